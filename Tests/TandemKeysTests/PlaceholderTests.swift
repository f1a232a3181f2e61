import XCTest
@testable import TandemKeys
final class TandemKeysPlaceholderTests: XCTestCase { func testModuleLoads() { XCTAssertNotNil(TandemKeys.self as Any) } }

import XCTest
@testable import TandemBlocking
final class TandemBlockingPlaceholderTests: XCTestCase { func testModuleLoads() { XCTAssertNotNil(TandemBlocking.self as Any) } }

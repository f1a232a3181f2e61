import Sodium
import TandemProtocol
import XCTest

/// Recovery codes as people write and type them: round trip, groups, typos caught.
final class RecoveryCodeTests: XCTestCase {
    func testRoundTripAndForms() throws {
        for _ in 0..<200 {
            let code = RecoveryCode(bytes: Sodium.randomBytes(16))
            XCTAssertEqual(code.canonical.count, RecoveryCode.canonicalLength)
            XCTAssertTrue(code.canonical.hasPrefix("tdmr1"))
            XCTAssertEqual(try RecoveryCode(parsing: code.canonical), code)
            XCTAssertEqual(try RecoveryCode(parsing: code.display), code)
            XCTAssertEqual(try RecoveryCode(parsing: code.display.uppercased().replacingOccurrences(of: "-", with: " ")), code)
            XCTAssertFalse(code.description.contains(String(code.canonical.dropFirst(5).prefix(6))), "not printed by accident")
        }
    }

    func testKnownVector() throws {
        let code = RecoveryCode(bytes: Array(0..<16))
        XCTAssertEqual(try RecoveryCode(parsing: code.canonical).bytes, Array(0..<16))
        XCTAssertEqual(code.display.split(separator: "-").dropFirst().map(\.count), [5, 5, 5, 5, 5, 5, 2])
    }

    func testEverySingleSubstitutionAndAdjacentSwapIsCaught() {
        let code = RecoveryCode(bytes: Sodium.randomBytes(16)).canonical
        let chars = Array(code)
        let alphabet = Array("qpzry9x8gf2tvdw0s3jn54khce6mua7l")
        for i in 5..<chars.count {
            for a in alphabet where a != chars[i] {
                var typo = chars
                typo[i] = a
                XCTAssertThrowsError(try RecoveryCode(parsing: String(typo)), "substitution at \(i)")
            }
            if i + 1 < chars.count, chars[i] != chars[i + 1] {
                var swapped = chars
                swapped.swapAt(i, i + 1)
                XCTAssertThrowsError(try RecoveryCode(parsing: String(swapped)), "swap at \(i)")
            }
        }
    }

    func testClearErrors() {
        let id = "tdm1" + String(repeating: "q", count: 58)
        for (text, fragment) in [("", "starts with"), (id, "starts with"), ("tdmr1qqq", "characters"), ("tdmr1" + String(repeating: "b", count: 32), "not a character"),
                                 ("tdmr1é", "letters and digits")] {
            XCTAssertThrowsError(try RecoveryCode(parsing: text)) { error in
                XCTAssertTrue("\(error)".contains(fragment), "\(text): \(error)")
            }
        }
    }
}

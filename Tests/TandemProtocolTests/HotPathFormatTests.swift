import Foundation
import XCTest
@testable import TandemProtocol

/// The hex text and ID parsing fast paths of session 12 (Protocol/messages.md 11.6) give exactly
/// what the general paths give.
final class HotPathFormatTests: XCTestCase {
    /// The general loop, as it was: the reference for every input below.
    private func referenceHex<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    func testHexOfContiguousAndOtherSequencesMatchesTheGeneralLoop() {
        let all = [UInt8](0...255)
        XCTAssertEqual(hexString(all), referenceHex(all))
        XCTAssertEqual(hexString(all).count, 512)
        XCTAssertEqual(hexString([UInt8]()), "")
        XCTAssertEqual(hexString([0x00, 0x09, 0x0a, 0x0f, 0x10, 0x9f, 0xa0, 0xff]), "00090a0f109fa0ff")
        XCTAssertEqual(hexString(Data(all)), referenceHex(all))
        XCTAssertEqual(hexString(all[17..<40]), referenceHex(all[17..<40]))
        // Not contiguous: the general loop.
        XCTAssertEqual(hexString(all.lazy.map { $0 ^ 0x5a }), referenceHex(all.map { $0 ^ 0x5a }))
        XCTAssertEqual(hexString(AnySequence(all.reversed())), referenceHex(all.reversed()))
    }

    func testAnASCIIIDParsesAsEveryCharacterPathParsesIt() throws {
        for key in [[UInt8](repeating: 0, count: 32), [UInt8](repeating: 0xff, count: 32), [UInt8](0..<32)] {
            let id = NodeID(publicKey: key)
            // Separators of every kind, upper case, tabs: the byte path.
            for text in [id.canonical, id.display, id.canonical.uppercased(), "\t" + id.display.replacingOccurrences(of: "-", with: ":"),
                         id.display.replacingOccurrences(of: "-", with: "."), id.display.replacingOccurrences(of: "-", with: "_ ")] {
                XCTAssertEqual(try NodeID.parse(text), key, text)
            }
            // Anything else (a non-breaking space, a combining mark, CR LF): the Character path,
            // with its own answers.
            XCTAssertThrowsError(try NodeID.parse(id.canonical.replacingOccurrences(of: "tdm1", with: "tdm1\u{00a0}"))) {
                XCTAssertTrue("\($0)".contains("letters and digits"), "\($0)")
            }
            XCTAssertThrowsError(try NodeID.parse(id.canonical + "\r\n"))
            XCTAssertThrowsError(try NodeID.parse(id.canonical + "\u{301}")) {
                XCTAssertTrue("\($0)".contains("letters and digits"), "\($0)")
            }
            // A character an ID does not use, and a control byte, on the byte path.
            XCTAssertThrowsError(try NodeID.parse(String(id.canonical.dropLast()) + "b")) {
                XCTAssertTrue("\($0)".contains("not a character"), "\($0)")
            }
            XCTAssertThrowsError(try NodeID.parse(String(id.canonical.dropLast()) + "\u{7f}"))
        }
    }
}

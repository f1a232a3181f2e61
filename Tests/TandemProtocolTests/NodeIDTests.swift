import Sodium
import XCTest
@testable import TandemProtocol

final class NodeIDTests: XCTestCase {
    /// Sample IDs: fixed keys with extreme bit patterns plus random ones.
    let samples: [NodeID] = [
        NodeID(publicKey: [UInt8](repeating: 0, count: 32)),
        NodeID(publicKey: [UInt8](repeating: 0xff, count: 32)),
        NodeID(publicKey: fixedPair(1).publicKey),
    ] + (0..<5).map { _ in NodeID(publicKey: SigningKeyPair.generate().publicKey) }

    func testRoundTripAndForms() throws {
        for id in samples {
            XCTAssertEqual(id.canonical.count, NodeID.canonicalLength)
            XCTAssertTrue(id.canonical.hasPrefix("tdm1"))
            XCTAssertEqual(try NodeID.parse(id.canonical), id.publicKey)
            XCTAssertEqual(try NodeID.parse(id.display), id.publicKey)
            XCTAssertEqual(try NodeID.parse(id.canonical.uppercased()), id.publicKey)
            XCTAssertEqual(try NodeID.parse(id.display.uppercased()), id.publicKey)
            let spaced = id.canonical.enumerated().map { $0.offset % 4 == 3 ? "\($0.element) " : "\($0.element)" }.joined()
            XCTAssertEqual(try NodeID.parse(spaced), id.publicKey)
            XCTAssertEqual(NodeID(id.display.replacingOccurrences(of: "-", with: "_")), id)
        }
    }

    func testEverySingleSubstitutionIsRejected() {
        let alphabet = Array("qpzry9x8gf2tvdw0s3jn54khce6mua7l")
        var checked = 0
        for id in samples {
            let chars = Array(id.canonical)
            for position in 0..<chars.count {
                for replacement in alphabet + ["t", "d", "m", "1"] where replacement != chars[position] {
                    var typo = chars
                    typo[position] = replacement
                    XCTAssertNil(NodeID(String(typo)), "substitution at \(position) accepted: \(String(typo))")
                    checked += 1
                }
            }
        }
        XCTAssertGreaterThan(checked, samples.count * 58 * 30)
    }

    func testEveryAdjacentSwapIsRejected() {
        for id in samples {
            let chars = Array(id.canonical)
            for i in 0..<(chars.count - 1) where chars[i] != chars[i + 1] {
                var typo = chars
                typo.swapAt(i, i + 1)
                XCTAssertNil(NodeID(String(typo)), "swap at \(i) accepted")
            }
        }
    }

    func testMalformedInputExplainsItself() {
        let good = samples[2].canonical
        let cases: [(String, String)] = [
            ("", "starts with"),
            ("xyz1qqqq", "starts with"),
            (String(good.dropLast()), "characters"),
            (good + "q", "characters"),
            ("tdm1" + String(repeating: "b", count: 58), "not a character"),
            ("tdm1" + String(repeating: "q", count: 58), "checksum"),
            (good.replacingOccurrences(of: "tdm1", with: "tdm1é"), "letters and digits"),
        ]
        for (text, fragment) in cases {
            XCTAssertThrowsError(try NodeID.parse(text), text) {
                XCTAssertTrue("\($0)".contains(fragment), "\(text): \($0)")
            }
        }
        // Insertion and deletion change the length and are caught too.
        XCTAssertNil(NodeID(String(good.prefix(30)) + String(good.dropFirst(31))))
    }

    func testShortFormAndOrdering() {
        let a = NodeID(publicKey: [UInt8](repeating: 0, count: 32))
        let b = NodeID(publicKey: [UInt8](repeating: 1, count: 32))
        XCTAssertLessThan(a, b)
        XCTAssertEqual(a.short.count, 10)
        XCTAssertTrue(a.canonical.dropFirst(4).hasPrefix(a.short))
    }
}

import Foundation
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
import TandemKeys

/// `JSONValue.compactJSON` is written by hand for speed; it must give what `JSONEncoder` (sorted
/// keys, slashes not escaped) gives, byte for byte, and parse back to the same value.
final class JSONValueTests: XCTestCase {
    private let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// Characters a string may hold: quotes, backslashes, slashes, every control character, DEL,
    /// line and paragraph separators, accents, emoji.
    private static let alphabet: [Character] = ["a", "Z", "0", "_", ".", " ", "\"", "\\", "/", "\u{7F}", "é", "ß", "\u{2028}",
                                                "\u{2029}", "😀", "\u{FEFF}", "\r\n"] + (0..<0x20).map { Character(Unicode.Scalar($0)!) }

    private func string(_ g: inout SplitMix64) -> String {
        String((0..<Int.random(in: 0...12, using: &g)).map { _ in Self.alphabet.randomElement(using: &g)! })
    }

    private func value(_ g: inout SplitMix64, depth: Int) -> JSONValue {
        switch Int.random(in: 0...(depth > 3 ? 4 : 6), using: &g) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &g))
        case 2: return .int([Int64.min, Int64.max, 0, -1, Int64.random(in: -1_000_000...1_000_000, using: &g)].randomElement(using: &g)!)
        case 3: return .double([0.1, -0.0, 1e20, 1e-7, 3.0, 123456789.125, Double.random(in: -1e6...1e6, using: &g)].randomElement(using: &g)!)
        case 4: return .string(string(&g))
        case 5: return .array((0..<Int.random(in: 0...4, using: &g)).map { _ in value(&g, depth: depth + 1) })
        default:
            var o: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &g) { o[string(&g)] = value(&g, depth: depth + 1) }
            return .object(o)
        }
    }

    func testCompactJSONIsWhatJSONEncoderWrites() throws {
        var g = SplitMix64(seed: 7)
        for _ in 0..<2_000 {
            let v = value(&g, depth: 0)
            let expected = String(decoding: try encoder.encode(v), as: UTF8.self)
            XCTAssertEqual(v.compactJSON, expected)
            XCTAssertEqual(Array(v.jsonData), Array(expected.utf8))
            // And it reads back: exactly, unless a double is in it (3.0 comes back as 3).
            if v.survivesJSONRoundTrip { XCTAssertEqual(try JSONValue.parse(v.compactJSON), v) }
        }
    }

    func testNonFiniteDoublesAreNull() {
        let v: JSONValue = ["a": .double(.nan), "b": .array([.double(.infinity), .double(-.infinity)])]
        XCTAssertEqual(v.compactJSON, #"{"a":null,"b":[null,null]}"#)
        XCTAssertFalse(v.survivesJSONRoundTrip)
    }

    func testLongRunsBetweenEscapesAreCopiedWhole() throws {
        // Runs with no escape are copied as a block: at the start, between escapes, at the end, alone.
        let run = String(repeating: "abcé😀/", count: 50)
        for text in [run, "\"" + run, run + "\n", run + "\u{1}" + run + "\\" + run, "", "\"", "\u{1f}\u{1f}"] {
            let v = JSONValue.string(text)
            XCTAssertEqual(v.compactJSON, String(decoding: try encoder.encode(v), as: UTF8.self))
            XCTAssertEqual(try JSONValue.parse(v.compactJSON), v)
        }
    }

    func testEscapes() {
        let v: JSONValue = .string("q\"b\\s/\n\t\r\u{8}\u{c}\u{1}\u{1f}\u{7f}é")
        XCTAssertEqual(v.compactJSON, #""q\"b\\s/\n\t\r\b\f\u0001\u001f"# + "\u{7f}é\"")
    }
}

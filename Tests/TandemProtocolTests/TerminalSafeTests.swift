import Foundation
import TandemProtocol
import XCTest

final class TerminalSafeTests: XCTestCase {
    func testPlainTextIsUnchanged() {
        for s in ["", "alice", "Zoë 🧘‍♀️ focus", "a\\b", "日本語", "tab\u{200B}zero-width", "👨‍👩‍👧"] {
            XCTAssertEqual(s.terminalSafe, s, s)
        }
    }

    func testC0ControlsAndDelBecomeHexEscapes() {
        XCTAssertEqual("\u{1B}[2Jx\rboss".terminalSafe, "\\x1b[2Jx\\x0dboss")
        XCTAssertEqual("a\nb\tc\u{0}d\u{7F}".terminalSafe, "a\\x0ab\\x09c\\x00d\\x7f")
        // Every C0 control and DEL: no raw control survives.
        let all = String(String.UnicodeScalarView((0...0x1F).map { Unicode.Scalar(UInt8($0)) } + [Unicode.Scalar(0x7F)]))
        let escaped = all.terminalSafe
        XCTAssertFalse(escaped.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F })
        XCTAssertEqual(escaped.count, 33 * 4)
    }

    func testC1AndBidiControlsBecomeUnicodeEscapes() {
        XCTAssertEqual("\u{9B}31m".terminalSafe, "\\u{9b}31m")
        XCTAssertEqual("\u{85}".terminalSafe, "\\u{85}")
        XCTAssertEqual("evil\u{202E}gpj.exe".terminalSafe, "evil\\u{202e}gpj.exe")
        for c: UInt32 in [0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x2066, 0x2067, 0x2068, 0x2069, 0x2028, 0x2029] {
            let s = String(Unicode.Scalar(c)!)
            XCTAssertEqual(s.terminalSafe, "\\u{\(String(c, radix: 16))}")
        }
        // Just outside the ranges: left alone.
        XCTAssertEqual("\u{A0}\u{2065}\u{202F}".terminalSafe, "\u{A0}\u{2065}\u{202F}")
    }

    func testKeepingNewlines() {
        XCTAssertEqual("one\ntwo\r\u{1B}".terminalSafe(keepingNewlines: true), "one\ntwo\\x0d\\x1b")
    }

    /// JSON encoders escape C0 controls themselves; `jsonTerminalSafe` adds DEL, C1 and bidi,
    /// and the result still decodes to the same string.
    func testJSONTextStaysTheSameValue() throws {
        let name = "a\u{1B}[2J\r\u{7F}\u{9B}\u{202E}\u{2028}z"
        let data = try JSONEncoder().encode(["name": name])
        let raw = String(decoding: data, as: UTF8.self)
        XCTAssertFalse(raw.unicodeScalars.contains { $0.value < 0x20 }, "JSONEncoder left a C0 control raw: \(raw)")
        let safe = raw.jsonTerminalSafe
        XCTAssertFalse(safe.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0.value == 0x202E || $0.value == 0x2028 })
        let back = try JSONDecoder().decode([String: String].self, from: Data(safe.utf8))
        XCTAssertEqual(back["name"], name)
        // Whitespace between tokens (pretty-printed JSON) is left as it is.
        XCTAssertEqual("{\n  \"a\" : 1\n}".jsonTerminalSafe, "{\n  \"a\" : 1\n}")
    }
}

import Foundation
@testable import TandemNode
@testable import TandemNodeCore
import TandemNet
import TandemProtocol
import XCTest

/// A peer's text reaches the log and `tandem events` with its control characters shown escaped.
final class TerminalOutputTests: XCTestCase {
    func testLogfmtQuotingEscapesControls() {
        XCTAssertEqual(StructuredLogHandler.quote("alice"), "alice")
        XCTAssertEqual(StructuredLogHandler.quote("a b"), "\"a b\"")
        XCTAssertEqual(StructuredLogHandler.quote("x\ny"), "\"x\\ny\"")
        XCTAssertEqual(StructuredLogHandler.quote("say \"hi\" \\o/"), "\"say \\\"hi\\\" \\\\o/\"")
        XCTAssertEqual(StructuredLogHandler.quote("\u{1B}[2J\rroot"), "\"\\x1b[2J\\x0droot\"")
        XCTAssertEqual(StructuredLogHandler.quote("abc\u{202E}"), "\"abc\\u{202e}\"")
        XCTAssertEqual(StructuredLogHandler.quote("\u{9B}"), "\"\\u{9b}\"")
    }

    func testEventTextLineEscapesFieldValues() {
        let event = NodeEvent(seq: 3, type: "friend.request_received", timeMs: 0,
                              fields: ["name": .string("\u{1B}]0;pwned\u{07}\u{1B}[2J"), "message": .string("hi\rthere")])
        let line = event.textLine
        XCTAssertFalse(line.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, line)
        XCTAssertTrue(line.contains("name=\"\\x1b]0;pwned\\x07\\x1b[2J\""), line)
        XCTAssertTrue(line.contains("message=\"hi\\x0dthere\""), line)
    }

    /// The CLI's --json output: the encoder escapes C0 controls, and the result of
    /// `jsonTerminalSafe` holds no raw control and decodes to the same value.
    func testEventJSONHasNoRawControls() throws {
        let name = "\u{1B}[2J\r\u{7F}\u{85}\u{202E}"
        let event = NodeEvent(seq: 1, type: "t", timeMs: 0, fields: ["name": .string(name)])
        let text = event.flatJSON.compactJSON.jsonTerminalSafe
        XCTAssertFalse(text.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0.value == 0x202E }, text)
        XCTAssertEqual(try JSONValue.parse(text)["name"]?.stringValue, name)
    }
}

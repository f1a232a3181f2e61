/// Text from peers (display names, messages, reasons, addresses) is shown on terminals and
/// written to logs. A terminal obeys control characters: ESC starts a sequence that can clear the
/// screen, move the cursor, retitle the window or (on some terminals) answer back; CR lets a line
/// overwrite itself; a bidi override makes text read in another order than it is stored. So every
/// such character is shown as a visible escape instead, at the output edges.
///
/// Escaped (Protocol/README.md, "Text from peers"):
/// - C0 controls U+0000–U+001F and DEL U+007F as `\xNN` (ESC → `\x1b`, CR → `\x0d`, LF → `\x0a`);
/// - C1 controls U+0080–U+009F (U+009B is a one-character CSI) as `\u{NN}`;
/// - bidi controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and the line and
///   paragraph separators U+2028, U+2029 as `\u{NNNN}`.
/// Everything else, backslashes and emoji joiners included, is left as it is.
extension String {
    /// The text with every control, bidi control and line separator shown as a visible escape.
    public var terminalSafe: String { terminalSafe(keepingNewlines: false) }

    /// As `terminalSafe`; with `keepingNewlines` a line feed (U+000A) is kept, for a block of lines
    /// whose line breaks are the program's own.
    public func terminalSafe(keepingNewlines: Bool) -> String {
        guard unicodeScalars.contains(where: { TerminalText.needsEscape($0, keepingNewlines: keepingNewlines) }) else {
            return self
        }
        var out = String.UnicodeScalarView()
        for scalar in unicodeScalars {
            if TerminalText.needsEscape(scalar, keepingNewlines: keepingNewlines) {
                out.append(contentsOf: TerminalText.escape(scalar).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    /// For JSON text (a whole document): JSON encoders already escape U+0000–U+001F inside
    /// strings, but leave DEL, C1 controls, bidi controls and U+2028/U+2029 raw. Those can only
    /// occur inside string literals, so each becomes a `\uNNNN` escape: the same JSON value,
    /// printable on a terminal.
    /// (U+0000–U+001F are left alone: raw, they can only be whitespace between tokens.)
    public var jsonTerminalSafe: String {
        func needs(_ s: Unicode.Scalar) -> Bool { s.value >= 0x7F && TerminalText.needsEscape(s, keepingNewlines: false) }
        guard unicodeScalars.contains(where: needs) else { return self }
        var out = String.UnicodeScalarView()
        for scalar in unicodeScalars {
            if needs(scalar) {
                let hex = String(scalar.value, radix: 16)
                out.append(contentsOf: ("\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }
}

enum TerminalText {
    static func needsEscape(_ s: Unicode.Scalar, keepingNewlines: Bool) -> Bool {
        switch s.value {
        case 0x0A: return !keepingNewlines
        case 0x00...0x1F, 0x7F...0x9F: return true
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: return true
        default: return false
        }
    }

    static func escape(_ s: Unicode.Scalar) -> String {
        let hex = String(s.value, radix: 16)
        if s.value < 0x80 { return "\\x" + (hex.count < 2 ? "0" + hex : hex) }
        return "\\u{" + (hex.count < 2 ? "0" + hex : hex) + "}"
    }
}

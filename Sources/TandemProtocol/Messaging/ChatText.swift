import Foundation

/// Text a person wrote, as messages carry it (Protocol/messages.md 4): valid UTF-8 (the protobuf
/// decoder refuses anything else), no NUL, normalised to NFC, and at most `ChatLimits.textBytes`
/// bytes both as sent and after normalisation (NFC can lengthen text a little; the bound holds for
/// what is stored and shown).
public enum ChatText {
    public enum Problem: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case tooLong(bytes: Int, maximum: Int)
        case containsNul
        public var description: String {
            switch self {
            case .empty: return "text is empty"
            case .tooLong(let bytes, let maximum): return "text of \(bytes) bytes exceeds \(maximum)"
            case .containsNul: return "text contains U+0000"
            }
        }
    }

    /// The text in NFC, checked: nonempty (unless `allowEmpty`), no U+0000, at most `maximumBytes`
    /// bytes of UTF-8 before and after normalisation. The raw length is checked first, so no more
    /// than `maximumBytes` are ever normalised.
    public static func normalised(_ s: String, maximumBytes: Int = ChatLimits.textBytes,
                                  allowEmpty: Bool = false) throws(Problem) -> String {
        let raw = s.utf8.count
        guard raw <= maximumBytes else { throw .tooLong(bytes: raw, maximum: maximumBytes) }
        guard raw > 0 || allowEmpty else { throw .empty }
        guard !s.utf8.contains(0) else { throw .containsNul }
        let nfc = s.precomposedStringWithCanonicalMapping
        let n = nfc.utf8.count
        guard n <= maximumBytes else { throw .tooLong(bytes: n, maximum: maximumBytes) }
        return nfc
    }

    /// Message text made safe to print on a terminal, keeping its line feeds and tabs: every other
    /// C0 control, DEL and C1 control becomes a visible escape (so an ANSI sequence loses its ESC, or
    /// its one-character CSI U+009B, and prints as text), as do the bidi controls (U+061C,
    /// U+200E/F, U+202A–U+202E, U+2066–U+2069), the line and paragraph separators, and the
    /// invisible characters U+200B, U+2060–U+2064 and U+FEFF.
    ///
    /// U+200C and U+200D (zero-width non-joiner and joiner) are kept: they build emoji sequences
    /// (a family, a flag with a modifier) and are required by Persian, Indic and other scripts. The
    /// spoofing they allow (two strings that look alike) matters for names a person trusts, not for
    /// the body of a message shown under its author's verified name.
    public static func terminalSafe(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: needsEscape) else { return s }
        var out = String.UnicodeScalarView()
        for scalar in s.unicodeScalars {
            if needsEscape(scalar) {
                out.append(contentsOf: TerminalText.escape(scalar).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }

    static func needsEscape(_ s: Unicode.Scalar) -> Bool {
        switch s.value {
        case 0x09, 0x0A: return false
        case 0x200B, 0x2060...0x2064, 0xFEFF: return true
        default: return TerminalText.needsEscape(s, keepingNewlines: true)
        }
    }

    /// An emoji for a reaction or cheer: 1 … 64 bytes (or empty where allowed), no controls, no
    /// bidi controls, no line breaks, no white space.
    public static func isEmoji(_ s: String) -> Bool {
        guard s.utf8.count <= ChatLimits.emojiBytes else { return false }
        return !s.unicodeScalars.contains { needsEscape($0) || $0.properties.isWhitespace }
    }
}

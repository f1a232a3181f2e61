/// A node's recovery code: 128 random bits people write down, in bech32m with the human-readable
/// part "tdmr" (the same alphabet and 6-character checksum as IDs, so a typo is caught before any
/// work): "tdmr1" then 26 data and 6 checksum characters, shown in groups of five.
public struct RecoveryCode: Hashable, Sendable, CustomStringConvertible {
    public static let humanReadablePart = "tdmr"
    public static let byteCount = 16
    public static let canonicalLength = 5 + 26 + 6

    /// The 16 secret bytes.
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) {
        precondition(bytes.count == Self.byteCount, "a recovery code holds 16 bytes")
        self.bytes = bytes
    }

    public struct ParseError: Error, CustomStringConvertible, Equatable, Sendable {
        public let description: String
    }

    private static let hrpExpanded: [UInt8] = {
        let h = Array(humanReadablePart.utf8)
        return h.map { $0 >> 5 } + [0] + h.map { $0 & 31 }
    }()

    /// Parses a code typed with any case and any of the ID separators.
    public init(parsing text: String) throws {
        var chars: [UInt8] = []
        for ch in text where !NodeID.separatorCharacters.contains(ch) {
            guard let ascii = ch.asciiValue else { throw ParseError(description: "a recovery code has only letters and digits") }
            chars.append((65...90).contains(ascii) ? ascii + 32 : ascii)
            if chars.count > Self.canonicalLength { break }
        }
        let prefix = Array((Self.humanReadablePart + "1").utf8)
        guard chars.starts(with: prefix) else { throw ParseError(description: "a recovery code starts with \"tdmr1\"") }
        guard chars.count == Self.canonicalLength else {
            throw ParseError(description: "a recovery code has \(Self.canonicalLength) characters (not counting dashes)")
        }
        var values: [UInt8] = []
        for c in chars[prefix.count...] {
            guard let v = NodeID.alphabet.firstIndex(of: c) else {
                throw ParseError(description: "'\(Character(Unicode.Scalar(c)))' is not a character a recovery code uses")
            }
            values.append(UInt8(v))
        }
        guard NodeID.polymod(Self.hrpExpanded + values) == NodeID.bech32mConstant else {
            throw ParseError(description: "the recovery code's checksum does not match: check it for a typo")
        }
        guard let data = NodeID.regroup(Array(values.dropLast(6)), from: 5, to: 8, pad: false), data.count == Self.byteCount else {
            throw ParseError(description: "the recovery code does not hold 16 bytes")
        }
        self.bytes = data
    }

    /// "tdmr1…", lowercase, no separators.
    public var canonical: String {
        let data = NodeID.regroup(bytes, from: 8, to: 5, pad: true)!
        let pm = NodeID.polymod(Self.hrpExpanded + data + [0, 0, 0, 0, 0, 0]) ^ NodeID.bech32mConstant
        let checksum = (0..<6).map { UInt8((pm >> (5 * (5 - UInt32($0)))) & 31) }
        return Self.humanReadablePart + "1" + String(decoding: (data + checksum).map { NodeID.alphabet[Int($0)] }, as: UTF8.self)
    }

    /// In groups of five after the prefix, for writing down: "tdmr1-xxxxx-xxxxx-…".
    public var display: String {
        let body = Array(canonical.dropFirst(5))
        var groups: [String] = []
        var i = 0
        while i < body.count {
            groups.append(String(body[i..<min(i + 5, body.count)]))
            i += 5
        }
        return "tdmr1-" + groups.joined(separator: "-")
    }

    /// Never printed by accident (logs, interpolation): only `canonical` and `display` show it.
    public var description: String { "tdmr1-…" }
}

/// A node's identity as people read it aloud, paste and type: the Ed25519 public key in
/// bech32m with the human-readable part "tdm" (see Protocol/README.md, "Identity").
///
/// The 6-character BCH checksum catches every single-character substitution and every swap
/// of two adjacent characters. Parsing accepts any letter case and ignores separators.
public struct NodeID: Hashable, Sendable, CustomStringConvertible, Comparable {
    public static let humanReadablePart = "tdm"
    public static let separatorCharacters: Set<Character> = [" ", "-", "_", ".", ":", "\t"]
    /// `separatorCharacters` as bytes.
    static let separatorBytes: [UInt8] = Array(" -_.:\t".utf8)
    static let alphabet = Array("qpzry9x8gf2tvdw0s3jn54khce6mua7l".utf8)
    static let bech32mConstant: UInt32 = 0x2bc8_30a3
    public static let canonicalLength = 62

    /// The 32-byte Ed25519 public key.
    public let publicKey: [UInt8]

    public init(publicKey: [UInt8]) {
        precondition(publicKey.count == 32, "a NodeID is a 32-byte Ed25519 public key")
        self.publicKey = publicKey
    }

    /// Parses a text ID; nil when it is not a valid Tandem ID.
    public init?(_ text: String) {
        guard let key = try? NodeID.parse(text) else { return nil }
        self.publicKey = key
    }

    public struct ParseError: Error, CustomStringConvertible, Equatable, Sendable {
        public let description: String
    }

    /// Parses a text ID, explaining what is wrong when it is not one.
    public static func parse(_ text: String) throws -> [UInt8] {
        var chars: [UInt8] = []
        chars.reserveCapacity(canonicalLength)
        if text.utf8.allSatisfy({ $0 == 9 || (0x20..<0x7f).contains($0) }) {
            // Printable ASCII and tabs (every ID a person pastes): each byte is a Character, so the
            // same rule byte by byte, without hashing a Character per letter (a lone message.send
            // parsed its friend's ID in 65,000 instructions: messages.md 11.6, session 12).
            for ascii in text.utf8 {
                if Self.separatorBytes.contains(ascii) { continue }
                chars.append((ascii >= 65 && ascii <= 90) ? ascii + 32 : ascii)
                if chars.count > canonicalLength { break }
            }
        } else {
            for ch in text {
                if separatorCharacters.contains(ch) { continue }
                guard let ascii = ch.asciiValue else {
                    throw ParseError(description: "an ID contains only letters and digits")
                }
                // Lowercase ASCII letters.
                chars.append((ascii >= 65 && ascii <= 90) ? ascii + 32 : ascii)
                if chars.count > canonicalLength { break }
            }
        }
        let prefix = Array((humanReadablePart + "1").utf8)
        guard chars.count >= prefix.count, Array(chars[0..<prefix.count]) == prefix else {
            throw ParseError(description: "an ID starts with \"tdm1\"")
        }
        guard chars.count == canonicalLength else {
            throw ParseError(description: "an ID has \(canonicalLength) characters (not counting separators), this one has \(chars.count > canonicalLength ? "more" : "\(chars.count)")")
        }
        var values: [UInt8] = []
        values.reserveCapacity(canonicalLength - prefix.count)
        for c in chars[prefix.count...] {
            guard let v = alphabetIndex[Int(c)] else {
                throw ParseError(description: "'\(Character(Unicode.Scalar(c)))' is not a character an ID uses")
            }
            values.append(v)
        }
        guard polymod(hrpExpanded + values) == bech32mConstant else {
            throw ParseError(description: "the ID's checksum does not match: check it for a typo")
        }
        let data = values.dropLast(6)
        guard let key = regroup(Array(data), from: 5, to: 8, pad: false), key.count == 32 else {
            throw ParseError(description: "the ID does not hold a 32-byte key")
        }
        return key
    }

    /// "tdm1" followed by 58 characters, lowercase. The form used in files, JSON and logs.
    public var canonical: String {
        let data = NodeID.regroup(publicKey, from: 8, to: 5, pad: true)!
        let checksum = NodeID.checksum(data)
        let body = (data + checksum).map { NodeID.alphabet[Int($0)] }
        return NodeID.humanReadablePart + "1" + String(decoding: body, as: UTF8.self)
    }

    /// The canonical form with a dash every five characters, for people.
    public var display: String {
        let c = Array(canonical.utf8)
        var out = Array("tdm1".utf8)
        var i = 4
        while i < c.count {
            out.append(UInt8(ascii: "-"))
            out.append(contentsOf: c[i..<min(i + 5, c.count)])
            i += 5
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A short form for logs: the first 12 characters after the prefix.
    public var short: String {
        String(canonical.dropFirst(4).prefix(10))
    }

    public var description: String { canonical }

    public static func < (lhs: NodeID, rhs: NodeID) -> Bool {
        lhs.publicKey.lexicographicallyPrecedes(rhs.publicKey)
    }

    // MARK: bech32m

    private static let alphabetIndex: [UInt8?] = {
        var table = [UInt8?](repeating: nil, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    private static let hrpExpanded: [UInt8] = {
        let h = Array(humanReadablePart.utf8)
        return h.map { $0 >> 5 } + [0] + h.map { $0 & 31 }
    }()

    static func polymod(_ values: [UInt8]) -> UInt32 {
        let generator: [UInt32] = [0x3b6a_57b2, 0x2650_8e6d, 0x1ea1_19fa, 0x3d42_33dd, 0x2a14_62b3]
        var chk: UInt32 = 1
        for v in values {
            let top = chk >> 25
            chk = ((chk & 0x1ff_ffff) << 5) ^ UInt32(v)
            for i in 0..<5 where (top >> UInt32(i)) & 1 == 1 {
                chk ^= generator[i]
            }
        }
        return chk
    }

    static func checksum(_ data: [UInt8]) -> [UInt8] {
        let pm = polymod(hrpExpanded + data + [0, 0, 0, 0, 0, 0]) ^ bech32mConstant
        return (0..<6).map { UInt8((pm >> (5 * (5 - UInt32($0)))) & 31) }
    }

    /// Regroups bits MSB-first. Without padding, leftover bits must be fewer than `from`
    /// and all zero (otherwise nil).
    static func regroup(_ input: [UInt8], from: Int, to: Int, pad: Bool) -> [UInt8]? {
        var acc = 0
        var bits = 0
        var out: [UInt8] = []
        let maxv = (1 << to) - 1
        for v in input {
            acc = (acc << from) | Int(v)
            bits += from
            while bits >= to {
                bits -= to
                out.append(UInt8((acc >> bits) & maxv))
            }
            acc &= (1 << bits) - 1
        }
        if pad {
            if bits > 0 { out.append(UInt8((acc << (to - bits)) & maxv)) }
        } else if bits >= from || (acc & ((1 << bits) - 1)) != 0 {
            return nil
        }
        return out
    }
}

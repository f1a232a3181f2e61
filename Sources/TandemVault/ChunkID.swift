/// A 32-byte digest held as four words, so dictionaries keyed by it hash and compare quickly.
/// Chunk ids (keyed BLAKE2b of a chunk's plaintext) and pack names (unkeyed BLAKE2b of a pack file)
/// are both one of these.
struct ChunkID: Hashable, Sendable, Comparable, CustomStringConvertible {
    static let byteCount = 32
    let w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

    /// Nil unless `bytes` is exactly 32 bytes.
    init?<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        guard bytes.count == Self.byteCount else { return nil }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { dst in
            for (i, b) in bytes.enumerated() { dst[i] = b }
        }
        (w0, w1, w2, w3) = words
    }

    var bytes: [UInt8] {
        var words = (w0, w1, w2, w3)
        return withUnsafeBytes(of: &words) { Array($0) }
    }

    var hex: String { Hex.encode(bytes) }
    var description: String { hex }

    static func < (a: ChunkID, b: ChunkID) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }
}

/// Lowercase hex, as pack names, index locators and item ids are written.
enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    static func encode<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Nil unless `text` is an even number of lowercase hex digits.
    static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            default: return nil
            }
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = value(chars[i]), let lo = value(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}

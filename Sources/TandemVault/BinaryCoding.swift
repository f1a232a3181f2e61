/// Big-endian writer for the vault's binary structures (pack headers, the index, the keys file).
struct BinaryWriter {
    private(set) var bytes: [UInt8] = []

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u32(_ v: UInt32) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.bigEndian) { bytes.append(contentsOf: $0) } }
    mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }
    mutating func raw(_ v: [UInt8]) { bytes.append(contentsOf: v) }
    /// A string as u16 length + UTF-8 (names are at most 255 bytes, so u16 is plenty).
    mutating func string(_ s: String) {
        let utf8 = Array(s.utf8)
        precondition(utf8.count <= Int(UInt16.max))
        bytes.append(UInt8(utf8.count >> 8)); bytes.append(UInt8(utf8.count & 0xff))
        bytes.append(contentsOf: utf8)
    }
    mutating func optionalString(_ s: String?) {
        if let s { u8(1); string(s) } else { u8(0) }
    }
    mutating func optionalI64(_ v: Int64?) {
        if let v { u8(1); i64(v) } else { u8(0) }
    }
}

/// Big-endian reader that never reads past its end: every read checks the remaining length and
/// throws `.corrupt` (naming `what`, the file being read), so a damaged file is an error, not a trap.
struct BinaryReader {
    private let bytes: [UInt8]
    private(set) var offset = 0
    let what: String

    init(_ bytes: [UInt8], what: String) {
        self.bytes = bytes
        self.what = what
    }

    var remaining: Int { bytes.count - offset }
    var isAtEnd: Bool { offset == bytes.count }

    func fail(_ detail: String) -> VaultError { .corrupt("\(what): \(detail)") }

    private mutating func take(_ n: Int) throws -> ArraySlice<UInt8> {
        guard n >= 0, n <= remaining else { throw fail("truncated at byte \(offset) (wanted \(n) more)") }
        defer { offset += n }
        return bytes[offset..<(offset + n)]
    }

    mutating func u8() throws -> UInt8 { try take(1).first! }

    mutating func u16() throws -> UInt16 {
        let s = try take(2)
        return s.reduce(0) { $0 << 8 | UInt16($1) }
    }

    mutating func u32() throws -> UInt32 {
        let s = try take(4)
        return s.reduce(0) { $0 << 8 | UInt32($1) }
    }

    mutating func u64() throws -> UInt64 {
        let s = try take(8)
        return s.reduce(0) { $0 << 8 | UInt64($1) }
    }

    mutating func i64() throws -> Int64 { Int64(bitPattern: try u64()) }

    mutating func raw(_ n: Int) throws -> [UInt8] { Array(try take(n)) }

    mutating func bool() throws -> Bool {
        switch try u8() {
        case 0: return false
        case 1: return true
        case let v: throw fail("bad boolean \(v) at byte \(offset - 1)")
        }
    }

    mutating func string() throws -> String {
        let n = Int(try u16())
        let s = try take(n)
        guard let text = String(validating: s, as: UTF8.self) else { throw fail("invalid UTF-8 at byte \(offset - n)") }
        return text
    }

    mutating func optionalString() throws -> String? { try bool() ? try string() : nil }
    mutating func optionalI64() throws -> Int64? { try bool() ? try i64() : nil }

    /// A count of entries of at least `minimumEntryBytes` each, checked against the bytes left so a
    /// damaged count cannot make the loader reserve gigabytes.
    mutating func count(minimumEntryBytes: Int, what entries: String) throws -> Int {
        let n = Int(try u32())
        guard n <= remaining / Swift.max(minimumEntryBytes, 1) else {
            throw fail("\(n) \(entries) cannot fit in the \(remaining) bytes left")
        }
        return n
    }

    mutating func expectEnd() throws {
        guard isAtEnd else { throw fail("\(remaining) unexpected trailing bytes") }
    }
}

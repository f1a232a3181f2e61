/// Bounds-checked reading of a TIFF structure (the body of an EXIF block: TIFF 6.0 §2, EXIF 2.32
/// §4.5). Every offset and count comes from the file, so each is checked against the block before
/// use; a block that breaks the structure throws `.malformed`.
struct TIFFReader {
    /// One 12-byte IFD entry.
    struct Entry {
        let tag: UInt16
        let type: UInt16
        let count: UInt32
        /// Where the entry's 4-byte value/offset field is in the block.
        let fieldPosition: Int
    }

    /// The largest EXIF block read (a JPEG's holds at most 64 KiB; PNG and HEIF could announce more).
    static let maximumSize = 4 << 20
    /// More entries than this in one IFD is not a photo's EXIF.
    static let maximumEntries = 1024

    let bytes: [UInt8]
    let littleEndian: Bool

    init(_ bytes: [UInt8]) throws {
        guard bytes.count <= TIFFReader.maximumSize else {
            throw MediaError(.tooLarge, "EXIF block of \(bytes.count) bytes (at most \(TIFFReader.maximumSize))")
        }
        guard bytes.count >= 8 else { throw MediaError.malformed("EXIF block of \(bytes.count) bytes is shorter than a TIFF header") }
        switch (bytes[0], bytes[1]) {
        case (0x49, 0x49): littleEndian = true     // "II"
        case (0x4D, 0x4D): littleEndian = false    // "MM"
        default: throw MediaError.malformed("EXIF block has no TIFF byte-order mark")
        }
        self.bytes = bytes
        guard try u16(at: 2) == 42 else { throw MediaError.malformed("EXIF block has a bad TIFF magic number") }
    }

    var firstIFDOffset: Int {
        get throws { Int(try u32(at: 4)) }
    }

    func u16(at position: Int) throws -> UInt16 {
        guard position >= 0, position <= bytes.count - 2 else {
            throw MediaError.malformed("EXIF value at \(position) is outside the \(bytes.count)-byte block")
        }
        let a = UInt16(bytes[position]), b = UInt16(bytes[position + 1])
        return littleEndian ? a | b << 8 : a << 8 | b
    }

    func u32(at position: Int) throws -> UInt32 {
        guard position >= 0, position <= bytes.count - 4 else {
            throw MediaError.malformed("EXIF value at \(position) is outside the \(bytes.count)-byte block")
        }
        let v = bytes[position..<(position + 4)].map(UInt32.init)
        return littleEndian ? v[0] | v[1] << 8 | v[2] << 16 | v[3] << 24 : v[0] << 24 | v[1] << 16 | v[2] << 8 | v[3]
    }

    /// The entries of the IFD at `offset`.
    func entries(ofIFDAt offset: Int) throws -> [Entry] {
        let count = Int(try u16(at: offset))
        guard count <= TIFFReader.maximumEntries else {
            throw MediaError.malformed("EXIF directory at \(offset) announces \(count) entries")
        }
        guard offset + 2 + count * 12 <= bytes.count else {
            throw MediaError.malformed("EXIF directory at \(offset) with \(count) entries runs past the \(bytes.count)-byte block")
        }
        return try (0..<count).map { i in
            let at = offset + 2 + i * 12
            return Entry(tag: try u16(at: at), type: try u16(at: at + 2), count: try u32(at: at + 4), fieldPosition: at + 8)
        }
    }

    /// Bytes per component of a TIFF/EXIF field type; nil for types the specs do not define.
    static func componentSize(_ type: UInt16) -> Int? {
        switch type {
        case 1, 2, 6, 7: return 1        // BYTE, ASCII, SBYTE, UNDEFINED
        case 3, 8: return 2              // SHORT, SSHORT
        case 4, 9, 11, 13: return 4      // LONG, SLONG, FLOAT, IFD
        case 5, 10, 12: return 8         // RATIONAL, SRATIONAL, DOUBLE
        default: return nil
        }
    }

    /// The raw value bytes of an entry: inline when they fit in 4 bytes, else at the offset the
    /// entry gives, which must lie inside the block.
    func value(of entry: Entry) throws -> ArraySlice<UInt8> {
        guard let size = TIFFReader.componentSize(entry.type) else {
            throw MediaError.malformed("EXIF tag 0x\(String(entry.tag, radix: 16)) has unknown type \(entry.type)")
        }
        let length = Int(entry.count) * size
        guard length <= bytes.count else {
            throw MediaError.malformed("EXIF tag 0x\(String(entry.tag, radix: 16)) announces \(length) bytes")
        }
        if length <= 4 { return bytes[entry.fieldPosition..<(entry.fieldPosition + length)] }
        let start = Int(try u32(at: entry.fieldPosition))
        guard start <= bytes.count - length else {
            throw MediaError.malformed("EXIF tag 0x\(String(entry.tag, radix: 16)) points outside the block")
        }
        return bytes[start..<(start + length)]
    }

    /// A SHORT or LONG entry with one component, as an integer.
    func integer(of entry: Entry) throws -> UInt32? {
        guard entry.count == 1 else { return nil }
        switch entry.type {
        case 3: return UInt32(try u16(at: entry.fieldPosition))
        case 4, 13: return try u32(at: entry.fieldPosition)
        default: return nil
        }
    }
}

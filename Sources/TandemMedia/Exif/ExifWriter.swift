/// Builds a new, minimal EXIF block (little-endian TIFF) holding only what the vault keeps:
/// Orientation and DateTime (+ OffsetTime) in IFD0; ExifVersion, DateTimeOriginal, DateTimeDigitized
/// and their offsets in the EXIF IFD. Writing a fresh block instead of editing the camera's means
/// nothing unknown survives: no GPS, no maker note, no serial numbers, no thumbnail.
enum ExifWriter {
    private struct Field {
        let tag: UInt16
        let type: UInt16
        let count: UInt32
        let data: [UInt8]   // count × component size bytes

        static func short(_ tag: UInt16, _ v: UInt16) -> Field {
            Field(tag: tag, type: 3, count: 1, data: [UInt8(v & 0xFF), UInt8(v >> 8)])
        }
        static func long(_ tag: UInt16, _ v: UInt32) -> Field {
            Field(tag: tag, type: 4, count: 1, data: le32(v))
        }
        static func ascii(_ tag: UInt16, _ bytes: [UInt8]) -> Field {
            Field(tag: tag, type: 2, count: UInt32(bytes.count), data: bytes)
        }
    }

    /// The TIFF block (no "Exif\0\0" prefix), or nil when there is nothing to keep. Pass `kept`
    /// fields (offsets only with their dates).
    static func tiff(_ fields: ExifFields) -> [UInt8]? {
        var exif: [Field] = []
        if let d = fields.dateTimeOriginal { exif.append(.ascii(ExifTag.dateTimeOriginal, d.ascii)) }
        if let d = fields.dateTimeDigitized { exif.append(.ascii(ExifTag.dateTimeDigitized, d.ascii)) }
        if let o = fields.offsetTime { exif.append(.ascii(ExifTag.offsetTime, o.ascii)) }
        if let o = fields.offsetTimeOriginal { exif.append(.ascii(ExifTag.offsetTimeOriginal, o.ascii)) }
        if let o = fields.offsetTimeDigitized { exif.append(.ascii(ExifTag.offsetTimeDigitized, o.ascii)) }
        if !exif.isEmpty {
            exif.insert(Field(tag: ExifTag.exifVersion, type: 7, count: 4, data: Array("0232".utf8)), at: 0)
        }

        var ifd0: [Field] = []
        if let o = fields.orientation { ifd0.append(.short(ExifTag.orientation, o)) }
        if let d = fields.dateTime { ifd0.append(.ascii(ExifTag.dateTime, d.ascii)) }
        if ifd0.isEmpty && exif.isEmpty { return nil }

        let ifd0Offset = 8
        // The EXIF IFD pointer's value does not change IFD0's size, so lay IFD0 out once to learn it.
        let pointer = exif.isEmpty ? 0 : 1
        let ifd0Size = size(of: ifd0.count + pointer, data: ifd0)
        let exifOffset = ifd0Offset + ifd0Size
        if !exif.isEmpty { ifd0.append(.long(ExifTag.exifIFD, UInt32(exifOffset))) }

        var out: [UInt8] = [0x49, 0x49, 42, 0] + le32(UInt32(ifd0Offset))
        out += layout(ifd0, at: ifd0Offset)
        if !exif.isEmpty { out += layout(exif, at: exifOffset) }
        return out
    }

    /// Bytes of an IFD with `entries` entries and the out-of-line values of `data` (each padded to
    /// an even length, as TIFF wants values on word boundaries).
    private static func size(of entries: Int, data: [Field]) -> Int {
        2 + entries * 12 + 4 + data.reduce(0) { $0 + ($1.data.count > 4 ? padded($1.data.count) : 0) }
    }

    private static func padded(_ n: Int) -> Int { n + (n & 1) }

    /// An IFD at `offset` (entries sorted by tag, no next IFD) followed by its out-of-line values.
    private static func layout(_ fields: [Field], at offset: Int) -> [UInt8] {
        let sorted = fields.sorted { $0.tag < $1.tag }
        var table: [UInt8] = le16(UInt16(sorted.count))
        var area: [UInt8] = []
        let areaStart = offset + 2 + sorted.count * 12 + 4
        for f in sorted {
            table += le16(f.tag) + le16(f.type) + le32(f.count)
            if f.data.count <= 4 {
                table += f.data + [UInt8](repeating: 0, count: 4 - f.data.count)
            } else {
                table += le32(UInt32(areaStart + area.count))
                area += f.data
                if f.data.count & 1 == 1 { area.append(0) }
            }
        }
        return table + le32(0) + area
    }

}

private func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
private func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * $0)) & 0xFF) } }

/// PNG's chunk structure (PNG spec, 3rd edition §5): length (u32 BE, at most 2³¹−1), type (four
/// ASCII letters), data, CRC. Shared by the capture-date reader and the sanitizer.
enum PNGChunks {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
    /// The largest eXIf chunk read; a photo's EXIF is tens of KiB.
    static let maximumExif = TIFFReader.maximumSize

    struct Header {
        let length: Int64
        let type: [UInt8]
        var name: String { String(decoding: type, as: UTF8.self) }
        /// Ancillary chunks have a lower-case first letter (bit 5); the rest are critical.
        var isCritical: Bool { type[0] & 0x20 == 0 }
    }

    /// Ancillary chunks sanitizing keeps: colour and transparency information, physical size,
    /// suggested palettes, and APNG's animation chunks. Everything else ancillary is left out:
    /// text (tEXt, zTXt, iTXt, where XMP lives too), tIME, eXIf (rewritten), and chunks nobody here
    /// knows (vendor data, C2PA manifests), which may hold anything.
    static let keptAncillary: Set<String> = [
        "cHRM", "gAMA", "iCCP", "sBIT", "sRGB", "cICP", "mDCV", "cLLI", "mDCv", "cLLi",
        "bKGD", "hIST", "tRNS", "pHYs", "sPLT", "acTL", "fcTL", "fdAT",
    ]

    static func readSignature(_ input: InputFile) throws {
        guard try input.read(8, "the PNG signature") == signature else {
            throw MediaError.malformed("\(input.path) does not start with the PNG signature")
        }
    }

    /// The next chunk's length and type; nil at a clean end of file.
    static func nextHeader(_ input: InputFile) throws -> Header? {
        guard let first = try input.readByte() else { return nil }
        let rest = try input.read(7, "a PNG chunk header")
        let length = Int64(first) << 24 | Int64(rest[0]) << 16 | Int64(rest[1]) << 8 | Int64(rest[2])
        let type = Array(rest[3..<7])
        guard length <= Int64(Int32.max) else {
            throw MediaError.malformed("\(input.path): PNG chunk at byte \(input.offset - 8) announces \(length) bytes")
        }
        guard type.allSatisfy({ (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }) else {
            throw MediaError.malformed("\(input.path): PNG chunk at byte \(input.offset - 8) has a type that is not four letters")
        }
        return Header(length: length, type: type)
    }

    /// Reads an eXIf chunk's data and CRC; nil (the data skipped) when it is larger than `maximumExif`.
    static func exifData(_ input: InputFile, _ header: Header) throws -> [UInt8]? {
        guard header.length <= Int64(maximumExif) else {
            try input.skip(header.length + 4, "a PNG eXIf chunk")
            return nil
        }
        let data = try input.read(Int(header.length), "a PNG eXIf chunk")
        _ = try input.read(4, "a PNG chunk CRC")
        return data
    }

    /// The fields of the first eXIf chunk, or nil. Walks the whole chunk list (eXIf may follow the
    /// image data), seeking over the rest. A damaged EXIF block reads as none.
    static func exifFields(_ input: InputFile) throws -> ExifFields? {
        try readSignature(input)
        while let header = try nextHeader(input) {
            if header.name == "eXIf" {
                return try exifData(input, header).flatMap(JPEGSegments.parseLeniently)
            }
            if header.name == "IEND" { return nil }
            try input.skip(header.length + 4, "PNG chunk \(header.name)")
        }
        return nil
    }

    /// Walks every chunk (seeking over the data), checking that IHDR comes first, every length
    /// fits in the file and IEND ends the list, before libvips sees the file: libpng, handed a
    /// chunk announcing more than the file holds, spends seconds trying to read it.
    static func checkChunks(_ input: InputFile) throws {
        try readSignature(input)
        var first = true
        while let header = try nextHeader(input) {
            if first, header.name != "IHDR" { throw MediaError.malformed("\(input.path): PNG does not start with IHDR") }
            first = false
            try input.skip(header.length + 4, "PNG chunk \(header.name)")
            if header.name == "IEND" { return }
        }
        throw MediaError.malformed("\(input.path): PNG ends without an IEND chunk")
    }

    /// A chunk as it is written, with its CRC over type and data.
    static func encode(type: String, data: [UInt8]) -> [UInt8] {
        let typeBytes = Array(type.utf8)
        let n = UInt32(data.count)
        let crc = CRC32.checksum(typeBytes + data)
        return be32(n) + typeBytes + data + be32(crc)
    }

    static func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }
}

/// JPEG's marker structure (ITU-T T.81 Annex B; JFIF; EXIF 2.32 §4.5.4): what the vault reads from
/// a JPEG's header and what sanitizing keeps. Shared by the capture-date reader and the sanitizer.
enum JPEGSegments {
    static let soi: UInt8 = 0xD8
    static let eoi: UInt8 = 0xD9
    static let sos: UInt8 = 0xDA
    static let app1: UInt8 = 0xE1

    static let exifPrefix: [UInt8] = Array("Exif".utf8) + [0, 0]

    /// Markers that stand alone (no length field): TEM and the restart markers. SOI and EOI too,
    /// but those are handled where they may appear.
    static func isStandalone(_ marker: UInt8) -> Bool {
        marker == 0x01 || (0xD0...0xD7).contains(marker)
    }

    /// What sanitizing does with a marker segment.
    enum Action: Equatable {
        /// Copied byte for byte: what decoding needs (frame, scan and hierarchical headers, tables,
        /// restart interval, line count) and the metadata that changes how pixels look (the ICC
        /// profile, Adobe's colour-transform flag).
        case keep
        /// Left out: every other APPn (XMP, IPTC/Photoshop, MPF, JFXX and maker segments, C2PA),
        /// comments, the JPEG-extension markers (JPGn, 0xFFF0…0xFFFD) and reserved codes.
        case drop
        /// The EXIF block: replaced by a minimal one (the first one only; later ones are dropped).
        case exif
        /// A JFIF APP0: its version, units and density kept, its thumbnail dropped (these bytes); the
        /// first one only.
        case jfif([UInt8])
    }

    /// Markers whose segments decoding needs (T.81 Table B.1): SOF0…SOF15 with DHT and DAC
    /// (0xC0…0xCF except the reserved JPG, 0xC8), SOS, DQT, DNL, DRI, DHP and EXP (0xDA…0xDF).
    static func isDecodingStructure(_ marker: UInt8) -> Bool {
        ((0xC0...0xCF).contains(marker) && marker != 0xC8) || (0xDA...0xDF).contains(marker)
    }

    /// The JFIF identifier, then version (2 bytes), units (1), X and Y density (2 each) and the
    /// thumbnail's width and height (1 each), then its 3 × width × height RGB bytes.
    static let jfifHeaderLength = 14

    static func action(marker: UInt8, payload: [UInt8]) -> Action {
        switch marker {
        case 0xE0:
            guard payload.starts(with: Array("JFIF".utf8) + [0]), payload.count >= jfifHeaderLength else { return .drop }
            return .jfif(Array(payload[0..<12]) + [0, 0])
        case app1: return payload.starts(with: exifPrefix) ? .exif : .drop
        case 0xE2: return payload.starts(with: Array("ICC_PROFILE".utf8) + [0]) ? .keep : .drop
        case 0xEE: return payload.starts(with: Array("Adobe".utf8)) ? .keep : .drop
        default: return isDecodingStructure(marker) ? .keep : .drop
        }
    }

    /// Reads the next marker where one must be: 0xFF (fill bytes allowed) and a marker code.
    static func nextMarker(_ input: InputFile) throws -> UInt8 {
        let first = try input.byte("a JPEG marker")
        guard first == 0xFF else {
            throw MediaError.malformed("\(input.path): expected a JPEG marker at byte \(input.offset - 1), found 0x\(String(first, radix: 16))")
        }
        var marker = try input.byte("a JPEG marker")
        while marker == 0xFF { marker = try input.byte("a JPEG marker") }
        guard marker != 0x00 else { throw MediaError.malformed("\(input.path): stuffed zero where a JPEG marker belongs (byte \(input.offset - 1))") }
        return marker
    }

    /// A marker segment's payload (after its 2-byte length, which counts itself: at most 65 533 bytes).
    static func payload(_ input: InputFile, marker: UInt8) throws -> [UInt8] {
        let hi = try input.byte("a JPEG segment length"), lo = try input.byte("a JPEG segment length")
        let length = Int(hi) << 8 | Int(lo)
        guard length >= 2 else {
            throw MediaError.malformed("\(input.path): JPEG segment 0xFF\(String(marker, radix: 16, uppercase: true)) has length \(length)")
        }
        return try input.read(length - 2, "JPEG segment 0xFF\(String(marker, radix: 16, uppercase: true))")
    }

    /// The segment as it is written: marker, length, payload.
    static func encode(marker: UInt8, payload: [UInt8]) -> [UInt8] {
        let length = payload.count + 2
        return [0xFF, marker, UInt8(length >> 8), UInt8(length & 0xFF)] + payload
    }

    /// Checks the start-of-image marker.
    static func readStart(_ input: InputFile) throws {
        guard try input.read(2, "the JPEG start") == [0xFF, soi] else {
            throw MediaError.malformed("\(input.path) does not start with a JPEG start-of-image marker")
        }
    }

    /// The fields of the first EXIF block before the image data, or nil when there is none. A
    /// damaged EXIF block reads as none: the photo is still a photo, and its structure was fine.
    static func exifFields(_ input: InputFile) throws -> ExifFields? {
        try readStart(input)
        while true {
            let marker = try nextMarker(input)
            if isStandalone(marker) { continue }
            guard marker != eoi, marker != soi else {
                throw MediaError.malformed("\(input.path): JPEG ends before its image data")
            }
            if marker == sos { return nil }
            if marker == app1 {
                let p = try payload(input, marker: marker)
                if p.starts(with: exifPrefix) { return parseLeniently(Array(p.dropFirst(exifPrefix.count))) }
            } else {
                let hi = try input.byte("a JPEG segment length"), lo = try input.byte("a JPEG segment length")
                let length = Int(hi) << 8 | Int(lo)
                guard length >= 2 else { throw MediaError.malformed("\(input.path): JPEG segment has length \(length)") }
                try input.skip(Int64(length - 2), "a JPEG segment")
            }
        }
    }

    /// Walks the header's segments up to the first start-of-scan, checking every length against
    /// the file, before libvips sees the file.
    static func checkHeader(_ input: InputFile) throws {
        try readStart(input)
        while true {
            let marker = try nextMarker(input)
            if isStandalone(marker) { continue }
            guard marker != eoi, marker != soi else {
                throw MediaError.malformed("\(input.path): JPEG ends before its image data")
            }
            let hi = try input.byte("a JPEG segment length"), lo = try input.byte("a JPEG segment length")
            let length = Int(hi) << 8 | Int(lo)
            guard length >= 2 else { throw MediaError.malformed("\(input.path): JPEG segment has length \(length)") }
            try input.skip(Int64(length - 2), "a JPEG segment")
            if marker == sos { return }
        }
    }

    static func parseLeniently(_ tiff: [UInt8]) -> ExifFields? {
        do {
            return try ExifFields(tiff: tiff)
        } catch {
            return nil   // deliberate: a broken EXIF block is no EXIF block (see exifFields)
        }
    }
}

/// The lossless JPEG rewrite: the header's segments are filtered (`JPEGSegments.action`: what
/// decoding needs, the ICC profile and Adobe's flag kept; JFIF without its thumbnail; unknown and
/// application markers dropped), the EXIF block is replaced by a minimal one (orientation and
/// dates), and everything from the first
/// start-of-scan on is copied byte for byte up to the end-of-image marker. Marker segments between
/// progressive scans go through the same filter. Bytes after end-of-image (MPF secondary images,
/// motion-photo videos, vendor trailers, any of which may carry their own metadata) are left out.
enum JPEGSanitizer {
    static func sanitize(_ input: InputFile, to output: OutputFile) throws {
        try JPEGSegments.readStart(input)
        try output.write([0xFF, JPEGSegments.soi])
        var exifSeen = false, jfifSeen = false
        header: while true {
            let marker = try JPEGSegments.nextMarker(input)
            if JPEGSegments.isStandalone(marker) {
                try output.write([0xFF, marker])
                continue
            }
            guard marker != JPEGSegments.eoi, marker != JPEGSegments.soi else {
                throw MediaError.malformed("\(input.path): JPEG ends before its image data")
            }
            let payload = try JPEGSegments.payload(input, marker: marker)
            if marker == JPEGSegments.sos {
                try output.write(JPEGSegments.encode(marker: marker, payload: payload))
                break header
            }
            switch JPEGSegments.action(marker: marker, payload: payload) {
            case .keep:
                try output.write(JPEGSegments.encode(marker: marker, payload: payload))
            case .jfif(let header):
                guard !jfifSeen else { break }   // the first one only, like EXIF
                jfifSeen = true
                try output.write(JPEGSegments.encode(marker: marker, payload: header))
            case .drop:
                break
            case .exif:
                guard !exifSeen else { break }
                exifSeen = true
                let tiff = Array(payload.dropFirst(JPEGSegments.exifPrefix.count))
                if let kept = JPEGSegments.parseLeniently(tiff)?.kept, let block = ExifWriter.tiff(kept) {
                    try output.write(JPEGSegments.encode(marker: JPEGSegments.app1, payload: JPEGSegments.exifPrefix + block))
                }
            }
        }
        try copyScans(input, to: output)
    }

    /// Entropy-coded data holds 0xFF only as 0xFF00 (stuffing) or a restart marker; any other
    /// 0xFF starts a marker. So the scan is copied up to each 0xFF, and what follows decides.
    /// A file that ends without end-of-image (cut short) is copied as far as it goes.
    private static func copyScans(_ input: InputFile, to output: OutputFile) throws {
        while try input.copyUntilFF(to: output) {
            var fills = 1
            var next = try input.readByte()
            while next == 0xFF {
                fills += 1
                next = try input.readByte()
            }
            let ffs = [UInt8](repeating: 0xFF, count: fills)
            guard let marker = next else {
                try output.write(ffs)
                return
            }
            if marker == 0x00 || JPEGSegments.isStandalone(marker) {
                try output.write(ffs + [marker])
                continue
            }
            if marker == JPEGSegments.eoi {
                try output.write(ffs + [marker])
                return
            }
            guard marker != JPEGSegments.soi else {
                throw MediaError.malformed("\(input.path): start-of-image marker inside the image data (byte \(input.offset - 1))")
            }
            let payload = try JPEGSegments.payload(input, marker: marker)
            switch JPEGSegments.action(marker: marker, payload: payload) {
            case .keep:
                try output.write(ffs.dropLast() + JPEGSegments.encode(marker: marker, payload: payload))
            case .drop, .exif, .jfif:   // metadata between scans: none is needed to decode
                break
            }
        }
    }
}

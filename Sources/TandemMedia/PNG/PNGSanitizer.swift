/// The lossless PNG rewrite: chunks are copied whole (their CRCs stay valid) or left out, by
/// `PNGChunks.keptAncillary`; critical chunks (IHDR, PLTE, IDAT, IEND and any other) are always
/// kept. The first eXIf becomes a minimal one (orientation and dates; browsers honour its
/// orientation) with a new CRC. Bytes after IEND are left out.
enum PNGSanitizer {
    static func sanitize(_ input: InputFile, to output: OutputFile) throws {
        try PNGChunks.readSignature(input)
        try output.write(PNGChunks.signature)
        var first = true
        var exifSeen = false
        while let header = try PNGChunks.nextHeader(input) {
            if first {
                guard header.name == "IHDR" else { throw MediaError.malformed("\(input.path): PNG does not start with IHDR") }
                first = false
            }
            if header.name == "eXIf" {
                let data = try PNGChunks.exifData(input, header)
                guard !exifSeen else { continue }
                exifSeen = true
                if let kept = data.flatMap(JPEGSegments.parseLeniently)?.kept, let block = ExifWriter.tiff(kept) {
                    try output.write(PNGChunks.encode(type: "eXIf", data: block))
                }
                continue
            }
            if header.isCritical || PNGChunks.keptAncillary.contains(header.name) {
                try output.write(PNGChunks.be32(UInt32(header.length)) + header.type)
                try input.copy(header.length + 4, to: output, "PNG chunk \(header.name)")
            } else {
                try input.skip(header.length + 4, "PNG chunk \(header.name)")
            }
            if header.name == "IEND" { return }
        }
        throw MediaError.malformed("\(input.path): PNG ends without an IEND chunk")
    }
}

import CVips

/// HEIC through libvips (libheif underneath, which decodes with libde265 and encodes with x265 on
/// Debian 12) for thumbnails and the capture date. Sanitizing rewrites the container's metadata
/// items in place (`HEIFMetadataRewrite`, lossless, milliseconds) and re-encodes only a file that
/// rewrite refuses (tens of seconds and hundreds of MB for a 12-megapixel photo, lossy).
enum HEICProcessor {
    /// How a HEIC was sanitized.
    enum Method: Equatable {
        /// Its metadata items were overwritten in place; the image data is the original's.
        case rewritten
        /// The in-place rewrite refused the file (the error says why); it was decoded and re-encoded.
        case reencoded(because: MediaError)
    }

    /// The re-encode's quality: high enough that a second generation is not visibly worse.
    static let quality: Int32 = 90

    /// Opens the file with libvips (its header: nothing is decoded until pixels are asked for).
    /// `reencode`: the pixels will be decoded and encoded again, so `HEIFDecodeBound` checks what
    /// the file declares first, with the re-encode's tighter bound.
    static func open(_ input: InputFile, reencode: Bool = false) throws -> (VipsSourceRef, VipsImageRef) {
        if reencode { try HEIFDecodeBound.check(input, forReencode: true) }
        try Vips.start()
        let source = try VipsSourceRef(descriptor: try input.rewoundDescriptor(), path: input.path)
        guard let p = tdm_image_new_from_source(source.pointer) else { throw Vips.failure("cannot read", input.path) }
        let image = VipsImageRef(p)
        try ImageLimits.check(image, path: input.path)
        return (source, image)
    }

    static func exifFields(_ input: InputFile) throws -> ExifFields? {
        let (_, image) = try open(input)
        return image.blob("exif-data").flatMap(tiffBody).flatMap(JPEGSegments.parseLeniently)
    }

    /// The TIFF structure inside an EXIF blob as a loader hands it over: bare, after "Exif\0\0", or
    /// after HEIF's 4-byte offset to the TIFF header (ISO/IEC 23008-12 Annex A.2.1).
    static func tiffBody(_ blob: [UInt8]) -> [UInt8]? {
        tiffStart(blob).map { Array(blob[$0...]) }
    }

    /// Where the TIFF header is in an EXIF blob or a HEIF Exif item (the forms of `tiffBody`).
    static func tiffStart(_ blob: [UInt8]) -> Int? {
        func isTIFF(_ b: ArraySlice<UInt8>) -> Bool {
            b.starts(with: [0x49, 0x49, 0x2A, 0x00]) || b.starts(with: [0x4D, 0x4D, 0x00, 0x2A])
        }
        let all = blob[...]
        if isTIFF(all) { return 0 }
        if all.starts(with: JPEGSegments.exifPrefix) { return 6 }
        guard let skip = offsetPrefix(blob) else { return nil }
        let rest = all.dropFirst(4 + skip)
        if isTIFF(rest) { return 4 + skip }
        if rest.starts(with: JPEGSegments.exifPrefix) { return 4 + skip + 6 }
        return nil
    }

    /// A HEIF Exif item's leading exif_tiff_header_offset when it points inside the blob.
    static func offsetPrefix(_ blob: [UInt8]) -> Int? {
        guard blob.count >= 8 else { return nil }
        let skip = Int(blob[0]) << 24 | Int(blob[1]) << 16 | Int(blob[2]) << 8 | Int(blob[3])
        return skip <= blob.count - 4 ? skip : nil
    }

    /// Writes the sanitized copy: in place when the container allows (`HEIFMetadataRewrite`), else
    /// re-encoded. The rewrite is planned before anything is written, so a refusal leaves `output`
    /// empty for the re-encode. When both fail the error is the re-encode's, with the rewrite's
    /// reason added.
    static func sanitize(_ input: InputFile, to output: OutputFile) throws -> Method {
        let plan: HEIFMetadataRewrite
        do {
            plan = try HEIFMetadataRewrite(input)
        } catch let error as MediaError where error.kind != .io {
            return try reencode(input, to: output, because: error)
        }
        try plan.write(input, to: output)
        return .rewritten
    }

    private static func reencode(_ input: InputFile, to output: OutputFile, because refusal: MediaError) throws -> Method {
        do {
            try reencode(input, to: output)
        } catch let error as MediaError {
            throw MediaError(error.kind, "\(error.detail) (in-place rewrite refused too: \(refusal.detail))")
        }
        return .reencoded(because: refusal)
    }

    /// Decodes (libheif applies the container's rotation and mirroring, so the pixels come out
    /// upright), drops every metadata field but the ICC profile, attaches a minimal EXIF block
    /// (dates, orientation 1 since the pixels are upright), and encodes an 8-bit HEVC HEIC.
    static func reencode(_ input: InputFile, to output: OutputFile) throws {
        let (_, image) = try open(input, reencode: true)
        var kept = image.blob("exif-data").flatMap(tiffBody).flatMap(JPEGSegments.parseLeniently)?.kept ?? ExifFields()
        kept.orientation = 1
        var copied: UnsafeMutablePointer<VipsImage>?
        guard tdm_copy(image.pointer, &copied) == 0, let copied else { throw Vips.failure("cannot copy", input.path) }
        let clean = VipsImageRef(copied)
        tdm_remove_metadata(clean.pointer)
        vips_image_set_int(clean.pointer, "orientation", 1)
        if let block = ExifWriter.tiff(kept) {
            let blob = JPEGSegments.exifPrefix + block
            blob.withUnsafeBytes { raw in
                vips_image_set_blob_copy(clean.pointer, "exif-data", raw.baseAddress, raw.count)
            }
        }
        let target = try VipsTargetRef(descriptor: try output.descriptor(), path: output.path)
        guard tdm_heifsave_target(clean.pointer, target.pointer, quality) == 0 else {
            throw Vips.failure("cannot encode a HEIC to", output.path)
        }
    }
}

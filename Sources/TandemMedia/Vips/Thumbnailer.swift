import CVips

/// The import thumbnail, by libvips: decoded from the file with shrink-on-load (a JPEG's DCT
/// scaling, a HEIF's embedded preview) so a 50-megapixel photo is never decoded whole, scaled to
/// cover the square, centre-cropped, EXIF orientation applied, alpha flattened onto white, and
/// saved as a baseline JPEG at quality 80 without any metadata.
enum Thumbnailer {
    static let quality: Int32 = 80

    static func thumbnail(_ input: InputFile, size: Int) throws -> [UInt8] {
        try Vips.start()
        let source = try VipsSourceRef(descriptor: try input.rewoundDescriptor(), path: input.path)
        // The header first: its dimensions are checked before anything is decoded.
        guard let header = tdm_image_new_from_source(source.pointer) else { throw Vips.failure("cannot read", input.path) }
        try ImageLimits.check(VipsImageRef(header), path: input.path)

        var out: UnsafeMutablePointer<VipsImage>?
        guard tdm_thumbnail_source(source.pointer, Int32(size), Int32(size), &out) == 0, let out else {
            throw Vips.failure("cannot make a thumbnail of", input.path)
        }
        var image = VipsImageRef(out)
        if vips_image_hasalpha(image.pointer) != 0 {
            var flat: UnsafeMutablePointer<VipsImage>?
            guard tdm_flatten_white(image.pointer, &flat) == 0, let flat else { throw Vips.failure("cannot flatten", input.path) }
            image = VipsImageRef(flat)
        }
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard tdm_jpegsave_buffer(image.pointer, &buffer, &length, quality) == 0, let buffer else {
            throw Vips.failure("cannot encode the thumbnail of", input.path)
        }
        defer { g_free(buffer) }
        return Array(UnsafeRawBufferPointer(start: buffer, count: length))
    }
}

/// What a HEIC may make libheif decode, checked from the container's own declarations before the
/// file reaches libheif or libvips (Protocol/vault.md, "Photos"). A HEIC's coded data is small and
/// its pixels are not: a few KB of HEVC can declare a 65 535 × 65 535 image, and libheif decodes a
/// grid image's tiles one after another in a single call nothing can interrupt. So the time a
/// decode can take is bounded by bounding what it may produce: every image size an item declares
/// (`ispe`, mandatory for every image item) is read and summed first.
///
/// - Any one image at most `maximumImagePixels`; all the images together (a grid and its tiles, a
///   thumbnail, depth and gain maps) at most `maximumTotalPixels`: for a thumbnail, which may
///   decode the whole primary image. (Reading the capture date decodes nothing and is not bounded
///   here; the in-place metadata rewrite never calls libheif.)
/// - A re-encode (decode and x265 encode of the primary image, the slow path taken only when the
///   in-place rewrite refuses the container): its largest image at most `maximumReencodePixels`.
///
/// A file without any declared size, or whose container cannot be read, is refused: nothing
/// bounds what it would decode. Measured (libvips 8.14, libheif 1.15 with libde265 and x265, a
/// 4-megapixel HEIC of noise, the hardest content to code): a decode takes about 0.11 CPU seconds
/// per megapixel and a re-encode about 2.2, so the bounds keep a decode under about 20 CPU seconds
/// and a re-encode under about 40.
enum HEIFDecodeBound {
    /// 64 megapixels: a 48-megapixel phone photo (8064 × 6048) fits, a decompression bomb does not.
    static let maximumImagePixels: UInt64 = 64_000_000
    /// A 48-megapixel grid image and its tiles (twice its pixels), with room for maps and previews.
    static let maximumTotalPixels: UInt64 = 160_000_000
    /// 16 megapixels (4608 × 3456, a 4:3 16-megapixel sensor) decoded and re-encoded.
    static let maximumReencodePixels: UInt64 = 16_000_000

    /// What a full decode of the file may produce at most, or why it is refused.
    static func check(_ source: some RandomAccessBytes, forReencode: Bool = false) throws {
        let container: HEIFContainer
        do {
            container = try HEIFContainer(source)
        } catch let error as MediaError where error.kind != .io {
            throw MediaError(.tooLarge, "\(source.name): its decoded size cannot be bounded (\(error.detail))")
        }
        try check(container.declaredSizes, name: source.name, forReencode: forReencode)
    }

    static func check(_ sizes: [HEIFContainer.DeclaredSize], name: String, forReencode: Bool = false) throws {
        guard !sizes.isEmpty else {
            throw MediaError(.tooLarge, "\(name): HEIF file declares no image size ('ispe'), so its decoded size cannot be bounded")
        }
        let perImage = forReencode ? maximumReencodePixels : maximumImagePixels
        var total: UInt64 = 0
        for size in sizes {
            guard size.width > 0, size.height > 0, size.pixels <= perImage else {
                throw MediaError(.tooLarge, "\(name): HEIF item \(size.item) declares \(size.width) × \(size.height) pixels (at most \(perImage) per image\(forReencode ? " for a re-encode" : ""))")
            }
            total += size.pixels   // at most 20 000 associations of at most 64 M pixels: no overflow
        }
        guard total <= maximumTotalPixels else {
            throw MediaError(.tooLarge, "\(name): HEIF images declare \(total) pixels in all (at most \(maximumTotalPixels))")
        }
    }
}

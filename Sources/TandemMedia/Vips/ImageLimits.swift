/// Bounds on what is decoded: a small file can announce a huge image (a decompression bomb).
enum ImageLimits {
    /// 16 384 × 16 384: above any phone or camera (a 200-megapixel sensor is 16 320 × 12 240).
    static let maximumPixels: Int64 = 268_435_456

    static func check(_ image: VipsImageRef, path: String) throws {
        let pixels = Int64(image.width) * Int64(image.height)
        guard image.width > 0, image.height > 0, pixels <= maximumPixels else {
            throw MediaError(.tooLarge, "\(path) is \(image.width) × \(image.height) pixels (at most \(maximumPixels))")
        }
    }
}

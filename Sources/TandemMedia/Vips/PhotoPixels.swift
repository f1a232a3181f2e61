import CVips
import Foundation

/// A photo's pixels for analysis: 8-bit sRGB, row by row from the top, three bytes a pixel.
public struct PhotoPixels: Sendable, Equatable {
    public let width: Int
    public let height: Int
    public let rgb: [UInt8]

    /// Nil unless both sides are positive and `rgb` holds exactly width × height × 3 bytes.
    public init?(width: Int, height: Int, rgb: [UInt8]) {
        guard width > 0, height > 0, width <= 1 << 16, height <= 1 << 16, rgb.count == width * height * 3 else { return nil }
        self.width = width
        self.height = height
        self.rgb = rgb
    }
}

/// When the camera says a photo was taken (EXIF 2.32): the wall-clock date and time of
/// DateTimeOriginal (else DateTimeDigitized) and the offset from UTC its OffsetTime tag gives, if any.
/// DateTime, the time the file was last changed, is not a capture time and is not read here.
public struct PhotoCaptureTime: Sendable, Equatable {
    public let year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int
    /// Minutes east of UTC, when the photo says; nil when it gives the camera's wall clock alone.
    public let offsetMinutes: Int?

    /// Seconds since 1970 UTC, reading the wall-clock time at `offsetMinutes`, or at
    /// `assumedOffsetMinutes` when the photo gives none.
    public func secondsSince1970(assumedOffsetMinutes: Int) -> Int64 {
        let days = ExifDateTime.daysSince1970(year: year, month: month, day: day)
        return days * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64((offsetMinutes ?? assumedOffsetMinutes) * 60)
    }
}

extension PhotoProcessor {
    /// The photo decoded for analysis: EXIF orientation applied, scaled down (never up) to fit a
    /// `fitting` × `fitting` box with shrink-on-load (a JPEG's DCT scaling, a HEIF's preview), so a
    /// 12-megapixel photo is never decoded whole; alpha flattened onto white, grey made RGB, 16-bit
    /// samples reduced to 8. `fitting` is 16…2048. The header is checked before any pixel is decoded.
    public static func pixels(of file: URL, fitting: Int = 256) throws -> PhotoPixels {
        guard (16...2048).contains(fitting) else {
            throw MediaError(.invalidArgument, "analysis size \(fitting) is outside 16…2048")
        }
        let input = try InputFile(file)
        switch try format(ofPhoto: input) {
        case .jpeg: try JPEGSegments.checkHeader(input)
        case .png: try PNGChunks.checkChunks(input)
        case .heic: break
        }
        try Vips.start()
        let source = try VipsSourceRef(descriptor: try input.rewoundDescriptor(), path: input.path)
        guard let header = tdm_image_new_from_source(source.pointer) else { throw Vips.failure("cannot read", input.path) }
        let headerRef = VipsImageRef(header)
        try ImageLimits.check(headerRef, path: input.path)
        // The box has the upright photo's aspect ratio, so the thumbnail's centre crop takes nothing.
        let swap = vips_image_get_orientation_swap(header) != 0
        let uprightWidth = swap ? headerRef.height : headerRef.width
        let uprightHeight = swap ? headerRef.width : headerRef.height
        let scale = min(1.0, Double(fitting) / Double(max(uprightWidth, uprightHeight)))
        let boxWidth = max(1, Int((Double(uprightWidth) * scale).rounded()))
        let boxHeight = max(1, Int((Double(uprightHeight) * scale).rounded()))

        var out: UnsafeMutablePointer<VipsImage>?
        guard tdm_thumbnail_source(source.pointer, Int32(boxWidth), Int32(boxHeight), &out) == 0, let out else {
            throw Vips.failure("cannot decode", input.path)
        }
        var image = VipsImageRef(out)
        if vips_image_hasalpha(image.pointer) != 0 {
            var flat: UnsafeMutablePointer<VipsImage>?
            guard tdm_flatten_white(image.pointer, &flat) == 0, let flat else { throw Vips.failure("cannot flatten", input.path) }
            image = VipsImageRef(flat)
        }
        return try rgb8(image, path: input.path)
    }

    /// A baseline JPEG of `pixels` without metadata (benchmarks and tests build inputs with it).
    public static func jpeg(of pixels: PhotoPixels, quality: Int = 90) throws -> [UInt8] {
        try Vips.start()
        let made = pixels.rgb.withUnsafeBytes {
            vips_image_new_from_memory_copy($0.baseAddress, $0.count, Int32(pixels.width), Int32(pixels.height), 3, VIPS_FORMAT_UCHAR)
        }
        guard let made else { throw MediaError(.decoder, "cannot make an image: \(Vips.takeError())") }
        let image = VipsImageRef(made)
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard tdm_jpegsave_buffer(image.pointer, &buffer, &length, Int32(max(1, min(100, quality)))) == 0, let buffer else {
            throw MediaError(.decoder, "cannot encode a JPEG: \(Vips.takeError())")
        }
        defer { g_free(buffer) }
        return Array(UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// The capture time of the photo's EXIF block: DateTimeOriginal with OffsetTimeOriginal, else
    /// DateTimeDigitized with OffsetTimeDigitized; nil when it has neither (or no EXIF block, or a
    /// damaged one). A damaged file structure throws.
    public static func captureTime(of file: URL) throws -> PhotoCaptureTime? {
        guard let fields = try exifFields(of: file) else { return nil }
        let chosen: (ExifDateTime, ExifOffset?)
        if let d = fields.dateTimeOriginal {
            chosen = (d, fields.offsetTimeOriginal)
        } else if let d = fields.dateTimeDigitized {
            chosen = (d, fields.offsetTimeDigitized)
        } else {
            return nil
        }
        let (d, offset) = chosen
        return PhotoCaptureTime(year: d.year, month: d.month, day: d.day, hour: d.hour, minute: d.minute,
                                second: d.second, offsetMinutes: offset?.minutes)
    }

    /// Sniffs the file's first bytes and rewinds it.
    private static func format(ofPhoto input: InputFile) throws -> PhotoFormat {
        let prefix = try input.prefix(PhotoFormat.sniffLength)
        _ = try input.rewoundDescriptor()
        guard let format = PhotoFormat.sniff(prefix) else {
            throw MediaError(.unsupportedFormat, "\(input.path) is not a JPEG, PNG or HEIC photo")
        }
        return format
    }

    /// The decoded image as 8-bit RGB: one band repeated, three bands as they are, 16-bit samples
    /// by their high byte. Anything else (CMYK left as it is, floats) is refused.
    private static func rgb8(_ image: VipsImageRef, path: String) throws -> PhotoPixels {
        let bands = Int(vips_image_get_bands(image.pointer))
        let format = vips_image_get_format(image.pointer)
        let bytesPerSample: Int
        switch format {
        case VIPS_FORMAT_UCHAR: bytesPerSample = 1
        case VIPS_FORMAT_USHORT: bytesPerSample = 2
        default: throw MediaError(.decoder, "\(path): samples of this kind are not read (\(format.rawValue))")
        }
        guard bands == 1 || bands == 3 else { throw MediaError(.decoder, "\(path): \(bands) colour bands are not read") }
        let width = image.width, height = image.height
        var size = 0
        guard let memory = vips_image_write_to_memory(image.pointer, &size) else { throw Vips.failure("cannot decode", path) }
        defer { g_free(memory) }
        let samples = width * height * bands
        guard size == samples * bytesPerSample else { throw MediaError(.decoder, "\(path): decoded \(size) bytes, expected \(samples * bytesPerSample)") }
        let raw = UnsafeRawBufferPointer(start: memory, count: size)
        var rgb = [UInt8](repeating: 0, count: width * height * 3)
        rgb.withUnsafeMutableBufferPointer { out in
            for p in 0..<(width * height) {
                for c in 0..<3 {
                    let sample = p * bands + (bands == 1 ? 0 : c)
                    // 16-bit samples are in the machine's byte order: the high byte by arithmetic.
                    out[p * 3 + c] = bytesPerSample == 1
                        ? raw[sample]
                        : UInt8(truncatingIfNeeded: raw.load(fromByteOffset: sample * 2, as: UInt16.self) >> 8)
                }
            }
        }
        guard let pixels = PhotoPixels(width: width, height: height, rgb: rgb) else {
            throw MediaError(.decoder, "\(path): decoded to an empty image")
        }
        return pixels
    }
}

import CVips

/// libvips, initialised once per process on first use (thread-safe: a Swift global is initialised
/// once under a lock), and thread-safe after that. Initialising also sets the process-wide policy
/// in `tdm_init`: only the JPEG, PNG and HEIF loaders may run, and no operation cache.
enum Vips {
    private static let initialised: Bool = tdm_init() == 0

    static func start() throws {
        guard initialised else { throw MediaError(.decoder, "libvips could not start: \(takeError())") }
    }

    /// libvips's error text (its buffer is process-wide), cleared; one line.
    static func takeError() -> String {
        guard let text = vips_error_buffer_copy() else { return "the file is damaged or not an image libvips can read" }
        defer { g_free(text) }
        let message = String(cString: text).split(whereSeparator: \.isNewline).joined(separator: "; ")
        return message.isEmpty ? "the file is damaged or not an image libvips can read" : message
    }

    /// A decoder failure naming the file and what libvips said.
    static func failure(_ what: String, _ path: String) -> MediaError {
        MediaError(.decoder, "\(what) \(path): \(takeError())")
    }
}

/// A libvips image reference, released when the Swift object goes.
final class VipsImageRef {
    let pointer: UnsafeMutablePointer<VipsImage>

    init(_ pointer: UnsafeMutablePointer<VipsImage>) { self.pointer = pointer }
    deinit { g_object_unref(pointer) }

    var width: Int { Int(vips_image_get_width(pointer)) }
    var height: Int { Int(vips_image_get_height(pointer)) }

    /// A metadata blob (EXIF, XMP, ICC…), copied out; nil when the image has none.
    func blob(_ name: String) -> [UInt8]? {
        guard vips_image_get_typeof(pointer, name) != 0 else { return nil }
        var data: UnsafeRawPointer?
        var length = 0
        guard vips_image_get_blob(pointer, name, &data, &length) == 0, let data else { return nil }
        return Array(UnsafeRawBufferPointer(start: data, count: length))
    }
}

/// A libvips source reading an open file descriptor (which stays the caller's). Reading from a
/// descriptor rather than a path means no file-name option syntax ("x.jpg[shrink=2]") applies.
final class VipsSourceRef {
    let pointer: UnsafeMutablePointer<VipsSource>

    init(descriptor: Int32, path: String) throws {
        guard let p = vips_source_new_from_descriptor(descriptor) else { throw Vips.failure("cannot read", path) }
        pointer = p
    }

    deinit { g_object_unref(pointer) }
}

/// A libvips target writing an open file descriptor (which stays the caller's).
final class VipsTargetRef {
    let pointer: UnsafeMutablePointer<VipsTarget>

    init(descriptor: Int32, path: String) throws {
        guard let p = vips_target_new_to_descriptor(descriptor) else { throw Vips.failure("cannot write", path) }
        pointer = p
    }

    deinit { g_object_unref(pointer) }
}

import CVips
import CZbar
import Foundation

/// Reads the QR codes in a photo (a tag key shown to the camera, issue 14): libvips decodes the
/// JPEG or PNG (HEIC too) under the same limits as the vault's imports, scales it so its longer
/// side is at most `maximumSide` pixels, makes it grey, and zbar finds the codes.
public enum QRDecoder {
    /// Phone photos are 4,000 px wide; a QR code in one is found at half that.
    public static let maximumSide = 2048
    /// A QR code holds at most 2,953 bytes; anything longer is not one of ours.
    public static let maximumPayloadBytes = 4096

    /// The payloads of every QR code in the image at `path`, in the order zbar found them; empty
    /// when there is none. Throws `MediaError` when the file cannot be read or decoded.
    public static func payloads(inImageAt path: String) throws -> [[UInt8]] {
        try Vips.start()
        let input = try InputFile(URL(fileURLWithPath: path), bufferSize: 16)
        let source = try VipsSourceRef(descriptor: try input.rewoundDescriptor(), path: path)
        guard let raw = tdm_image_new_from_source(source.pointer) else { throw Vips.failure("cannot decode", path) }
        let image = VipsImageRef(raw)
        try ImageLimits.check(image, path: path)
        let side = max(image.width, image.height)
        let scale = side > maximumSide ? Double(maximumSide) / Double(side) : 1.0
        var out: UnsafeMutablePointer<VipsImage>?
        guard tdm_grey_for_scan(image.pointer, scale, &out) == 0, let greyPointer = out else { throw Vips.failure("cannot decode", path) }
        let grey = VipsImageRef(greyPointer)
        var length = 0
        guard let pixels = vips_image_write_to_memory(grey.pointer, &length) else { throw Vips.failure("cannot decode", path) }
        defer { g_free(pixels) }
        let (w, h) = (grey.width, grey.height)
        guard w > 0, h > 0, length == w * h else { throw MediaError(.decoder, "\(path): unexpected grey image size") }
        return scan(pixels: UnsafeRawPointer(pixels), width: w, height: h)
    }

    /// zbar over an 8-bit grey image (`Y800`), QR codes only.
    static func scan(pixels: UnsafeRawPointer, width: Int, height: Int) -> [[UInt8]] {
        guard let scanner = zbar_image_scanner_create() else { return [] }
        defer { zbar_image_scanner_destroy(scanner) }
        zbar_image_scanner_set_config(scanner, ZBAR_NONE, ZBAR_CFG_ENABLE, 0)
        zbar_image_scanner_set_config(scanner, ZBAR_QRCODE, ZBAR_CFG_ENABLE, 1)
        guard let img = zbar_image_create() else { return [] }
        defer { zbar_image_destroy(img) }
        let y800: UInt = UInt(UInt8(ascii: "Y")) | UInt(UInt8(ascii: "8")) << 8 | UInt(UInt8(ascii: "0")) << 16 | UInt(UInt8(ascii: "0")) << 24
        zbar_image_set_format(img, y800)
        zbar_image_set_size(img, UInt32(width), UInt32(height))
        zbar_image_set_data(img, pixels, UInt(width * height), nil)
        guard zbar_scan_image(scanner, img) > 0 else { return [] }
        var found: [[UInt8]] = []
        var symbol = zbar_image_first_symbol(img)
        while let s = symbol {
            let count = Int(zbar_symbol_get_data_length(s))
            if count > 0, count <= maximumPayloadBytes, let data = zbar_symbol_get_data(s) {
                found.append(Array(UnsafeRawBufferPointer(start: UnsafeRawPointer(data), count: count)))
            }
            symbol = zbar_symbol_next(s)
        }
        return found
    }
}

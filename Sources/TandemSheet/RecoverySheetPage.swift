import CVips
import Foundation

/// What a printed recovery sheet holds: the node, its recovery code, and per friend holding its
/// backups what `tandem restore --from` takes to reach it (the share code first).
public struct RecoverySheetPage: Sendable {
    public struct Holder: Sendable {
        public let name: String
        public let id: String
        /// Share codes and `ID@host:port` addresses, the share code first.
        public let froms: [String]

        public init(name: String, id: String, froms: [String]) {
            self.name = name
            self.id = id
            self.froms = froms
        }

        /// What the holder's QR code carries: its first share code, else its first address.
        public var qrText: String? { froms.first { $0.hasPrefix("tandem:") } ?? froms.first }
    }

    public let title: String
    public let date: String
    public let nodeID: String
    public let code: String
    public let holders: [Holder]

    public init(title: String, date: String, nodeID: String, code: String, holders: [Holder]) {
        self.title = title
        self.date = date
        self.nodeID = nodeID
        self.code = code
        self.holders = holders
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    // MARK: - PNG

    /// A4 at 150 dpi is 1240 px wide.
    static let pageWidth = 1240
    static let margin = 60
    /// The recovery code's QR code, quiet zone included, is about this wide; each holder's about
    /// `holderSide`, three to a row.
    static let codeSide = 560
    static let holderSide = 360

    /// The page as a grey PNG: the recovery code's QR code at the top, then one QR code per holder
    /// (its share code), in the order of `holders`, three to a row. Each code has its 4-module
    /// quiet zone and whole pixels per module, so a phone or zbar reads it from paper or screen.
    public func png() throws -> [UInt8] {
        var canvas = Canvas(width: Self.pageWidth, height: 1)
        var placed: [(QRCode, x: Int, y: Int, side: Int)] = []
        let main = try QRCode(code)
        placed.append((main, Self.margin, Self.margin, Self.codeSide))
        var y = Self.margin + Self.codeSide + Self.margin / 2
        let perRow = 3
        let codes = try holders.compactMap { h in try h.qrText.map { try QRCode($0) } }
        for (i, qr) in codes.enumerated() {
            let column = i % perRow
            if i > 0 && column == 0 { y += Self.holderSide + Self.margin / 3 }
            placed.append((qr, Self.margin + column * (Self.holderSide + Self.margin / 3), y, Self.holderSide))
        }
        let height = (codes.isEmpty ? y : y + Self.holderSide) + Self.margin
        canvas = Canvas(width: Self.pageWidth, height: height)
        for p in placed { canvas.draw(p.0, x: p.x, y: p.y, side: p.side) }
        return try canvas.png()
    }

    /// A white 8-bit grey image drawn into, then saved by libvips.
    struct Canvas {
        let width: Int
        let height: Int
        var pixels: [UInt8]

        init(width: Int, height: Int) {
            self.width = width
            self.height = height
            pixels = [UInt8](repeating: 255, count: width * height)
        }

        /// `qr` with its quiet zone in a square of at most `side` px at (x, y), whole px per module.
        mutating func draw(_ qr: QRCode, x: Int, y: Int, side: Int) {
            let modules = qr.size + 8
            let scale = max(1, side / modules)
            let origin = (x: x + 4 * scale, y: y + 4 * scale)
            for my in 0..<qr.size {
                for mx in 0..<qr.size where qr.isDark(mx, my) {
                    for py in 0..<scale {
                        let row = origin.y + my * scale + py
                        guard row >= 0, row < height else { continue }
                        for px in 0..<scale {
                            let col = origin.x + mx * scale + px
                            guard col >= 0, col < width else { continue }
                            pixels[row * width + col] = 0
                        }
                    }
                }
            }
        }

        func png() throws -> [UInt8] {
            guard Self.vipsStarted else { throw Failure(description: "libvips could not start") }
            let image = pixels.withUnsafeBytes { raw in
                vips_image_new_from_memory_copy(raw.baseAddress, raw.count, Int32(width), Int32(height), 1, VIPS_FORMAT_UCHAR)
            }
            guard let image else { throw Failure(description: "libvips could not take the page's pixels") }
            defer { g_object_unref(image) }
            var buffer: UnsafeMutableRawPointer?
            var length = 0
            guard tdm_pngsave_buffer(image, &buffer, &length) == 0, let buffer else {
                throw Failure(description: "libvips could not write the PNG")
            }
            defer { g_free(buffer) }
            return Array(UnsafeRawBufferPointer(start: buffer, count: length))
        }

        /// libvips, started (vips_init is idempotent). Not `tdm_init`: that also installs GLib's
        /// log writer, which may be set once per process, and TandemMedia calls it; this only saves
        /// a PNG and loads nothing, so the loader policy there does not concern it.
        private static let vipsStarted: Bool = vips_init("tandem") == 0
    }
}

import CVips
import Foundation
import XCTest
@testable import TandemMedia

/// Test inputs built here: pixels drawn in Swift, encoded by libvips, metadata written by hand.
enum TestImages {
    static let red: [UInt8] = [255, 0, 0]
    static let blue: [UInt8] = [0, 0, 255]

    /// RGB pixels, left half red, right half blue.
    static func twoColour(width: Int, height: Int) -> [UInt8] {
        var pixels = [UInt8]()
        pixels.reserveCapacity(width * height * 3)
        for _ in 0..<height {
            for x in 0..<width { pixels += x < width / 2 ? red : blue }
        }
        return pixels
    }

    static func image(_ pixels: [UInt8], width: Int, height: Int, bands: Int = 3) throws -> UnsafeMutablePointer<VipsImage> {
        try Vips.start()
        let p = pixels.withUnsafeBytes {
            vips_image_new_from_memory_copy($0.baseAddress, $0.count, Int32(width), Int32(height), Int32(bands), VIPS_FORMAT_UCHAR)
        }
        guard let p else { throw MediaError(.decoder, "new_from_memory: \(Vips.takeError())") }
        return p
    }

    private static func saved(_ image: UnsafeMutablePointer<VipsImage>,
                              _ save: (UnsafeMutablePointer<VipsImage>, UnsafeMutablePointer<UnsafeMutableRawPointer?>, UnsafeMutablePointer<Int>) -> Int32) throws -> [UInt8] {
        defer { g_object_unref(image) }
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        guard save(image, &buffer, &length) == 0, let buffer else { throw MediaError(.decoder, "save: \(Vips.takeError())") }
        defer { g_free(buffer) }
        return Array(UnsafeRawBufferPointer(start: buffer, count: length))
    }

    /// A JPEG with no metadata but a JFIF APP0 (libvips, asked to strip, writes neither EXIF nor JFIF).
    static func jpeg(width: Int, height: Int) throws -> [UInt8] {
        let bare = try saved(try image(twoColour(width: width, height: height), width: width, height: height)) {
            tdm_jpegsave_buffer($0, $1, $2, 95)
        }
        let jfif = JPEGSegments.encode(marker: 0xE0, payload: Array("JFIF".utf8) + [0, 1, 2, 0, 0, 1, 0, 1, 0, 0])
        return Array(bare[0..<2]) + jfif + Array(bare[2...])
    }

    static func png(width: Int, height: Int) throws -> [UInt8] {
        try saved(try image(twoColour(width: width, height: height), width: width, height: height)) { tdm_pngsave_buffer($0, $1, $2) }
    }

    /// A HEIC whose EXIF block is `exif` (a TIFF structure) and whose XMP item is `xmp`.
    static func heic(width: Int, height: Int, exif: [UInt8]?, xmp: [UInt8]? = nil) throws -> [UInt8] {
        let img = try image(twoColour(width: width, height: height), width: width, height: height)
        if let exif {
            let blob = JPEGSegments.exifPrefix + exif
            blob.withUnsafeBytes { vips_image_set_blob_copy(img, "exif-data", $0.baseAddress, $0.count) }
        }
        if let xmp {
            xmp.withUnsafeBytes { vips_image_set_blob_copy(img, "xmp-data", $0.baseAddress, $0.count) }
        }
        return try saved(img) { tdm_heifsave_buffer($0, $1, $2) }
    }

    /// Decoded RGB pixels of an encoded image, with its size.
    static func decode(_ bytes: [UInt8]) throws -> (width: Int, height: Int, bands: Int, pixels: [UInt8]) {
        try Vips.start()
        let image = try bytes.withUnsafeBytes { raw -> VipsImageRef in
            guard let p = tdm_image_new_from_buffer(raw.baseAddress, raw.count) else {
                throw MediaError(.decoder, "decode: \(Vips.takeError())")
            }
            return VipsImageRef(p)
        }
        var size = 0
        guard let memory = vips_image_write_to_memory(image.pointer, &size) else { throw MediaError(.decoder, "pixels: \(Vips.takeError())") }
        defer { g_free(memory) }
        let bands = Int(vips_image_get_bands(image.pointer))
        return (image.width, image.height, bands, Array(UnsafeRawBufferPointer(start: memory, count: size)))
    }

    // MARK: EXIF built by hand (big-endian, so both byte orders are exercised)

    struct Entry {
        let tag: UInt16, type: UInt16, count: UInt32, data: [UInt8]
        static func ascii(_ tag: UInt16, _ s: String) -> Entry { let b = Array(s.utf8) + [0]; return Entry(tag: tag, type: 2, count: UInt32(b.count), data: b) }
        static func short(_ tag: UInt16, _ v: UInt16) -> Entry { Entry(tag: tag, type: 3, count: 1, data: be16(v)) }
        static func long(_ tag: UInt16, _ v: UInt32) -> Entry { Entry(tag: tag, type: 4, count: 1, data: be32(v)) }
        static func rationals(_ tag: UInt16, _ v: [(UInt32, UInt32)]) -> Entry {
            Entry(tag: tag, type: 5, count: UInt32(v.count), data: v.flatMap { be32($0.0) + be32($0.1) })
        }
    }

    static func be16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xFF)] }
    static func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8((v >> 16) & 0xFF), UInt8((v >> 8) & 0xFF), UInt8(v & 0xFF)] }

    /// IFDs laid out one after another; an entry whose data is `pointer(n)` gets the offset of IFD n.
    static func tiff(_ ifds: [[Entry]]) -> [UInt8] {
        func size(_ ifd: [Entry]) -> Int { 2 + ifd.count * 12 + 4 + ifd.reduce(0) { $0 + ($1.data.count > 4 ? $1.data.count + ($1.data.count & 1) : 0) } }
        var offsets: [Int] = []
        var at = 8
        for ifd in ifds { offsets.append(at); at += size(ifd) }
        var out: [UInt8] = [0x4D, 0x4D, 0, 42] + be32(8)
        for (n, ifd) in ifds.enumerated() {
            var area: [UInt8] = []
            let areaStart = offsets[n] + 2 + ifd.count * 12 + 4
            out += be16(UInt16(ifd.count))
            for e in ifd.sorted(by: { $0.tag < $1.tag }) {
                var data = e.data
                if e.type == 0xFFFF {   // a pointer to IFD number data[0]
                    data = be32(UInt32(offsets[Int(e.data[0])]))
                    out += be16(e.tag) + be16(4) + be32(1) + data
                    continue
                }
                out += be16(e.tag) + be16(e.type) + be32(e.count)
                if data.count <= 4 {
                    out += data + [UInt8](repeating: 0, count: 4 - data.count)
                } else {
                    out += be32(UInt32(areaStart + area.count))
                    area += data
                    if data.count & 1 == 1 { area.append(0) }
                }
            }
            out += be32(0) + area
        }
        return out
    }

    static func pointer(_ tag: UInt16, toIFD n: UInt8) -> Entry { Entry(tag: tag, type: 0xFFFF, count: 1, data: [n]) }

    /// The camera's EXIF: orientation, a capture date with offset, GPS coordinates, make, model,
    /// serial number.
    static func cameraExif(orientation: UInt16 = 6) -> [UInt8] {
        tiff([
            [.ascii(0x010F, "TestCam"), .ascii(0x0110, "X100"), .short(0x0112, orientation),
             .ascii(0x0131, "TestFirmware 1.0"), pointer(0x8769, toIFD: 1), pointer(0x8825, toIFD: 2)],
            [.ascii(0x9003, "2021:07:04 15:30:45"), .ascii(0x9011, "+02:00"), .ascii(0xA431, "SN12345")],
            [Entry(tag: 0x0000, type: 1, count: 4, data: [2, 3, 0, 0]),
             .ascii(0x0001, "N"), .rationals(0x0002, [(48, 1), (51, 1), (2412, 100)]),
             .ascii(0x0003, "E"), .rationals(0x0004, [(2, 1), (21, 1), (720, 100)])],
        ])
    }

    /// 2021-07-04 15:30:45 at +02:00, in ms since 1970.
    static var cameraDate: Int64 {
        var c = DateComponents()
        (c.year, c.month, c.day, c.hour, c.minute, c.second) = (2021, 7, 4, 15, 30, 45)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(secondsFromGMT: 7200)!
        return Int64(calendar.date(from: c)!.timeIntervalSince1970 * 1000)
    }

    static let xmp: [UInt8] = Array("http://ns.adobe.com/xap/1.0/".utf8) + [0]
        + Array("<x:xmpmeta><exif:GPSLatitude>48,51.4N</exif:GPSLatitude><tiff:Make>TestCam</tiff:Make></x:xmpmeta>".utf8)

    /// A JPEG as a camera writes it: SOI, APP1 EXIF, APP1 XMP, a comment, then libvips's JPEG.
    static func cameraJPEG(width: Int = 400, height: Int = 200, exif: [UInt8]? = nil) throws -> [UInt8] {
        let plain = try jpeg(width: width, height: height)
        let exifBlock = JPEGSegments.exifPrefix + (exif ?? cameraExif())
        let extra = JPEGSegments.encode(marker: 0xE1, payload: exifBlock)
            + JPEGSegments.encode(marker: 0xE1, payload: xmp)
            + JPEGSegments.encode(marker: 0xFE, payload: Array("Shot on TestCam X100".utf8))
            + JPEGSegments.encode(marker: 0xED, payload: Array("Photoshop 3.0\0TestCam".utf8))
        return Array(plain[0..<2]) + extra + Array(plain[2...])
    }

    /// A PNG with tEXt Make=TestCam, an iTXt, a tIME, an unknown ancillary chunk, and eXIf.
    static func cameraPNG(width: Int = 400, height: Int = 200) throws -> [UInt8] {
        let plain = try png(width: width, height: height)
        // IHDR is 8 (signature) + 4 + 4 + 13 + 4 bytes.
        let afterIHDR = 8 + 25
        let extra = PNGChunks.encode(type: "tEXt", data: Array("Make\0TestCam".utf8))
            + PNGChunks.encode(type: "iTXt", data: Array("Model\0\0\0\0\0X100".utf8))
            + PNGChunks.encode(type: "tIME", data: [0x07, 0xE5, 7, 4, 15, 30, 45])
            + PNGChunks.encode(type: "vnDr", data: Array("serial SN12345".utf8))
            + PNGChunks.encode(type: "eXIf", data: cameraExif())
        return Array(plain[0..<afterIHDR]) + extra + Array(plain[afterIHDR...])
    }

    /// The byte offset of a JPEG's first SOS marker, by walking its segments.
    static func sosOffset(_ b: [UInt8]) -> Int? {
        var i = 2
        while i + 4 <= b.count {
            guard b[i] == 0xFF else { return nil }
            if b[i + 1] == 0xDA { return i }
            i += 2 + (Int(b[i + 2]) << 8 | Int(b[i + 3]))
        }
        return nil
    }

    /// The PNG's chunks as (type, whole chunk bytes).
    static func chunks(_ b: [UInt8]) -> [(String, [UInt8])] {
        var out: [(String, [UInt8])] = []
        var i = 8
        while i + 12 <= b.count {
            let n = Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3])
            out.append((String(decoding: b[(i + 4)..<(i + 8)], as: UTF8.self), Array(b[i..<(i + 12 + n)])))
            i += 12 + n
        }
        return out
    }
}

/// A scratch directory per test case.
class MediaTestCase: XCTestCase {
    var dir: URL!

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-media-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: dir)
    }

    func file(_ name: String, _ bytes: [UInt8]) throws -> URL {
        let url = dir.appendingPathComponent(name)
        try Data(bytes).write(to: url)
        return url
    }

    func read(_ url: URL) throws -> [UInt8] { Array(try Data(contentsOf: url)) }

    func contains(_ haystack: [UInt8], _ needle: String) -> Bool {
        let n = Array(needle.utf8)
        guard haystack.count >= n.count else { return false }
        return (0...(haystack.count - n.count)).contains { haystack[$0..<($0 + n.count)].elementsEqual(n) }
    }

    /// The RGB at (x, y) of decoded pixels.
    func pixel(_ d: (width: Int, height: Int, bands: Int, pixels: [UInt8]), _ x: Int, _ y: Int) -> [UInt8] {
        let i = (y * d.width + x) * d.bands
        return Array(d.pixels[i..<(i + 3)])
    }

    func assertColour(_ p: [UInt8], _ expected: [UInt8], _ message: String, file: StaticString = #filePath, line: UInt = #line) {
        let close = zip(p, expected).allSatisfy { abs(Int($0) - Int($1)) < 60 }
        XCTAssertTrue(close, "\(message): \(p), expected about \(expected)", file: file, line: line)
    }
}

/// A fixed-seed generator (SplitMix64), so a failing fuzz case is the same on every run.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

import XCTest
@testable import TandemMedia

/// Hostile files: every prefix of a small valid photo and random byte flips must throw a
/// MediaError or succeed, never trap or read out of bounds.
final class RobustnessTests: MediaTestCase {
    private func exercise(_ bytes: [UInt8], name: String, thumbnail: Bool) throws {
        let input = try file(name, bytes)
        let output = dir.appendingPathComponent("out-" + name)
        func check(_ body: () throws -> Void) {
            do { try body() } catch let e as MediaError {
                XCTAssertFalse(e.description.isEmpty)
                XCTAssertFalse(e.description.contains("\n"), "one line: \(e.description)")
            } catch { XCTFail("\(name): not a MediaError: \(error)") }
        }
        check { _ = try PhotoProcessor.captureDate(of: input) }
        check {
            _ = try PhotoProcessor.sanitizedCopy(of: input, to: output)
            // Whatever came out must itself be processable the same way.
            _ = try PhotoProcessor.captureDate(of: output)
        }
        if thumbnail { check { _ = try PhotoProcessor.thumbnail(of: input, size: 32) } }
    }

    private func smallJPEG() throws -> [UInt8] { try TestImages.cameraJPEG(width: 24, height: 16) }
    private func smallPNG() throws -> [UInt8] { try TestImages.cameraPNG(width: 24, height: 16) }

    func testEveryPrefixOfAJPEG() throws {
        let jpeg = try smallJPEG()
        for n in 0..<jpeg.count { try exercise(Array(jpeg.prefix(n)), name: "p.jpg", thumbnail: n % 37 == 0) }
    }

    func testEveryPrefixOfAPNG() throws {
        let png = try smallPNG()
        for n in 0..<png.count { try exercise(Array(png.prefix(n)), name: "p.png", thumbnail: n % 37 == 0) }
    }

    func testRandomByteFlips() throws {
        var generator = SeededGenerator(seed: 1)
        for (base, name) in [(try smallJPEG(), "f.jpg"), (try smallPNG(), "f.png")] {
            for i in 0..<400 {
                var b = base
                for _ in 0..<Int.random(in: 1...8, using: &generator) {
                    let at = Int.random(in: 2..<b.count, using: &generator)
                    b[at] = UInt8.random(in: 0...255, using: &generator)
                }
                try exercise(b, name: name, thumbnail: i % 10 == 0)
            }
        }
    }

    /// A real HEIC cut short and flipped, through the whole path: the in-place rewrite, and libheif
    /// (thumbnail, capture date, the re-encode fallback) for whatever the rewrite refuses.
    func testHEICPrefixesAndByteFlips() throws {
        let heic = try TestImages.heic(width: 24, height: 16, exif: TestImages.cameraExif(orientation: 1))
        for n in stride(from: 0, to: heic.count, by: 13) { try exercise(Array(heic.prefix(n)), name: "p.heic", thumbnail: n % 39 == 0) }
        var generator = SeededGenerator(seed: 2)
        for i in 0..<200 {
            var b = heic
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                b[Int.random(in: 12..<b.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            try exercise(b, name: "f.heic", thumbnail: i % 20 == 0)
        }
    }

    func testCraftedLengths() throws {
        // An APP1 announcing more than the file holds.
        try exercise([0xFF, 0xD8, 0xFF, 0xE1, 0xFF, 0xFF] + Array("Exif\0\0".utf8), name: "a.jpg", thumbnail: true)
        // A length below 2.
        try exercise([0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01, 0xFF, 0xDA], name: "b.jpg", thumbnail: true)
        // A PNG chunk of 2³¹ − 1 bytes, and one of 2³² − 1.
        let ihdr = PNGChunks.encode(type: "IHDR", data: [0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0])
        try exercise(PNGChunks.signature + ihdr + [0x7F, 0xFF, 0xFF, 0xFF] + Array("IDAT".utf8), name: "c.png", thumbnail: true)
        try exercise(PNGChunks.signature + ihdr + [0xFF, 0xFF, 0xFF, 0xFF] + Array("eXIf".utf8), name: "d.png", thumbnail: true)
        // libpng spends seconds on a text chunk announcing more than the file holds: refused first.
        let png = try smallPNG()
        var long = png
        long.replaceSubrange(33..<37, with: [0x00, 0xFF, 0xFF, 0x00])   // the tEXt after IHDR
        XCTAssertThrowsError(try PhotoProcessor.thumbnail(of: try file("long.png", long))) {
            XCTAssertEqual(($0 as? MediaError)?.kind, .malformed, "\($0)")
        }
        // A PNG announcing 100 000 × 100 000 pixels is refused before decoding.
        let bomb = PNGChunks.signature + PNGChunks.encode(type: "IHDR", data: [0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0, 8, 2, 0, 0, 0])
            + PNGChunks.encode(type: "IDAT", data: [0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]) + PNGChunks.encode(type: "IEND", data: [])
        XCTAssertThrowsError(try PhotoProcessor.thumbnail(of: try file("bomb.png", bomb))) {
            XCTAssertEqual(($0 as? MediaError)?.kind, .tooLarge, "\($0)")
        }
        // An EXIF block whose IFD points outside it: no date, and the sanitized copy has no EXIF.
        let badExif: [UInt8] = [0x4D, 0x4D, 0, 42, 0x7F, 0xFF, 0xFF, 0xFF]
        let jpeg = try TestImages.cameraJPEG(width: 24, height: 16, exif: badExif)
        let input = try file("e.jpg", jpeg)
        XCTAssertNil(try PhotoProcessor.captureDate(of: input))
        let out = dir.appendingPathComponent("e-out.jpg")
        _ = try PhotoProcessor.sanitizedCopy(of: input, to: out)
        XCTAssertNil(try PhotoProcessor.exifFields(of: out))
    }
}

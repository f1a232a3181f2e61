import XCTest
@testable import TandemMedia

final class ThumbnailTests: MediaTestCase {
    func testJPEGThumbnailIsSquareJPEGWithOrientationApplied() throws {
        // 400 × 200, red left, blue right, EXIF orientation 6 (rotate 90° clockwise to display):
        // displayed it is 200 × 400, red on top, blue below.
        let input = try file("camera.jpg", try TestImages.cameraJPEG())
        let thumb = try PhotoProcessor.thumbnail(of: input)
        XCTAssertEqual(Array(thumb.prefix(3)), [0xFF, 0xD8, 0xFF])
        XCTAssertFalse(contains(thumb, "TestCam"))
        XCTAssertFalse(contains(thumb, "Exif"), "thumbnail carries no metadata")
        let d = try TestImages.decode(thumb)
        XCTAssertEqual(d.width, 300)
        XCTAssertEqual(d.height, 300)
        assertColour(pixel(d, 40, 40), TestImages.red, "top left")
        assertColour(pixel(d, 260, 40), TestImages.red, "top right")
        assertColour(pixel(d, 40, 260), TestImages.blue, "bottom left")
        assertColour(pixel(d, 260, 260), TestImages.blue, "bottom right")
    }

    func testUnrotatedThumbnailIsCentreCrop() throws {
        let input = try file("camera.jpg", try TestImages.cameraJPEG(exif: TestImages.cameraExif(orientation: 1)))
        let d = try TestImages.decode(try PhotoProcessor.thumbnail(of: input))
        XCTAssertEqual([d.width, d.height], [300, 300])
        // 400 × 200 covers 300 × 300 at 600 × 300; the centre crop keeps x 150…450: half red, half blue.
        assertColour(pixel(d, 40, 150), TestImages.red, "left")
        assertColour(pixel(d, 260, 150), TestImages.blue, "right")
    }

    func testPNGThumbnailAndSize() throws {
        let input = try file("camera.png", try TestImages.cameraPNG(width: 90, height: 30))
        let d = try TestImages.decode(try PhotoProcessor.thumbnail(of: input, size: 64))
        XCTAssertEqual([d.width, d.height], [64, 64], "small images are scaled up to fill the square")
        // The eXIf says orientation 6, which libvips applies to PNGs too: red on top, blue below.
        assertColour(pixel(d, 32, 5), TestImages.red, "top")
        assertColour(pixel(d, 32, 58), TestImages.blue, "bottom")
        XCTAssertThrowsError(try PhotoProcessor.thumbnail(of: input, size: 0))
    }

    func testTransparentPNGIsFlattenedOntoWhite() throws {
        let pixels = [UInt8](repeating: 0, count: 32 * 32 * 4)   // fully transparent black
        let img = try TestImages.image(pixels, width: 32, height: 32, bands: 4)
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        XCTAssertEqual(tdm_pngsave_buffer(img, &buffer, &length), 0)
        g_object_unref(img)
        let png = Array(UnsafeRawBufferPointer(start: buffer, count: length))
        g_free(buffer)
        let d = try TestImages.decode(try PhotoProcessor.thumbnail(of: try file("clear.png", png), size: 32))
        assertColour(pixel(d, 16, 16), [255, 255, 255], "transparent becomes white")
    }

    /// Not an assertion on speed: the time for a 12-megapixel JPEG with photo-like entropy (a
    /// pattern plus noise, several MB), printed for the record. TANDEM_MEDIA_PHOTO=path times a real
    /// photo as well.
    func testTwelveMegapixelThumbnailTime() throws {
        var pixels = TestImages.twoColour(width: 4000, height: 3000)
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        pixels.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in words.indices {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                words[i] = (words[i] & 0xC0C0_C0C0_C0C0_C0C0) | (state & 0x1F1F_1F1F_1F1F_1F1F)
            }
        }
        let img = try TestImages.image(pixels, width: 4000, height: 3000)
        var buffer: UnsafeMutableRawPointer?
        var length = 0
        XCTAssertEqual(tdm_jpegsave_buffer(img, &buffer, &length, 90), 0)
        g_object_unref(img)
        let big = Array(UnsafeRawBufferPointer(start: buffer, count: length))
        g_free(buffer)
        var files = [(try file("big.jpg", big), big.count)]
        if let path = ProcessInfo.processInfo.environment["TANDEM_MEDIA_PHOTO"] {
            let url = URL(fileURLWithPath: path)
            files.append((url, try read(url).count))
        }
        for (url, size) in files {
            _ = try PhotoProcessor.thumbnail(of: url)
            let start = Date()
            let runs = 5
            for _ in 0..<runs { _ = try PhotoProcessor.thumbnail(of: url) }
            let ms = Date().timeIntervalSince(start) * 1000 / Double(runs)
            print("thumbnail of \(url.lastPathComponent) (\(size) bytes): \(String(format: "%.0f", ms)) ms per photo")
        }
    }
}

import CVips

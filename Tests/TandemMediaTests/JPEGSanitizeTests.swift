import XCTest
@testable import TandemMedia

final class JPEGSanitizeTests: MediaTestCase {
    func testSniff() throws {
        XCTAssertEqual(PhotoProcessor.sniff([0xFF, 0xD8, 0xFF, 0xE0]), .jpeg)
        XCTAssertEqual(PhotoProcessor.sniff(PNGChunks.signature), .png)
        XCTAssertEqual(PhotoProcessor.sniff([0, 0, 0, 0x18] + Array("ftypheic".utf8)), .heic)
        XCTAssertEqual(PhotoProcessor.sniff([0, 0, 0, 0x18] + Array("ftypmif1".utf8)), .heic)
        XCTAssertNil(PhotoProcessor.sniff([0, 0, 0, 0x18] + Array("ftypisom".utf8)))
        XCTAssertNil(PhotoProcessor.sniff(Array("GIF89a".utf8)))
        XCTAssertNil(PhotoProcessor.sniff([]))
    }

    func testSanitizedJPEGLosesGPSAndDeviceKeepsDateOrientationAndImageData() throws {
        let original = try TestImages.cameraJPEG()
        let input = try file("camera.jpg", original)
        let before = try XCTUnwrap(try PhotoProcessor.exifFields(of: input))
        XCTAssertTrue(before.hasGPS)
        XCTAssertFalse(before.deviceTags.isEmpty)

        let output = dir.appendingPathComponent("clean.jpg")
        let report = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        XCTAssertEqual(report, SanitizeReport(format: .jpeg, strippedGPS: true, strippedDevice: true, lossless: true))

        let clean = try read(output)
        let after = try XCTUnwrap(try PhotoProcessor.exifFields(of: output))
        XCTAssertFalse(after.hasGPS)
        XCTAssertTrue(after.deviceTags.isEmpty)
        XCTAssertEqual(after.orientation, 6)
        XCTAssertEqual(after.dateTimeOriginal, before.dateTimeOriginal)
        XCTAssertEqual(after.offsetTimeOriginal, before.offsetTimeOriginal)
        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate)
        XCTAssertEqual(try PhotoProcessor.captureDate(of: input), TestImages.cameraDate)
        for secret in ["TestCam", "X100", "SN12345", "TestFirmware", "http://ns.adobe.com/xap", "Photoshop"] {
            XCTAssertTrue(contains(original, secret), secret)
            XCTAssertFalse(contains(clean, secret), "\(secret) survived")
        }
        XCTAssertTrue(contains(clean, "JFIF"), "JFIF APP0 kept")

        let sos0 = try XCTUnwrap(TestImages.sosOffset(original))
        let sos1 = try XCTUnwrap(TestImages.sosOffset(clean))
        XCTAssertEqual(Array(original[sos0...]), Array(clean[sos1...]), "image data from SOS on is byte-identical")

        // The copy still decodes to the same picture.
        let a = try TestImages.decode(original), b = try TestImages.decode(clean)
        XCTAssertEqual(a.pixels, b.pixels)
    }

    func testTrailerAfterEOIIsDropped() throws {
        let original = try TestImages.cameraJPEG() + [0xFF, 0xD8, 0xFF, 0xE1] + Array("Exif GPS TestCam trailer".utf8)
        let output = dir.appendingPathComponent("clean.jpg")
        _ = try PhotoProcessor.sanitizedCopy(of: try file("t.jpg", original), to: output)
        let clean = try read(output)
        XCTAssertEqual(Array(clean.suffix(2)), [0xFF, 0xD9])
        XCTAssertFalse(contains(clean, "TestCam"))
    }

    func testJPEGWithoutExifHasNoDateAndStaysWhole() throws {
        let plain = try TestImages.jpeg(width: 64, height: 32)
        let input = try file("plain.jpg", plain)
        XCTAssertNil(try PhotoProcessor.captureDate(of: input))
        let output = dir.appendingPathComponent("clean.jpg")
        _ = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        XCTAssertEqual(try read(output), plain, "a JPEG with only JFIF, tables and image data is copied as it is")
    }

    func testNotAPhotoIsUnsupported() throws {
        let input = try file("text.txt", Array("hello, world".utf8))
        XCTAssertThrowsError(try PhotoProcessor.sanitizedCopy(of: input, to: dir.appendingPathComponent("x"))) {
            XCTAssertEqual(($0 as? MediaError)?.kind, .unsupportedFormat)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.appendingPathComponent("x").path))
        XCTAssertThrowsError(try PhotoProcessor.thumbnail(of: input))
        XCTAssertThrowsError(try PhotoProcessor.captureDate(of: dir.appendingPathComponent("missing.jpg"))) {
            XCTAssertEqual(($0 as? MediaError)?.kind, .io)
        }
    }
}

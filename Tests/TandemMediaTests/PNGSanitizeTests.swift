import XCTest
@testable import TandemMedia

final class PNGSanitizeTests: MediaTestCase {
    func testSanitizedPNGLosesTextAndExifKeepsImageData() throws {
        let original = try TestImages.cameraPNG()
        let input = try file("camera.png", original)
        XCTAssertEqual(try PhotoProcessor.captureDate(of: input), TestImages.cameraDate)

        let output = dir.appendingPathComponent("clean.png")
        let report = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        XCTAssertEqual(report, SanitizeReport(format: .png, strippedGPS: true, strippedDevice: true, lossless: true))
        let clean = try read(output)
        for secret in ["TestCam", "X100", "SN12345", "TestFirmware"] {
            XCTAssertTrue(contains(original, secret), secret)
            XCTAssertFalse(contains(clean, secret), "\(secret) survived")
        }
        let types = TestImages.chunks(clean).map(\.0)
        for dropped in ["tEXt", "iTXt", "zTXt", "tIME", "vnDr"] { XCTAssertFalse(types.contains(dropped), dropped) }
        XCTAssertEqual(types.first, "IHDR")
        XCTAssertEqual(types.last, "IEND")

        // Every image chunk is copied whole, CRC included.
        let idat = { (b: [UInt8]) in TestImages.chunks(b).filter { $0.0 == "IDAT" || $0.0 == "IHDR" }.map(\.1) }
        XCTAssertEqual(idat(original), idat(clean))
        XCTAssertFalse(idat(clean).isEmpty)

        // The new eXIf: orientation and date, no GPS, a valid CRC.
        let exif = try XCTUnwrap(TestImages.chunks(clean).first { $0.0 == "eXIf" }?.1)
        XCTAssertEqual(Array(exif.suffix(4)), PNGChunks.be32(CRC32.checksum(exif.dropFirst(4).dropLast(4))))
        let after = try XCTUnwrap(try PhotoProcessor.exifFields(of: output))
        XCTAssertFalse(after.hasGPS)
        XCTAssertTrue(after.deviceTags.isEmpty)
        XCTAssertEqual(after.orientation, 6)
        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate)

        let a = try TestImages.decode(original), b = try TestImages.decode(clean)
        XCTAssertEqual(a.pixels, b.pixels)
    }

    func testCRC32() {
        XCTAssertEqual(CRC32.checksum(Array("IEND".utf8)), 0xAE42_6082)
        XCTAssertEqual(CRC32.checksum(Array("123456789".utf8)), 0xCBF4_3926)
    }
}

import XCTest
@testable import TandemMedia

/// Debian 12's libheif (1.15) decodes HEVC with libde265 and encodes with x265, both built in, so
/// libvips writes the test's HEIC itself.
final class HEICTests: MediaTestCase {
    func testHEICThumbnailDateAndSanitizedCopy() throws {
        let original = try TestImages.heic(width: 400, height: 200, exif: TestImages.cameraExif(orientation: 1))
        XCTAssertEqual(PhotoProcessor.sniff(Array(original.prefix(12))), .heic)
        let input = try file("camera.heic", original)

        let before = try XCTUnwrap(try PhotoProcessor.exifFields(of: input))
        XCTAssertTrue(before.hasGPS, "the test HEIC carries GPS")
        XCTAssertEqual(try PhotoProcessor.captureDate(of: input), TestImages.cameraDate)

        let d = try TestImages.decode(try PhotoProcessor.thumbnail(of: input))
        XCTAssertEqual([d.width, d.height], [300, 300])
        assertColour(pixel(d, 40, 150), TestImages.red, "left")
        assertColour(pixel(d, 260, 150), TestImages.blue, "right")

        let output = dir.appendingPathComponent("clean.heic")
        let report = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        XCTAssertEqual(report, SanitizeReport(format: .heic, strippedGPS: true, strippedDevice: true, lossless: false))
        let clean = try read(output)
        XCTAssertEqual(PhotoProcessor.sniff(Array(clean.prefix(12))), .heic)
        for secret in ["TestCam", "X100", "SN12345", "TestFirmware"] {
            XCTAssertTrue(contains(original, secret), secret)
            XCTAssertFalse(contains(clean, secret), "\(secret) survived")
        }
        let after = try XCTUnwrap(try PhotoProcessor.exifFields(of: output))
        XCTAssertFalse(after.hasGPS)
        XCTAssertTrue(after.deviceTags.isEmpty, "\(after.deviceTags)")
        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate)
        let c = try TestImages.decode(clean)
        XCTAssertEqual([c.width, c.height], [400, 200])
        assertColour(pixel(c, 50, 100), TestImages.red, "left")
        assertColour(pixel(c, 350, 100), TestImages.blue, "right")
    }

    /// What libvips makes of an EXIF orientation in a HEIC that has no `irot` box (HEIF says the
    /// container's transforms rule and EXIF's orientation is informative only).
    func testHEICExifOrientationIsNotAppliedTwice() throws {
        let original = try TestImages.heic(width: 400, height: 200, exif: TestImages.cameraExif(orientation: 6))
        let input = try file("rotated.heic", original)
        let d = try TestImages.decode(try PhotoProcessor.thumbnail(of: input))
        let output = dir.appendingPathComponent("clean.heic")
        _ = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        let e = try TestImages.decode(try PhotoProcessor.thumbnail(of: output))
        // The sanitized copy must look like the original did.
        for (x, y) in [(40, 40), (260, 40), (40, 260), (260, 260)] {
            assertColour(pixel(e, x, y), pixel(d, x, y), "(\(x), \(y))")
        }
        print("HEIC with EXIF orientation 6 and no irot: thumbnail top-right is \(pixel(d, 260, 40)) (red = rotated, blue = not)")
    }
}

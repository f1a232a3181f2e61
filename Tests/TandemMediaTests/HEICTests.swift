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
        XCTAssertEqual(report, SanitizeReport(format: .heic, strippedGPS: true, strippedDevice: true, lossless: true))
        let clean = try read(output)
        XCTAssertEqual(PhotoProcessor.sniff(Array(clean.prefix(12))), .heic)
        let after = try assertNoCameraSecrets(original: original, clean: clean, output: output)
        XCTAssertEqual(after.orientation, before.orientation, "the orientation is kept")
        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate)
        let c = try TestImages.decode(clean)
        XCTAssertEqual([c.width, c.height], [400, 200])
        assertColour(pixel(c, 50, 100), TestImages.red, "left")
        assertColour(pixel(c, 350, 100), TestImages.blue, "right")
    }

    private static let xmp = Array(#"<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Make="TestCam" tiff:Model="X100"/></rdf:RDF></x:xmpmeta>"#.utf8)

    /// The in-place rewrite on a HEIC libheif wrote: same size, the same bytes outside the Exif and
    /// XMP items, the same decoded pixels, no GPS, device or XMP data, the date and orientation kept.
    func testHEICIsRewrittenInPlaceLosslessly() throws {
        let original = try TestImages.heic(width: 400, height: 200, exif: TestImages.cameraExif(orientation: 6), xmp: HEICTests.xmp)
        let container = try HEIFContainer(MemoryBytes(original))
        let metadata = container.items.filter { $0.isExif || $0.isXMP }
        XCTAssertEqual(metadata.map(\.isExif), [true, false], "libheif wrote an Exif and an XMP item")
        let ranges = try metadata.compactMap { container.locations[$0.id] }.flatMap(container.fileRanges)
        let input = try file("camera.heic", original)

        let output = dir.appendingPathComponent("clean.heic")
        let report = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        XCTAssertEqual(report, SanitizeReport(format: .heic, strippedGPS: true, strippedDevice: true, lossless: true))
        let clean = try read(output)
        XCTAssertEqual(clean.count, original.count)
        var outside = [Bool](repeating: true, count: original.count)
        for r in ranges { for i in r { outside[Int(i)] = false } }
        let changed = (0..<original.count).filter { outside[$0] && original[$0] != clean[$0] }
        XCTAssertEqual(changed, [], "bytes outside the metadata items changed")
        let after = try assertNoCameraSecrets(original: original, clean: clean, output: output)
        XCTAssertEqual(after.orientation, 6)
        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate)

        let a = try TestImages.decode(original), b = try TestImages.decode(clean)
        XCTAssertEqual([a.width, a.height, a.bands], [b.width, b.height, b.bands])
        XCTAssertTrue(a.pixels == b.pixels, "decoded pixels differ")
        let (_, image) = try HEICProcessor.open(try InputFile(output))
        let xmp = try XCTUnwrap(image.blob("xmp-data"))
        XCTAssertEqual(String(decoding: xmp, as: UTF8.self).trimmingCharacters(in: .whitespaces),
                       String(decoding: HEIFMetadataRewrite.emptyXMP, as: UTF8.self))
    }

    /// A vendor's top-level box (here a `uuid` box holding text) becomes a `free` box of the same size.
    func testHEICVendorBoxBecomesFree() throws {
        let plain = try TestImages.heic(width: 64, height: 32, exif: TestImages.cameraExif(orientation: 1))
        let vendor = HEIFBuilder.box("uuid", [UInt8](repeating: 0x5A, count: 16) + Array("owner SN12345 TestCam".utf8))
        let input = try file("vendor.heic", plain + vendor)
        let output = dir.appendingPathComponent("clean.heic")
        XCTAssertTrue(try PhotoProcessor.sanitizedCopy(of: input, to: output).lossless)
        let clean = try read(output)
        XCTAssertEqual(clean.count, plain.count + vendor.count)
        XCTAssertEqual(Array(clean[(plain.count + 4)..<(plain.count + 8)]), Array("free".utf8))
        XCTAssertFalse(contains(clean, "SN12345"))
        XCTAssertTrue(try TestImages.decode(clean).pixels == TestImages.decode(plain).pixels)
    }

    /// A container the in-place rewrite refuses (here: a top-level `moov`, an image sequence's) is
    /// re-encoded instead, and the report says why.
    func testHEICTheRewriteRefusesIsReencoded() throws {
        let plain = try TestImages.heic(width: 64, height: 32, exif: TestImages.cameraExif(orientation: 1))
        let input = try file("sequence.heic", plain + HEIFBuilder.box("moov", []))
        let output = dir.appendingPathComponent("clean.heic")
        let report = try PhotoProcessor.sanitizedCopy(of: input, to: output)
        XCTAssertFalse(report.lossless)
        XCTAssertTrue(report.reencodedBecause?.contains("image sequence") == true, "\(String(describing: report.reencodedBecause))")
        let clean = try read(output)
        for secret in ["TestCam", "X100", "SN12345", "TestFirmware"] { XCTAssertFalse(contains(clean, secret), secret) }
        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate)
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

    /// The camera's strings were in the original and are gone from the copy, which has no GPS and no
    /// device tags left; returns the copy's fields for further checks.
    @discardableResult
    private func assertNoCameraSecrets(original: [UInt8], clean: [UInt8], output: URL,
                                       file: StaticString = #filePath, line: UInt = #line) throws -> ExifFields {
        for secret in ["TestCam", "X100", "SN12345", "TestFirmware"] {
            XCTAssertTrue(contains(original, secret), secret, file: file, line: line)
            XCTAssertFalse(contains(clean, secret), "\(secret) survived", file: file, line: line)
        }
        let after = try XCTUnwrap(try PhotoProcessor.exifFields(of: output), file: file, line: line)
        XCTAssertFalse(after.hasGPS, file: file, line: line)
        XCTAssertTrue(after.deviceTags.isEmpty, "\(after.deviceTags)", file: file, line: line)
        return after
    }
}

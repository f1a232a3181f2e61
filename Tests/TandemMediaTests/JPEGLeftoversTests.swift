import XCTest
@testable import TandemMedia

/// Issue 34: what a JPEG carries besides its EXIF block — a JFIF thumbnail, a JFXX extension,
/// application and unknown markers, bytes after end-of-image — is gone from the stored copy, byte
/// for byte, and the copy still decodes to the same picture with its capture date.
final class JPEGLeftoversTests: MediaTestCase {
    /// A JFIF APP0 with a 2 × 2 RGB thumbnail whose bytes spell a marker we look for.
    private static let jfifWithThumbnail: [UInt8] = JPEGSegments.encode(
        marker: 0xE0, payload: Array("JFIF".utf8) + [0, 1, 2, 1, 0, 72, 0, 72, 2, 2] + Array("THUMBpixels!".utf8))

    func testJFIFThumbnailUnknownMarkersAndTrailerAreGoneAndTheImageDecodes() throws {
        let camera = try TestImages.cameraJPEG()
        XCTAssertEqual(Array(camera[0..<2]), [0xFF, 0xD8])
        let extras: [[UInt8]] = [
            JPEGLeftoversTests.jfifWithThumbnail,
            JPEGSegments.encode(marker: 0xE0, payload: Array("JFXX".utf8) + [0, 0x10] + Array("JFXXthumb".utf8)),
            JPEGSegments.encode(marker: 0xEF, payload: Array("APP15 vendor serial".utf8)),
            JPEGSegments.encode(marker: 0xF3, payload: Array("JPG3 extension".utf8)),   // JPGn
            JPEGSegments.encode(marker: 0xC8, payload: Array("JPG reserved".utf8)),
            JPEGSegments.encode(marker: 0x02, payload: Array("RES reserved".utf8)),
            JPEGSegments.encode(marker: 0xFE, payload: Array("COM owner note".utf8)),
        ]
        let trailer = Array("after EOI: motion video".utf8)
        let original = Array(camera[0..<2]) + extras.joined() + Array(camera[2...]) + trailer
        let input = try file("leftovers.jpg", original)
        let output = dir.appendingPathComponent("clean.jpg")
        XCTAssertTrue(try PhotoProcessor.sanitizedCopy(of: input, to: output).lossless)
        let clean = try read(output)

        for secret in ["THUMBpixels", "JFXX", "APP15 vendor", "JPG3 extension", "JPG reserved", "RES reserved", "owner note", "motion video"] {
            XCTAssertTrue(contains(original, secret), secret)
            XCTAssertFalse(contains(clean, secret), "\(secret) survived")
        }
        // The JFIF segment is kept with its density and a 0 × 0 thumbnail: 16 bytes of payload.
        let jfif = JPEGSegments.encode(marker: 0xE0, payload: Array("JFIF".utf8) + [0, 1, 2, 1, 0, 72, 0, 72, 0, 0])
        XCTAssertTrue(clean.starts(with: [0xFF, 0xD8] + jfif), "SOI then the JFIF header without its thumbnail")
        XCTAssertEqual(Array(clean.suffix(2)), [0xFF, 0xD9], "nothing after end-of-image")
        let segments = try Self.headerMarkers(clean)
        XCTAssertTrue(segments.allSatisfy { [0xE0, 0xE1].contains($0) || JPEGSegments.isDecodingStructure($0) },
                      "only JFIF, EXIF and decoding structure before the scan: \(segments.map { String($0, radix: 16) })")
        XCTAssertEqual(segments.filter { $0 == 0xE0 }.count, 1)

        XCTAssertEqual(try PhotoProcessor.captureDate(of: output), TestImages.cameraDate, "the capture date is kept")
        let a = try TestImages.decode(camera), b = try TestImages.decode(clean)
        XCTAssertEqual([a.width, a.height], [b.width, b.height])
        XCTAssertTrue(a.pixels == b.pixels, "the stripped copy decodes to the same pixels")
        let sos0 = try XCTUnwrap(TestImages.sosOffset(camera)), sos1 = try XCTUnwrap(TestImages.sosOffset(clean))
        XCTAssertEqual(Array(camera[sos0...]), Array(clean[sos1...]), "image data byte-identical")
    }

    /// A JFIF segment too short to hold its header is dropped (decoders do not need it).
    func testShortJFIFIsDropped() {
        XCTAssertEqual(JPEGSegments.action(marker: 0xE0, payload: Array("JFIF".utf8) + [0, 1]), .drop)
        XCTAssertEqual(JPEGSegments.action(marker: 0xC0, payload: []), .keep)
        XCTAssertEqual(JPEGSegments.action(marker: 0xDB, payload: []), .keep)
        XCTAssertEqual(JPEGSegments.action(marker: 0xFD, payload: []), .drop)
    }

    /// The markers of the header's segments, up to and including the first SOS.
    static func headerMarkers(_ b: [UInt8]) throws -> [UInt8] {
        var out: [UInt8] = []
        var i = 2
        while i + 4 <= b.count {
            guard b[i] == 0xFF else { throw MediaError.malformed("no marker at \(i)") }
            let m = b[i + 1]
            out.append(m)
            if m == 0xDA { return out }
            i += 2 + (Int(b[i + 2]) << 8 | Int(b[i + 3]))
        }
        return out
    }
}

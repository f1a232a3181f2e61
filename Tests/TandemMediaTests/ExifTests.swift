import XCTest
@testable import TandemMedia

final class ExifTests: XCTestCase {
    func testCameraExifParses() throws {
        let f = try ExifFields(tiff: TestImages.cameraExif())
        XCTAssertEqual(f.orientation, 6)
        XCTAssertTrue(f.hasGPS)
        XCTAssertEqual(f.deviceTags, [0x010F, 0x0110, 0x0131, 0xA431])
        XCTAssertEqual(f.offsetTimeOriginal?.minutes, 120)
        XCTAssertEqual(f.captureMilliseconds, TestImages.cameraDate)
    }

    func testWriterKeepsOnlyOrientationAndDates() throws {
        let original = try ExifFields(tiff: TestImages.cameraExif())
        let block = try XCTUnwrap(ExifWriter.tiff(original.kept))
        let again = try ExifFields(tiff: block)
        XCTAssertEqual(again, original.kept)
        XCTAssertFalse(again.hasGPS)
        XCTAssertTrue(again.deviceTags.isEmpty)
        XCTAssertNil(ExifWriter.tiff(ExifFields()))
    }

    func testDateFallbacksAndOffsets() throws {
        let digitized = TestImages.tiff([[TestImages.pointer(0x8769, toIFD: 1), .ascii(0x0132, "2000:01:01 00:00:00")],
                                         [.ascii(0x9004, "2010:02:03 04:05:06"), .ascii(0x9012, "-05:30")]])
        let f = try ExifFields(tiff: digitized)
        // 2010-02-03 04:05:06 at −05:30 is 09:35:06 UTC.
        XCTAssertEqual(f.captureMilliseconds, (ExifDateTime.daysSince1970(year: 2010, month: 2, day: 3) * 86_400 + 9 * 3600 + 35 * 60 + 6) * 1000)
        let onlyDateTime = TestImages.tiff([[.ascii(0x0132, "1970:01:02 00:00:00")]])
        XCTAssertEqual(try ExifFields(tiff: onlyDateTime).captureMilliseconds, 86_400_000)
    }

    func testDateParsingIsStrict() {
        XCTAssertNil(ExifDateTime(ascii: Array("0000:00:00 00:00:00".utf8)))
        XCTAssertNil(ExifDateTime(ascii: Array("    :  :     :  :  ".utf8)))
        XCTAssertNil(ExifDateTime(ascii: Array("2021:02:29 10:00:00".utf8)))
        XCTAssertNil(ExifDateTime(ascii: Array("2021:13:01 10:00:00".utf8)))
        XCTAssertNil(ExifDateTime(ascii: Array("2021:01:01 24:00:00".utf8)))
        XCTAssertNotNil(ExifDateTime(ascii: Array("2020:02:29 23:59:59".utf8)))
        XCTAssertNotNil(ExifDateTime(ascii: Array("2020-02-29T23:59:59".utf8)))
        XCTAssertNil(ExifOffset(ascii: Array("   :  ".utf8)))
        XCTAssertNil(ExifOffset(ascii: Array("+15:00".utf8)))
        XCTAssertEqual(ExifOffset(ascii: Array("-09:30".utf8))?.ascii, Array("-09:30".utf8) + [0])
    }

    func testCivilDays() {
        XCTAssertEqual(ExifDateTime.daysSince1970(year: 1970, month: 1, day: 1), 0)
        XCTAssertEqual(ExifDateTime.daysSince1970(year: 2000, month: 3, day: 1), 11_017)
        XCTAssertEqual(ExifDateTime.daysSince1970(year: 1969, month: 12, day: 31), -1)
        XCTAssertEqual(ExifDateTime.daysSince1970(year: 1, month: 1, day: 1), -719_162)
    }

    /// Crafted blocks: offsets past the end, huge counts, pointers back into the header, loops.
    func testHostileBlocksThrowOrParse() {
        var cases: [[UInt8]] = [
            [], [0x49, 0x49], [0x49, 0x49, 42, 0, 0xFF, 0xFF, 0xFF, 0xFF],
            [0x4D, 0x4D, 0, 42, 0, 0, 0, 8, 0xFF, 0xFF],
            [0x4D, 0x4D, 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x32, 0, 2, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xF0, 0, 0, 0, 0],
            [0x4D, 0x4D, 0, 42, 0, 0, 0, 8, 0, 1, 0x87, 0x69, 0, 4, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0],   // EXIF IFD = IFD0
            [0x4D, 0x4D, 0, 42, 0, 0, 0, 8, 0, 1, 0x87, 0x69, 0, 4, 0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFE, 0, 0, 0, 0],
            [0x4D, 0x4D, 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0, 9, 0, 0, 0, 0, 0, 0],
        ]
        var generator = SeededGenerator(seed: 1)
        let base = TestImages.cameraExif()
        for _ in 0..<2000 {
            var b = base
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                b[Int.random(in: 0..<b.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            cases.append(b)
        }
        for n in 0..<base.count { cases.append(Array(base.prefix(n))) }
        for c in cases {
            do {
                let f = try ExifFields(tiff: c)
                if let block = ExifWriter.tiff(f.kept) { XCTAssertEqual(try ExifFields(tiff: block), f.kept) }
            } catch let e as MediaError {
                XCTAssertFalse(e.description.isEmpty)
            } catch {
                XCTFail("unexpected error \(error)")
            }
        }
    }
}

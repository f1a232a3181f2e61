import Foundation
import XCTest
@testable import TandemDaylight
@testable import TandemMedia

/// The daylight check on generated scenes of every kind (DaylightScenes), on files, and on its
/// capture-time rule. The full labelled set and its per-class report are Tests/daylight and
/// Tests/cli/test_daylight.py.
final class DaylightJudgeTests: XCTestCase {
    /// Landscape and portrait frames at the size the check scores.
    static let sizes = [(256, 192), (192, 256), (256, 144)]

    private func verdicts(_ kind: DaylightScenes.Kind, seeds: Range<UInt64>) -> [(UInt64, DaylightReport)] {
        seeds.map { seed in
            let (w, h) = Self.sizes[Int(seed % UInt64(Self.sizes.count))]
            return (seed, DaylightJudge.judge(pixels: DaylightScenes.render(kind, seed: seed, width: w, height: h)))
        }
    }

    private func assertAll(_ kind: DaylightScenes.Kind, _ expected: Set<DaylightVerdict>, file: StaticString = #filePath, line: UInt = #line) {
        for (seed, report) in verdicts(kind, seeds: 0..<12) {
            XCTAssertTrue(expected.contains(report.verdict),
                          "\(kind.rawValue) seed \(seed): \(report.verdict.rawValue) — \(report.reason) \(report.scores)", file: file, line: line)
            XCTAssertFalse(report.reason.isEmpty, file: file, line: line)
        }
    }

    func testClearSkyIsDaylight() { assertAll(.clear, [.daylight]) }
    func testOvercastIsDaylight() { assertAll(.overcast, [.daylight]) }
    func testDuskIsNotDaylight() { assertAll(.dusk, [.notDaylight, .ambiguous]) }
    func testNightIsNotDaylight() { assertAll(.night, [.notDaylight]) }
    func testIndoorWarmLampIsNotDaylight() { assertAll(.indoorWarm, [.notDaylight]) }
    func testIndoorColdLampIsNotDaylight() { assertAll(.indoorCold, [.notDaylight]) }
    func testScreenShowingSkyIsNotDaylight() { assertAll(.screen, [.notDaylight, .ambiguous]) }
    func testBlueWallIsNotDaylight() { assertAll(.blueWall, [.notDaylight, .ambiguous]) }

    func testReasonsNameWhatFailed() {
        let night = DaylightJudge.judge(pixels: DaylightScenes.render(.night, seed: 3, width: 256, height: 192))
        XCTAssertTrue(night.reason.contains("dark"), night.reason)
        let warm = DaylightJudge.judge(pixels: DaylightScenes.render(.indoorWarm, seed: 3, width: 256, height: 192))
        XCTAssertEqual(warm.verdict, .notDaylight)
        let clear = DaylightJudge.judge(pixels: DaylightScenes.render(.clear, seed: 3, width: 256, height: 192))
        XCTAssertTrue(clear.reason.hasPrefix("daylight:"), clear.reason)
        for key in ["top_brightness", "blue_sky_share", "top_saturation", "colour_temperature", "sky_ground_contrast"] {
            XCTAssertNotNil(clear.scores[key], key)
        }
        XCTAssertEqual(DaylightVerdict.notDaylight.rawValue, "not_daylight")
    }

    func testUniformImagesAreNotDaylight() {
        for rgb: [UInt8] in [[0, 0, 0], [255, 255, 255], [128, 128, 128], [90, 150, 230]] {
            let pixels = PhotoPixels(width: 64, height: 48, rgb: Array((0..<(64 * 48)).map { _ in rgb }.joined()))!
            let report = DaylightJudge.judge(pixels: pixels)
            XCTAssertNotEqual(report.verdict, .daylight, "\(rgb): \(report.reason)")
            for (key, value) in report.scores { XCTAssertTrue(value.isFinite, "\(rgb) \(key)") }
        }
    }

    func testPixelsInitialiserValidates() {
        XCTAssertNil(PhotoPixels(width: 2, height: 2, rgb: [0, 0, 0]))
        XCTAssertNil(PhotoPixels(width: 0, height: 2, rgb: []))
        XCTAssertNil(PhotoPixels(width: -1, height: -3, rgb: [0, 0, 0]))
        XCTAssertNotNil(PhotoPixels(width: 1, height: 1, rgb: [1, 2, 3]))
    }

    // MARK: Files

    private func temporaryFile(_ bytes: [UInt8], _ name: String) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("daylight-\(getpid())-\(name)")
        try Data(bytes).write(to: url)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url.path
    }

    /// A JPEG with DateTimeOriginal (and OffsetTimeOriginal when given) in its EXIF block.
    private func jpegWithCapture(_ pixels: PhotoPixels, _ stamp: String, offset: String?) throws -> [UInt8] {
        let bare = try PhotoProcessor.jpeg(of: pixels, quality: 90)
        var fields = ExifFields()
        fields.dateTimeOriginal = ExifDateTime(ascii: Array(stamp.utf8))
        fields.offsetTimeOriginal = offset.flatMap { ExifOffset(ascii: Array($0.utf8)) }
        let tiff = try XCTUnwrap(ExifWriter.tiff(fields))
        return Array(bare[0..<2]) + JPEGSegments.encode(marker: 0xE1, payload: JPEGSegments.exifPrefix + tiff) + Array(bare[2...])
    }

    func testLargeJPEGIsJudgedFromTheFileWithItsCaptureTime() throws {
        let pixels = DaylightScenes.render(.clear, seed: 5, width: 1024, height: 768)
        let path = try temporaryFile(try jpegWithCapture(pixels, "2026:06:21 09:30:15", offset: "+02:00"), "clear.jpg")
        let report = try DaylightJudge.judge(photoAt: path)
        XCTAssertEqual(report.verdict, .daylight, report.reason)
        XCTAssertEqual(report.captureTime, Date(timeIntervalSince1970: 1_782_027_015))  // 07:30:15 UTC
        let decoded = try PhotoProcessor.pixels(of: URL(fileURLWithPath: path), fitting: DaylightJudge.analysisSize)
        XCTAssertEqual(decoded.width, 256)
        XCTAssertEqual(decoded.height, 192)

        let night = try temporaryFile(try PhotoProcessor.jpeg(of: DaylightScenes.render(.night, seed: 5, width: 800, height: 600)), "night.jpg")
        let nightReport = try DaylightJudge.judge(photoAt: night)
        XCTAssertEqual(nightReport.verdict, .notDaylight)
        XCTAssertNil(nightReport.captureTime)
    }

    func testCaptureTimeWithoutOffsetIsReadInTheLocalZone() throws {
        let capture = PhotoCaptureTime(year: 2026, month: 1, day: 15, hour: 12, minute: 0, second: 0, offsetMinutes: nil)
        let date = DaylightJudge.date(of: capture)
        let utcNoon = Date(timeIntervalSince1970: 1_768_478_400)
        XCTAssertEqual(date.timeIntervalSince(utcNoon), -Double(TimeZone.current.secondsFromGMT(for: date)))
    }

    func testRecentCaptureRule() {
        let now = Date(timeIntervalSince1970: 1_782_027_015)
        let scores = ["top_brightness": 0.8]
        let none = DaylightReport(verdict: .daylight, reason: "daylight", captureTime: nil, scores: scores).requiringRecentCapture(now: now)
        XCTAssertEqual(none.verdict, .notDaylight)
        XCTAssertTrue(none.reason.contains("no EXIF capture time"), none.reason)
        XCTAssertEqual(none.scores, scores)
        let old = DaylightReport(verdict: .daylight, reason: "daylight", captureTime: now - 601, scores: scores).requiringRecentCapture(now: now)
        XCTAssertEqual(old.verdict, .notDaylight)
        XCTAssertTrue(old.reason.contains("10 minutes ago"), old.reason)
        let future = DaylightReport(verdict: .daylight, reason: "daylight", captureTime: now + 600, scores: scores).requiringRecentCapture(now: now)
        XCTAssertEqual(future.verdict, .notDaylight)
        let fresh = DaylightReport(verdict: .daylight, reason: "daylight", captureTime: now - 599, scores: scores).requiringRecentCapture(now: now)
        XCTAssertEqual(fresh.verdict, .daylight)
        let ancient = DaylightReport(verdict: .daylight, reason: "x", captureTime: Date.distantPast, scores: [:]).requiringRecentCapture(now: now)
        XCTAssertEqual(ancient.verdict, .notDaylight)
    }

    func testHostileFilesThrowMediaErrors() throws {
        let text = try temporaryFile(Array("not a photo at all".utf8), "text.jpg")
        XCTAssertThrowsError(try DaylightJudge.judge(photoAt: text)) { XCTAssertTrue($0 is MediaError, "\($0)") }
        let jpeg = try PhotoProcessor.jpeg(of: DaylightScenes.render(.clear, seed: 1, width: 320, height: 240))
        let truncated = try temporaryFile(Array(jpeg.prefix(jpeg.count / 3)), "cut.jpg")
        // libvips reads what is there of a cut JPEG; either way it is an answer or a MediaError.
        do { _ = try DaylightJudge.judge(photoAt: truncated) } catch { XCTAssertTrue(error is MediaError, "\(error)") }
        XCTAssertThrowsError(try DaylightJudge.judge(photoAt: "/nonexistent/photo.jpg")) { XCTAssertTrue($0 is MediaError, "\($0)") }
    }
}

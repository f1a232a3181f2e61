import Foundation
import TandemMedia

/// What the daylight check says of a photo.
public enum DaylightVerdict: String, Sendable {
    case daylight
    case notDaylight = "not_daylight"
    case ambiguous
}

/// The verdict, why in words, when the photo says it was taken, and the scores it was judged on.
public struct DaylightReport: Sendable {
    public let verdict: DaylightVerdict
    public let reason: String
    /// EXIF DateTimeOriginal (else DateTimeDigitized) at its OffsetTime tag; read in this machine's
    /// time zone when the photo gives no offset. Nil when the photo has neither date.
    public let captureTime: Date?
    public let scores: [String: Double]

    public init(verdict: DaylightVerdict, reason: String, captureTime: Date?, scores: [String: Double]) {
        self.verdict = verdict
        self.reason = reason
        self.captureTime = captureTime
        self.scores = scores
    }
}

/// The daylight check of issue 35 (Protocol/daylight.md): is this a photo of daylight sky above the
/// ground, taken outside? Pure: a file or pixels in, a report out; no clock, no place (whether the
/// capture time is recent and after sunrise is the caller's rule).
///
/// The photo is scaled to 256 pixels a side (libvips shrink-on-load) and scored: brightness and
/// sky share of the upper part, colour temperature, the warm glow of dusk and lamps, sky against
/// ground, a dark top edge around a bright area, blue at the bottom, a rippled sky. Each check has
/// a threshold chosen on the generated training set (`DaylightThresholds`); a photo that fails one
/// is not daylight, one inside a check's borderline band is ambiguous, and the first check it
/// fails gives the reason.
public enum DaylightJudge {
    /// The longest side the photo is scaled to before scoring.
    public static let analysisSize = 256

    /// Judges the photo at `path` (JPEG, PNG or HEIC). Throws `MediaError` when it is not a photo
    /// libvips can read, or a damaged one.
    public static func judge(photoAt path: String) throws -> DaylightReport {
        let url = URL(fileURLWithPath: path)
        let pixels = try PhotoProcessor.pixels(of: url, fitting: analysisSize)
        let capture = try PhotoProcessor.captureTime(of: url).map(date(of:))
        return judge(pixels: pixels, captureTime: capture)
    }

    /// Judges decoded pixels (any size; the scores are computed on what is given — scale a large
    /// frame down first, as `judge(photoAt:)` does, or the chroma ripple reads differently).
    public static func judge(pixels: PhotoPixels, captureTime: Date? = nil) -> DaylightReport {
        var scores = DaylightScores(pixels)
        let (verdict, reason) = DaylightThresholds.standard.decide(&scores)
        return DaylightReport(verdict: verdict, reason: reason, captureTime: captureTime, scores: scores.named)
    }

    /// The capture time as an instant: at the photo's own offset, else in this machine's time zone
    /// at that wall-clock time.
    static func date(of capture: PhotoCaptureTime) -> Date {
        if capture.offsetMinutes != nil {
            return Date(timeIntervalSince1970: TimeInterval(capture.secondsSince1970(assumedOffsetMinutes: 0)))
        }
        // The offset of the local zone at that wall-clock time (read as UTC first, then corrected
        // once, which is exact except inside a DST change's skipped or repeated hour).
        let asUTC = capture.secondsSince1970(assumedOffsetMinutes: 0)
        let zone = TimeZone.current
        let guess = Date(timeIntervalSince1970: TimeInterval(asUTC))
        let offset = zone.secondsFromGMT(for: guess.addingTimeInterval(TimeInterval(-zone.secondsFromGMT(for: guess))))
        return Date(timeIntervalSince1970: TimeInterval(asUTC - Int64(offset)))
    }
}

extension DaylightReport {
    /// How old a photo may be for `requiringRecentCapture` (issue 35: ten minutes).
    public static let recentCaptureLimit: TimeInterval = 600
    /// How far in the future a capture time may lie (a camera clock a little fast).
    public static let futureCaptureSlack: TimeInterval = 120

    /// This report, refused (not daylight, with the reason) when the photo has no EXIF capture time,
    /// or one more than `maxAge` before `now`, or more than two minutes after it. A refused report
    /// keeps its scores; one that passes is returned unchanged.
    public func requiringRecentCapture(now: Date, maxAge: TimeInterval = DaylightReport.recentCaptureLimit) -> DaylightReport {
        guard let captureTime else {
            return DaylightReport(verdict: .notDaylight,
                                  reason: "the photo has no EXIF capture time (DateTimeOriginal): take a new photo with the camera app, not a copy or a screenshot",
                                  captureTime: nil, scores: scores)
        }
        let age = now.timeIntervalSince(captureTime)
        if age > maxAge {
            return DaylightReport(verdict: .notDaylight,
                                  reason: "the photo was taken \(Self.minutes(age)) ago (at most \(Self.minutes(maxAge))): take a new one",
                                  captureTime: captureTime, scores: scores)
        }
        if age < -Self.futureCaptureSlack {
            return DaylightReport(verdict: .notDaylight,
                                  reason: "the photo's capture time is \(Self.minutes(-age)) in the future: check the camera's clock and time zone",
                                  captureTime: captureTime, scores: scores)
        }
        return self
    }

    private static func minutes(_ seconds: TimeInterval) -> String {
        let m = Int((seconds / 60).rounded(.down).clamped(0, 1e9))
        if m < 120 { return m == 1 ? "1 minute" : "\(m) minutes" }
        let h = m / 60
        return h < 48 ? "\(h) hours" : "\(h / 24) days"
    }
}

private extension Double {
    func clamped(_ lo: Double, _ hi: Double) -> Double { Swift.min(hi, Swift.max(lo, self)) }
}

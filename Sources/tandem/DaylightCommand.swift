import ArgumentParser
import Foundation
import TandemDaylight
import TandemMedia
import TandemNet
import TandemProtocol

/// `tandem daylight PHOTO`: the daylight check of issue 35 on one photo, locally (no node needed).
/// Exit 0 only for daylight; 1 for not daylight or ambiguous (the verdict says which), and for a
/// photo that cannot be read (one line on stderr).
struct DaylightCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daylight",
        abstract: "Check that a photo shows daylight sky above the ground (exit 0 only for daylight).",
        discussion: """
        Reads a JPEG, PNG or HEIC and scores the upper part of the frame (brightness, blue-sky share, \
        saturation), the colour temperature, and the sky against the ground. Prints the verdict \
        (daylight, not_daylight or ambiguous) and the reason. --json prints {"verdict", "reason", \
        "scores", "capture_time"} (capture_time: EXIF DateTimeOriginal as ISO 8601 with offset, or \
        null). With --require-recent a photo without an EXIF capture time, or taken more than 10 \
        minutes ago, is not daylight whatever it shows. See Protocol/daylight.md for what the check \
        cannot tell (a printed sky photo held up outside).
        """
    )

    @Argument(help: ArgumentHelp("The photo (JPEG, PNG or HEIC).", valueName: "photo"))
    var photo: String

    @Flag(name: .long, help: "Print JSON: verdict, reason, scores, capture_time.")
    var json = false

    @Flag(name: .long, help: "Refuse a photo with no EXIF capture time, or one taken more than 10 minutes ago.")
    var requireRecent = false

    func run() throws {
        var report: DaylightReport
        do {
            report = try DaylightJudge.judge(photoAt: photo)
        } catch let error as MediaError {
            throw TandemError("cannot judge \(photo): \(error)", exitCode: 1)
        }
        if requireRecent { report = report.requiringRecentCapture(now: Date()) }
        if json {
            var object: [String: Any] = [
                "verdict": report.verdict.rawValue,
                "reason": report.reason,
                "scores": report.scores.mapValues { ($0 * 10_000).rounded() / 10_000 },
            ]
            object["capture_time"] = report.captureTime.map { Self.iso8601($0) } ?? NSNull()
            printJSON(object)
        } else {
            output("\(report.verdict.rawValue): \(report.reason)".terminalSafe)
            if let time = report.captureTime { output("taken: \(Self.iso8601(time))") }
        }
        // The verdict is the answer, not an error: nothing more on stderr.
        if report.verdict != .daylight { Foundation.exit(1) }
    }

    /// ISO 8601 with this machine's offset for that instant.
    static func iso8601(_ date: Date) -> String {
        let f = ISO8601DateFormatter()
        f.timeZone = TimeZone.current
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: date)
    }
}

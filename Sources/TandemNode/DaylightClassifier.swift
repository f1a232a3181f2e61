import Foundation
import NIOPosix
import NodeFocus
import TandemDaylight
import TandemNodeCore

/// The daylight check bedtime asks (Protocol/daylight.md): the classifier of TandemDaylight, run on
/// NIO's blocking thread pool (it decodes and scores an image: tens of milliseconds, never on the
/// core, an event loop or the cooperative pool).
struct DaylightClassifier: DaylightChecking {
    func check(photoAt path: String) async throws -> DaylightCheckResult {
        let report: DaylightReport
        do {
            report = try await NIOThreadPool.singleton.runIfActive { try DaylightJudge.judge(photoAt: path) }
        } catch {
            throw NodeError.invalidArgument("cannot read the photo \(path): \(error)")
        }
        let verdict: DaylightCheckResult.Verdict
        switch report.verdict {
        case .daylight: verdict = .daylight
        case .notDaylight: verdict = .notDaylight
        case .ambiguous: verdict = .ambiguous
        }
        return DaylightCheckResult(verdict: verdict, reason: report.reason, capturedAt: report.captureTime)
    }
}

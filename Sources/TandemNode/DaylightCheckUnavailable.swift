import NodeFocus
import TandemNodeCore

/// The daylight check until the classifier (TandemDaylight) is wired in: it refuses every photo,
/// so bedtime can be left only by an emergency unlock, never by a check that accepts anything.
/// The node's wiring (`NodeRuntime`) replaces it with the classifier.
struct DaylightCheckUnavailable: DaylightChecking {
    func check(photoAt path: String) async throws -> DaylightCheckResult {
        throw ControlError(code: "daylight_unavailable", message: "daylight check not available", exitCode: 1)
    }
}

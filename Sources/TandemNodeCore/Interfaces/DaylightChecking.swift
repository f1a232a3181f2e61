import Foundation

/// What a photo's daylight check answered (Protocol/bedtime.md "Leaving bedtime").
package struct DaylightCheckResult: Sendable, Equatable {
    package enum Verdict: String, Sendable, Equatable {
        case daylight
        case notDaylight = "not_daylight"
        case ambiguous
    }

    package var verdict: Verdict
    /// The check's reason, in words, for the person.
    package var reason: String
    /// The photo's capture time from its EXIF data; nil when it has none.
    package var capturedAt: Date?

    package init(verdict: Verdict, reason: String, capturedAt: Date?) {
        self.verdict = verdict
        self.reason = reason
        self.capturedAt = capturedAt
    }
}

/// The daylight photo check that leaving bedtime needs. Local focus calls it (off the core: it
/// reads and scores an image); the node's wiring hands over the implementation (the classifier
/// module; tests hand a double). Throws when the photo cannot be read or no check is available.
package protocol DaylightChecking: Sendable {
    func check(photoAt path: String) async throws -> DaylightCheckResult
}

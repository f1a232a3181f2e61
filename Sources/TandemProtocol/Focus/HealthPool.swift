import Foundation

/// The daily health pool (Protocol/bedtime.md "Health"): 100 a local day, every bypass costs, a
/// cooldown after each one, dead at 0 until the next local midnight. Pure: the node keeps the
/// bypasses in a table and asks this value; nothing here runs on a timer — midnight is computed.
///
/// A clock set back cannot buy health: a bypass recorded later than `now` still counts against
/// today (and its cooldown still runs), so moving the clock to before the last bypass changes
/// nothing; only a new local day (by the clock) starts at 100 again.
public struct HealthPool: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// A temporary key opened a locked mode's temporary items.
        case temporaryUnlock = "temp_unlock"
        /// A solo session or a challenge was quit early.
        case quitEarly = "quit_early"
        /// Bedtime left with `tandem unlock --emergency`.
        case emergency = "emergency"

        public var cost: Int {
            switch self {
            case .temporaryUnlock, .quitEarly: return 5
            case .emergency: return 20
            }
        }
    }

    public enum State: String, Sendable, Equatable {
        case healthy, concerned, tired, weak, dead

        /// 80–100 healthy, 60–79 concerned, 40–59 tired, 1–39 weak, 0 dead.
        public init(health: Int) {
            switch health {
            case ...0: self = .dead
            case 1...39: self = .weak
            case 40...59: self = .tired
            case 60...79: self = .concerned
            default: self = .healthy
            }
        }
    }

    public struct Bypass: Sendable, Equatable {
        public var atMs: Int64
        public var kind: Kind
        public var cost: Int
        public init(atMs: Int64, kind: Kind, cost: Int) {
            self.atMs = atMs
            self.kind = kind
            self.cost = cost
        }
    }

    public static let full = 100
    public static let cooldownChoices = [10, 20, 30, 45, 60]
    public static let defaultCooldownMinutes = 10

    public var timeZone: TimeZone
    public var cooldownMinutes: Int
    /// Recorded bypasses, any order (the node keeps the last few days').
    public var bypasses: [Bypass]

    public init(timeZone: TimeZone, cooldownMinutes: Int, bypasses: [Bypass]) {
        self.timeZone = timeZone
        self.cooldownMinutes = cooldownMinutes
        self.bypasses = bypasses
    }

    /// 00:00 of the local date of `nowMs` (DST-safe: the zone's own midnight, or the first instant
    /// of the day where midnight is skipped).
    public func startOfDayMs(_ nowMs: Int64) -> Int64 {
        let d = LocalDate(Date(timeIntervalSince1970: Double(nowMs) / 1000), in: timeZone)
        return Int64((timeZone.instant(on: d, at: TimeOfDay(minutes: 0)!).timeIntervalSince1970 * 1000).rounded())
    }

    /// The next local midnight after `nowMs`.
    public func nextMidnightMs(_ nowMs: Int64) -> Int64 {
        let d = LocalDate(Date(timeIntervalSince1970: Double(nowMs) / 1000), in: timeZone).adding(days: 1)
        return Int64((timeZone.instant(on: d, at: TimeOfDay(minutes: 0)!).timeIntervalSince1970 * 1000).rounded())
    }

    /// Bypasses that count today: from today's local midnight on, including any recorded after
    /// `nowMs` (the clock went back).
    public func today(_ nowMs: Int64) -> [Bypass] {
        let start = startOfDayMs(nowMs)
        return bypasses.filter { $0.atMs >= start }.sorted { $0.atMs < $1.atMs }
    }

    public func health(_ nowMs: Int64) -> Int {
        let spent = today(nowMs).reduce(0) { $0.addingReportingOverflow(max(0, $1.cost)).partialValue }
        return max(0, Self.full - min(Self.full, spent))
    }

    public func state(_ nowMs: Int64) -> State { State(health: health(nowMs)) }

    /// When the cooldown after the latest bypass ends (nil: none running). A bypass recorded after
    /// `nowMs` keeps the cooldown running from `nowMs` for the whole cooldown.
    public func cooldownEndsMs(_ nowMs: Int64) -> Int64? {
        guard let last = bypasses.map(\.atMs).max() else { return nil }
        let length = Int64(cooldownMinutes) * 60_000
        let end = last > nowMs ? nowMs.addingReportingOverflow(length).partialValue : last.addingReportingOverflow(length).partialValue
        return end > nowMs ? end : nil
    }

    public enum Refusal: Sendable, Equatable {
        /// Health is 0: nothing until midnight.
        case dead(untilMs: Int64)
        /// A temporary unlock within the cooldown after a bypass.
        case cooldown(untilMs: Int64)
    }

    /// Whether a bypass of `kind` may happen now. Dead refuses every kind; the cooldown refuses a
    /// temporary unlock (quitting or an emergency are not put off by it; they still cost).
    public func check(_ kind: Kind, nowMs: Int64) -> Refusal? {
        if health(nowMs) <= 0 { return .dead(untilMs: nextMidnightMs(nowMs)) }
        if kind == .temporaryUnlock, let end = cooldownEndsMs(nowMs) { return .cooldown(untilMs: end) }
        return nil
    }

    /// Records a bypass if `check` allows it; returns the refusal otherwise.
    public mutating func spend(_ kind: Kind, nowMs: Int64) -> Refusal? {
        if let r = check(kind, nowMs: nowMs) { return r }
        bypasses.append(Bypass(atMs: nowMs, kind: kind, cost: kind.cost))
        return nil
    }
}

import TandemProtocol
import TandemNodeCore

/// The vault's PIN attempt rules, as a value: how many wrong PINs in a row, until when the next
/// attempt is refused, and the break-in log. Pure (the clock is passed in); the vault service keeps
/// it in the node's store and writes it before it answers, so a restart (or `kill -9`) never
/// shortens a lockout.
///
/// Schedule (wrong PINs in a row → wait before the next attempt): 3–4 → 30 s, 5–7 → 2 min,
/// 8–9 → 15 min, 10 and more → 1 h. Attempts refused during a wait do not count. The counter goes
/// back to zero only on a right PIN. From the third wrong PIN on, each one is logged: when, and
/// which wrong PIN in a row it was; nothing of the PIN tried (no digit, no length). The log keeps
/// the last 20; the service stores it sealed (BreakInLog.swift).
public struct PinGuard: Sendable, Equatable, Codable {
    public struct BreakIn: Sendable, Equatable, Codable {
        public var atMs: Int64
        /// Which wrong PIN in a row this was (3, 4, …); 0 when not known (logged before v8).
        public var attempt: Int

        public init(atMs: Int64, attempt: Int) {
            self.atMs = atMs
            self.attempt = min(max(0, attempt), 1_000_000)
        }
    }

    /// Wrong PINs since the last right one.
    public private(set) var failures: Int
    /// Wall-clock milliseconds until which attempts are refused (0: none).
    public private(set) var lockedUntilMs: Int64
    public private(set) var breakIns: [BreakIn]

    public static let maximumBreakIns = 20

    public init() {
        failures = 0
        lockedUntilMs = 0
        breakIns = []
    }

    /// From stored values, validated: a counter out of range is clamped, a lockout further away
    /// than the longest wait is cut to it (a wrong clock or a bad row cannot lock the owner out for
    /// years), and the log is cut to its bound.
    public init(failures: Int, lockedUntilMs: Int64, breakIns: [BreakIn], nowMs: Int64) {
        self.failures = min(max(0, failures), 1_000_000)
        let longest = nowMs.addingSaturated(Self.lockout(afterFailures: Int.max) ?? 0)
        self.lockedUntilMs = min(max(0, lockedUntilMs), longest)
        self.breakIns = Array(breakIns.suffix(Self.maximumBreakIns))
    }

    /// How long attempts are refused after `failures` wrong PINs in a row, in milliseconds.
    public static func lockout(afterFailures failures: Int) -> Int64? {
        switch failures {
        case ..<3: return nil
        case 3...4: return 30_000
        case 5...7: return 120_000
        case 8...9: return 900_000
        default: return 3_600_000
        }
    }

    /// Milliseconds until the next attempt is allowed (nil: now).
    public func wait(nowMs: Int64) -> Int64? {
        lockedUntilMs > nowMs ? lockedUntilMs - nowMs : nil
    }

    /// A wrong PIN: counts, and starts the wait it earns. What was tried is not taken: the log
    /// cannot keep what it is never given.
    public mutating func failed(nowMs: Int64) {
        failures = min(failures + 1, 1_000_000)
        if let wait = Self.lockout(afterFailures: failures) {
            lockedUntilMs = nowMs.addingSaturated(wait)
        }
        if failures >= 3 {
            breakIns.append(BreakIn(atMs: nowMs, attempt: failures))
            if breakIns.count > Self.maximumBreakIns { breakIns.removeFirst(breakIns.count - Self.maximumBreakIns) }
        }
    }

    /// The right PIN: the counter and any wait end (the log stays for the owner to read).
    public mutating func succeeded() {
        failures = 0
        lockedUntilMs = 0
    }
}

/// When automatic pushes run (Protocol/backup.md 4.1), as a plain value: the backup service feeds
/// it what it saw (a holder's copy fell behind, a push ended) and asks which holders are due and
/// when to look again. Pure: no clock, no I/O; times are the node's wall clock in ms.
public struct BackupSchedulePolicy: Equatable, Sendable {
    public struct Config: Equatable, Sendable {
        /// How long after a change the push runs (a burst of changes makes one push).
        public var delayMs: Int64
        /// Push at least once a day even when nothing changed (the holder's copy stays dated recently).
        public var daily: Bool

        public static let defaultDelayMs: Int64 = 300_000
        public static let maximumDelayMs: Int64 = 604_800_000
        public static let `default` = Config(delayMs: defaultDelayMs, daily: true)

        public init(delayMs: Int64, daily: Bool) {
            self.delayMs = min(max(delayMs, 0), Self.maximumDelayMs)
            self.daily = daily
        }
    }

    public struct Holder: Equatable, Sendable {
        public var key: [UInt8]
        /// Since when its copy is behind the node's content (nil: current).
        public var dirtySinceMs: Int64?
        /// Automatic pushes that failed in a row (the backoff's exponent).
        public var failures: Int
        /// Not before this (backoff after a failure).
        public var notBeforeMs: Int64?
        /// When it last took a complete push (nil: never).
        public var lastPushAtMs: Int64?

        public init(key: [UInt8], dirtySinceMs: Int64? = nil, failures: Int = 0, notBeforeMs: Int64? = nil, lastPushAtMs: Int64? = nil) {
            self.key = key
            self.dirtySinceMs = dirtySinceMs
            self.failures = failures
            self.notBeforeMs = notBeforeMs
            self.lastPushAtMs = lastPushAtMs
        }
    }

    public static let dayMs: Int64 = 86_400_000
    /// Backoff after failures in a row: 1 min, doubling, at most 1 h.
    public static let firstBackoffMs: Int64 = 60_000
    public static let maximumBackoffMs: Int64 = 3_600_000
    public static let maximumFailures = 64

    public var config: Config
    public private(set) var holders: [Holder]

    public init(config: Config, holders: [Holder]) {
        self.config = config
        self.holders = holders
    }

    public static func backoffMs(failures: Int) -> Int64 {
        guard failures > 0 else { return 0 }
        let shift = min(failures - 1, 12)
        return min(firstBackoffMs << Int64(shift), maximumBackoffMs)
    }

    /// When `h` is due (nil: not at all): `delay` after its copy fell behind, a day after its last
    /// push (when `daily`), never before its backoff ends.
    public func dueAt(_ h: Holder) -> Int64? {
        var due: Int64?
        if let d = h.dirtySinceMs { due = d.addingReportingOverflow(config.delayMs).partialValue }
        if config.daily {
            let daily = (h.lastPushAtMs ?? 0).addingReportingOverflow(Self.dayMs).partialValue
            due = min(due ?? daily, daily)
        }
        if let due, let nb = h.notBeforeMs { return max(due, nb) }
        return due
    }

    /// The holders due at `nowMs`.
    public func due(nowMs: Int64) -> [[UInt8]] {
        holders.filter { dueAt($0).map { $0 <= nowMs } ?? false }.map(\.key)
    }

    /// The earliest time something becomes due (nil: nothing will).
    public func nextWakeMs() -> Int64? {
        holders.compactMap(dueAt).min()
    }

    /// The holders whose copies are behind now: they are due `delay` from `nowMs` (a copy already
    /// behind keeps its earlier time, so a stream of changes cannot postpone it for ever).
    public mutating func behind(_ keys: Set<[UInt8]>, nowMs: Int64) {
        for i in holders.indices where keys.contains(holders[i].key) && holders[i].dirtySinceMs == nil {
            holders[i].dirtySinceMs = nowMs
        }
    }

    /// A push to `key` that started at `startedAtMs` completed at `nowMs`: its copy is current
    /// unless it fell behind again after the push read the vault.
    public mutating func pushed(_ key: [UInt8], startedAtMs: Int64, nowMs: Int64) {
        guard let i = holders.firstIndex(where: { $0.key == key }) else { return }
        if let d = holders[i].dirtySinceMs, d <= startedAtMs { holders[i].dirtySinceMs = nil }
        holders[i].failures = 0
        holders[i].notBeforeMs = nil
        holders[i].lastPushAtMs = nowMs
    }

    /// A push to `key` failed at `nowMs`: the next try waits the backoff.
    public mutating func failed(_ key: [UInt8], nowMs: Int64) {
        guard let i = holders.firstIndex(where: { $0.key == key }) else { return }
        holders[i].failures = min(holders[i].failures + 1, Self.maximumFailures)
        holders[i].notBeforeMs = nowMs.addingReportingOverflow(Self.backoffMs(failures: holders[i].failures)).partialValue
    }

    /// The holders are now `keys` (offers come and go): new ones start current with no push yet,
    /// gone ones are dropped.
    public mutating func setHolders(_ keys: [[UInt8]], lastPushAtMs: [[UInt8]: Int64]) {
        holders = keys.map { k in
            holders.first { $0.key == k } ?? Holder(key: k, lastPushAtMs: lastPushAtMs[k])
        }
    }
}

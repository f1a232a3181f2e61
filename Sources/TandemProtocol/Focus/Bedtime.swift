import Foundation

/// A bedtime (Protocol/bedtime.md): which mode the node locks at the bed time, the wake time, and
/// where the sun is judged. Pure: every question carries the time; the time zone is the place's
/// (or the node's when no place is set), read from the system's tz database.
public struct BedtimeRule: Sendable, Equatable {
    public var mode: String
    public var bed: TimeOfDay
    public var wake: TimeOfDay
    /// nil: no place known (no --location, no --city, and the node's time zone has no city in the
    /// table): sunrise is taken as 07:00 local time.
    public var place: SunPlace?
    /// The zone whose clock `bed` and `wake` are read on: the place's, or the node's.
    public var timeZoneID: String

    /// The stand-in sunrise when no place is known.
    public static let fixedSunrise = TimeOfDay(minutes: 7 * 60)!

    public init(mode: String, bed: TimeOfDay, wake: TimeOfDay, place: SunPlace?, timeZoneID: String) {
        self.mode = mode
        self.bed = bed
        self.wake = wake
        self.place = place
        self.timeZoneID = place?.timeZoneID ?? timeZoneID
    }

    public var timeZone: TimeZone { TimeZone(identifier: timeZoneID) ?? TimeZone(secondsFromGMT: 0)! }

    /// The latest bed-time instant at or before `now` (the night `now` belongs to, or the one
    /// before the coming bed time).
    public func nightStart(atOrBefore now: Date) -> Date {
        let tz = timeZone
        let today = LocalDate(now, in: tz)
        for back in 0...2 {
            let s = tz.instant(on: today.adding(days: -back), at: bed)
            if s <= now { return s }
        }
        return tz.instant(on: today.adding(days: -3), at: bed)
    }

    /// The next bed-time instant after `now`.
    public func nextNightStart(after now: Date) -> Date {
        let tz = timeZone
        let today = LocalDate(now, in: tz)
        for ahead in 0...2 {
            let s = tz.instant(on: today.adding(days: ahead), at: bed)
            if s > now { return s }
        }
        return tz.instant(on: today.adding(days: 3), at: bed)
    }

    /// The first wake-time instant after the night's start.
    public func wakeTime(afterNightStart start: Date) -> Date {
        let tz = timeZone
        let d = LocalDate(start, in: tz)
        let same = tz.instant(on: d, at: wake)
        return same > start ? same : tz.instant(on: d.adding(days: 1), at: wake)
    }

    /// True when `now` lies between a bed time and the wake time that follows it.
    public func isNight(_ now: Date) -> Bool {
        now < wakeTime(afterNightStart: nightStart(atOrBefore: now))
    }

    /// When the night that began at `start` may be left: the later of the wake time and the
    /// sunrise of that morning at the place, and how to say so.
    public struct Opening: Sendable, Equatable {
        public enum Because: Sendable, Equatable {
            /// The sunrise (−0.833°) at the place that morning.
            case sunrise
            /// The wake time.
            case wake
            /// No place known: the fixed 07:00.
            case fixedSunrise
            /// Polar night there that day: no sunrise; solar noon stands in for it.
            case polarNightNoon
        }

        public var at: Date
        public var because: Because
        public var wake: Date
        /// The sunrise (or its stand-in) that morning; nil in polar day (the sun is up all day).
        public var sunrise: Date?
        public var polar: SolarDay.Polar?
        public var morning: LocalDate
    }

    public func opening(forNightStarting start: Date) -> Opening {
        let tz = timeZone
        let w = wakeTime(afterNightStart: start)
        let morning = LocalDate(w, in: tz)
        var rise: Date?
        var because = Opening.Because.sunrise
        var polar: SolarDay.Polar?
        if let p = place {
            let day = SolarCalculator.day(morning, latitude: p.latitude, longitude: p.longitude, timeZone: tz)
            polar = day.sunrise == nil ? day.polar : nil
            switch (day.sunrise, day.polar) {
            case (let r?, _): rise = r
            case (nil, .night?): rise = day.solarNoon; because = .polarNightNoon
            case (nil, .day?), (nil, nil): rise = nil
            }
        } else {
            rise = tz.instant(on: morning, at: Self.fixedSunrise)
            because = .fixedSunrise
        }
        guard let r = rise, r > w else { return Opening(at: w, because: .wake, wake: w, sunrise: rise, polar: polar, morning: morning) }
        return Opening(at: r, because: because, wake: w, sunrise: r, polar: polar, morning: morning)
    }

    /// The refusal's words for an opening still ahead ("civil sunrise in Oslo today is 08:41").
    public func explain(_ o: Opening, now: Date) -> String {
        let tz = timeZone
        let clock = { (d: Date) -> String in
            let local = d.timeIntervalSince1970 + Double(tz.secondsFromGMT(for: d))
            let m = Int((local / 60).rounded(.down)) % 1440
            let mm = (m + 1440) % 1440
            return String(format: "%02d:%02d", mm / 60, mm % 60)
        }
        let day = LocalDate(now, in: tz) == o.morning ? "today" : "on \(o.morning)"
        let name = place?.name ?? "here"
        switch o.because {
        case .sunrise:
            return "civil sunrise in \(name) \(day) is \(clock(o.at)); unlocking opens then (wake time \(clock(o.wake)))"
        case .fixedSunrise:
            return "no place is set, so sunrise counts as \(clock(o.at)) \(day); unlocking opens then (tandem bedtime set --city NAME)"
        case .polarNightNoon:
            return "polar night in \(name) \(day): the sun does not rise; unlocking opens at solar noon, \(clock(o.at))"
        case .wake:
            let sun: String
            switch (o.polar, o.sunrise) {
            case (.day?, _): sun = "midnight sun in \(name) \(day)"
            case (_, let r?): sun = "civil sunrise in \(name) \(day) is \(clock(r))"
            case (_, nil): sun = "the sun is up"
            }
            return "\(sun); unlocking opens at the wake time, \(clock(o.at)) \(day)"
        }
    }
}

/// Whether bedtime holds now (pure; the node keeps `armedAtMs` and `releasedAtMs` in its bedtime row).
public struct BedtimeBook: Sendable, Equatable {
    public var rule: BedtimeRule
    /// Nights that started before this instant do not lock (set when bedtime is set outside the
    /// night: the night already passed is not owed).
    public var armedAtMs: Int64
    /// The last release (daylight or emergency): the night it ended does not lock again.
    public var releasedAtMs: Int64?

    public init(rule: BedtimeRule, armedAtMs: Int64, releasedAtMs: Int64?) {
        self.rule = rule
        self.armedAtMs = armedAtMs
        self.releasedAtMs = releasedAtMs
    }

    /// A bedtime set at `nowMs`: inside the night it holds at once; outside, from the next bed time.
    public static func set(_ rule: BedtimeRule, nowMs: Int64) -> BedtimeBook {
        let now = Date(timeIntervalSince1970: Double(nowMs) / 1000)
        if rule.isNight(now) {
            let start = Int64((rule.nightStart(atOrBefore: now).timeIntervalSince1970 * 1000).rounded())
            return BedtimeBook(rule: rule, armedAtMs: start - 1, releasedAtMs: nil)
        }
        return BedtimeBook(rule: rule, armedAtMs: nowMs, releasedAtMs: nil)
    }

    /// The start of the night that holds the lock now, or nil when bedtime does not hold: the
    /// latest bed time at or before now, unless it came before the rule was armed or was released.
    /// A node that was off across a bed time finds the night unreleased at start and locks.
    public func holdingNight(nowMs: Int64) -> Date? {
        let now = Date(timeIntervalSince1970: Double(nowMs) / 1000)
        let start = rule.nightStart(atOrBefore: now)
        let startMs = Int64((start.timeIntervalSince1970 * 1000).rounded())
        guard startMs > armedAtMs else { return nil }
        if let r = releasedAtMs, r >= startMs { return nil }
        return start
    }

    /// Why leaving now is refused, or nil when the sun and the wake time allow it (the photo is checked apart).
    public func tooEarly(nowMs: Int64) -> (Date, String)? {
        let now = Date(timeIntervalSince1970: Double(nowMs) / 1000)
        let start = holdingNight(nowMs: nowMs) ?? rule.nightStart(atOrBefore: now)
        let o = rule.opening(forNightStarting: start)
        return now < o.at ? (o.at, rule.explain(o, now: now)) : nil
    }
}

import Foundation

/// A calendar date in some time zone (no time, no zone): the day a person means by "today".
public struct LocalDate: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let year: Int
    public let month: Int
    public let day: Int

    /// nil for a date that does not exist (2026-02-30) or outside years 1–9999.
    public init?(year: Int, month: Int, day: Int) {
        guard (1...9999).contains(year), (1...12).contains(month), day >= 1,
              day <= LocalDate.daysIn(month: month, year: year) else { return nil }
        self.year = year
        self.month = month
        self.day = day
    }

    /// `YYYY-MM-DD`.
    public init?(_ text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
              let y = Int(parts[0]), let m = Int(parts[1]), let d = Int(parts[2]) else { return nil }
        self.init(year: y, month: m, day: d)
    }

    /// The date `days` days after 1970-01-01 (proleptic Gregorian; H. Hinnant's civil_from_days).
    public init(daysSinceEpoch days: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        year = yoe + era * 400 + (m <= 2 ? 1 : 0)
        month = m
        day = d
    }

    /// The date of `instant` in `timeZone` (its offset at that instant, DST included).
    public init(_ instant: Date, in timeZone: TimeZone) {
        let local = instant.timeIntervalSince1970 + Double(timeZone.secondsFromGMT(for: instant))
        self.init(daysSinceEpoch: Int((local / 86_400).rounded(.down)))
    }

    /// Days from 1970-01-01 (H. Hinnant's days_from_civil).
    public var daysSinceEpoch: Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = month > 2 ? month - 3 : month + 9
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    public func adding(days n: Int) -> LocalDate { LocalDate(daysSinceEpoch: daysSinceEpoch + n) }

    public var description: String {
        String(format: "%04d-%02d-%02d", year, month, day)
    }

    public static func < (a: LocalDate, b: LocalDate) -> Bool { a.daysSinceEpoch < b.daysSinceEpoch }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

/// A wall-clock time of day, `HH:MM` (00:00–23:59).
public struct TimeOfDay: Sendable, Hashable, CustomStringConvertible {
    public let minutes: Int

    public init?(minutes: Int) {
        guard (0..<1440).contains(minutes) else { return nil }
        self.minutes = minutes
    }

    /// `H:MM` or `HH:MM`.
    public init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, (1...2).contains(parts[0].count), parts[1].count == 2,
              parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }),
              let h = Int(parts[0]), let m = Int(parts[1]), (0..<24).contains(h), (0..<60).contains(m) else { return nil }
        self.init(minutes: h * 60 + m)
    }

    public var description: String { String(format: "%02d:%02d", minutes / 60, minutes % 60) }
}

extension TimeZone {
    /// The instant at which the wall clock in this zone shows `time` on `date`. DST: a time the
    /// clocks skip (spring forward, 02:30 on a night 02:00→03:00) moves forward by the gap (03:30);
    /// a time that happens twice (fall back) is its first occurrence.
    public func instant(on date: LocalDate, at time: TimeOfDay) -> Date {
        let wall = Double(date.daysSinceEpoch) * 86_400 + Double(time.minutes) * 60
        // The offsets in force just before and just after: at most one change in a day's span here.
        let before = Double(secondsFromGMT(for: Date(timeIntervalSince1970: wall - 86_400)))
        let after = Double(secondsFromGMT(for: Date(timeIntervalSince1970: wall + 86_400)))
        let early = Date(timeIntervalSince1970: wall - before)
        let late = Date(timeIntervalSince1970: wall - after)
        // The first candidate whose offset agrees with itself is a real reading of the wall clock.
        for c in [early, late].sorted() where Double(secondsFromGMT(for: c)) + c.timeIntervalSince1970 == wall { return c }
        // In a gap: neither reading exists; the wall time moves forward by the gap.
        return max(early, late)
    }
}

/// Sun times on the node (Protocol/bedtime.md "The sun"): the NOAA solar equations (the NOAA Global
/// Monitoring Laboratory's solar calculator, after Meeus), two passes per event: the sun's
/// declination and the equation of time at 0 h UT of the day, then again at the event found.
/// The sun's position is computed in full twice per place-day, half a day either side of the local
/// noon guess, and read in between by linear interpolation (over a day the declination's and the
/// equation of time's curvature make that < 0.001° and < 1 s off; the full terms six times a
/// place-day cost about twice as much). Pure and allocation-free: `tandem-bench sun` runs a million
/// place-days through `utcEvents`.
public enum SolarCalculator {
    /// Sunrise and sunset: the sun's upper limb on the horizon with standard refraction (0.833° below).
    public static let sunriseZenith = 90.833
    /// Civil dawn and dusk: the sun's centre 6° below the horizon.
    public static let civilZenith = 96.0

    /// What one event is on one day: an instant (minutes after 0 h UT of the day, may fall outside
    /// 0..<1440), or the sun never crossing that altitude (`polarDay`: always above it, `polarNight`:
    /// always below).
    public enum Crossing: Sendable, Equatable {
        case at(minutesUTC: Double)
        case polarDay
        case polarNight
    }

    /// The four events and solar noon for UTC day `daysSinceEpoch` at a place.
    public struct UTCEvents: Sendable, Equatable {
        public var civilDawn: Crossing
        public var sunrise: Crossing
        public var sunset: Crossing
        public var civilDusk: Crossing
        /// Minutes after 0 h UT.
        public var solarNoonMinutes: Double
    }

    /// The sun's position terms at Julian day `jd`: sin and cos of the declination, and the equation
    /// of time in minutes.
    @inline(__always)
    static func position(jd: Double) -> (sinDec: Double, cosDec: Double, eqTime: Double) {
        let rad = Double.pi / 180
        let t = (jd - 2_451_545.0) / 36_525.0
        var l0 = (280.466_46 + t * (36_000.769_83 + t * 0.000_303_2)).truncatingRemainder(dividingBy: 360)
        if l0 < 0 { l0 += 360 }
        let m = (357.529_11 + t * (35_999.050_29 - 0.000_153_7 * t)) * rad
        let e = 0.016_708_634 - t * (0.000_042_037 + 0.000_000_126_7 * t)
        let sinM = sin(m), cosM = cos(m)
        let sin2M = 2 * sinM * cosM
        let sin3M = sinM * (3 - 4 * sinM * sinM)
        let c = sinM * (1.914_602 - t * (0.004_817 + 0.000_014 * t)) + sin2M * (0.019_993 - 0.000_101 * t) + sin3M * 0.000_289
        let omega = (125.04 - 1_934.136 * t) * rad
        let sinO = sin(omega), cosO = cos(omega)
        let lambda = (l0 + c - 0.005_69 - 0.004_78 * sinO) * rad
        let eps0 = 23.0 + (26.0 + (21.448 - t * (46.815 + t * (0.000_59 - t * 0.001_813))) / 60.0) / 60.0
        let eps = (eps0 + 0.002_56 * cosO) * rad
        let sinDec = sin(eps) * sin(lambda)
        let cosDec = (1 - sinDec * sinDec).squareRoot()
        let cosEps = cos(eps)
        let y = (1 - cosEps) / (1 + cosEps)  // tan²(ε/2)
        let l0r = l0 * rad
        let sin2L = sin(2 * l0r), cos2L = cos(2 * l0r)
        let sin4L = 2 * sin2L * cos2L
        let eq = y * sin2L - 2 * e * sinM + 4 * e * y * sinM * cos2L - 0.5 * y * y * sin4L - 1.25 * e * e * sin2M
        return (sinDec, cosDec, 4 * eq / rad)
    }

    /// The sun's position over one day by linear interpolation between two full computations a day
    /// apart (`minutes` after 0 h UT of the day; the span is centred on the local noon guess).
    struct DaySpan {
        var startMinutes: Double
        var sinDec0: Double, sinDecSlope: Double
        var eqTime0: Double, eqTimeSlope: Double

        @inline(__always)
        init(jd0: Double, centreMinutes: Double) {
            startMinutes = centreMinutes - 720
            let a = position(jd: jd0 + startMinutes / 1440), b = position(jd: jd0 + (startMinutes + 1440) / 1440)
            sinDec0 = a.sinDec; sinDecSlope = (b.sinDec - a.sinDec) / 1440
            eqTime0 = a.eqTime; eqTimeSlope = (b.eqTime - a.eqTime) / 1440
        }

        @inline(__always)
        func at(minutes: Double) -> (sinDec: Double, cosDec: Double, eqTime: Double) {
            let d = minutes - startMinutes
            let s = sinDec0 + sinDecSlope * d
            return (s, (1 - s * s).squareRoot(), eqTime0 + eqTimeSlope * d)
        }
    }

    /// One event: minutes after 0 h UT of the day, by two passes: the position at 0 h UT of the
    /// day, then at the event found.
    @inline(__always)
    static func crossing(span: DaySpan, sinLat: Double, cosLat: Double, longitude: Double, cosZenith: Double, rising: Bool) -> Crossing {
        var p = span.at(minutes: 0)
        var minutes = 0.0
        for pass in 0..<2 {
            if pass == 1 { p = span.at(minutes: minutes) }
            let cosH = (cosZenith - sinLat * p.sinDec) / (cosLat * p.cosDec)
            if cosH > 1 { return .polarNight }
            if cosH < -1 { return .polarDay }
            let h = acos(cosH) * 180 / Double.pi
            var offset = 4 * (-longitude + (rising ? -h : h)) - p.eqTime
            if offset < -720 { offset += 1440 }
            minutes = 720 + offset
        }
        return .at(minutesUTC: minutes)
    }

    /// The day's events at a place (latitude clamped to ±89.8°, as is usual for these equations).
    public static func utcEvents(daysSinceEpoch: Int, latitude: Double, longitude: Double) -> UTCEvents {
        let lat = min(89.8, max(-89.8, latitude)) * Double.pi / 180
        let sinLat = sin(lat), cosLat = cos(lat)
        let jd0 = Double(daysSinceEpoch) + 2_440_587.5
        let span = DaySpan(jd0: jd0, centreMinutes: 720 - 4 * longitude)
        let cosRise = cos(sunriseZenith * Double.pi / 180), cosCivil = cos(civilZenith * Double.pi / 180)
        func at(_ cz: Double, _ rising: Bool) -> Crossing {
            crossing(span: span, sinLat: sinLat, cosLat: cosLat, longitude: longitude, cosZenith: cz, rising: rising)
        }
        let noonGuess = 720 - 4 * longitude - span.at(minutes: 0).eqTime
        let noon = 720 - 4 * longitude - span.at(minutes: noonGuess).eqTime
        return UTCEvents(civilDawn: at(cosCivil, true), sunrise: at(cosRise, true), sunset: at(cosRise, false),
                         civilDusk: at(cosCivil, false), solarNoonMinutes: noon)
    }

    /// One event for the local date `date` in `timeZone`: none when the UTC day of that date has
    /// none (the polar rule); else, of the events computed for that UTC day and the UTC days before
    /// and after it, the one whose local time falls on that date (the UTC day's own first, when two
    /// do), or none (the event skips that local date, as a dusk just after midnight can).
    static func pick(_ c: Crossing, days: Int, date: LocalDate, timeZone: TimeZone) -> Date? {
        guard case .at(let m) = c else { return nil }
        let instant = Date(timeIntervalSince1970: ((Double(days) * 86_400 + m * 60) * 1000).rounded() / 1000)
        return LocalDate(instant, in: timeZone) == date ? instant : nil
    }

    /// The sun on local date `date` at a place, in its time zone.
    public static func day(_ date: LocalDate, latitude: Double, longitude: Double, timeZone: TimeZone) -> SolarDay {
        let d = date.daysSinceEpoch
        let own = utcEvents(daysSinceEpoch: d, latitude: latitude, longitude: longitude)
        let before = utcEvents(daysSinceEpoch: d - 1, latitude: latitude, longitude: longitude)
        let after = utcEvents(daysSinceEpoch: d + 1, latitude: latitude, longitude: longitude)
        func event(_ path: KeyPath<UTCEvents, Crossing>) -> (Date?, SolarDay.Polar?) {
            switch own[keyPath: path] {
            case .at: break
            case .polarDay: return (nil, .day)
            case .polarNight: return (nil, .night)
            }
            for (e, day) in [(own, d), (before, d - 1), (after, d + 1)] {
                if let t = pick(e[keyPath: path], days: day, date: date, timeZone: timeZone) { return (t, nil) }
            }
            return (nil, nil)
        }
        let (dawn, dawnPolar) = event(\.civilDawn), (rise, risePolar) = event(\.sunrise)
        let (set, setPolar) = event(\.sunset), (dusk, duskPolar) = event(\.civilDusk)
        var noonInstant = Date(timeIntervalSince1970: Double(d) * 86_400 + own.solarNoonMinutes * 60)
        // Solar noon of the local date (a place far from its zone's meridian can see it on the UTC day before or after).
        let noonDate = LocalDate(noonInstant, in: timeZone)
        if noonDate != date { noonInstant = noonInstant.addingTimeInterval(noonDate < date ? 86_400 : -86_400) }
        return SolarDay(date: date, civilDawn: dawn, sunrise: rise, sunset: set, civilDusk: dusk, solarNoon: noonInstant,
                        polar: risePolar ?? setPolar, civilPolar: dawnPolar ?? duskPolar)
    }
}

/// The sun on one local date at one place.
public struct SolarDay: Sendable, Equatable {
    public enum Polar: String, Sendable, Equatable {
        /// The sun stays above the horizon all day (midnight sun).
        case day
        /// The sun stays below the horizon all day.
        case night
    }

    public var date: LocalDate
    public var civilDawn: Date?
    public var sunrise: Date?
    public var sunset: Date?
    public var civilDusk: Date?
    public var solarNoon: Date
    /// Set when the sun neither rises nor sets that day (sunrise and sunset are nil).
    public var polar: Polar?
    /// Set when there is no civil dawn or dusk that day.
    public var civilPolar: Polar?
}

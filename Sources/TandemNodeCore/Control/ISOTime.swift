#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// ISO 8601 text of an instant (ms since the epoch) with milliseconds, as `ISO8601DateFormatter`
/// with `[.withInternetDateTime, .withFractionalSeconds]` writes it ("2026-11-29T03:51:01.123Z", or
/// "…+01:00" in a zone east of UTC), from the C library's calendar functions: no formatter object
/// is made per call (making one cost more than the rest of a `message list` row).
package enum ISOTime {
    /// In UTC ("Z").
    package static func utc(_ ms: Int64) -> String { format(ms, local: false) }

    /// In the local time zone, with its offset ("Z" when it is UTC).
    package static func local(_ ms: Int64) -> String { format(ms, local: true) }

    static func format(_ ms: Int64, local: Bool) -> String {
        // Floor division: an instant before 1970 has a negative second and a positive millisecond.
        let (q, r) = ms.quotientAndRemainder(dividingBy: 1000)
        let seconds = r < 0 ? q - 1 : q
        let millis = r < 0 ? r + 1000 : r
        var t = time_t(clamping: seconds)
        var parts = tm()
        let ok = local ? localtime_r(&t, &parts) != nil : gmtime_r(&t, &parts) != nil
        guard ok else { return "1970-01-01T00:00:00.000Z" }
        let offset = local ? Int(parts.tm_gmtoff) : 0
        var s = pad(Int(parts.tm_year) + 1900, 4) + "-" + pad(Int(parts.tm_mon) + 1, 2) + "-" + pad(Int(parts.tm_mday), 2)
        s += "T" + pad(Int(parts.tm_hour), 2) + ":" + pad(Int(parts.tm_min), 2) + ":" + pad(Int(parts.tm_sec), 2)
        s += "." + pad(Int(millis), 3)
        if offset == 0 { return s + "Z" }
        let minutes = abs(offset) / 60
        return s + (offset < 0 ? "-" : "+") + pad(minutes / 60, 2) + ":" + pad(minutes % 60, 2)
    }

    private static func pad(_ n: Int, _ width: Int) -> String {
        let text = String(abs(n))
        let padded = text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
        return n < 0 ? "-" + padded : padded
    }
}

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
        // The digits into one buffer, one String at the end: a String per field and its padding
        // cost 32 k instructions per timestamp, more than the rest of a `message.received` event
        // (messages.md 11.6, session 14).
        var b: [UInt8] = []
        b.reserveCapacity(32)
        digits(Int(parts.tm_year) + 1900, 4, &b)
        b.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2, &b)
        b.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2, &b)
        b.append(UInt8(ascii: "T"))
        digits(Int(parts.tm_hour), 2, &b)
        b.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2, &b)
        b.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2, &b)
        b.append(UInt8(ascii: "."))
        digits(Int(millis), 3, &b)
        if offset == 0 {
            b.append(UInt8(ascii: "Z"))
        } else {
            let minutes = abs(offset) / 60
            b.append(UInt8(ascii: offset < 0 ? "-" : "+"))
            digits(minutes / 60, 2, &b)
            b.append(UInt8(ascii: ":"))
            digits(minutes % 60, 2, &b)
        }
        return String(decoding: b, as: UTF8.self)
    }

    /// `n` in decimal, at least `width` digits (zeros in front); a negative year keeps its sign.
    private static func digits(_ n: Int, _ width: Int, _ b: inout [UInt8]) {
        if n < 0 { b.append(UInt8(ascii: "-")) }
        let m = n.magnitude
        var count = 1
        var power: UInt = 10
        while m >= power {
            count += 1
            let (next, overflow) = power.multipliedReportingOverflow(by: 10)
            if overflow { break }
            power = next
        }
        if count < width { b.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: width - count)) }
        let start = b.count
        b.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: count))
        var v = m
        var i = start + count - 1
        while v > 0 {
            b[i] = UInt8(ascii: "0") + UInt8(v % 10)
            v /= 10
            i -= 1
        }
    }
}

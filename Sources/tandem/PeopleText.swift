import Foundation
import TandemNodeCore
import TandemProtocol

/// Text for people: local times, counts with the right plural, names rather than raw IDs.
/// `--json` keeps ISO 8601 instants; everything printed for a person goes through these.
enum PeopleText {
    /// An ISO 8601 instant in the local time zone, as near as people say it: "today 07:12",
    /// "yesterday 23:42", "tomorrow 06:30", "Mon 14:02" within a week, else "2026-11-20 14:02".
    static func when(_ iso: String?, now: Date = Date(), zone: TimeZone = .current) -> String {
        guard let iso, let date = parse(iso) else { return iso?.terminalSafe ?? "never" }
        return when(date, now: now, zone: zone)
    }

    static func when(_ date: Date, now: Date = Date(), zone: TimeZone = .current) -> String {
        var cal = Calendar(identifier: .gregorian)
        cal.timeZone = zone
        let clock = format("HH:mm", zone).string(from: date)
        let days = cal.dateComponents([.day], from: cal.startOfDay(for: now), to: cal.startOfDay(for: date)).day ?? 99
        switch days {
        case 0: return "today \(clock)"
        case -1: return "yesterday \(clock)"
        case 1: return "tomorrow \(clock)"
        case -6 ... -2, 2...6: return format("EEE", zone).string(from: date) + " \(clock)"
        default: return format("yyyy-MM-dd HH:mm", zone).string(from: date)
        }
    }

    /// Only the clock time when the instant is today ("23:42"), else as `when`.
    static func until(_ iso: String?, now: Date = Date(), zone: TimeZone = .current) -> String {
        guard let iso, let date = parse(iso) else { return iso?.terminalSafe ?? "?" }
        let text = when(date, now: now, zone: zone)
        return text.hasPrefix("today ") ? String(text.dropFirst(6)) : text
    }

    /// "1 item", "3 items"; `plural` defaults to the noun with an s.
    static func count(_ n: Int, _ noun: String, plural: String? = nil) -> String {
        "\(n) \(n == 1 ? noun : (plural ?? noun + "s"))"
    }

    /// A contact as people know it, from a control answer's object: the nickname, else the display
    /// name, else the ID's short form.
    static func who(_ f: JSONValue) -> String {
        if let n = f["nickname"]?.stringValue, !n.isEmpty { return n.terminalSafe }
        if let n = f["name"]?.stringValue, !n.isEmpty { return n.terminalSafe }
        let id = f["id"]?.stringValue ?? "?"
        return NodeID(id).map { "tdm1-" + $0.short + "…" } ?? id.terminalSafe
    }

    static func parse(_ iso: String) -> Date? {
        let p = ISO8601DateFormatter()
        p.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = p.date(from: iso) { return d }
        p.formatOptions = [.withInternetDateTime]
        return p.date(from: iso)
    }

    private static func format(_ pattern: String, _ zone: TimeZone) -> DateFormatter {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.dateFormat = pattern
        f.timeZone = zone
        return f
    }
}

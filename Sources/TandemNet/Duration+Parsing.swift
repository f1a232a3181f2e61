import Foundation

/// Durations as people type them on the command line: `500ms`, `30s`, `2m`, `1h`, `1d`, or
/// combinations (`1m30s`). A bare number means seconds.
public enum DurationText {
    /// The longest duration accepted (so arithmetic on it cannot overflow).
    public static let maximum: Duration = .seconds(366 * 24 * 3600)

    public static func parse(_ text: String) throws -> Duration {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        func bad(_ why: String) -> TandemError {
            TandemError("'\(text)' is not a duration (\(why); e.g. 500ms, 30s, 2m, 1h)", exitCode: TandemError.usageExitCode)
        }
        guard !trimmed.isEmpty else { throw bad("empty") }
        if let seconds = Int64(trimmed) {
            guard seconds >= 0, seconds <= maximum.components.seconds else { throw bad("out of range") }
            return .seconds(seconds)
        }
        var totalMs: Int64 = 0
        var rest = Substring(trimmed)
        while !rest.isEmpty {
            let digits = rest.prefix(while: { $0.isASCII && $0.isNumber })
            guard !digits.isEmpty, digits.count <= 12, let number = Int64(digits) else { throw bad("expected a number") }
            rest = rest.dropFirst(digits.count)
            let unit = rest.prefix(while: { $0.isASCII && $0.isLetter })
            rest = rest.dropFirst(unit.count)
            let msPerUnit: Int64
            switch unit.lowercased() {
            case "ms": msPerUnit = 1
            case "s": msPerUnit = 1000
            case "m": msPerUnit = 60_000
            case "h": msPerUnit = 3_600_000
            case "d": msPerUnit = 86_400_000
            case "": throw bad("a unit is missing")
            case let other: throw bad("unknown unit '\(other)'")
            }
            let (product, overflow) = number.multipliedReportingOverflow(by: msPerUnit)
            guard !overflow else { throw bad("out of range") }
            totalMs += product
            guard totalMs <= maximum.components.seconds * 1000 else { throw bad("longer than a year") }
        }
        return .milliseconds(totalMs)
    }

    /// `1500ms` → "1.5s", `90s` → "1m30s": the shortest readable form.
    public static func format(_ duration: Duration) -> String {
        let ms = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        if ms < 1000 { return "\(ms)ms" }
        if ms % 1000 != 0 || ms < 60_000 {
            let s = Double(ms) / 1000
            return s == s.rounded() ? "\(Int64(s))s" : "\(s)s"
        }
        var seconds = ms / 1000
        var out = ""
        for (unit, size) in [("d", Int64(86_400)), ("h", 3600), ("m", 60), ("s", 1)] where seconds >= size {
            out += "\(seconds / size)\(unit)"
            seconds %= size
        }
        return out
    }
}

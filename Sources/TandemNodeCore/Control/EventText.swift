import Foundation
import TandemNet

/// How the CLI shows and selects events: `tandem events` lines and `--json` objects, and the
/// `key=value` conditions of `tandem wait --match`. Presentation only; the bus and the control
/// protocol carry `NodeEvent` as it is.
extension NodeEvent {
    /// The CLI's `--json` form: the fields flattened beside `seq`, `type`, `time` (ISO 8601) and
    /// `time_ms` (which win over fields of the same name).
    public var flatJSON: JSONValue {
        var object = fields
        object["seq"] = .int(seq)
        object["type"] = .string(type)
        object["time"] = .string(isoTime)
        object["time_ms"] = JSONValue(timeMs)
        return .object(object)
    }

    /// The CLI's readable form, in the local time zone: `#12 2025-01-02 04:04:05.678+01:00
    /// node.started address=… id=…` (`--json` keeps ISO 8601 UTC in `time`).
    public var textLine: String { textLine(zone: .current) }

    public func textLine(zone: TimeZone) -> String {
        // Field values are often a peer's text (names, messages): `quote` shows controls escaped.
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = zone
        f.dateFormat = "yyyy-MM-dd HH:mm:ss.SSSxxx"
        var line = "#\(seq) \(f.string(from: Date(timeIntervalSince1970: Double(timeMs) / 1000))) \(type.terminalSafe)"
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            line += " \(key.terminalSafe)=\(StructuredLogHandler.quote(value.textValue))"
        }
        return line
    }

    public var isoTime: String {
        ISOTime.utc(Int64(clamping: timeMs))
    }

    /// True when every `key=value` condition holds (field text compared as strings).
    public func matches(_ conditions: [FieldCondition]) -> Bool {
        conditions.allSatisfy { fields[$0.key]?.textValue == $0.value }
    }
}

/// `key=value` from `tandem wait --match`.
public struct FieldCondition: Sendable, Equatable {
    public var key: String
    public var value: String

    public init(key: String, value: String) {
        self.key = key
        self.value = value
    }

    /// Parses `key=value` (the value may contain `=` and may be empty).
    public init(parsing text: String) throws {
        guard let eq = text.firstIndex(of: "="), eq != text.startIndex else {
            throw NodeError.invalidArgument("'\(text)' is not key=value")
        }
        self.init(key: String(text[..<eq]), value: String(text[text.index(after: eq)...]))
    }
}

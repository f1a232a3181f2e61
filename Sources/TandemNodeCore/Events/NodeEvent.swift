import Foundation

/// Something that happened in the node, as the CLI streams it. `seq` orders events and is what a
/// script passes to `--since` to resume.
public struct NodeEvent: Codable, Sendable, Equatable {
    public var seq: Int64
    public var type: String
    public var timeMs: UInt64
    public var fields: [String: JSONValue]

    public init(seq: Int64, type: String, timeMs: UInt64, fields: [String: JSONValue] = [:]) {
        self.seq = seq
        self.type = type
        self.timeMs = timeMs
        self.fields = fields
    }

    enum CodingKeys: String, CodingKey {
        case seq
        case type
        case timeMs = "time_ms"
        case fields
    }

    /// The type of the marker a subscriber gets when it fell too far behind; its `seq` is the last
    /// event it received, so `--since <seq>` resumes exactly where it stopped.
    public static let overflowType = "events.overflow"

    /// Wall-clock milliseconds since 1970.
    public static func nowMs() -> UInt64 {
        UInt64(max(0, (Date().timeIntervalSince1970 * 1000).rounded()))
    }

    /// The wire form: `{"seq", "type", "time_ms", "fields"}`.
    public var jsonValue: JSONValue {
        ["seq": .int(seq), "type": .string(type), "time_ms": JSONValue(timeMs), "fields": .object(fields)]
    }

    public init?(json: JSONValue) {
        guard let seq = json["seq"]?.intValue, let type = json["type"]?.stringValue,
              let time = json["time_ms"]?.intValue, time >= 0 else { return nil }
        self.init(seq: seq, type: type, timeMs: UInt64(time), fields: json["fields"]?.objectValue ?? [:])
    }
}

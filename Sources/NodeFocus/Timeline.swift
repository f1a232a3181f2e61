import Foundation
import TandemProtocol
import TandemNodeCore

/// The day's timeline (Protocol/bedtime.md "The timeline"): the node's events of one local day
/// that tell its story, each with a line from `TimelineTemplates.swift` in the tone of the health
/// at that moment, chosen by the event's sequence number (the same day reads the same twice).
/// Pure: events in, entries out.
struct TimelineBook {
    struct Entry: Equatable {
        var timeMs: Int64
        var seq: Int64
        var type: String
        var kind: String
        var health: Int
        var state: HealthPool.State
        var tone: String
        var line: String
    }

    static let templates: [String: [String]] = {
        var t: [String: [String]] = [:]
        for raw in templateText.split(separator: "\n") {
            let parts = raw.split(separator: "|", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let key = parts[0].split(separator: " ").joined(separator: " ")
            t[key, default: []].append(parts[1].trimmingCharacters(in: .whitespaces))
        }
        return t
    }()

    static func tone(_ s: HealthPool.State) -> String {
        switch s {
        case .healthy: return "playful"
        case .concerned: return "concerned"
        case .tired: return "strained"
        case .weak, .dead: return "faint"
        }
    }

    /// FNV-1a: a hash that is the same in every run (Swift's `Hasher` is seeded per process).
    static func stableHash(_ s: String) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in s.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return h
    }

    static func line(kind: String, tone: String, seed: String, values: [String: String]) -> String {
        let choices = templates["\(kind) \(tone)"] ?? templates["\(kind) playful"] ?? [kind.replacingOccurrences(of: "_", with: " ")]
        var text = choices[Int(stableHash(seed + "|" + kind) % UInt64(choices.count))]
        for (k, v) in values { text = text.replacingOccurrences(of: "{\(k)}", with: v) }
        return text
    }

    /// A gap this long between two of the day's events earns a "quiet return" line.
    static let quietGapMs: Int64 = 3 * 3_600_000

    static func build(_ events: [NodeEvent], clock: (Int64) -> String) -> (entries: [Entry], summary: Entry?) {
        var out: [Entry] = []
        var healthNow = HealthPool.full
        var lastMs: Int64?
        for e in events.sorted(by: { $0.seq < $1.seq }) {
            let f = e.fields
            let s = { (k: String) in f[k]?.stringValue ?? "" }
            var kind: String?
            var values: [String: String] = ["mode": s("mode"), "reason": s("reason")]
            var deadAfter = false
            switch e.type {
            case "focus.locked":
                if s("hold") != "bedtime" { kind = "locked" }
            case "focus.unlocked":
                if !["daylight", "emergency"].contains(s("reason")) { kind = "unlocked"; values["reason"] = s("reason").replacingOccurrences(of: "_", with: " ") }
            case "focus.temp_unlocked":
                kind = "temp_unlocked"
                values["until"] = f["until_ms"]?.intValue.map(clock) ?? "?"
            case "focus.relocked":
                kind = "relocked"
            case "health.bypass":
                let h = Int(clamping: f["health"]?.intValue ?? Int64(healthNow))
                healthNow = max(0, min(HealthPool.full, h))
                let streak = Int(clamping: f["within_15_min"]?.intValue ?? 0)
                kind = streak >= 3 ? "bypass_streak" : (f["first_today"]?.boolValue == true ? "first_bypass" : "bypass")
                values["cost"] = String(f["cost"]?.intValue ?? 0)
                values["count"] = String(streak)
                deadAfter = healthNow == 0
                // An emergency's line is bedtime.left's; only its death (if it was) is told here.
                if s("kind") == "emergency" { kind = nil }
            case "health.refused":
                kind = "refused"
                values["reason"] = s("message")
            case "challenge.started":
                kind = "challenge_started"
            case "challenge.ended":
                kind = "challenge_ended"
                values["reason"] = s("result")
            case "challenge.quit":
                kind = "challenge_quit"
                values["reason"] = s("reason").isEmpty ? "no reason given" : s("reason")
            case "bedtime.started":
                kind = "bedtime_started"
                values["reason"] = s("opens").isEmpty ? "" : s("opens").prefix(1).uppercased() + s("opens").dropFirst()
            case "bedtime.left":
                kind = s("reason") == "emergency" ? "bedtime_emergency" : "bedtime_left"
                values["cost"] = String(HealthPool.Kind.emergency.cost)
            case "bedtime.unlock_refused":
                kind = "bedtime_refused"
                values["reason"] = s("message")
            default:
                kind = nil
            }
            let t = Int64(clamping: e.timeMs)
            guard let kind else {
                if deadAfter {
                    out.append(Entry(timeMs: t, seq: e.seq, type: "timeline.dead", kind: "dead", health: 0, state: .dead, tone: "faint",
                                     line: line(kind: "dead", tone: "faint", seed: "\(e.seq)", values: [:])))
                    lastMs = t
                }
                continue
            }
            let state = HealthPool.State(health: healthNow)
            values["health"] = String(healthNow)
            if let last = lastMs, t - last >= quietGapMs {
                let hours = (t - last) / 3_600_000, minutes = ((t - last) % 3_600_000) / 60_000
                out.append(Entry(timeMs: t, seq: e.seq, type: "timeline.quiet_return", kind: "quiet_return", health: healthNow, state: state,
                                 tone: tone(state), line: line(kind: "quiet_return", tone: tone(state), seed: "\(e.seq)",
                                                               values: ["gap": minutes == 0 ? "\(hours) h" : "\(hours) h \(minutes) min"])))
            }
            lastMs = t
            out.append(Entry(timeMs: t, seq: e.seq, type: e.type, kind: kind, health: healthNow, state: state, tone: tone(state),
                             line: line(kind: kind, tone: tone(state), seed: "\(e.seq)", values: values)))
            if deadAfter {
                out.append(Entry(timeMs: t, seq: e.seq, type: "timeline.dead", kind: "dead", health: 0, state: .dead, tone: "faint",
                                 line: line(kind: "dead", tone: "faint", seed: "\(e.seq)", values: [:])))
            }
        }
        guard let last = out.last else { return (out, nil) }
        let state = HealthPool.State(health: healthNow)
        let summary = Entry(timeMs: last.timeMs, seq: last.seq, type: "timeline.summary", kind: "summary", health: healthNow, state: state,
                            tone: tone(state), line: line(kind: "summary", tone: tone(state), seed: "summary\(last.seq)",
                                                          values: ["count": String(out.count), "health": String(healthNow)]))
        return (out, summary)
    }
}

extension FocusService {
    /// Most events one timeline scans (the event log is read from its start; old events are pruned by the store).
    nonisolated static let timelineScanLimit = 200_000

    nonisolated func registerTimelineMethods(on router: ControlRouter) {
        router.register("timeline.day") { [self] params in
            let tz = healthTimeZone
            let now = Date()
            let day: LocalDate
            if let text = try params.optionalString("date") {
                guard let d = LocalDate(text) else { throw NodeError.invalidArgument("--date wants YYYY-MM-DD") }
                day = d
            } else {
                day = LocalDate(now, in: tz)
            }
            let start = tz.instant(on: day, at: TimeOfDay(minutes: 0)!), end = tz.instant(on: day.adding(days: 1), at: TimeOfDay(minutes: 0)!)
            let (fromMs, toMs) = (UInt64(max(0, start.timeIntervalSince1970 * 1000)), UInt64(max(0, end.timeIntervalSince1970 * 1000)))
            var found: [NodeEvent] = []
            var cursor: Int64 = 0
            var scanned = 0
            while scanned < Self.timelineScanLimit {
                let page = try events.log.events(since: cursor, limit: 1000)
                if page.isEmpty { break }
                for e in page {
                    scanned += 1
                    cursor = e.seq
                    if e.timeMs >= fromMs && e.timeMs < toMs { found.append(e) }
                }
            }
            let (entries, summary) = TimelineBook.build(found, clock: clockText)
            func json(_ e: TimelineBook.Entry) -> JSONValue {
                ["time": JSONValue.iso(e.timeMs), "clock": .string(clockText(e.timeMs)), "seq": .int(e.seq), "type": .string(e.type),
                 "kind": .string(e.kind), "health": .int(Int64(e.health)), "state": .string(e.state.rawValue), "tone": .string(e.tone),
                 "line": .string(e.line)]
            }
            return ["date": .string(day.description), "time_zone": .string(tz.identifier), "entries": .array(entries.map(json)),
                    "summary": summary.map(json) ?? .null]
        }
    }
}

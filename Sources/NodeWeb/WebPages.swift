import Foundation
import Hummingbird
import Mustache
import NIOCore
import TandemNodeCore

/// Renders the pages: the data comes from the control methods, the HTML from the Mustache
/// templates in `WebTemplates` (compiled in), one CSS file and one small script (`WebAssets`).
struct WebPages: Sendable {
    let library: MustacheLibrary

    init() {
        var library = MustacheLibrary()
        for (name, text) in WebTemplates.all + WebTemplatesMore.all {
            do {
                try library.register(text, named: name)
            } catch {
                preconditionFailure("dashboard template \(name) does not parse: \(error)")  // compiled in: a bug here, not input
            }
        }
        self.library = library
    }

    func render(_ page: WebPage, dashboard: WebDashboard, csrf: String, flash: String?, query: [String: String] = [:]) async -> String {
        let router = dashboard.router
        var errors: [String] = []
        /// A control method's answer; a failure becomes a line on the page, never a broken page.
        func load(_ method: String, _ params: JSONValue = [:]) async -> JSONValue {
            do {
                return try await router.call(method, params)
            } catch {
                errors.append("\(method): \(ControlError.from(error).message)")
                return [:]
            }
        }
        let status = await load("node.status")
        let me: [String: Any] = ["name": status["name"]?.stringValue ?? "", "id": status["id"]?.stringValue ?? "",
                                 "display": status["display"]?.stringValue ?? ""]
        var view: [String: Any]
        switch page {
        case .friends:
            let share = await load("node.share")
            view = WebViews.friends(list: await load("friend.list"), requests: await load("friend.requests"))
            var meWithShare = me
            if let code = share["share"]?.stringValue, code != me["id"] as? String { meWithShare["share"] = code }
            view["me"] = meWithShare
        case .challenges:
            view = WebViews.challenges(list: await load("challenge.list"), friends: await load("friend.list"))
        case .ledger:
            view = WebViews.ledger(list: await load("ledger.list"), stats: await load("stats"),
                                   me: status["id"]?.stringValue ?? "", today: Date())
        case .focus:
            view = WebViews.focus(modes: await load("mode.list"), lock: await load("lock.status"))
            view.merge(await renderMore(page, query: query, load: load)) { old, _ in old }
        case .messages, .bedtime, .health:
            view = await renderMore(page, query: query, load: load)
        case .vault:
            view = await WebVaultPage.view(load: load, query: query)
        }
        view["csrf"] = csrf
        if view["me"] == nil { view["me"] = me }
        let body = library.render(view, withTemplate: page.rawValue) ?? ""
        let layout: [String: Any] = [
            "title": page.title,
            "page": page.rawValue,
            "me": me,
            "hasName": !(status["name"]?.stringValue ?? "").isEmpty,
            "csrf": csrf,
            "flash": flash ?? "",
            "hasFlash": flash != nil,
            "errors": errors,
            "hasErrors": !errors.isEmpty,
            "nav": WebPage.allCases.map { ["path": $0.path, "title": $0.title, "current": $0 == page] as [String: Any] },
            "body": body,
        ]
        return library.render(layout, withTemplate: "layout") ?? ""
    }

    static func html(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "text/html; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func asset(_ text: String, type: String) -> Response {
        Response(status: .ok, headers: [.contentType: type], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// A small page with one sentence (refusals, sign-in, errors).
    static func plain(_ status: HTTPResponse.Status, _ text: String) -> Response {
        let escaped = text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
        let page = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Tandem</title><link rel="stylesheet" href="/static/dashboard.css"></head>
        <body><main id="main" class="notice-page"><h1>Tandem</h1><p>\(escaped)</p></main></body></html>
        """
        return html(page, status: status)
    }

    static func signIn() -> Response {
        plain(.unauthorized, "Not signed in. Run `tandem web` in a terminal and open the link it prints (each link works once).")
    }
}

/// The pages' view models: control answers turned into what the templates show.
enum WebViews {
    static func friends(list: JSONValue, requests: JSONValue) -> [String: Any] {
        let friends = (list["friends"]?.arrayValue ?? []).map(person)
        let received = (requests["received"]?.arrayValue ?? []).map(person)
        let sent = (requests["sent"]?.arrayValue ?? []).map(person)
        let online = friends.filter { $0["online"] as? Bool == true }.count
        return ["friends": friends, "hasFriends": !friends.isEmpty, "friendCount": friends.count, "onlineCount": online,
                "received": received, "hasReceived": !received.isEmpty, "sent": sent, "hasSent": !sent.isEmpty]
    }

    static func person(_ f: JSONValue) -> [String: Any] {
        let online = f["online"]?.boolValue ?? false
        let id = f["id"]?.stringValue ?? ""
        let name = f["name"]?.stringValue ?? ""
        var via = ""
        if online {
            switch f["via"] {
            case .string(let s)?: via = s
            case .object(let o)?: via = o["kind"]?.stringValue ?? o["type"]?.stringValue ?? ""
            default: via = ""
            }
        }
        let status = f["status"]?.stringValue ?? (online ? "idle" : "offline")
        return [
            "id": id, "short": String(id.prefix(12)), "name": name.isEmpty ? String(id.prefix(12)) + "…" : name,
            "online": online, "stateText": online ? (status == "idle" ? "online" : "online · \(status.replacingOccurrences(of: "_", with: " "))") : "offline",
            "stateClass": online ? "on" : "off", "via": via.isEmpty ? "" : "via \(via)",
            "seen": online ? "" : (f["last_seen"]?.stringValue).map { "last seen \(shortTime($0))" } ?? "",
            "message": f["message"]?.stringValue ?? "", "hasMessage": !(f["message"]?.stringValue ?? "").isEmpty,
        ]
    }

    /// Circumference of a ring of radius 52 (the SVG in the challenges template).
    static let ringLength = 2 * Double.pi * 52

    static func challenges(list: JSONValue, friends: JSONValue) -> [String: Any] {
        let all = list["challenges"]?.arrayValue ?? []
        var running: [[String: Any]] = []
        var others: [[String: Any]] = []
        for c in all {
            let phase = c["phase"]?.stringValue ?? ""
            let duration = max(1, c["duration_ms"]?.intValue ?? 1)
            let remaining = c["remaining_ms"]?.intValue ?? duration
            let id = c["id"]?.stringValue ?? ""
            let role = c["role"]?.stringValue ?? ""
            let participants = (c["participants"]?.arrayValue ?? []).map { p -> [String: Any] in
                let quitAt = p["quit_elapsed_ms"]?.intValue
                let left = quitAt.map { max(0, duration - $0) } ?? remaining
                let result = p["result"]?.stringValue
                let state: String
                if quitAt != nil || result == "quit" { state = "quit" }
                else if p["out_of_contact"]?.boolValue == true { state = "out of contact" }
                else if let result { state = result.replacingOccurrences(of: "_", with: " ") }
                else { state = p["answer"]?.stringValue ?? "" }
                let pname = p["name"]?.stringValue ?? ""
                return [
                    "name": (p["me"]?.boolValue ?? false) ? "You" : (pname.isEmpty ? String((p["id"]?.stringValue ?? "").prefix(12)) + "…" : pname),
                    "state": state, "quit": quitAt != nil || result == "quit",
                    "reason": p["reason"]?.stringValue ?? "", "hasReason": !(p["reason"]?.stringValue ?? "").isEmpty,
                    "remainingMs": left, "frozen": quitAt != nil || phase != "running",
                    "offset": String(format: "%.2f", ringLength * (1 - Double(left) / Double(duration))),
                    "clock": clock(left),
                ]
            }
            let me = (c["participants"]?.arrayValue ?? []).first { $0["me"]?.boolValue == true }
            let myAnswer = me?["answer"]?.stringValue ?? ""
            let view: [String: Any] = [
                "id": id, "short": c["short"]?.stringValue ?? String(id.prefix(8)), "phase": phase,
                "phaseText": phase.replacingOccurrences(of: "_", with: " "),
                "message": c["message"]?.stringValue ?? "", "hasMessage": !(c["message"]?.stringValue ?? "").isEmpty,
                "minutes": duration / 60_000, "durationMs": duration, "ringLength": String(format: "%.2f", ringLength),
                "participants": participants,
                "names": participants.map { $0["name"] as? String ?? "" }.joined(separator: ", "),
                "canAnswer": phase == "invited" && role == "invitee" && (myAnswer == "pending" || myAnswer == "invited" || myAnswer.isEmpty),
                "canCancel": ["invited", "accepted", "scheduled"].contains(phase) && role == "inviter",
                "canQuit": phase == "running" || phase == "scheduled",
                "startsAt": (c["start_at"]?.stringValue).map(shortTime) ?? "",
                "hasStartsAt": c["start_at"]?.stringValue != nil && phase != "ended",
                "result": c["result"]?.stringValue ?? "",
            ]
            if phase == "running" { running.append(view) } else { others.append(view) }
        }
        let friendOptions = (friends["friends"]?.arrayValue ?? []).map { person($0) }
        return ["running": running, "hasRunning": !running.isEmpty, "others": others, "hasOthers": !others.isEmpty,
                "friendOptions": friendOptions, "hasFriendOptions": !friendOptions.isEmpty]
    }

    /// Focused minutes per day over the last `days` days (completed results of this node), as SVG
    /// bars: a 560×170 chart drawn here, on the server.
    static func chart(_ entries: [JSONValue], me: String, today: Date, days: Int = 14) -> [String: Any] {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = .current
        var minutes: [String: Int64] = [:]
        for e in entries {
            guard let when = e["committed_at"]?.stringValue, when.count >= 10 else { continue }
            let mine = (e["outcomes"]?.arrayValue ?? []).contains { $0["id"]?.stringValue == me && $0["result"]?.stringValue == "completed" }
            if mine { minutes[String(when.prefix(10)), default: 0] += max(0, e["duration_ms"]?.intValue ?? 0) }
        }
        minutes = minutes.mapValues { ($0 + 30_000) / 60_000 }
        let dayFormat = DateFormatter()
        dayFormat.calendar = calendar
        dayFormat.timeZone = .current
        dayFormat.locale = Locale(identifier: "en_US_POSIX")
        dayFormat.dateFormat = "yyyy-MM-dd"
        let labelFormat = DateFormatter()
        labelFormat.calendar = calendar
        labelFormat.timeZone = .current
        labelFormat.locale = Locale(identifier: "en_US_POSIX")
        labelFormat.dateFormat = "d"
        let start = calendar.startOfDay(for: today)
        let series = (0..<days).reversed().compactMap { back -> (String, String, Int64)? in
            guard let day = calendar.date(byAdding: .day, value: -back, to: start) else { return nil }
            let key = dayFormat.string(from: day)
            return (key, labelFormat.string(from: day), minutes[key] ?? 0)
        }
        let top = max(series.map(\.2).max() ?? 0, 30)
        let width = 560.0, plot = 130.0, slot = width / Double(max(series.count, 1))
        let bars = series.enumerated().map { i, d -> [String: Any] in
            let h = d.2 == 0 ? 0 : max(2, plot * Double(d.2) / Double(top))
            return ["x": String(format: "%.1f", Double(i) * slot + slot * 0.15), "w": String(format: "%.1f", slot * 0.7),
                    "y": String(format: "%.1f", 10 + plot - h), "h": String(format: "%.1f", h),
                    "lx": String(format: "%.1f", Double(i) * slot + slot / 2), "label": d.1,
                    "title": "\(d.0): \(d.2) min"]
        }
        let total = series.reduce(Int64(0)) { $0 + $1.2 }
        return ["bars": bars, "top": top, "summary": "Focused minutes per day, last \(days) days: \(total) in all, most \(series.map(\.2).max() ?? 0) in one day"]
    }

    static func ledger(list: JSONValue, stats: JSONValue, me: String, today: Date) -> [String: Any] {
        let entries = (list["entries"]?.arrayValue ?? []).reversed().map { e -> [String: Any] in
            let outcomes = (e["outcomes"]?.arrayValue ?? []).map { o -> [String: Any] in
                ["name": o["name"]?.stringValue ?? "", "result": o["result"]?.stringValue ?? "",
                 "ok": o["result"]?.stringValue == "completed",
                 "reason": o["reason"]?.stringValue ?? "", "hasReason": !(o["reason"]?.stringValue ?? "").isEmpty]
            }
            let signers = e["signers"]?.arrayValue?.count ?? 0
            return ["seq": e["seq"]?.intValue ?? 0, "when": (e["committed_at"]?.stringValue).map(shortTime) ?? "",
                    "length": length(e["duration_ms"]?.intValue ?? 0), "outcomes": outcomes,
                    "signers": "\(signers) \(signers == 1 ? "signature" : "signatures")",
                    "hash": String((e["hash"]?.stringValue ?? "").prefix(16))]
        }
        func stat(_ key: String) -> Int64 { stats[key]?.intValue ?? 0 }
        return ["entries": entries, "hasEntries": !entries.isEmpty,
                "chart": chart(list["entries"]?.arrayValue ?? [], me: me, today: today),
                "stats": ["completed": stat("challenges_completed"), "failed": stat("challenges_failed"),
                          "solo": stat("solo_completed"), "minutes": stat("focused_minutes"),
                          "streak": stat("current_streak_days"), "longest": stat("longest_streak_days")] as [String: Any]]
    }

    static func focus(modes: JSONValue, lock: JSONValue) -> [String: Any] {
        let list = (modes["modes"]?.arrayValue ?? []).map { m -> [String: Any] in
            let sites = m["block_sites"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let apps = m["block_apps"]?.arrayValue?.compactMap(\.stringValue) ?? []
            return ["name": m["name"]?.stringValue ?? "", "locked": m["locked"]?.boolValue ?? false,
                    "active": m["active"]?.boolValue ?? false,
                    "mainKey": m["main_key"]?["name"]?.stringValue ?? "none",
                    "sites": sites.joined(separator: ", "), "hasSites": !sites.isEmpty,
                    "apps": apps.joined(separator: ", "), "hasApps": !apps.isEmpty]
        }
        let locked = lock["locked"]?.boolValue ?? false
        var hold = ""
        switch lock["hold"]?.stringValue {
        case "key"?: hold = "until its key is shown"
        case "until"?: hold = "until \((lock["until"]?.stringValue).map(shortTime) ?? "")"
        case "challenge"?: hold = "until the challenge ends"
        default: hold = ""
        }
        return ["modes": list, "hasModes": !list.isEmpty, "locked": locked, "lockedMode": lock["mode"]?.stringValue ?? "",
                "hold": hold, "temporary": (lock["temporary"]?["until"]?.stringValue).map { "open until \(shortTime($0))" } ?? "",
                "hasTemporary": lock["temporary"]?["until"] != nil]
    }

    /// "2026-11-29T00:41:00+01:00" → "2026-11-29 00:41".
    static func shortTime(_ iso: String) -> String {
        guard iso.count >= 16 else { return iso }
        return String(iso.prefix(16)).replacingOccurrences(of: "T", with: " ")
    }

    /// "45 s", "25 min", "1 h 30 min".
    static func length(_ ms: Int64) -> String {
        let s = max(0, ms) / 1000
        if s < 60 { return "\(s) s" }
        let m = (s + 30) / 60
        return m < 60 ? "\(m) min" : (m % 60 == 0 ? "\(m / 60) h" : "\(m / 60) h \(m % 60) min")
    }

    /// 1:02:03 or 12:34.
    static func clock(_ ms: Int64) -> String {
        let s = max(0, ms) / 1000
        let h = s / 3600, m = (s % 3600) / 60, sec = s % 60
        return h > 0 ? String(format: "%d:%02d:%02d", h, m, sec) : String(format: "%d:%02d", m, sec)
    }
}

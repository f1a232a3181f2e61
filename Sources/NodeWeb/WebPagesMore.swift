import Foundation
import TandemNodeCore
import TandemProtocol

/// The pages added after the first four — Messages, Bedtime, Health — and the Focus page's keys.
/// Like the others, each is built from the control methods the CLI calls (`load`), never from a
/// feature module.
extension WebPages {
    typealias Loader = (String, JSONValue) async -> JSONValue

    func renderMore(_ page: WebPage, query: [String: String], load: Loader) async -> [String: Any] {
        switch page {
        case .messages:
            let friends = await load("friend.list", [:])
            if let with = query["with"]?.trimmingCharacters(in: .whitespaces), !with.isEmpty {
                return WebViewsMore.conversation(with: with, list: await load("message.list", ["friend": .string(with), "limit": 100]),
                                                 friends: friends)
            }
            return WebViewsMore.inbox(conversations: await load("message.conversations", [:]), friends: friends)
        case .bedtime:
            return WebViewsMore.bedtime(await load("bedtime.show", [:]), modes: await load("mode.list", [:]), now: Date())
        case .health:
            return WebViewsMore.health(await load("health.show", [:]), timeline: await load("timeline.day", [:]))
        case .focus:
            return WebViewsMore.focusKeys(await load("key.list", [:]))
        default:
            return [:]  // the first pages are rendered by `render` itself
        }
    }
}

enum WebViewsMore {
    /// A friend's canonical ID for comparing (IDs come in display and canonical forms).
    static func key(_ id: String) -> String { NodeID(id)?.canonical ?? id }

    static func names(_ friends: JSONValue) -> [String: (id: String, name: String, online: Bool)] {
        var out: [String: (id: String, name: String, online: Bool)] = [:]
        for f in friends["friends"]?.arrayValue ?? [] {
            let id = f["id"]?.stringValue ?? ""
            let name = f["name"]?.stringValue ?? ""
            out[key(id)] = (id, name.isEmpty ? String(id.prefix(12)) + "…" : name, f["online"]?.boolValue ?? false)
        }
        return out
    }

    static func preview(_ text: String) -> String {
        let line = text.replacingOccurrences(of: "\n", with: " ")
        return line.count > 80 ? String(line.prefix(79)) + "…" : line
    }

    /// The inbox: every friend, those with messages first (newest first), with unread counts.
    static func inbox(conversations: JSONValue, friends: JSONValue) -> [String: Any] {
        let people = names(friends)
        var seen = Set<String>()
        var rows: [[String: Any]] = []
        var unreadTotal: Int64 = 0
        for c in conversations["conversations"]?.arrayValue ?? [] {
            guard let friend = c["friend"]?.stringValue else { continue }  // challenge threads live on the Challenges page
            let k = key(friend)
            guard let p = people[k], !seen.contains(k) else { continue }
            seen.insert(k)
            let unread = max(0, c["unread"]?.intValue ?? 0)
            unreadTotal += unread
            var preview = ""
            var when = ""
            if let last = c["last"], !last.isNull {
                let text = last["retracted"]?.boolValue == true ? "(message retracted)" : (last["text"]?.stringValue ?? "")
                preview = (last["me"]?.boolValue == true ? "You: " : "") + self.preview(text)
                when = (last["sent_at"]?.stringValue).map(WebViews.shortTime) ?? ""
            }
            rows.append(["id": p.id, "name": p.name, "unread": unread, "hasUnread": unread > 0,
                         "preview": preview.isEmpty ? "No messages yet" : preview, "when": when])
        }
        for (k, p) in people.sorted(by: { $0.value.name < $1.value.name }) where !seen.contains(k) {
            rows.append(["id": p.id, "name": p.name, "unread": 0, "hasUnread": false, "preview": "No messages yet", "when": ""])
        }
        return ["hasConversation": false, "inbox": rows, "hasInbox": !rows.isEmpty,
                "unreadText": unreadTotal == 0 ? "nothing unread" : "\(unreadTotal) unread"]
    }

    static func receipt(_ state: String) -> String {
        switch state {
        case "queued": return "queued"
        case "sent": return "sent ✓"
        case "delivered": return "delivered ✓✓"
        case "read": return "read ✓✓"
        default: return state
        }
    }

    /// One conversation, oldest first; shown = read (message.list marks them and sends the receipt).
    static func conversation(with: String, list: JSONValue, friends: JSONValue) -> [String: Any] {
        let people = names(friends)
        let p = people[key(with)]
        let name = p?.name ?? with
        let messages = (list["messages"]?.arrayValue ?? []).map { m -> [String: Any] in
            let me = m["me"]?.boolValue ?? false
            let state = m["state"]?.stringValue ?? ""
            let reactions = (m["reactions"]?.arrayValue ?? []).map { r -> [String: Any] in
                let author = r["author"]?.stringValue ?? ""
                let by = people[key(author)]?.name ?? (key(author) == key(with) ? name : "You")
                return ["emoji": r["emoji"]?.stringValue ?? "", "by": by]
            }
            let fileName = m["file"]?["name"]?.stringValue
            let sentISO = m["sent_at"]?.stringValue ?? ""
            return [
                "id": m["id"]?.stringValue ?? "", "me": me, "who": me ? "You" : name,
                "text": m["text"]?.stringValue ?? "", "retracted": m["retracted"]?.boolValue ?? false,
                "sentAt": WebViews.shortTime(sentISO), "sentAtISO": sentISO,
                "state": state, "stateText": receipt(state),
                "hasReply": m["reply_to"]?.stringValue != nil, "replyTo": String((m["reply_to"]?.stringValue ?? "").prefix(8)),
                "reactions": reactions, "hasReactions": !reactions.isEmpty,
                "hasFile": fileName != nil, "file": fileName.map { "A file: \($0)" } ?? "",
            ]
        }
        let online = p?.online ?? false
        return ["hasConversation": true, "messages": messages, "hasMessages": !messages.isEmpty,
                "with": ["id": p?.id ?? with, "name": name, "stateText": online ? "online" : "offline"] as [String: Any]]
    }

    /// "HH:MM" of `date` in `zone`.
    static func clock(_ date: Date?, _ zone: TimeZone) -> String {
        guard let date else { return "none" }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = zone
        f.dateFormat = "HH:mm"
        return f.string(from: date)
    }

    static func bedtime(_ b: JSONValue, modes: JSONValue, now: Date) -> [String: Any] {
        let enabled = b["enabled"]?.boolValue == true && b["valid"]?.boolValue != false
        let mode = b["mode"]?.stringValue ?? ""
        let zoneID = b["time_zone"]?.stringValue ?? TimeZone.current.identifier
        let zone = TimeZone(identifier: zoneID) ?? .current
        var view: [String: Any] = [
            "enabled": enabled, "mode": mode, "locked": b["locked"]?.boolValue ?? false,
            "bed": b["bed"]?.stringValue ?? "", "wake": b["wake"]?.stringValue ?? "",
            "opens": b["opens"]?.stringValue ?? "", "opensSentence": (b["opens"]?.stringValue ?? "").capitalizedFirst,
            "opensAt": (b["opens_at"]?.stringValue).map(WebViews.shortTime) ?? "",
            "nextBed": (b["next_bed_at"]?.stringValue).map(WebViews.shortTime) ?? "",
            "modeExists": b["mode_exists"]?.boolValue ?? true,
        ]
        let place = b["place"]
        if let place, !place.isNull, let lat = place["latitude"]?.doubleValue, let lon = place["longitude"]?.doubleValue {
            let day = LocalDate(now, in: zone)
            let s = SolarCalculator.day(day, latitude: lat, longitude: lon, timeZone: zone)
            var polar = ""
            if let p = s.polar { polar = p == .day ? "The sun does not set today." : "The sun does not rise today." }
            view["place"] = ["name": place["name"]?.stringValue ?? String(format: "%.2f, %.2f", lat, lon)]
            view["hasSun"] = true
            view["sun"] = ["dawn": clock(s.civilDawn, zone), "sunrise": clock(s.sunrise, zone), "sunset": clock(s.sunset, zone),
                           "zone": zoneID, "date": day.description, "polar": polar, "hasPolar": !polar.isEmpty] as [String: Any]
        } else {
            view["hasSun"] = false
        }
        let list = (modes["modes"]?.arrayValue ?? []).compactMap { $0["name"]?.stringValue }
        view["modes"] = list.map { ["name": $0, "selected": $0 == mode] as [String: Any] }
        view["hasModes"] = !list.isEmpty
        let hasPlace = !(place?.isNull ?? true)
        let placeName: String = place?["name"]?.stringValue ?? ""
        let isCity: Bool = hasPlace && !placeName.isEmpty && !placeName.contains(",")
        let lat: Double = place?["latitude"]?.doubleValue ?? 0
        let lon: Double = place?["longitude"]?.doubleValue ?? 0
        let bed: String = enabled ? (b["bed"]?.stringValue ?? "23:00") : "23:00"
        let wake: String = enabled ? (b["wake"]?.stringValue ?? "07:00") : "07:00"
        let location: String = hasPlace && !isCity ? "\(lat),\(lon)" : ""
        view["form"] = ["bed": bed, "wake": wake, "city": isCity ? placeName : "", "location": location,
                        "zone": enabled ? zoneID : ""] as [String: Any]
        return view
    }

    static func minutesText(_ seconds: Int64) -> String {
        seconds <= 0 ? "none" : "\((seconds + 59) / 60) min"
    }

    static func health(_ h: JSONValue, timeline: JSONValue) -> [String: Any] {
        let cooldown = h["cooldown_minutes"]?.intValue ?? 0
        let bypasses = (h["bypasses"]?.arrayValue ?? []).reversed().map { b -> [String: Any] in
            ["kind": (b["kind"]?.stringValue ?? "").replacingOccurrences(of: "_", with: " "),
             "at": (b["at"]?.stringValue).map(WebViews.shortTime) ?? "", "cost": b["cost"]?.intValue ?? 0]
        }
        let entries = (timeline["entries"]?.arrayValue ?? []).map { e -> [String: Any] in
            ["clock": e["clock"]?.stringValue ?? "", "line": e["line"]?.stringValue ?? "", "tone": e["tone"]?.stringValue ?? "",
             "health": e["health"]?.intValue ?? 0]
        }
        let summary = timeline["summary"].flatMap { $0.isNull ? nil : $0["line"]?.stringValue } ?? ""
        return [
            "health": h["health"]?.intValue ?? 0, "state": h["state"]?.stringValue ?? "",
            "cooldownLeft": minutesText(h["cooldown_seconds_left"]?.intValue ?? 0), "cooldownMinutes": cooldown,
            "resetsAt": (h["resets_at"]?.stringValue).map(WebViews.shortTime) ?? "",
            "bypasses": bypasses, "hasBypasses": !bypasses.isEmpty,
            "timeline": entries, "hasTimeline": !entries.isEmpty, "summary": summary, "hasSummary": !summary.isEmpty,
            "date": timeline["date"]?.stringValue ?? "",
            "cooldownChoices": HealthPool.cooldownChoices.map { ["minutes": $0, "selected": Int64($0) == cooldown] as [String: Any] },
        ]
    }

    static func focusKeys(_ keys: JSONValue) -> [String: Any] {
        let list = (keys["keys"]?.arrayValue ?? []).map { k -> [String: Any] in
            let main = (k["main_key_of"]?.arrayValue ?? []).compactMap(\.stringValue)
            let temp = (k["temp_key_of"]?.arrayValue ?? []).compactMap(\.stringValue)
            return ["id": k["id"]?.stringValue ?? "", "name": k["name"]?.stringValue ?? "", "kind": k["kind"]?.stringValue ?? "unusable",
                    "usable": k["usable"]?.boolValue ?? false, "main": main.joined(separator: ", "), "hasMain": !main.isEmpty,
                    "temp": temp.joined(separator: ", "), "hasTemp": !temp.isEmpty]
        }
        return ["keys": list, "hasKeys": !list.isEmpty]
    }
}

// MARK: - Actions of the new pages

extension WebAction {
    /// Where the browser goes after the action: the conversation for message actions.
    func next(_ form: [String: String]) -> String {
        switch self {
        case .messageSend, .messageReact:
            let who = (form[self == .messageSend ? "to" : "friend"] ?? "").trimmingCharacters(in: .whitespaces)
            guard !who.isEmpty, let q = who.addingPercentEncoding(withAllowedCharacters: .alphanumerics) else { return page.path }
            return "/messages?with=\(q)"
        default:
            return page.path
        }
    }

    func runMore(_ form: [String: String], dashboard: WebDashboard) async throws -> String {
        let router = dashboard.router
        func field(_ name: String, _ what: String) throws -> String {
            let v = (form[name] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            guard !v.isEmpty else { throw ControlError.invalid("\(what) is missing") }
            return v
        }
        func tag() throws -> JSONValue {
            guard let text = form["tag"], !text.isEmpty else { throw ControlError.invalid("type the tag's text") }
            return .string(Data(text.utf8).base64EncodedString())
        }
        switch self {
        case .messageSend:
            // The text as typed (line breaks kept); a browser sends CRLF.
            let text = (form["text"] ?? "").replacingOccurrences(of: "\r\n", with: "\n")
            guard !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { throw ControlError.invalid("the message is empty") }
            _ = try await router.call("message.send", ["to": .string(try field("to", "the friend")), "text": .string(text)])
            return "Sent."
        case .messageReact:
            _ = try await router.call("message.react", ["id": .string(try field("id", "the message")), "emoji": .string(form["emoji"] ?? "👍")])
            return "Reacted."
        case .bedtimeSet:
            var p: [String: JSONValue] = ["mode": .string(try field("mode", "the mode")), "bed": .string(try field("bed", "the bed time")),
                                          "wake": .string(try field("wake", "the wake time"))]
            let location = (form["location"] ?? "").trimmingCharacters(in: .whitespaces)
            let city = (form["city"] ?? "").trimmingCharacters(in: .whitespaces)
            if !location.isEmpty {
                guard let (lat, lon) = SunPlace.parseCoordinates(location) else {
                    throw ControlError.invalid("the location is LAT,LON in decimal degrees (-90…90, -180…180), e.g. 59.91,10.75")
                }
                p["latitude"] = .double(lat)
                p["longitude"] = .double(lon)
            } else if !city.isEmpty {
                p["city"] = .string(city)
            }
            let zone = (form["time_zone"] ?? "").trimmingCharacters(in: .whitespaces)
            if !zone.isEmpty { p["time_zone"] = .string(zone) }
            let r = try await router.call("bedtime.set", .object(p))
            return "Bedtime saved: mode \(r["mode"]?.stringValue ?? "") from \(r["bed"]?.stringValue ?? "") to \(r["wake"]?.stringValue ?? "")."
        case .bedtimeOff:
            _ = try await router.call("bedtime.off")
            return "Bedtime is off."
        case .bedtimeEmergency:
            _ = try await router.call("bedtime.emergency")
            return "Unlocked (an emergency: 20 health)."
        case .healthCooldown:
            guard let m = Int64(try field("minutes", "the cooldown")) else { throw ControlError.invalid("the cooldown is a number of minutes") }
            _ = try await router.call("health.set", ["cooldown_minutes": .int(m)])
            return "The cooldown is \(m) minutes."
        case .focusTempUnlock:
            let r = try await router.call("lock.temp_unlock", ["tag_b64": try tag()])
            let until = (r["temporary"]?["until"]?.stringValue).map(WebViews.shortTime)
            return until.map { "Temporary items open until \($0)." } ?? "Temporary items open."
        case .focusTempKey:
            let name = try field("name", "the key's name")
            let mode = try field("mode", "the mode")
            let r = try await router.call("key.enroll", ["name": .string(name), "tag_b64": try tag()])
            let id = r["key"]?["id"]?.stringValue ?? name
            do {
                _ = try await router.call("mode.edit", ["name": .string(mode), "temp_keys": [.string(id)]])
            } catch {
                return "Key \(name) enrolled, but it is not a temporary key of \(mode) yet: \(ControlError.from(error).message)."
            }
            return "Key \(name) is a temporary key of \(mode) now."
        default:
            throw ControlError.invalid("not an action of these pages")
        }
    }
}

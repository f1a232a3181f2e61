import Foundation
import TandemNodeCore
import TandemProtocol

/// `tandem status` for people: sentences, local times, counts with their plurals (`--json` keeps
/// the node's object as it is).
enum StatusText {
    static func lines(_ s: JSONValue) -> [String] {
        func int(_ k: String) -> Int { Int(s[k]?.intValue ?? 0) }
        var out: [String] = []
        let name = s["name"]?.stringValue ?? ""
        let listen = s["listen"]?.stringValue
        out.append("\(name.isEmpty ? "This node (no display name: tandem name NAME)" : name) is running"
                   + (listen.map { ", listening on \($0)." } ?? ", but is not listening (see its log)."))
        out.append("ID: \(s["display"]?.stringValue ?? s["id"]?.stringValue ?? "?")")
        if let dir = s["data_dir"]?.stringValue { out.append("Data directory: \(dir)") }

        var friends = "Friends: \(int("friends")), \(PeopleText.count(int("links"), "open link"))"
        if int("pending_requests") > 0 { friends += "; \(PeopleText.count(int("pending_requests"), "friend request")) waiting for your answer" }
        out.append(friends + ".")
        let outbox = int("outbox")
        out.append(outbox == 0 ? "Outbox: empty (everything sent was delivered)."
                               : "Outbox: \(PeopleText.count(outbox, "frame")) waiting to be delivered.")
        if s["discovery"]?.boolValue == false {
            out.append("LAN discovery: off (--no-discovery); friends are reached at known addresses and relays.")
        } else {
            out.append(s["discoverable"]?.boolValue == true
                       ? "LAN discovery: on; this node is discoverable by anyone on the LAN."
                       : "LAN discovery: on; only friends recognise this node's beacons.")
        }
        let relays = s["relays"]?.arrayValue ?? []
        if relays.isEmpty {
            out.append("Relays: none (tandem relay add ID@host:port to be reachable off the LAN).")
        } else {
            for r in relays {
                let addr = r["address"]?.stringValue ?? "?"
                if r["connected"]?.boolValue == true {
                    out.append("Relay \(addr): connected since \(PeopleText.when(r["since"]?.stringValue)).")
                } else {
                    var line = "Relay \(addr): not connected"
                    if let e = r["last_error"]?.stringValue { line += " (\(e))" }
                    if let next = r["next_attempt"]?.stringValue { line += "; next try \(PeopleText.until(next))" }
                    out.append(line + ".")
                }
            }
        }
        out.append(focusLine(s["focus"]))
        let quarantined = int("quarantined"), errors = int("store_errors")
        if quarantined == 0 && errors == 0 {
            out.append("Store: healthy.")
        } else {
            var line = "Store: \(PeopleText.count(quarantined, "row")) quarantined, \(PeopleText.count(errors, "store error"))"
            if let q = s["quarantine"]?.arrayValue?.first {
                line += "; latest: \(q["kind"]?.stringValue ?? "?") (\(q["reason"]?.stringValue ?? "?"))"
            }
            out.append(line + ".")
        }
        if let t = s["transport"] {
            let rejected = (t["frames_rejected"]?.objectValue ?? [:]).values.reduce(0) { $0 + Int($1.intValue ?? 0) }
            var line = "Network: \(PeopleText.count(Int(t["frames_accepted"]?.intValue ?? 0), "frame")) accepted, \(rejected) rejected"
            let refused = Int(t["handshakes_refused"]?.intValue ?? 0)
            if refused > 0 { line += ", \(PeopleText.count(refused, "handshake")) refused" }
            let dropped = int("frames_dropped_queue_full")
            if dropped > 0 { line += ", \(PeopleText.count(dropped, "frame")) dropped (queue full)" }
            out.append(line + ".")
        }
        return out
    }

    static func focusLine(_ f: JSONValue?) -> String {
        guard let f, f["locked"]?.boolValue == true, let mode = f["mode"]?.stringValue else {
            if let active = f?["active_mode"]?.stringValue { return "Focus: mode \(active) is active, not locked." }
            return "Focus: no mode is locked."
        }
        var line = "Focus: mode \(mode) is locked"
        switch f["hold"]?.stringValue {
        case "until": line += " until \(PeopleText.until(f["until"]?.stringValue)) (or its main key)"
        case "challenge": line += " for a challenge"
        default: line += " until its main key is presented"
        }
        if let t = f["temporary"], !t.isNull { line += "; open with a temporary key until \(PeopleText.until(t["until"]?.stringValue))" }
        return line + "."
    }
}

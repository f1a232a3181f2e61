import Foundation
import TandemNodeCore

/// The dashboard's pages.
enum WebPage: String, CaseIterable, Sendable {
    case friends, challenges, ledger, focus
    case messages, bedtime, health
    case vault

    var path: String { self == .friends ? "/" : "/\(rawValue)" }
    var title: String {
        switch self {
        case .friends: return "Friends"
        case .challenges: return "Challenges"
        case .ledger: return "Ledger"
        case .focus: return "Focus"
        case .messages: return "Messages"
        case .bedtime: return "Bedtime"
        case .health: return "Health"
        case .vault: return "Vault"
        }
    }
}

/// What a page's forms may do: each a control method the CLI calls too, with the same checks.
enum WebAction: String, CaseIterable, Sendable {
    case friendRequest, friendAccept, friendDecline
    case challengeInvite, challengeAccept, challengeDecline, challengeQuit, challengeCancel
    case ledgerVerify
    case focusLock, focusUnlock
    case messageSend, messageReact, bedtimeSet, bedtimeOff, bedtimeEmergency, healthCooldown, focusTempUnlock, focusTempKey

    var page: WebPage {
        switch self {
        case .friendRequest, .friendAccept, .friendDecline: return .friends
        case .challengeInvite, .challengeAccept, .challengeDecline, .challengeQuit, .challengeCancel: return .challenges
        case .ledgerVerify: return .ledger
        case .focusLock, .focusUnlock: return .focus
        case .messageSend, .messageReact: return .messages
        case .bedtimeSet, .bedtimeOff, .bedtimeEmergency: return .bedtime
        case .healthCooldown: return .health
        case .focusTempUnlock, .focusTempKey: return .focus
        }
    }

    var path: String {
        func sentence(_ text: String) -> String { text.hasSuffix("…") ? text : text + "." }
        switch self {
        case .friendRequest: return "/friends/request"
        case .friendAccept: return "/friends/accept"
        case .friendDecline: return "/friends/decline"
        case .challengeInvite: return "/challenges/invite"
        case .challengeAccept: return "/challenges/accept"
        case .challengeDecline: return "/challenges/decline"
        case .challengeQuit: return "/challenges/quit"
        case .challengeCancel: return "/challenges/cancel"
        case .ledgerVerify: return "/ledger/verify"
        case .focusLock: return "/focus/lock"
        case .focusUnlock: return "/focus/unlock"
        case .messageSend: return "/messages/send"
        case .messageReact: return "/messages/react"
        case .bedtimeSet: return "/bedtime/set"
        case .bedtimeOff: return "/bedtime/off"
        case .bedtimeEmergency: return "/bedtime/emergency"
        case .healthCooldown: return "/health/cooldown"
        case .focusTempUnlock: return "/focus/temp-unlock"
        case .focusTempKey: return "/focus/temp-key"
        }
    }

    /// Runs the action; the notice to show.
    func run(_ form: [String: String], dashboard: WebDashboard) async throws -> String {
        let router = dashboard.router
        func field(_ name: String, _ what: String) throws -> String {
            let v = (form[name] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            guard !v.isEmpty else { throw ControlError.invalid("\(what) is missing") }
            return v
        }
        func optional(_ name: String) -> JSONValue {
            let v = (form[name] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            return v.isEmpty ? .null : .string(v)
        }
        func tag() throws -> JSONValue {
            guard let text = form["tag"], !text.isEmpty else { throw ControlError.invalid("type the tag's text") }
            return .string(Data(text.utf8).base64EncodedString())
        }
        func who(_ r: JSONValue) -> String {
            let name = r["name"]?.stringValue ?? ""
            return name.isEmpty ? String((r["id"]?.stringValue ?? "").prefix(12)) + "…" : name
        }
        func sentence(_ text: String) -> String { text.hasSuffix("…") ? text : text + "." }
        switch self {
        case .friendRequest:
            let r = try await router.call("friend.request", ["id": .string(try field("id", "a Tandem ID or share code")),
                                                            "addr": optional("addr"), "message": optional("message")])
            return sentence("Friend request sent to \(who(r))")
        case .friendAccept:
            let r = try await router.call("friend.accept", ["id": .string(try field("id", "the friend's ID"))])
            return "You and \(who(r)) are friends now."
        case .friendDecline:
            _ = try await router.call("friend.decline", ["id": .string(try field("id", "the friend's ID"))])
            return "Request declined."
        case .challengeInvite:
            let friend = try field("friend", "a friend to invite")
            guard let minutes = Int64(try field("minutes", "the duration")), (1...24 * 60).contains(minutes) else {
                throw ControlError.invalid("the duration is from 1 to 1440 minutes")
            }
            let r = try await router.call("challenge.invite", ["ids": [.string(friend)], "duration_ms": .int(minutes * 60_000),
                                                              "message": .string(form["message"] ?? "")])
            return "Challenge \(r["short"]?.stringValue ?? "") sent."
        case .challengeAccept:
            _ = try await router.call("challenge.accept", ["id": .string(try field("id", "the challenge"))])
            return "Challenge accepted."
        case .challengeDecline:
            _ = try await router.call("challenge.decline", ["id": .string(try field("id", "the challenge"))])
            return "Challenge declined."
        case .challengeQuit:
            _ = try await router.call("challenge.quit", ["id": .string(try field("id", "the challenge")),
                                                        "reason": .string(form["reason"] ?? "")])
            return "You quit the challenge; your friends are told."
        case .challengeCancel:
            _ = try await router.call("challenge.cancel", ["id": .string(try field("id", "the challenge"))])
            return "Challenge cancelled."
        case .ledgerVerify:
            let r = try await router.call("ledger.verify")
            let n = r["entries"]?.intValue ?? 0
            if r["ok"]?.boolValue == true {
                return "The ledger checks out: \(n) \(n == 1 ? "entry" : "entries"), every signature and link valid."
            }
            let seq = r["break"]?["seq"]?.intValue ?? 0
            return "The ledger does not check out at entry \(seq): \(r["break"]?["reason"]?.stringValue ?? "unknown")."
        case .focusLock:
            var params: [String: JSONValue] = ["tag_b64": try tag()]
            if case .string(let m) = optional("mode") { params["mode"] = .string(m) }
            _ = try await router.call("lock.lock", .object(params))
            return "Locked."
        case .focusUnlock:
            _ = try await router.call("lock.unlock", ["tag_b64": try tag()])
            return "Unlocked."
        case .messageSend, .messageReact, .bedtimeSet, .bedtimeOff, .bedtimeEmergency, .healthCooldown, .focusTempUnlock, .focusTempKey:
            return try await runMore(form, dashboard: dashboard)
        }
    }
}

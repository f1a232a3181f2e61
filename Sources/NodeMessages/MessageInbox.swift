import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// `message.conversations` (Protocol/control.md): the inbox — every conversation with its unread
/// count and newest message, the most recent first. Read-only: nothing is marked read here
/// (`message.list` does that when a conversation is shown).
extension MessageService {
    nonisolated func registerInbox(on router: ControlRouter) {
        router.registerOnCore("message.conversations") { [self] params in
            let limit = Int(clamping: params["limit"]?.intValue ?? 200)
            guard (1...1000).contains(limit) else { throw Self.usage("the limit is from 1 to 1000") }
            let rows = try store.conversationSummaries(limit: limit)
            return .object(["conversations": .array(rows.map { inboxEntry($0) })])
        }
    }

    func inboxEntry(_ s: ConversationSummary) -> JSONValue {
        let c = s.conversation
        var o: [String: JSONValue] = [
            "conversation": conversationText(c),
            "unread": .int(Int64(s.unread)),
            "muted": .bool(c.muted),
        ]
        if let peer = c.peer.map({ Array($0) }) {
            o["friend"] = idText(peer)
            o["name"] = .string(name(peer, store))
        } else if let thread = c.challengeId {
            o["challenge"] = .string(hexString(Array(thread)))
        }
        if let m = s.newest {
            o["last"] = .object([
                "id": .string(hexString(Array(m.id))),
                "me": .bool(Array(m.author) == me),
                "text": .string(m.retracted ? "" : m.text),
                "retracted": .bool(m.retracted),
                "sent_at": JSONValue.isoLocal(m.sentAtMs),
                "state": .string(m.retracted ? "retracted" : m.state.rawValue),
            ])
        }
        return .object(o)
    }
}

import TandemProtocol
import TandemStore
import TandemNodeCore

/// DELIVERED (messages.md 2.2): a MESSAGE that came as relay mail has no link to send its ACK on,
/// so the receiver says "stored" with a frame of its own, queued in the step that stored the
/// message (one per author and inbound batch, at most 256 ids each), and sent through the outbox
/// like any other: on a link, or into the author's own mailbox when the author is offline in turn.
extension MessageService {
    /// Notes that the MESSAGE `id` by `author` came as mail and was stored in `step`.
    func oweReceipt(for id: [UInt8], to author: [UInt8], _ step: StoreStep) {
        if receiptsIn !== step {
            // An earlier batch that never reached its end (its step failed) owes nothing: its
            // messages were rolled back with it.
            receiptsIn = step
            owedReceipts = [:]
        }
        owedReceipts[author, default: []].append(id)
    }

    /// The inbound batch is handled: its receipts join its step (durable with the messages they
    /// name, or gone with them).
    package func batchEnded(_ step: StoreStep) {
        markSent(in: step)
        guard receiptsIn === step else { return }
        let owed = owedReceipts
        receiptsIn = nil
        owedReceipts = [:]
        for (author, ids) in owed {
            let unique = Self.distinct(ids)
            health.attempt("queue a delivery receipt") {
                var start = 0
                while start < unique.count {
                    let chunk = Array(unique[start..<min(unique.count, start + DeliveryReceiptMessage.maximumIDs)])
                    start += chunk.count
                    let receipt = DeliveryReceiptMessage(messageIDs: chunk)
                    try step.enqueue(outbox.frame(.deliveryReceipt, to: author, payload: receipt.payload, in: step))
                }
            }
            outbox.send(to: [author], in: step)
        }
    }

    nonisolated static func distinct(_ ids: [[UInt8]]) -> [[UInt8]] {
        var seen = Set<[UInt8]>()
        return ids.filter { seen.insert($0).inserted }
    }

    /// A DELIVERED from a friend: our MESSAGEs it names that went to that friend (its direct
    /// conversation, or a thread it takes part in) are delivered. Ids of anything else are ignored.
    func receiveDeliveryReceipt(_ envelope: Envelope, _ m: DeliveryReceiptMessage, handled: HandledMark, _ step: StoreStep) throws {
        try mark(handled, step)
        let from = envelope.author
        var conversations: [Int64: Bool] = [:]
        for id in m.messageIDs {
            guard let message = try step.message(id), Array(message.author) == me else { continue }
            let allowed: Bool
            if let known = conversations[message.conversationId] {
                allowed = known
            } else {
                let c = try step.conversation(id: message.conversationId)
                if let peer = c?.peer {
                    allowed = Array(peer) == from
                } else if let thread = c?.challengeId, let ch = try step.challenge(Array(thread)) {
                    allowed = ch.participant(from) != nil
                } else {
                    allowed = false
                }
                conversations[message.conversationId] = allowed
            }
            guard allowed, try step.markMessageDelivered(id) else { continue }
            events.emit("message.delivered", ["id": .string(hexString(id)), "to": idText(from), "via": .string("mail")], in: step)
        }
    }
}

import Foundation
import Sodium
import TandemProtocol
import TandemStore

/// The unavoidable work per message of a burst, measured in this process on one thread (CPU of that
/// thread), and the rate the machine's cores allow from it, beside what the nodes spent (messages.md
/// 11.6). Crypto: a MESSAGE-sized frame signed (sender) and verified (receiver), and the share of its
/// acknowledgement — one ACK per message, or one ACKS per inbound batch of 32. Store: the rows the
/// protocol needs on each side (`MessageStoreFloor`), in batches of 256 with one synced commit.
struct MessageBurstFloors {
    var signMessageNs = 0.0, verifyMessageNs = 0.0
    var signAckNs = 0.0, verifyAckNs = 0.0
    /// One ACKS naming `acksBatch` ids: sign and verify, per id.
    var signAcksPerIdNs = 0.0, verifyAcksPerIdNs = 0.0
    let acksBatch = 32
    var store = MessageStoreFloor.Figures()

    static func ns(_ r: Floors.Rate) -> Double { r.cpu > 0 ? 1e9 / r.cpu : 0 }

    static func measure(in directory: URL, seconds: Double = 0.3) throws -> MessageBurstFloors {
        var f = MessageBurstFloors()
        let alice = SigningKeyPair.generate(), bob = SigningKeyPair.generate()
        // A burst's MESSAGE: "burst 1234" with its seq, lamport and send time.
        let body = ChatMessageBody(challengeID: nil, seq: 1234, lamport: 1234, text: "burst 1234", replyTo: nil,
                                   sentAtMs: 1_800_000_000_000, expiresAfterMs: 0)
        let now: UInt64 = 1_800_000_000_001
        f.signMessageNs = ns(Floors.rate(seconds: seconds) {
            _ = Envelope.sign(type: .chatMessage, author: alice, recipient: bob.publicKey, createdAt: now, payload: body.payload)
        })
        let message = Envelope.sign(type: .chatMessage, author: alice, recipient: bob.publicKey, createdAt: now, payload: body.payload)
        f.verifyMessageNs = ns(Floors.rate(seconds: seconds) { precondition(message.hasValidSignature) })
        var ack = Tandem_V1_Ack()
        ack.messageID = Data(message.messageID.bytes)
        let ackPayload = (try? ack.serializedBytes()) ?? []  // a message of set fields always serializes
        f.signAckNs = ns(Floors.rate(seconds: seconds) {
            _ = Envelope.sign(type: .ack, author: bob, recipient: alice.publicKey, createdAt: now, payload: ackPayload)
        })
        let ackFrame = Envelope.sign(type: .ack, author: bob, recipient: alice.publicKey, createdAt: now, payload: ackPayload)
        f.verifyAckNs = ns(Floors.rate(seconds: seconds) { precondition(ackFrame.hasValidSignature) })
        let acks = try AcksMessage(messageIDs: (0..<f.acksBatch).map { _ in Sodium.randomBytes(16) }).payload
        f.signAcksPerIdNs = ns(Floors.rate(seconds: seconds, opsPerCall: f.acksBatch) {
            _ = Envelope.sign(type: .acks, author: bob, recipient: alice.publicKey, createdAt: now, payload: acks)
        })
        let acksFrame = Envelope.sign(type: .acks, author: bob, recipient: alice.publicKey, createdAt: now, payload: acks)
        f.verifyAcksPerIdNs = ns(Floors.rate(seconds: seconds, opsPerCall: f.acksBatch) { precondition(acksFrame.hasValidSignature) })
        f.store = try MessageStoreFloor.measure(in: directory, cpuNanos: threadCPUNanos)
        return f
    }

    /// Per message, each side: the floor with single ACKs or with ACKS (ns of CPU).
    func sender(batchedAcks: Bool) -> Double { signMessageNs + (batchedAcks ? verifyAcksPerIdNs : verifyAckNs) + store.senderCPUNs }
    func receiver(batchedAcks: Bool) -> Double { verifyMessageNs + (batchedAcks ? signAcksPerIdNs : signAckNs) + store.receiverCPUNs }

    /// Messages a second that `cores` allow a path of `total` ns of CPU per message whose busiest
    /// single thread needs `stage` ns per message.
    static func ceiling(total: Double, stage: Double, cores: Double) -> Double {
        guard total > 0, stage > 0 else { return 0 }
        return min(cores * 1e9 / total, 1e9 / stage)
    }

    /// `senderMs`, `receiverMs`: the nodes' CPU per message (each process); `busiestThreadMs`: the
    /// busiest thread of either (a node's core thread), the slowest stage of the measured path.
    func json(cores: Double, senderMs: Double, receiverMs: Double, busiestThreadMs: Double, measuredPerSecond: Double) -> [String: Any] {
        // Stages of the floor path: the sender's core signs and writes; its event loop verifies the
        // acknowledgements; the receiver's event loop verifies; its core writes (the ACK is signed on its loop).
        func floorCeiling(_ batched: Bool) -> Double {
            let stage = max(signMessageNs + store.senderCPUNs, batched ? verifyAcksPerIdNs : verifyAckNs,
                            verifyMessageNs + (batched ? signAcksPerIdNs : signAckNs), store.receiverCPUNs)
            return Self.ceiling(total: sender(batchedAcks: batched) + receiver(batchedAcks: batched), stage: stage, cores: cores)
        }
        let measured = Self.ceiling(total: (senderMs + receiverMs) * 1e6, stage: busiestThreadMs * 1e6, cores: cores)
        return [
            "crypto_us_per_message": [
                "sign_message": round3(signMessageNs / 1e3), "verify_message": round3(verifyMessageNs / 1e3),
                "sign_ack": round3(signAckNs / 1e3), "verify_ack": round3(verifyAckNs / 1e3),
                "sign_acks_per_id": round3(signAcksPerIdNs / 1e3), "verify_acks_per_id": round3(verifyAcksPerIdNs / 1e3),
                "acks_batch": acksBatch,
            ] as [String: Any],
            "store_us_per_message": [
                "sender_cpu": round3(store.senderCPUNs / 1e3), "receiver_cpu": round3(store.receiverCPUNs / 1e3),
                "sender_wall_with_syncs": round3(store.senderWallNs / 1e3), "receiver_wall_with_syncs": round3(store.receiverWallNs / 1e3),
                "messages": store.messages, "batch": store.batch,
            ] as [String: Any],
            "floor_us_per_message": [
                "sender_single_acks": round3(sender(batchedAcks: false) / 1e3), "receiver_single_acks": round3(receiver(batchedAcks: false) / 1e3),
                "sender_acks": round3(sender(batchedAcks: true) / 1e3), "receiver_acks": round3(receiver(batchedAcks: true) / 1e3),
            ],
            "nodes_us_per_message": ["sender": round3(senderMs * 1e3), "receiver": round3(receiverMs * 1e3),
                                     "busiest_thread": round3(busiestThreadMs * 1e3)],
            "cores": cores,
            "ceiling_messages_per_s": [
                "floors_single_acks": round3(floorCeiling(false)), "floors_acks": round3(floorCeiling(true)),
                "nodes_measured_cpu": round3(measured),
            ],
            "measured_share_of_nodes_ceiling": round3(measured > 0 ? measuredPerSecond / measured : 0),
            "method": "each floor on one thread of the bench process, CPU time of that thread. Crypto: Envelope.sign and "
                + "hasValidSignature of a MESSAGE frame ('burst 1234'), of an ACK, and of an ACKS of acks_batch ids (per id). Store: "
                + "MessageStoreFloor, a scratch GRDB database (WAL, synchronous FULL): sender = message row + FTS5 entry + outbox row "
                + "per message, 256 per synced commit, then outbox row deleted + message marked delivered, 256 per unsynced commit; "
                + "receiver = message row + FTS5 entry + handled mark, 256 per synced commit. ceiling = min(cores / (sender + "
                + "receiver), 1 / the slowest single thread's share); nodes_measured_cpu: the same from the nodes' CPU per message "
                + "(both processes) and their busiest thread's.",
        ]
    }
}

import Foundation
import Sodium
import NIOConcurrencyHelpers
import SwiftProtobuf
import TandemNet
import TandemProtocol
import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// Delivery beyond a link's ACK, through a node with no sockets (`NodeHarness`: frames arrive as
/// relay mail, through the real router and store): DELIVERED for mail (messages.md 2.2), the
/// inviter forwarding a participant's own frame again on a GAP_REQUEST (5.2), and sends that
/// arrive together sharing one commit.
final class MessageDeliveryTests: XCTestCase {
    let me = SigningKeyPair.generate()
    let friend = SigningKeyPair.generate()
    let other = SigningKeyPair.generate()
    let stranger = SigningKeyPair.generate()

    var nowMs: UInt64 { wallClockMilliseconds() }

    func chat(_ from: SigningKeyPair, to: [UInt8]? = nil, seq: UInt64, text: String, thread: [UInt8]? = nil) -> Envelope {
        let body = ChatMessageBody(challengeID: thread, seq: seq, lamport: seq, text: text, replyTo: nil, sentAtMs: nowMs)
        return Envelope.sign(type: .chatMessage, author: from, recipient: to ?? me.publicKey, createdAt: nowMs, payload: body.payload)
    }

    func receipt(_ from: SigningKeyPair, _ ids: [[UInt8]]) -> Envelope {
        Envelope.sign(type: .deliveryReceipt, author: from, recipient: me.publicKey, createdAt: nowMs,
                      payload: DeliveryReceiptMessage(messageIDs: ids).payload)
    }

    func call(_ h: NodeHarness, _ method: String, _ params: [String: JSONValue]) async throws -> JSONValue {
        guard case .unary(let handler) = h.runtime.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    /// The frames waiting in the outbox for `key`, parsed.
    func outbox(_ h: NodeHarness, for key: [UInt8]) throws -> [Envelope] {
        let store = h.runtime.store
        return try NodeCore.blocking { try store.outbox(for: key) }.map { try Envelope.parse(Array($0.frame)) }
    }

    func state(_ h: NodeHarness, _ id: [UInt8]) throws -> MessageState? {
        let store = h.runtime.store
        return try NodeCore.blocking { try store.message(id) }?.state
    }

    func testMailThatIsStoredIsAnsweredWithOneDeliveredPerAuthorAndBatch() throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        try h.befriend(other.publicKey, name: "other")
        let frames = (1...3).map { chat(friend, seq: UInt64($0), text: "by mail \($0)") }
        let relay = RelayAddress(id: NodeID(publicKey: me.publicKey), host: "127.0.0.1", port: 1)
        let router = h.runtime.frameRouter
        // One inbound batch: three mail items from the friend, one from the other friend, one from
        // a stranger, and a copy of the first again.
        let batch: [InboundEvent] = (frames + [chat(other, seq: 1, text: "hi"), chat(stranger, seq: 1, text: "spam"), frames[0]])
            .map { .mail($0, relay: relay, done: {}) }
        NodeCore.blocking { router.handle(batch) }
        let receipts = try outbox(h, for: friend.publicKey).filter { $0.type == .deliveryReceipt }
        XCTAssertEqual(receipts.count, 1, "one DELIVERED for the friend's three messages")
        XCTAssertEqual(try DeliveryReceiptMessage(payload: receipts[0].payload).messageIDs, frames.map(\.messageID.bytes),
                       "each stored message once, in order")
        XCTAssertEqual(try outbox(h, for: other.publicKey).filter { $0.type == .deliveryReceipt }.count, 1)
        XCTAssertEqual(try outbox(h, for: stranger.publicKey).count, 0, "nothing for a stranger")
        // The same mail again (the relay offers it at the next registration): handled before, no new receipt.
        h.deliver(frames[1])
        XCTAssertEqual(try outbox(h, for: friend.publicKey).filter { $0.type == .deliveryReceipt }.count, 1)
        XCTAssertTrue(MailboxSeal.isMailable(.deliveryReceipt), "a receipt can wait in the author's mailbox in turn")
    }

    func testADeliveredReceiptMarksOnlyOurMessagesToItsAuthor() async throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        try h.befriend(other.publicKey, name: "other")
        let sent = try await call(h, "message.send", ["to": .string(NodeID(publicKey: friend.publicKey).canonical), "text": "hello"])
        let id = try XCTUnwrap(parseHex(try XCTUnwrap(sent["id"]?.stringValue)))
        XCTAssertEqual(try state(h, id), .queued)
        // From a stranger, from another friend, a malformed one, ids of nothing: no change.
        h.deliver(receipt(stranger, [id]))
        h.deliver(receipt(other, [id]))
        h.deliver(Envelope.sign(type: .deliveryReceipt, author: friend, recipient: me.publicKey, createdAt: nowMs, payload: []))
        var twice = Tandem_V1_DeliveryReceipt()
        twice.messageIds = [Data(id), Data(id)]
        h.deliver(Envelope.sign(type: .deliveryReceipt, author: friend, recipient: me.publicKey, createdAt: nowMs,
                                payload: try twice.serializedBytes()))
        h.deliver(receipt(friend, [Sodium.randomBytes(16)]))
        XCTAssertEqual(try state(h, id), .queued)
        // The friend's receipt for it: delivered, once.
        h.deliver(receipt(friend, [id]))
        XCTAssertEqual(try state(h, id), .delivered)
        guard case .unary(let list) = h.runtime.router.entry("events.list") else { return XCTFail("no events.list") }
        let delivered = try await list(.object(["limit": 100, "types": ["message.delivered"]]))["events"]?.arrayValue ?? []
        XCTAssertEqual(delivered.count, 1)
        XCTAssertEqual(delivered.first?["fields"]?["via"]?.stringValue, "mail")
    }

    func testTheInviterForwardsAParticipantsOwnFrameAgainOnAGapRequest() async throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        try h.befriend(other.publicKey, name: "other")
        // We invite both; they are not each other's friends.
        let invited = try await call(h, "challenge.invite", ["ids": [.string(NodeID(publicKey: friend.publicKey).canonical),
                                                                     .string(NodeID(publicKey: other.publicKey).canonical)],
                                                             "duration_ms": 60_000, "start_in_ms": 600_000])
        let thread = try XCTUnwrap(parseHex(try XCTUnwrap(invited["id"]?.stringValue)))
        let inner = chat(friend, seq: 1, text: "hi all", thread: thread)
        h.deliver(inner)
        let forwarded = try outbox(h, for: other.publicKey).filter { $0.type == .chatForward }
        XCTAssertEqual(forwarded.count, 1)
        // The other participant acknowledged the FORWARD: it leaves the outbox.
        for f in try outbox(h, for: other.publicKey) {
            var ack = Tandem_V1_Ack()
            ack.messageID = Data(f.messageID.bytes)
            h.deliver(Envelope.sign(type: .ack, author: other, recipient: me.publicKey, createdAt: nowMs, payload: try ack.serializedBytes()))
        }
        XCTAssertEqual(try outbox(h, for: other.publicKey).count, 0)
        // Later it asks for the friend's seq 1 (it lost it): the friend's own frame comes again.
        let ask = GapRequestMessage(challengeID: thread, author: friend.publicKey, ranges: [SeqRange(first: 1, last: 1)])
        h.deliver(Envelope.sign(type: .gapRequest, author: other, recipient: me.publicKey, createdAt: nowMs, payload: ask.payload))
        let again = try outbox(h, for: other.publicKey).filter { $0.type == .chatForward }
        XCTAssertEqual(again.count, 1)
        let f = try ChatForwardMessage(payload: try XCTUnwrap(again.first).payload, forwarder: me.publicKey)
        XCTAssertEqual(f.inner.bytes, inner.bytes, "byte for byte: the author's signature, not ours")
        // The author itself asking for its own message gets nothing (it has it); nor does a stranger.
        let own = GapRequestMessage(challengeID: thread, author: friend.publicKey, ranges: [SeqRange(first: 1, last: 1)])
        h.deliver(Envelope.sign(type: .gapRequest, author: friend, recipient: me.publicKey, createdAt: nowMs, payload: own.payload))
        XCTAssertEqual(try outbox(h, for: friend.publicKey).filter { $0.type == .chatForward }.count, 0)
        h.deliver(Envelope.sign(type: .gapRequest, author: stranger, recipient: me.publicKey, createdAt: nowMs, payload: ask.payload))
        XCTAssertEqual(try outbox(h, for: stranger.publicKey).count, 0)
        // Once retracted, the kept frame is gone: nothing is forwarded any more.
        let retract = RetractMessage(challengeID: thread, messageID: inner.messageID.bytes)
        h.deliver(Envelope.sign(type: .retract, author: friend, recipient: me.publicKey, createdAt: nowMs, payload: retract.payload))
        let store = h.runtime.store
        XCTAssertNil(try NodeCore.blocking { try store.threadFrame(inner.messageID.bytes) })
    }

    func testSendsThatArriveTogetherShareACommitAndFailAlone() async throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        let to = NodeID(publicKey: friend.publicKey).canonical
        // The core is held busy until all 64 sends wait in the lane (as when a commit takes its
        // time while a script's burst comes in): then they go in one step.
        let gate = ConditionLock(value: 0)
        NodeCore.submit {
            gate.lock(whenValue: 1)
            gate.unlock()
        }
        let lane = h.runtime.messages.sendLane
        let before = h.runtime.store.commits
        async let opened: Void = {
            for _ in 0..<3000 where lane.waiting < 64 { try? await Task.sleep(for: .milliseconds(10)) }
            gate.lock()
            gate.unlock(withValue: 1)
        }()
        guard case .unary(let send) = h.runtime.router.entry("message.send") else { return XCTFail("no message.send") }
        let strangerID = NodeID(publicKey: stranger.publicKey).canonical
        let results = await withTaskGroup(of: (Int, Result<JSONValue, Error>).self) { group in
            for i in 0..<64 {
                group.addTask {
                    // Every 8th names someone who is not a friend: refused alone.
                    let params: JSONValue = .object(["to": .string(i % 8 == 7 ? strangerID : to), "text": .string("m\(i)")])
                    do { return (i, .success(try await send(params))) } catch { return (i, .failure(error)) }
                }
            }
            var out: [(Int, Result<JSONValue, Error>)] = []
            for await r in group { out.append(r) }
            return out
        }
        XCTAssertEqual(results.filter { if case .failure = $0.1 { true } else { false } }.map(\.0).sorted(), stride(from: 7, to: 64, by: 8).map { $0 })
        let seqs = results.compactMap { r -> Int64? in if case .success(let v) = r.1 { v["seq"]?.intValue } else { nil } }
        XCTAssertEqual(seqs.sorted(), Array(1...56), "one seq each, none lost to a refused neighbour")
        await opened
        let commits = h.runtime.store.commits - before
        XCTAssertEqual(commits, 1, "the 64 sends that waited together shared one commit")
        // Each is durable: the rows and frames are in the store.
        XCTAssertEqual(try outbox(h, for: friend.publicKey).filter { $0.type == .chatMessage }.count, 56)
    }
}

import Foundation
import Sodium
import SwiftProtobuf
import TandemNet
import TandemProtocol
import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// The message service's receiver rules, driven frame by frame through a node with no sockets
/// (`NodeHarness`: frames arrive as relay mail, through the real router and store): who may write,
/// gaps and in-order release, and the forwarding rule of a challenge's thread.
final class MessageHarnessTests: XCTestCase {
    let me = SigningKeyPair.generate()
    let friend = SigningKeyPair.generate()
    let member = SigningKeyPair.generate()
    let stranger = SigningKeyPair.generate()

    var nowMs: UInt64 { wallClockMilliseconds() }

    func chat(_ from: SigningKeyPair, to: [UInt8]? = nil, seq: UInt64, text: String, thread: [UInt8]? = nil) -> Envelope {
        let body = ChatMessageBody(challengeID: thread, seq: seq, lamport: seq, text: text, replyTo: nil, sentAtMs: nowMs)
        return Envelope.sign(type: .chatMessage, author: from, recipient: to ?? me.publicKey, createdAt: nowMs, payload: body.payload)
    }

    func forward(by forwarder: SigningKeyPair, thread: [UInt8], inner: Envelope) throws -> Envelope {
        var m = Tandem_V1_ChatForward()
        m.challengeID = Data(thread)
        m.envelope = Data(inner.bytes)
        return Envelope.sign(type: .chatForward, author: forwarder, recipient: me.publicKey, createdAt: nowMs,
                             payload: try m.serializedBytes())
    }

    func texts(_ h: NodeHarness, thread: [UInt8]? = nil, peer: [UInt8]? = nil) throws -> [String] {
        let store = h.runtime.store
        return try NodeCore.blocking {
            let c = try thread.map { try store.conversation(challengeId: $0) } ?? peer.map { try store.conversation(peer: $0) }
            guard let id = c??.id else { return [] }
            return try store.messages(conversationId: id, limit: 1000).filter { $0.state != .held }.map(\.text)
        }
    }

    func eventFields(_ h: NodeHarness, _ type: String) async throws -> [[String: JSONValue]] {
        guard case .unary(let list) = h.runtime.router.entry("events.list") else { throw TandemError("no events.list") }
        let page = try await list(.object(["limit": 1000, "types": [.string(type)]]))
        return (page["events"]?.arrayValue ?? []).compactMap(NodeEvent.init(json:)).map(\.fields)
    }

    func testNothingAStrangerSendsIsStored() throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        h.deliver(chat(stranger, seq: 1, text: "buy now"))
        let reaction = ChatReactionMessage(challengeID: nil, messageID: [UInt8](repeating: 1, count: 16), emoji: "👍")
        h.deliver(Envelope.sign(type: .chatReaction, author: stranger, recipient: me.publicKey, createdAt: nowMs, payload: reaction.payload))
        XCTAssertEqual(try texts(h, peer: stranger.publicKey), [])
        let store = h.runtime.store
        let strangerKey = stranger.publicKey
        XCTAssertNil(try NodeCore.blocking { try store.conversation(peer: strangerKey) }, "not even a conversation row")
        XCTAssertEqual(try h.counts().handled, 0, "no handled mark for a stranger's frames")
        // The same from a friend is stored.
        h.deliver(chat(friend, seq: 1, text: "hello"))
        XCTAssertEqual(try texts(h, peer: friend.publicKey), ["hello"])
    }

    func testAGapIsAskedForAndHeldMessagesAreReleasedInOrder() async throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        let frames = (1...3).map { chat(friend, seq: UInt64($0), text: "m\($0)") }
        h.deliver(frames[2])
        XCTAssertEqual(try texts(h, peer: friend.publicKey), [], "seq 3 is held above the gap")
        let gaps = try await eventFields(h, "message.gap")
        XCTAssertEqual(gaps.count, 1)
        XCTAssertEqual(gaps.first?["ranges"], .array([.array([.int(1), .int(2)])]))
        XCTAssertEqual(gaps.first?["asked"]?.stringValue, NodeID(publicKey: friend.publicKey).canonical)
        // The periodic pass asks again only once 30 s passed: not yet.
        let messages = h.runtime.messages
        NodeCore.blocking { messages.askAboutGaps() }
        let again = try await eventFields(h, "message.gap")
        XCTAssertEqual(again.count, 1)
        h.deliver(frames[2])  // a duplicate while held: nothing changes
        h.deliver(frames[0])
        XCTAssertEqual(try texts(h, peer: friend.publicKey), ["m1"])
        h.deliver(frames[1])
        XCTAssertEqual(try texts(h, peer: friend.publicKey), ["m1", "m2", "m3"])
        let received = try await eventFields(h, "message.received").map { $0["text"]?.stringValue ?? "" }
        XCTAssertEqual(received, ["m1", "m2", "m3"], "each announced once, in order")
        // A second copy of seq 2 under another id is a duplicate.
        h.deliver(chat(friend, seq: 2, text: "m2 again"))
        XCTAssertEqual(try texts(h, peer: friend.publicKey), ["m1", "m2", "m3"])
        // Far beyond the window: refused, not stored.
        h.deliver(chat(friend, seq: 3 + ChatLimits.heldAboveGap + 1, text: "far"))
        let held = try NodeCore.blocking { [store = h.runtime.store, friend] in
            try store.messages(conversationId: try store.conversation(peer: friend.publicKey)!.id!, limit: 1000).count
        }
        XCTAssertEqual(held, 3)
    }

    /// Invites `me` (and `member`) to a challenge from `friend`: the thread's inviter.
    func invite(_ h: NodeHarness) throws -> [UInt8] {
        let id = Sodium.randomBytes(16)
        var m = Tandem_V1_ChallengeInvite()
        m.challengeID = Data(id)
        m.participants = [Data(friend.publicKey), Data(me.publicKey), Data(member.publicKey)]
        m.durationMs = 60_000
        m.startAtUs = nowMs * 1000 + 300_000_000  // a group starts at a given time
        m.expiresAtUs = nowMs * 1000 + 600_000_000
        m.message = "thread"
        h.deliver(Envelope.sign(type: .challengeInvite, author: friend, recipient: me.publicKey, createdAt: nowMs,
                                payload: try m.serializedBytes()))
        let store = h.runtime.store
        XCTAssertNotNil(try NodeCore.blocking { try store.challenge(id) }, "the invite was stored")
        return id
    }

    func testAThreadTakesForwardedFramesOnlyFromItsInviterAboutItsParticipants() throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        let thread = try invite(h)
        // The member (not our friend) writes to the inviter, who forwards the frame byte for byte.
        let inner = chat(member, to: friend.publicKey, seq: 1, text: "hi all", thread: thread)
        h.deliver(try forward(by: friend, thread: thread, inner: inner))
        XCTAssertEqual(try texts(h, thread: thread), ["hi all"])
        // Forged: a stranger's frame (validly signed, not a participant).
        h.deliver(try forward(by: friend, thread: thread, inner: chat(stranger, to: friend.publicKey, seq: 1, text: "forged", thread: thread)))
        // Forged: the member's frame with a byte of its text changed after signing.
        var tampered = chat(member, to: friend.publicKey, seq: 2, text: "pay alice", thread: thread).bytes
        if let i = tampered.indices.dropLast(64).last(where: { tampered[$0] == UInt8(ascii: "a") }) { tampered[i] = UInt8(ascii: "b") }
        h.deliver(try forward(by: friend, thread: thread, inner: try Envelope.parse(tampered)))
        // Forged: forwarded by someone who is not the inviter (the member forwards its own frame to us).
        h.deliver(try forward(by: member, thread: thread, inner: chat(member, to: member.publicKey, seq: 2, text: "not via the inviter", thread: thread)))
        // A stranger writing straight into the thread.
        h.deliver(chat(stranger, seq: 1, text: "direct", thread: thread))
        XCTAssertEqual(try texts(h, thread: thread), ["hi all"])
        // The inviter's own thread message arrives directly.
        h.deliver(chat(friend, seq: 1, text: "welcome", thread: thread))
        XCTAssertEqual(try texts(h, thread: thread).sorted(), ["hi all", "welcome"])
    }
}

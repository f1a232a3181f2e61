import Foundation
import NIOEmbedded
import Sodium
@testable import TandemNet
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// ACKS (0x0108, Protocol/README.md 12.5): a friend's node acknowledges an inbound batch with one
/// signed frame once the sender announced it takes them, and what a peer puts in an ACKS can only
/// ever acknowledge that peer's own frames, each once.
final class MessageAcksTests: XCTestCase, MessageNodeCalls {
    /// A burst between two nodes goes out once, in order, and its ACKs come back as ACKS frames
    /// (fewer signed acknowledgements than messages), after each node heard the other's PRESENCE.
    func testABurstIsAcknowledgedInBatchesOnceAndInOrder() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        // b takes ACKS from a once a's PRESENCE (takes_acks) arrived on their link.
        let takesAcks = try await announced(to: b.node, by: a.node, \.takesAcks)
        XCTAssertTrue(takesAcks, "a announced ACKS in its PRESENCE")
        let outboxB = await NodeCore.run { b.node.messages.outbox }
        let before = outboxB.acknowledgements
        let n = 200
        let ids = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for i in 0..<n {
                group.addTask { [a, b] in (i, try await Self.send(a.node, to: b.node, "burst \(i)")) }
            }
            var out = [String](repeating: "", count: n)
            for try await (i, id) in group { out[i] = id }
            return out
        }
        try await outboxDrains(a.node)
        let delivered = try await events(a.node, "message.delivered").compactMap { $0.fields["id"]?.stringValue }
        XCTAssertEqual(Set(delivered).intersection(ids).count, n, "every message delivered")
        XCTAssertEqual(delivered.filter { ids.contains($0) }.count, n, "each once")
        // The receiver holds each once, in the sender's order.
        let sent = try await list(a.node, with: b.node).compactMap { $0["id"]?.stringValue }
        let held = try await list(b.node, with: a.node).compactMap { $0["id"]?.stringValue }
        XCTAssertEqual(held, sent)
        XCTAssertEqual(Set(held).count, held.count)
        let after = outboxB.acknowledgements
        let acked = (after.single - before.single) + (after.batched - before.batched)
        XCTAssertGreaterThanOrEqual(acked, n, "every frame acknowledged")
        XCTAssertGreaterThan(after.acksFrames, before.acksFrames, "some came several to an ACKS")
        XCTAssertLessThan((after.single - before.single) + (after.acksFrames - before.acksFrames), acked,
                          "fewer signed acknowledgements than frames acknowledged")
    }

    /// Each node announces in its PRESENCE that it takes MESSAGEs unsigned on the link (README 5.4),
    /// and a direct message then crosses unsigned: the receiver accepts it from its author's link.
    func testADirectMessageCrossesUnsignedOnceBothAnnouncedIt() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let takesUnsigned = try await announced(to: a.node, by: b.node, \.takesLinkAuthenticated)
        XCTAssertTrue(takesUnsigned, "b announced it in its PRESENCE")
        let received = b.node.metrics.snapshot.linkMessagesAccepted
        let id = try await Self.send(a.node, to: b.node, "unsigned, on its author's link")
        try await outboxDrains(a.node)
        let delivered = try await events(a.node, "message.delivered").compactMap { $0.fields["id"]?.stringValue }
        XCTAssertEqual(delivered.filter { $0 == id }.count, 1)
        let texts = try await list(b.node, with: a.node).compactMap { $0["text"]?.stringValue }
        XCTAssertEqual(texts, ["unsigned, on its author's link"])
        XCTAssertEqual(b.node.metrics.snapshot.linkMessagesAccepted - received, 1, "it came with the zero signature")

        // A second link to the friend (both ends dialled; the peer sends its PRESENCE on its first
        // link only, and the outbox writes on the newest): it takes what the PRESENCE announced.
        let second = PeerLink(channel: EmbeddedChannel(), identity: a.node.identity)
        second.setRemote(b.node.identity.publicKey)
        XCTAssertFalse(second.takesLinkAuthenticated)
        a.node.peers.linkEstablished(second)
        XCTAssertTrue(second.takesLinkAuthenticated, "announced for every link to the peer, later ones too")
        XCTAssertTrue(second.takesAcks)
        a.node.peers.linkClosed(second, error: nil)
    }

    /// Alice with two friends, bob and carol, both stopped; bob's key, for a link in his name.
    private func aliceWithBobAndCarolStopped() async throws -> (a: RunningNode, b: RunningNode, c: RunningNode, bobKey: SigningKeyPair) {
        let bobKey = SigningKeyPair.generate()
        let a = try await RunningNode.start(), b = try await RunningNode.start(identity: bobKey)
        let c = try await RunningNode.start()
        do {
            try await befriend(a, b)
            try await befriend(a, c)
        } catch {
            a.task.cancel(); b.task.cancel(); c.task.cancel()
            throw error
        }
        await b.stop()
        await c.stop()
        return (a, b, c, bobKey)
    }

    /// An unsigned MESSAGE is the author's only on the author's own link: one naming another author
    /// (carol, a friend too) on bob's link is refused (BAD_SIGNATURE) and stores nothing; bob's own is
    /// stored.
    func testAnUnsignedMessageInAnotherAuthorsNameIsRefused() async throws {
        let (a, b, c, bobKey) = try await aliceWithBobAndCarolStopped()
        defer { a.task.cancel(); b.task.cancel(); c.task.cancel() }
        let ghost = try NodeRuntime(identity: bobKey, configuration: TestSupport.loopbackConfiguration(), logger: TestSupport.quietLogger)
        let (link, _) = try await ghost.connect(host: "127.0.0.1", port: a.port, to: a.node.id)
        defer { link.close() }
        let now = wallClockMilliseconds()
        func message(by author: [UInt8], _ text: String) -> Envelope {
            let body = ChatMessageBody(challengeID: nil, seq: 1, lamport: 1, text: text, replyTo: nil, sentAtMs: now)
            return Envelope.unsigned(type: .chatMessage, author: author, recipient: a.node.identity.publicKey, createdAt: now,
                                     payload: body.payload)
        }
        let before = a.node.metrics.snapshot
        link.send(message(by: c.node.identity.publicKey, "carol's name on bob's link"))
        link.send(message(by: bobKey.publicKey, "bob's own"))
        _ = try await event(a.node, "message.received", where: { $0.fields["text"]?.stringValue == "bob's own" })
        let after = a.node.metrics.snapshot
        XCTAssertEqual(after.framesRejected["BAD_SIGNATURE", default: 0] - before.framesRejected["BAD_SIGNATURE", default: 0], 1)
        XCTAssertEqual(after.linkMessagesAccepted - before.linkMessagesAccepted, 1)
        let fromCarol = try await list(a.node, with: c.node)
        XCTAssertTrue(fromCarol.isEmpty, "nothing stored in carol's name")
    }

    /// Whether `node`'s link to `peer` takes what `flag` names, once the peer's PRESENCE came
    /// (polled for up to 5 s).
    private func announced(to node: NodeRuntime, by peer: NodeRuntime, _ flag: KeyPath<PeerLink, Bool> & Sendable) async throws -> Bool {
        for _ in 0..<200 {
            if node.peers.link(to: peer.identity.publicKey)?[keyPath: flag] == true { return true }
            try await Task.sleep(for: .milliseconds(25))
        }
        return false
    }

    /// `message.send` from a child task (the instance's helper is not `Sendable`).
    static func send(_ from: NodeRuntime, to: NodeRuntime, _ text: String) async throws -> String {
        guard case .unary(let handler) = from.router.entry("message.send") else { throw TandemError("no message.send") }
        let sent = try await handler(.object(["to": .string(to.id.canonical), "text": .string(text)]))
        return try XCTUnwrap(sent["id"]?.stringValue)
    }

    /// Forged, foreign, unknown, duplicated, oversized and empty ACKS acknowledge nothing; a good one
    /// acknowledges its ids once, and its copy nothing more.
    func testAHostileAcksAcknowledgesNothingButThePeersOwnFrames() async throws {
        let (a, b, c, bobKey) = try await aliceWithBobAndCarolStopped()
        defer { a.task.cancel(); b.task.cancel(); c.task.cancel() }
        // Frames waiting at a for bob and for carol (both offline).
        let toBob = [try await send(a.node, to: b.node, "one"), try await send(a.node, to: b.node, "two")]
        let toCarol = try await send(a.node, to: c.node, "carol's")
        let carolKey = c.node.identity.publicKey
        func waiting(_ key: [UInt8]) async -> Set<String> {
            await NodeCore.run { Set(((try? a.node.store.outbox(for: key)) ?? []).map { hexString(Array($0.messageId)) }) }
        }
        let bobWaits = await waiting(bobKey.publicKey)
        XCTAssertTrue(Set(toBob).isSubset(of: bobWaits))
        let carolWaits = await waiting(carolKey)
        XCTAssertTrue(carolWaits.contains(toCarol))

        // Bob's key on a link whose node handles nothing: it sends ACKS by hand.
        let ghost = try NodeRuntime(identity: bobKey, configuration: TestSupport.loopbackConfiguration(), logger: TestSupport.quietLogger)
        let (link, _) = try await ghost.connect(host: "127.0.0.1", port: a.port, to: a.node.id)
        defer { link.close() }
        func acks(_ ids: [[UInt8]]) -> [UInt8] {
            var m = Tandem_V1_Acks()
            m.messageIds = ids.map { Data($0) }
            return (try? m.serializedBytes()) ?? []
        }
        let bobIDs = try toBob.map { try XCTUnwrap(parseHex($0)) }
        let carolID = try XCTUnwrap(parseHex(toCarol))
        let now = wallClockMilliseconds()
        // A forged signature (bob's key, one bit of the signature flipped).
        var forged = Envelope.sign(type: .acks, author: bobKey, recipient: a.node.identity.publicKey, createdAt: now,
                                   payload: acks(bobIDs)).bytes
        forged[forged.count - 1] ^= 1
        link.send(try Envelope.parse(forged))
        // Ids of frames never sent; carol's frame (someone else's); an id twice; 257 ids; none.
        link.send(type: .acks, payload: acks([Sodium.randomBytes(16), Sodium.randomBytes(16)]))
        link.send(type: .acks, payload: acks([carolID]))
        link.send(type: .acks, payload: acks([bobIDs[0], bobIDs[0]]))
        link.send(type: .acks, payload: acks([bobIDs[0]] + (0..<256).map { _ in Sodium.randomBytes(16) }))
        link.send(type: .acks, payload: acks([]))
        link.send(type: .acks, payload: acks([Array(bobIDs[0].prefix(15))]))
        // Then a good one for the second frame only, and its copy: handled in order after the others.
        link.send(type: .acks, payload: acks([bobIDs[1], Sodium.randomBytes(16)]))
        link.send(type: .acks, payload: acks([bobIDs[1]]))
        _ = try await event(a.node, "message.delivered", where: { $0.fields["id"]?.stringValue == toBob[1] })
        // The last ACKS came after the copy: once it is handled, everything before it was.
        link.send(type: .ack, payload: { var m = Tandem_V1_Ack(); m.messageID = Data(bobIDs[0]); return (try? m.serializedBytes()) ?? [] }())
        _ = try await event(a.node, "message.delivered", where: { $0.fields["id"]?.stringValue == toBob[0] })

        let delivered = try await events(a.node, "message.delivered").compactMap { $0.fields["id"]?.stringValue }
        XCTAssertEqual(delivered.filter { $0 == toBob[1] }.count, 1, "the copy of an ACKS acknowledges nothing more")
        XCTAssertEqual(delivered.filter { $0 == toBob[0] }.count, 1, "acknowledged by its single ACK only")
        XCTAssertFalse(delivered.contains(toCarol), "bob cannot acknowledge carol's frame")
        let carolStill = await waiting(carolKey), bobStill = await waiting(bobKey.publicKey)
        XCTAssertTrue(carolStill.contains(toCarol), "carol's frame still waits for carol")
        XCTAssertTrue(bobStill.isDisjoint(with: toBob), "bob's frames left the outbox")
        // The single ACK still counts after ACKS: old peers keep working.
        let states = try await list(a.node, with: b.node).compactMap { $0["state"]?.stringValue }
        XCTAssertEqual(states, ["delivered", "delivered"])
    }
}

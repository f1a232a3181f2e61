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

/// Files in a challenge's thread (Protocol/messages.md 7.7) through a node with no sockets
/// (`NodeHarness`: frames arrive through the real router and store): a participant takes a forwarded
/// offer from the inviter and fetches from it; forged and misrouted offers leave nothing; the
/// inviter forwards a participant's offer byte for byte and fetches the file whatever its auto-accept
/// limit; a chunk the inviter altered is refused against the author's `chunk_root`.
final class ThreadFileHarnessTests: XCTestCase {
    let me = SigningKeyPair.generate()
    let friend = SigningKeyPair.generate()  // the inviter
    let member = SigningKeyPair.generate()  // a participant who is not our friend
    let stranger = SigningKeyPair.generate()

    var nowMs: UInt64 { wallClockMilliseconds() }

    func call(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue] = [:]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    /// Invites `me` and `member` to a challenge from `friend`.
    func invite(_ h: NodeHarness) throws -> [UInt8] {
        let id = Sodium.randomBytes(16)
        var m = Tandem_V1_ChallengeInvite()
        m.challengeID = Data(id)
        m.participants = [Data(friend.publicKey), Data(me.publicKey), Data(member.publicKey)]
        m.durationMs = 60_000
        m.startAtUs = nowMs * 1000 + 300_000_000
        m.expiresAtUs = nowMs * 1000 + 600_000_000
        h.deliver(Envelope.sign(type: .challengeInvite, author: friend, recipient: me.publicKey, createdAt: nowMs, payload: try m.serializedBytes()))
        return id
    }

    func fileOffer(_ data: [UInt8], thread: [UInt8]?, messageID: [UInt8]? = nil) -> (FileOfferMessage, [[UInt8]]) {
        let chunks = stride(from: 0, to: data.count, by: ChatLimits.chunkBytes).map { Array(data[$0..<min($0 + ChatLimits.chunkBytes, data.count)]) }
        let leaves = chunks.map { ChunkTree.leafHash($0) }
        return (FileOfferMessage(fileID: FileID.random(), name: "desk.jpg", size: UInt64(data.count), fileHash: Hash.blake2b(data),
                                 chunkRoot: ChunkTree.root(leaves), messageID: messageID, challengeID: thread), chunks)
    }

    func forward(by forwarder: SigningKeyPair, thread: [UInt8], inner: [UInt8]) throws -> Envelope {
        var m = Tandem_V1_ChatForward()
        m.challengeID = Data(thread)
        m.envelope = Data(inner)
        return Envelope.sign(type: .chatForward, author: forwarder, recipient: me.publicKey, createdAt: nowMs, payload: try m.serializedBytes())
    }

    func transfer(_ h: NodeHarness, _ o: FileOfferMessage) throws -> StoredFileTransfer? {
        let store = h.runtime.store
        return try NodeCore.blocking { try store.fileTransfer(o.fileID.bytes) }
    }

    func testAParticipantTakesAForwardedOfferFetchesFromTheInviterAndDropsForgeries() async throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        let thread = try invite(h)
        // The member's thread message and the file attached to it, both forwarded by the inviter.
        let caption = ChatMessageBody(challengeID: thread, seq: 1, lamport: 1, text: "desk.jpg", replyTo: nil, sentAtMs: nowMs)
        let captionFrame = Envelope.sign(type: .chatMessage, author: member, recipient: friend.publicKey, createdAt: nowMs, payload: caption.payload)
        h.deliver(try forward(by: friend, thread: thread, inner: captionFrame.bytes))
        let (o, _) = fileOffer([UInt8](repeating: 7, count: 1000), thread: thread, messageID: captionFrame.messageID.bytes)
        let inner = Envelope.sign(type: .fileOffer, author: member, recipient: friend.publicKey, createdAt: nowMs, payload: o.payload)
        h.deliver(try forward(by: friend, thread: thread, inner: inner.bytes))
        let row = try XCTUnwrap(try transfer(h, o), "the forwarded offer is stored")
        XCTAssertEqual(row.peer, Data(friend.publicKey), "fetched from the inviter, the node the offer came from")
        XCTAssertEqual(row.direction, .incoming)
        let store = h.runtime.store
        let threadConversation = try NodeCore.blocking { try store.conversation(challengeId: thread) }
        XCTAssertEqual(row.conversationId, threadConversation?.id, "in the thread's conversation")
        // `message list --challenge` shows it like a direct conversation does.
        let list = try await call(h.runtime, "message.list", ["challenge": .string(hexString(thread))])
        let shown = try XCTUnwrap(list["messages"]?.arrayValue?.first)
        XCTAssertEqual(shown["author"]?.stringValue, NodeID(publicKey: member.publicKey).canonical)
        XCTAssertEqual(shown["file"]?["name"]?.stringValue, "desk.jpg")
        XCTAssertEqual(shown["file"]?["file_id"]?.stringValue, o.fileID.description)
        // A second copy (the inviter forwarding again) changes nothing.
        h.deliver(try forward(by: friend, thread: thread, inner: inner.bytes))
        XCTAssertEqual(try transfer(h, o)?.createdAtMs, row.createdAtMs)

        // Forged: the member named as author, a stranger's key signed it.
        let (forgedOffer, _) = fileOffer([1, 2, 3], thread: thread)
        var forged = Envelope.sign(type: .fileOffer, author: stranger, recipient: friend.publicKey, createdAt: nowMs, payload: forgedOffer.payload).bytes
        forged.replaceSubrange(19..<51, with: member.publicKey)
        h.deliver(try forward(by: friend, thread: thread, inner: forged))
        XCTAssertNil(try transfer(h, forgedOffer), "a forged author in a forwarded FILE_OFFER is dropped")
        // A stranger's validly signed offer, forwarded: not a participant.
        let (strangers, _) = fileOffer([4, 5, 6], thread: thread)
        h.deliver(try forward(by: friend, thread: thread, inner: Envelope.sign(type: .fileOffer, author: stranger, recipient: friend.publicKey,
                                                                               createdAt: nowMs, payload: strangers.payload).bytes))
        XCTAssertNil(try transfer(h, strangers))
        // The member writing to us directly, or forwarding its own offer: it is not our friend.
        let (direct, _) = fileOffer([7, 8, 9], thread: thread)
        h.deliver(Envelope.sign(type: .fileOffer, author: member, recipient: me.publicKey, createdAt: nowMs, payload: direct.payload))
        h.deliver(try forward(by: member, thread: thread, inner: Envelope.sign(type: .fileOffer, author: member, recipient: member.publicKey,
                                                                               createdAt: nowMs, payload: direct.payload).bytes))
        XCTAssertNil(try transfer(h, direct))
        // A friend who is not the inviter cannot offer into the thread directly either.
        let (notInviter, _) = fileOffer([1], thread: Sodium.randomBytes(16))
        h.deliver(Envelope.sign(type: .fileOffer, author: friend, recipient: me.publicKey, createdAt: nowMs, payload: notInviter.payload))
        XCTAssertNil(try transfer(h, notInviter), "a thread we do not hold")
        // The inviter's own thread file comes directly, and is fetched from it.
        let (own, _) = fileOffer([9, 9], thread: thread)
        h.deliver(Envelope.sign(type: .fileOffer, author: friend, recipient: me.publicKey, createdAt: nowMs, payload: own.payload))
        XCTAssertEqual(try transfer(h, own)?.peer, Data(friend.publicKey))
    }

    func testTheInviterForwardsAnOfferByteForByteAndFetchesItWhateverItsLimit() async throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        try h.befriend(member.publicKey, name: "member")
        let invited = try await call(h.runtime, "challenge.invite", ["ids": .array([.string(NodeID(publicKey: friend.publicKey).canonical),
                                                                                  .string(NodeID(publicKey: member.publicKey).canonical)]),
                                                                     "duration_ms": 60_000])
        let thread = try XCTUnwrap(invited["id"]?.stringValue.flatMap(parseHex))
        // Nothing is fetched without asking here: the inviter fetches a thread's file anyway.
        _ = try await call(h.runtime, "message.file_settings", ["auto_accept_bytes": 0])
        let (o, chunks) = fileOffer((0..<(ChatLimits.chunkBytes + 10)).map { UInt8(truncatingIfNeeded: $0) }, thread: thread)
        let offer = Envelope.sign(type: .fileOffer, author: friend, recipient: me.publicKey, createdAt: nowMs, payload: o.payload)
        h.deliver(offer)
        let row = try XCTUnwrap(try transfer(h, o))
        XCTAssertEqual(row.peer, Data(friend.publicKey), "the inviter fetches from the author")
        XCTAssertEqual(row.state, .receiving, "accepted at once, above the auto-accept limit")
        // The member gets the author's envelope inside a FORWARD, byte for byte; the author gets none.
        let store = h.runtime.store
        let (memberKey, friendKey) = (member.publicKey, friend.publicKey)
        let (toMember, toFriend) = try NodeCore.blocking { (try store.outbox(for: memberKey), try store.outbox(for: friendKey)) }
        let forwards = toMember.filter { $0.type == MessageType.chatForward.rawValue }
        XCTAssertEqual(forwards.count, 1)
        let outer = try Envelope.parse(Array(try XCTUnwrap(forwards.first).frame))
        let f = try ChatForwardMessage(payload: outer.payload, forwarder: me.publicKey)
        XCTAssertEqual(f.inner.bytes, offer.bytes)
        XCTAssertEqual(f.content, .fileOffer(o))
        XCTAssertFalse(toFriend.contains { $0.type == MessageType.chatForward.rawValue })

        // A chunk the author's path does not prove is refused (the same check stops an inviter that alters one).
        let files = h.runtime.messageFiles
        let leaves = chunks.map { ChunkTree.leafHash($0) }
        var altered = chunks[1]
        altered[0] ^= 1
        let (authorKey, fileID) = (friend.publicKey, o.fileID)
        try NodeCore.blocking {
            try store.step { step in
                files.receive(FileChunkMessage(fileID: fileID, index: 1, data: altered, proof: ChunkTree.proof(index: 1, leaves)), from: authorKey, step)
            }
        }
        XCTAssertEqual(NodeCore.blocking { files.heldChunks()[fileID] }, [])
        // A participant asking before the inviter holds the file is not served (no link here): nothing breaks.
        XCTAssertNil(NodeCore.blocking { files.relays[fileID] })
    }
}

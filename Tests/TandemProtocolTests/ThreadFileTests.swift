import Foundation
import Sodium
@testable import TandemProtocol
import XCTest

/// Files in a challenge's thread (Protocol/messages.md 7.7): FILE_OFFER's `challenge_id`, FORWARD around
/// a FILE_OFFER, which node the chunks come from and who may fetch, and that a forwarder cannot alter
/// what it relays.
final class ThreadFileTests: XCTestCase {
    let thread = [UInt8](repeating: 7, count: 16)
    let inviter = fixedPair(21), member = fixedPair(22), other = fixedPair(23), stranger = fixedPair(24)
    var participants: [[UInt8]] { [inviter.publicKey, member.publicKey, other.publicKey] }

    func offer(_ data: [UInt8], thread: [UInt8]?) -> (FileOfferMessage, [[UInt8]]) {
        let chunks = stride(from: 0, to: data.count, by: ChatLimits.chunkBytes).map { Array(data[$0..<min($0 + ChatLimits.chunkBytes, data.count)]) }
        let leaves = chunks.map { ChunkTree.leafHash($0) }
        let o = FileOfferMessage(fileID: FileID(bytes: [UInt8](repeating: 3, count: 16))!, name: "notes.pdf", size: UInt64(data.count),
                                 fileHash: Hash.blake2b(data), chunkRoot: ChunkTree.root(leaves), messageID: [UInt8](repeating: 4, count: 16),
                                 challengeID: thread)
        return (o, chunks)
    }

    func testTheOfferCarriesItsThreadAndRefusesABadChallengeID() throws {
        let (o, _) = offer([1, 2, 3], thread: thread)
        let back = try FileOfferMessage(payload: o.payload)
        XCTAssertEqual(back, o)
        XCTAssertEqual(back.challengeID, thread)
        let (direct, _) = offer([1, 2, 3], thread: nil)
        XCTAssertNil(try FileOfferMessage(payload: direct.payload).challengeID)
        // An offer from before field 8 existed reads as direct; a field of the wrong length is refused.
        var m = try Tandem_V1_FileOffer(serializedBytes: o.payload)
        for n in [1, 15, 17, 32] {
            m.challengeID = Data(repeating: 1, count: n)
            XCTAssertThrowsError(try FileOfferMessage(payload: try m.serializedBytes()), "challenge id of \(n) bytes")
        }
    }

    func testAForwardedOfferCarriesTheAuthorsFrameAndRefusesForgeries() throws {
        let (o, _) = offer([1, 2, 3], thread: thread)
        let inner = Envelope.sign(type: .fileOffer, author: member, recipient: inviter.publicKey, createdAt: 100, payload: o.payload)
        let fwd = ChatForwardMessage(challengeID: thread, inner: inner, content: .fileOffer(o))
        XCTAssertEqual(ChatForwardMessage.innerType(payload: fwd.payload), .fileOffer)
        let back = try ChatForwardMessage(payload: fwd.payload, forwarder: inviter.publicKey)
        XCTAssertEqual(back.inner.bytes, inner.bytes, "byte for byte")
        XCTAssertEqual(back.content, .fileOffer(o))
        XCTAssertEqual(back.inner.author, member.publicKey)

        func wrapped(_ envelope: [UInt8], thread: [UInt8]? = nil) throws -> [UInt8] {
            var m = Tandem_V1_ChatForward()
            m.challengeID = Data(thread ?? self.thread)
            m.envelope = Data(envelope)
            return try m.serializedBytes()
        }
        // A forged author: the frame names the member as author but another key signed it.
        var forged = inner.bytes
        let authorAt = 1 + 2 + 16
        forged.replaceSubrange(authorAt..<authorAt + 32, with: other.publicKey)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try wrapped(forged), forwarder: inviter.publicKey))
        // An offer re-signed by the forwarder's hand under the member's name is the same forgery.
        let resigned = Envelope.sign(type: .fileOffer, author: stranger, recipient: inviter.publicKey, createdAt: 100, payload: o.payload)
        var renamed = resigned.bytes
        renamed.replaceSubrange(authorAt..<authorAt + 32, with: member.publicKey)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try wrapped(renamed), forwarder: inviter.publicKey))
        // The offer's name or hash changed by the forwarder after signing.
        var altered = inner.bytes
        altered[Envelope.headerLength + 20] ^= 1
        XCTAssertThrowsError(try ChatForwardMessage(payload: try wrapped(altered), forwarder: inviter.publicKey))
        // Another thread's offer, or a direct one, wrapped as this thread's.
        XCTAssertThrowsError(try ChatForwardMessage(payload: try wrapped(inner.bytes, thread: [UInt8](repeating: 9, count: 16)),
                                                    forwarder: inviter.publicKey))
        let (direct, _) = offer([1, 2, 3], thread: nil)
        let d = Envelope.sign(type: .fileOffer, author: member, recipient: inviter.publicKey, createdAt: 100, payload: direct.payload)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try wrapped(d.bytes), forwarder: inviter.publicKey))
        // Not addressed to this forwarder, or the forwarder's own offer.
        XCTAssertThrowsError(try ChatForwardMessage(payload: fwd.payload, forwarder: other.publicKey))
        let own = Envelope.sign(type: .fileOffer, author: inviter, recipient: inviter.publicKey, createdAt: 100, payload: o.payload)
        XCTAssertThrowsError(try ChatForwardMessage(payload: try wrapped(own.bytes), forwarder: inviter.publicKey))
        // The peek reads only the type; garbage has none.
        XCTAssertNil(ChatForwardMessage.innerType(payload: [0xff, 0x01]))
        XCTAssertNil(ChatForwardMessage.innerType(payload: [UInt8](repeating: 0, count: ChatLimits.maximumForwardPayloadBytes + 1)))
    }

    func testChunksComeFromTheNodeTheOfferCameFrom() {
        let me = other.publicKey
        // The member offers to the inviter; the inviter forwards to us: we fetch from the inviter.
        XCTAssertEqual(ThreadFileRoute.receive(me: me, inviter: inviter.publicKey, participants: participants, author: member.publicKey,
                                               sender: inviter.publicKey),
                       ThreadFileRoute(fetchFrom: inviter.publicKey, forwardTo: [], serves: false))
        // The inviter's own offer, directly: from the inviter.
        XCTAssertEqual(ThreadFileRoute.receive(me: me, inviter: inviter.publicKey, participants: participants, author: inviter.publicKey,
                                               sender: inviter.publicKey),
                       ThreadFileRoute(fetchFrom: inviter.publicKey, forwardTo: [], serves: false))
        // As the inviter, the member's offer: fetched from the member, forwarded to the rest, served to them.
        XCTAssertEqual(ThreadFileRoute.receive(me: inviter.publicKey, inviter: inviter.publicKey, participants: participants,
                                               author: member.publicKey, sender: member.publicKey),
                       ThreadFileRoute(fetchFrom: member.publicKey, forwardTo: [other.publicKey], serves: true))
        // A thread of two: nothing to forward or serve.
        XCTAssertEqual(ThreadFileRoute.receive(me: inviter.publicKey, inviter: inviter.publicKey, participants: [inviter.publicKey, member.publicKey],
                                               author: member.publicKey, sender: member.publicKey),
                       ThreadFileRoute(fetchFrom: member.publicKey, forwardTo: [], serves: false))
        // Where our own offer goes.
        XCTAssertEqual(ThreadFileRoute.offerRecipients(me: member.publicKey, inviter: inviter.publicKey, participants: participants),
                       [inviter.publicKey])
        XCTAssertEqual(ThreadFileRoute.offerRecipients(me: inviter.publicKey, inviter: inviter.publicKey, participants: participants),
                       [member.publicKey, other.publicKey])
    }

    func testOnlyParticipantsOfferAndOnlyTheWayTheThreadAllows() {
        let me = other.publicKey
        func route(author: SigningKeyPair, sender: SigningKeyPair, me: [UInt8]? = nil) -> ThreadFileRoute? {
            ThreadFileRoute.receive(me: me ?? self.other.publicKey, inviter: inviter.publicKey, participants: participants,
                                    author: author.publicKey, sender: sender.publicKey)
        }
        XCTAssertNil(route(author: stranger, sender: inviter), "a stranger's offer forwarded by the inviter")
        XCTAssertNil(route(author: stranger, sender: stranger), "a stranger's offer, directly")
        XCTAssertNil(route(author: member, sender: member), "a participant who is not the inviter writes to us directly")
        XCTAssertNil(route(author: member, sender: stranger), "forwarded by someone who is not the inviter")
        XCTAssertNil(route(author: member, sender: member, me: stranger.publicKey), "a thread we do not take part in")
        XCTAssertNil(route(author: other, sender: inviter), "our own offer coming back")
        XCTAssertNil(route(author: member, sender: other, me: inviter.publicKey), "forwarded to the inviter")
        XCTAssertNotNil(route(author: member, sender: inviter))
        _ = me

        // Who may fetch from whom.
        func may(_ requester: SigningKeyPair, from me: SigningKeyPair, author: SigningKeyPair) -> Bool {
            ThreadFileRoute.mayFetch(requester: requester.publicKey, me: me.publicKey, inviter: inviter.publicKey, participants: participants,
                                     author: author.publicKey)
        }
        XCTAssertTrue(may(inviter, from: member, author: member), "the inviter fetches the member's file from the member")
        XCTAssertFalse(may(other, from: member, author: member), "the others fetch it from the inviter, not from the member")
        XCTAssertTrue(may(other, from: inviter, author: member), "the inviter serves what it relays")
        XCTAssertTrue(may(member, from: inviter, author: inviter), "the inviter's own file, to each participant")
        XCTAssertFalse(may(stranger, from: inviter, author: member), "never to someone outside the thread")
        XCTAssertFalse(may(member, from: other, author: inviter), "a participant who is not the inviter relays nothing")
    }

    func testAnInviterThatAltersAChunkIsCaughtByTheAuthorsChunkRoot() throws {
        var rng = SplitMix64(seed: 77)
        let data = (0..<(2 * ChatLimits.chunkBytes + 99)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let (o, chunks) = offer(data, thread: thread)
        let leaves = chunks.map { ChunkTree.leafHash($0) }
        var r = FileReceiver(offer: o, nowMs: 0, window: 8)
        _ = r.accept(nowMs: 0)
        // The inviter changes a byte of chunk 1 and sends it with the true path.
        var altered = chunks[1]
        altered[1000] ^= 0x20
        XCTAssertEqual(r.receive(FileChunkMessage(fileID: o.fileID, index: 1, data: altered, proof: ChunkTree.proof(index: 1, leaves)), nowMs: 1),
                       .failure(ChunkRefusalError(.badHash)))
        XCTAssertFalse(r.has(1))
        // ... or builds a path to match its own tree: the root is the author's, signed in the offer.
        var forgedLeaves = leaves
        forgedLeaves[1] = ChunkTree.leafHash(altered)
        var fresh = FileReceiver(offer: o, nowMs: 0, window: 8)
        _ = fresh.accept(nowMs: 0)
        XCTAssertEqual(fresh.receive(FileChunkMessage(fileID: o.fileID, index: 1, data: altered, proof: ChunkTree.proof(index: 1, forgedLeaves)),
                                     nowMs: 1),
                       .failure(ChunkRefusalError(.badHash)))
        XCTAssertFalse(fresh.has(1))
        _ = r.tick(nowMs: 1)  // the refused chunk is asked for again
        // The true chunks pass, and the whole file matches the author's hash.
        for i in chunks.indices { _ = try r.receive(FileChunkMessage(fileID: o.fileID, index: i, data: chunks[i], proof: ChunkTree.proof(index: i, leaves)), nowMs: 2).get() }
        XCTAssertEqual(r.phase, .verifying)
        XCTAssertEqual(r.wholeFileHashed(Hash.blake2b(data)), [.finish])
    }
}

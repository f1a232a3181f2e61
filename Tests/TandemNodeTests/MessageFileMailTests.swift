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

/// A file offered to a friend who was offline (Protocol/messages.md 7.4): FILE_OFFER and FILE_CANCEL
/// come as relay mail and are handled like any friend's frame; a stranger's mailed offer, a
/// malformed one, and chunks or requests that claim to come as mail store nothing.
final class MessageFileMailTests: XCTestCase {
    let me = SigningKeyPair.generate()
    let friend = SigningKeyPair.generate()
    let stranger = SigningKeyPair.generate()

    var nowMs: UInt64 { wallClockMilliseconds() }
    lazy var relay = RelayAddress(id: NodeID(publicKey: me.publicKey), host: "127.0.0.1", port: 1)

    func frame(_ type: MessageType, from: SigningKeyPair, _ payload: [UInt8]) -> Envelope {
        Envelope.sign(type: type, author: from, recipient: me.publicKey, createdAt: nowMs, payload: payload)
    }

    func offer() -> FileOfferMessage {
        FileOfferMessage(fileID: .random(), name: "plan.bin", size: 1_000, fileHash: [UInt8](repeating: 7, count: 32),
                         chunkRoot: [UInt8](repeating: 9, count: 32))
    }

    func mail(_ h: NodeHarness, _ envelopes: [Envelope]) {
        let router = h.runtime.frameRouter
        let batch: [InboundEvent] = envelopes.map { .mail($0, relay: relay, done: {}) }
        NodeCore.blocking { router.handle(batch) }
    }

    func transfer(_ h: NodeHarness, _ id: FileID) throws -> StoredFileTransfer? {
        let store = h.runtime.store
        return try NodeCore.blocking { try store.fileTransfer(id.bytes) }
    }

    func testAMailedOfferFromAFriendIsStoredAndAcceptedAndAStrangersIsNot() throws {
        XCTAssertTrue(MailboxSeal.isMailable(.fileOffer) && MailboxSeal.isMailable(.fileCancel))
        XCTAssertFalse(MailboxSeal.isMailable(.fileRequest) || MailboxSeal.isMailable(.fileChunk), "a file's bytes need a link")
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        let mine = offer(), theirs = offer()
        mail(h, [frame(.fileOffer, from: friend, mine.payload), frame(.fileOffer, from: stranger, theirs.payload)])
        // Under the auto-accept limit: accepted at once; the requests wait for a link.
        XCTAssertEqual(try transfer(h, mine.fileID)?.state, .receiving)
        XCTAssertNil(try transfer(h, theirs.fileID), "nothing a stranger mails is stored")
        // The same offer again (a relay offering the item once more): one transfer, unchanged.
        mail(h, [frame(.fileOffer, from: friend, mine.payload)])
        XCTAssertEqual(try transfer(h, mine.fileID)?.state, .receiving)
        // The sender's mailed FILE_CANCEL ends it.
        mail(h, [frame(.fileCancel, from: friend, FileCancelMessage(fileID: mine.fileID, reason: .byUser).payload)])
        XCTAssertEqual(try transfer(h, mine.fileID)?.state, .failed)
    }

    func testMalformedMailedOffersAndMailedChunksStoreNothing() throws {
        let h = try NodeHarness(identity: me)
        try h.befriend(friend.publicKey)
        let good = offer()
        let bytes = good.payload
        var m = try Tandem_V1_FileOffer(serializedBytes: bytes)
        m.size = (1 << 32) + 1  // one byte over 4 GiB
        let tooBig: [UInt8] = try m.serializedBytes()
        let chunk = FileChunkMessage(fileID: good.fileID, index: 0, data: [1, 2, 3], proof: [])
        let request = FileRequestMessage(fileID: good.fileID, ranges: [.init(first: 0, count: 1)])
        mail(h, [frame(.fileOffer, from: friend, Array(bytes.prefix(bytes.count / 2))), frame(.fileOffer, from: friend, tooBig),
                 frame(.fileChunk, from: friend, chunk.payload), frame(.fileRequest, from: friend, request.payload)])
        XCTAssertNil(try transfer(h, good.fileID), "a cut offer and one over 4 GiB fail their decoder")
        let store = h.runtime.store
        XCTAssertEqual(try NodeCore.blocking { try store.openFileTransfers() }.count, 0)
    }
}

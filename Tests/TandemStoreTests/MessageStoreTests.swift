import Foundation
import GRDB
import TandemProtocol
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// Migration v6-messages and the messaging intents (Protocol/messages.md 8).
final class MessageStoreTests: XCTestCase {
    let me = [UInt8](repeating: 1, count: 32)
    let bob = [UInt8](repeating: 2, count: 32)
    let carol = [UInt8](repeating: 3, count: 32)

    private func mid(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 16) }

    private func frame(_ id: [UInt8], to recipient: [UInt8], type: UInt16 = 0x0501) -> OutboxItem {
        OutboxItem(messageId: id, recipient: recipient, type: type, frame: id, nowMs: 1000)
    }

    private func outbound(_ c: ConversationRow, _ n: UInt8, seq: UInt64, text: String) -> StoredMessage {
        StoredMessage(id: mid(n), conversationId: c.id!, author: me, seq: seq, lamport: seq, sentLamport: seq, text: text,
                      replyTo: nil, sentAtMs: Int64(n), receivedAtMs: Int64(n), state: .queued)
    }

    private func inbound(_ c: ConversationRow, _ n: UInt8, from author: [UInt8], seq: UInt64, lamport: UInt64, text: String,
                         state: MessageState = .received, expiresAtMs: Int64? = nil) -> StoredMessage {
        StoredMessage(id: mid(n), conversationId: c.id!, author: author, seq: seq, lamport: lamport, sentLamport: lamport, text: text,
                      replyTo: nil, sentAtMs: Int64(n), receivedAtMs: Int64(n), state: state, expiresAtMs: expiresAtMs)
    }

    func testSendingStoresTheMessageAndItsFrameInOneStepAndDeliveryMarksIt() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        XCTAssertNotNil(c.id)
        XCTAssertEqual(try store.batch { try $0.directConversation(peer: bob, nowMs: 2) }.id, c.id)
        try store.batch { try $0.sendMessage(outbound(c, 1, seq: 1, text: "ready?"), frame: frame(mid(1), to: bob)) }
        XCTAssertEqual(try store.outbox(for: bob).map { Array($0.messageId) }, [mid(1)])
        XCTAssertEqual(try store.conversation(peer: bob)?.ownSeq, 1)
        // A seq that is not the next one is refused, and nothing of the step is kept.
        XCTAssertThrowsError(try store.batch { try $0.sendMessage(outbound(c, 2, seq: 3, text: "x"), frame: frame(mid(2), to: bob)) })
        XCTAssertEqual(try store.outboxCount(), 1)
        XCTAssertNil(try store.message(mid(2)))

        try store.batch { try $0.markMessagesSent([mid(1)]) }
        XCTAssertEqual(try store.message(mid(1))?.state, .sent)
        XCTAssertTrue(try store.batch { try $0.markMessageDelivered(mid(1)) })
        XCTAssertEqual(try store.message(mid(1))?.state, .delivered)
        XCTAssertFalse(try store.batch { try $0.markMessageDelivered(mid(1)) })
        XCTAssertEqual(try store.batch { try $0.markReadByPeer(conversationId: c.id!, ownAuthor: me, upToSeq: 1) }, [mid(1)])
        XCTAssertEqual(try store.message(mid(1))?.state, .read)
        XCTAssertEqual(try store.conversation(peer: bob)?.peerReadUpToSeq, 1)
    }

    func testInboundMessagesAreStoredOnceAndBoundedPerAuthor() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        let handled = HandledMark(messageId: mid(5), createdAtMs: 5, windowMs: 1_000_000, nowMs: 5, fromFriend: true)
        XCTAssertEqual(try store.batch { try $0.receiveMessage(inbound(c, 5, from: bob, seq: 1, lamport: 1, text: "hi"), handled: handled) }, .stored)
        XCTAssertTrue(try store.wasHandled(mid(5)))
        XCTAssertEqual(try store.batch { try $0.receiveMessage(inbound(c, 5, from: bob, seq: 1, lamport: 1, text: "hi")) }, .duplicate)
        // Same author and seq under another id (a re-signed copy): a duplicate as well.
        XCTAssertEqual(try store.batch { try $0.receiveMessage(inbound(c, 6, from: bob, seq: 1, lamport: 1, text: "hi")) }, .duplicate)
        XCTAssertEqual(try store.storedMessageBytes(author: bob), StoredMessage.cost(textBytes: 2))
        XCTAssertEqual(try store.batch {
            try $0.receiveMessage(inbound(c, 7, from: bob, seq: 2, lamport: 2, text: "more"), maximumBytesPerAuthor: 300)
        }, .overBound)
        XCTAssertNil(try store.message(mid(7)))
    }

    func testListingIsNewestLastInDisplayOrderWithBeforeAndLimit() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        try store.batch { step in
            try step.sendMessage(outbound(c, 1, seq: 1, text: "one"), frame: frame(mid(1), to: bob))
            _ = try step.receiveMessage(inbound(c, 2, from: bob, seq: 1, lamport: 2, text: "two"))
            _ = try step.receiveMessage(inbound(c, 3, from: bob, seq: 2, lamport: 3, text: "three"))
            // A message held above a gap, then released with its display lamport.
            _ = try step.receiveMessage(inbound(c, 4, from: bob, seq: 4, lamport: 5, text: "five", state: .held))
            try step.sendMessage(StoredMessage(id: mid(9), conversationId: c.id!, author: me, seq: 2, lamport: 4, sentLamport: 4,
                                               text: "four", replyTo: mid(3), sentAtMs: 9, receivedAtMs: 9, state: .queued),
                                 frame: frame(mid(9), to: bob))
        }
        XCTAssertEqual(try store.messages(conversationId: c.id!).map(\.text), ["one", "two", "three", "four", "five"])
        XCTAssertEqual(try store.messages(conversationId: c.id!, limit: 2).map(\.text), ["four", "five"])
        XCTAssertEqual(try store.messages(conversationId: c.id!, before: mid(9), limit: 2).map(\.text), ["two", "three"])
        XCTAssertEqual(try store.messages(conversationId: c.id!, before: mid(77)), [])
        let state = try store.inboundOrderState(conversationId: c.id!)
        XCTAssertEqual(state.count, 1)
        XCTAssertEqual(state[0].released, 2)
        XCTAssertEqual(state[0].held.map(\.seq), [4])
        // Released rows that are gone (expired) do not reopen their seqs: the highest released one counts.
        try store.batch { step in
            _ = try step.receiveMessage(inbound(c, 20, from: carol, seq: 1, lamport: 1, text: "c1"))
            _ = try step.receiveMessage(inbound(c, 21, from: carol, seq: 2, lamport: 2, text: "c2", expiresAtMs: 5))
            _ = try step.receiveMessage(inbound(c, 22, from: carol, seq: 3, lamport: 7, text: "c3"))
            _ = try step.expireMessages(nowMs: 10)
        }
        let carols = try XCTUnwrap(try store.inboundOrderState(conversationId: c.id!).first { $0.author == carol })
        XCTAssertEqual(carols.released, 3)
        XCTAssertEqual(carols.lastLamport, 7)
        XCTAssertTrue(carols.held.isEmpty)
        try store.batch { try $0.releaseHeld([(id: mid(4), displayLamport: 6)]) }
        XCTAssertEqual(try store.message(mid(4))?.state, .received)
        // The listing uses the display index.
        let plan = try store.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN SELECT * FROM message WHERE conversationId = 1 ORDER BY lamport DESC, author DESC, seq DESC LIMIT 50").map { $0["detail"] as String }
        }.joined()
        XCTAssertTrue(plan.contains("message_display"), plan)
    }

    func testSearchFindsTextWithSnippetsFilteredByFriendAndForgetsRetractedText() throws {
        let store = try NodeStore.inMemory()
        let withBob = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        let withCarol = try store.batch { try $0.directConversation(peer: carol, nowMs: 1) }
        try store.batch { step in
            _ = try step.receiveMessage(inbound(withBob, 1, from: bob, seq: 1, lamport: 1, text: "that focus session was really hard today"))
            _ = try step.receiveMessage(inbound(withCarol, 2, from: carol, seq: 1, lamport: 1, text: "focused all morning"))
            _ = try step.receiveMessage(inbound(withCarol, 3, from: carol, seq: 2, lamport: 2, text: "lunch?"))
        }
        let all = try store.searchMessages("focus")
        XCTAssertEqual(Set(all.map(\.messageId)), [mid(1), mid(2)])
        XCTAssertTrue(all.contains { $0.snippet.contains("[focus]") }, "\(all.map(\.snippet))")
        XCTAssertTrue(all.contains { $0.snippet.contains("[focused]") })
        XCTAssertEqual(try store.searchMessages("focus", friend: carol).map(\.messageId), [mid(2)])
        XCTAssertEqual(try store.searchMessages("hard today").map(\.messageId), [mid(1)])
        // FTS syntax in the query is taken as words, never as an error.
        XCTAssertEqual(try store.searchMessages("\"unbalanced AND OR (").count, 0)
        XCTAssertEqual(try store.searchMessages("").count, 0)
        // Retract: only the author can; the text leaves the index and the reactions go.
        XCTAssertTrue(try store.batch { try $0.setReaction(messageId: mid(1), author: me, emoji: "💪", atMs: 5) })
        XCTAssertEqual(try store.reactions(messageId: mid(1)).map(\.emoji), ["💪"])
        XCTAssertFalse(try store.batch { try $0.retractMessage(mid(1), author: carol) })
        XCTAssertTrue(try store.batch { try $0.retractMessage(mid(1), author: bob) })
        XCTAssertEqual(try store.message(mid(1))?.retracted, true)
        XCTAssertEqual(try store.message(mid(1))?.text, "")
        XCTAssertEqual(try store.searchMessages("hard").count, 0)
        XCTAssertEqual(try store.reactions(messageId: mid(1)), [])
    }

    /// v9-message-burst: a step's new messages join the search index once, right before its
    /// commit; a message retracted or deleted in the step that stored it never leaves a stale
    /// entry (FTS5's integrity check would fail), and nothing stays noted after a commit.
    func testMessagesJoinTheSearchIndexOncePerStepAndChangesInTheSameStepKeepItWhole() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        try store.batch { step in
            for n in 1...20 {
                _ = try step.receiveMessage(inbound(c, UInt8(n), from: bob, seq: UInt64(n), lamport: UInt64(n), text: "burst number \(n)"))
            }
            // Retracted and expired before the step commits: never indexed, and no stale entry.
            XCTAssertTrue(try step.retractMessage(mid(3), author: bob))
            _ = try step.receiveMessage(inbound(c, 40, from: bob, seq: 21, lamport: 21, text: "gone soon", expiresAtMs: 10))
            XCTAssertEqual(try step.expireMessages(nowMs: 10), [mid(40)])
        }
        XCTAssertEqual(try store.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM messageFtsPending") }, 0)
        XCTAssertEqual(try store.searchMessages("burst", limit: 100).count, 19)
        XCTAssertEqual(try store.searchMessages("gone").count, 0)
        XCTAssertEqual(Set(try store.searchMessages("number 7").map(\.messageId)), [mid(7)])
        // Indexed rows change as before: a retract after the commit leaves the index too.
        XCTAssertTrue(try store.batch { try $0.retractMessage(mid(7), author: bob) })
        XCTAssertEqual(try store.searchMessages("burst", limit: 100).count, 18)
        try store.batch { step in try step.read { db in try db.execute(sql: "INSERT INTO messageFts(messageFts) VALUES ('integrity-check')") } }
        // A failed step notes nothing and indexes nothing.
        XCTAssertThrowsError(try store.batch { step -> Void in
            _ = try step.receiveMessage(inbound(c, 50, from: bob, seq: 22, lamport: 22, text: "rolled back"))
            throw MessageStoreError.noSuchConversation
        })
        XCTAssertEqual(try store.searchMessages("rolled").count, 0)
        XCTAssertEqual(try store.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM messageFtsPending") }, 0)
    }

    func testReactionsCheersSettingsAndExpiry() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        try store.batch { step in
            _ = try step.receiveMessage(inbound(c, 1, from: bob, seq: 1, lamport: 1, text: "gone soon", expiresAtMs: 100))
            _ = try step.receiveMessage(inbound(c, 2, from: bob, seq: 2, lamport: 2, text: "stays"))
        }
        XCTAssertTrue(try store.batch { try $0.setReaction(messageId: mid(1), author: me, emoji: "👍", atMs: 2) })
        XCTAssertTrue(try store.batch { try $0.setReaction(messageId: mid(1), author: me, emoji: "🎉", atMs: 3) })
        XCTAssertEqual(try store.reactions(messageId: mid(1)).map(\.emoji), ["🎉"])
        XCTAssertTrue(try store.batch { try $0.setReaction(messageId: mid(1), author: me, emoji: "", atMs: 4) })
        XCTAssertEqual(try store.reactions(messageId: mid(1)), [])
        XCTAssertFalse(try store.batch { try $0.setReaction(messageId: mid(99), author: me, emoji: "👍", atMs: 4) })

        _ = try store.batch { try $0.setReaction(messageId: mid(1), author: bob, emoji: "👍", atMs: 5) }
        XCTAssertEqual(try store.batch { try $0.expireMessages(nowMs: 99) }, [])
        XCTAssertEqual(try store.batch { try $0.expireMessages(nowMs: 100) }, [mid(1)])
        XCTAssertNil(try store.message(mid(1)))
        XCTAssertEqual(try store.reactions(messageId: mid(1)), [])
        XCTAssertEqual(try store.searchMessages("gone").count, 0)

        let challenge = [UInt8](repeating: 7, count: 16)
        try store.batch { try $0.storeCheer(StoredCheer(challengeId: challenge, subject: bob, author: me, emoji: "🎉", text: "nice", atMs: 1)) }
        XCTAssertEqual(try store.cheers(challengeId: challenge).map(\.text), ["nice"])

        XCTAssertTrue(try store.batch { try $0.setDisappearingTimer(conversationId: c.id!, afterMs: 60_000, version: 5, author: bob) })
        XCTAssertFalse(try store.batch { try $0.setDisappearingTimer(conversationId: c.id!, afterMs: 0, version: 4, author: me) })
        XCTAssertTrue(try store.batch { try $0.setDisappearingTimer(conversationId: c.id!, afterMs: 0, version: 5, author: [UInt8](repeating: 9, count: 32)) })
        XCTAssertEqual(try store.conversation(peer: bob)?.disappearAfterMs, 0)
        try store.batch { step in
            try step.setMuted(conversationId: c.id!, true)
            try step.setReadReceipts(peer: bob, true, nowMs: 1)
        }
        XCTAssertEqual(try store.conversation(peer: bob)?.muted, true)
        XCTAssertEqual(try store.conversation(peer: bob)?.readReceipts, true)
        try store.batch { try $0.markReadLocally(conversationId: c.id!, peer: bob, upToSeq: 2, frame: frame(mid(40), to: bob, type: 0x0505)) }
        XCTAssertEqual(try store.message(mid(2))?.state, .read)
        XCTAssertEqual(try store.conversation(peer: bob)?.readSentUpToSeq, 2)

        let thread = try store.batch { try $0.threadConversation(challengeId: challenge, nowMs: 1) }
        XCTAssertEqual(try store.conversation(challengeId: challenge)?.id, thread.id)
        XCTAssertFalse(thread.isDirect)
    }

    func testFileTransfersAreStoredUpdatedAndCounted() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        let offer = FileOfferMessage(fileID: FileID(bytes: mid(3))!, name: "desk.jpg", size: 600_000,
                                     fileHash: [UInt8](repeating: 1, count: 32), chunkRoot: [UInt8](repeating: 2, count: 32))
        let t = StoredFileTransfer(offer: offer, conversationId: c.id!, direction: .incoming, peer: bob, path: nil, nowMs: 1, deadlineMs: 100)
        XCTAssertTrue(try store.batch { try $0.storeFileOffer(t) })
        XCTAssertFalse(try store.batch { try $0.storeFileOffer(t) })
        XCTAssertEqual(try store.pendingIncomingFiles(peer: bob), 1)
        XCTAssertEqual(try store.fileTransfer(mid(3))?.offer, offer)
        try store.batch { try $0.updateFileTransfer(mid(3), state: .receiving, bitmap: [0b011], path: "/tmp/x.part", nowMs: 2) }
        XCTAssertEqual(try store.fileTransfer(mid(3))?.bitmap, Data([0b011]))
        try store.batch { try $0.updateFileTransfer(mid(3), state: .complete, bitmap: [0b111], nowMs: 3) }
        XCTAssertEqual(try store.fileTransfer(mid(3))?.path, "/tmp/x.part")
        XCTAssertEqual(try store.pendingIncomingFiles(peer: bob), 0)
    }

    func testAPageOfReactionsAndFilesReadsAsOneMessageAtATimeDoes() throws {
        // `message list` reads a page's reactions and files in one query each: the same answers as
        // the per-message reads, in the same order, for ids with none, and past one IN list (500).
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        try store.batch { step in
            for n in UInt8(1)...20 { _ = try step.receiveMessage(inbound(c, n, from: bob, seq: UInt64(n), lamport: UInt64(n), text: "m\(n)")) }
        }
        for (n, author, emoji, at) in [(UInt8(2), me, "👍", Int64(9)), (2, bob, "🎉", 3), (5, me, "💪", 4), (17, bob, "😀", 4), (17, me, "👍", 4)] {
            XCTAssertTrue(try store.batch { try $0.setReaction(messageId: mid(n), author: author, emoji: emoji, atMs: at) })
        }
        for (n, file, at) in [(UInt8(3), UInt8(200), Int64(1)), (3, 201, 5), (3, 202, 2), (19, 203, 1)] {
            let offer = FileOfferMessage(fileID: FileID(bytes: mid(file))!, name: "f\(file).jpg", size: 1_000,
                                         fileHash: [UInt8](repeating: 1, count: 32), chunkRoot: [UInt8](repeating: 2, count: 32), messageID: mid(n))
            let t = StoredFileTransfer(offer: offer, conversationId: c.id!, direction: .incoming, peer: bob, path: nil, nowMs: at, deadlineMs: 100)
            XCTAssertTrue(try store.batch { try $0.storeFileOffer(t) })
        }
        // Ids with no message among them, 1,200 in all: three IN lists.
        let ids = (0..<1_200).map { i -> [UInt8] in i < 30 ? mid(UInt8(i)) : [UInt8](repeating: 0xEE, count: 12) + withUnsafeBytes(of: UInt32(i)) { Array($0) } }
        let reactions = try store.reactions(messageIds: ids)
        let files = try store.fileTransfers(messageIds: ids)
        for id in ids {
            XCTAssertEqual(reactions[Data(id)] ?? [], try store.reactions(messageId: id))
            XCTAssertEqual(files[Data(id)], try store.fileTransfer(messageId: id))
        }
        XCTAssertEqual(reactions[Data(mid(2))]?.map(\.emoji), ["🎉", "👍"])
        XCTAssertEqual(files[Data(mid(3))]?.fileId, Data(mid(201)), "the newest transfer of a message")
        XCTAssertEqual(Set(files.keys), [Data(mid(3)), Data(mid(19))])
        XCTAssertEqual(try store.reactions(messageIds: []), [:])
    }

    func testBadRowsAreQuarantined() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        try store.batch { step in
            _ = try step.receiveMessage(inbound(c, 1, from: bob, seq: 1, lamport: 1, text: "fine"))
            _ = try step.receiveMessage(inbound(c, 2, from: bob, seq: 2, lamport: 2, text: "soon bad"))
            try step.write { db in
                try db.execute(sql: "UPDATE message SET text = ? WHERE id = ?", arguments: [String(repeating: "a", count: 16_385), Data(mid(2))])
                try db.execute(sql: """
                    INSERT INTO fileTransfer(fileId, conversationId, direction, peer, name, size, fileHash, chunkRoot, state, bitmap,
                    createdAtMs, updatedAtMs, deadlineMs) VALUES (?, ?, 'in', ?, '../etc/passwd', 10, ?, ?, 'offered', X'00', 1, 1, 1)
                    """, arguments: [Data(mid(8)), c.id!, Data(bob), Data(count: 32), Data(count: 32)])
            }
        }
        XCTAssertEqual(try store.batch { try $0.quarantineInvalidMessageRows(nowMs: 5) }, 2)
        XCTAssertNotNil(try store.message(mid(1)))
        XCTAssertNil(try store.message(mid(2)))
        XCTAssertNil(try store.fileTransfer(mid(8)))
        XCTAssertEqual(Set(try store.quarantined().map(\.kind)), ["message", "fileTransfer"])
        XCTAssertEqual(try store.searchMessages("soon").count, 0)
    }

    /// v6 on top of the database an earlier node wrote (Tests/fixtures/store-v4): the migration
    /// applies, and the old rows stay.
    func testTheMigrationAppliesOnTopOfTheV4Fixture() throws {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("fixtures/store-v4/node.sqlite")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("v6-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path
        try FileManager.default.copyItem(atPath: fixture.path, toPath: path)
        let before = try DatabaseQueue(path: path)
        let contacts = try before.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM contact") ?? 0 }
        try before.close()
        let store = try NodeStore(path: path)
        let applied = try store.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }
        XCTAssertTrue(applied.contains("v6-messages"))
        XCTAssertEqual(try store.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM contact") }, contacts)
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        XCTAssertEqual(try store.batch { try $0.receiveMessage(inbound(c, 1, from: bob, seq: 1, lamport: 1, text: "after upgrade")) }, .stored)
        XCTAssertEqual(try store.searchMessages("upgrade").count, 1)
    }
}

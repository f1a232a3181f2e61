import Foundation
import GRDB
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// What session 9 took off a message's way through the store (Protocol/messages.md 11.6), and what
/// must still hold: a received copy is refused by the keys and leaves nothing behind, a row that
/// breaks a rule is still an error, the ACK's removal answers the frame's type once, events stand
/// without a savepoint of their own, migration v9-message-cpu keeps the queries on indexes, and the
/// outbox's expiry reads only frames that can expire.
final class MessageCPUTests: XCTestCase {
    let me = [UInt8](repeating: 1, count: 32)
    let bob = [UInt8](repeating: 2, count: 32)

    private func mid(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 16) }

    private func inbound(_ c: ConversationRow, _ n: UInt8, seq: UInt64, text: String = "hi") -> StoredMessage {
        StoredMessage(id: mid(n), conversationId: c.id!, author: bob, seq: seq, lamport: max(1, seq), sentLamport: max(1, seq), text: text,
                      replyTo: nil, sentAtMs: Int64(n), receivedAtMs: Int64(n), state: .received)
    }

    private func mark(_ n: UInt8) -> HandledMark {
        HandledMark(messageId: mid(n), createdAtMs: 5, windowMs: 1_000_000, nowMs: 5, fromFriend: true)
    }

    func testACopyRefusedByTheKeysLeavesNothingBehindAndABrokenRowIsStillAnError() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        XCTAssertEqual(try store.batch { try $0.receiveMessage(inbound(c, 5, seq: 1), handled: mark(5)) }, .stored)
        let events = try store.lastEventSeq()
        // A copy under its own id, and a re-signed copy (another id, same author and seq): each one
        // a duplicate, its handled mark rolled back with it, and the step goes on.
        let (byID, bySeq, after) = try store.batch { step -> (InboundMessageResult, InboundMessageResult, InboundMessageResult) in
            let byID = try step.receiveMessage(inbound(c, 5, seq: 1), handled: mark(5))
            let bySeq = try step.receiveMessage(inbound(c, 6, seq: 1), handled: mark(6))
            let after = try step.receiveMessage(inbound(c, 7, seq: 2), handled: mark(7))
            return (byID, bySeq, after)
        }
        XCTAssertEqual([byID, bySeq, after], [.duplicate, .duplicate, .stored])
        XCTAssertFalse(try store.wasHandled(mid(6)), "the copy's mark went with it")
        XCTAssertTrue(try store.wasHandled(mid(7)))
        XCTAssertNil(try store.message(mid(6)))
        XCTAssertEqual(try store.lastEventSeq(), events)
        // A row the table's rules refuse (seq 0) is not taken for a copy: an error, nothing kept.
        XCTAssertThrowsError(try store.batch { try $0.receiveMessage(inbound(c, 8, seq: 0), handled: mark(8)) })
        XCTAssertFalse(try store.wasHandled(mid(8)))
        // The bound is checked with the new row in: at the bound it is stored, one byte over it is not.
        let used = try store.storedMessageBytes(author: bob)
        let next = inbound(c, 9, seq: 3, text: "four")
        XCTAssertEqual(try store.batch { try $0.receiveMessage(next, handled: mark(9), maximumBytesPerAuthor: used + next.storedBytes - 1) },
                       .overBound)
        XCTAssertFalse(try store.wasHandled(mid(9)), "over the bound: neither stored nor marked")
        XCTAssertEqual(try store.batch { try $0.receiveMessage(next, handled: mark(9), maximumBytesPerAuthor: used + next.storedBytes) },
                       .stored)
    }

    func testTheAcknowledgedFrameAnswersItsTypeOnceAndEventsStandWithoutASavepoint() throws {
        let store = try NodeStore.inMemory()
        try store.batch { step in
            try step.enqueue(OutboxItem(messageId: mid(1), recipient: bob, type: 0x0501, frame: [1], nowMs: 1000))
        }
        XCTAssertEqual(try store.batch { try $0.acknowledgeReturningType(mid(1), from: bob) }, 0x0501)
        XCTAssertNil(try store.batch { try $0.acknowledgeReturningType(mid(1), from: bob) }, "gone: a second ACK finds nothing")
        XCTAssertNil(try store.batch { try $0.acknowledgeReturningType(mid(2), from: me) })
        XCTAssertEqual(try store.outboxCount(), 0)
        // An event appended in a step is kept with it, and is gone with a step rolled back.
        let before = try store.lastEventSeq()
        _ = try store.batch { try $0.appendEvent(type: "test.kept", timeMs: 1, fields: "{}") }
        XCTAssertEqual(try store.lastEventSeq(), before + 1)
        struct Abandon: Error {}
        XCTAssertThrowsError(try store.batch { step in
            _ = try step.appendEvent(type: "test.lost", timeMs: 1, fields: "{}")
            throw Abandon()
        })
        XCTAssertEqual(try store.lastEventSeq(), before + 1)
    }

    /// Expiry reads the frames that can expire only (frames to friends have no expiry and are not
    /// in `outbox_expiry`), and still gives up exactly those past their time.
    func testExpiryFindsOnlyFramesThatExpireAndGivesUpThosePastTheirTime() throws {
        let store = try NodeStore.inMemory()
        try store.batch { step in
            for n in 1...50 as ClosedRange<UInt8> {
                try step.enqueue(OutboxItem(messageId: mid(n), recipient: bob, type: 0x0501, frame: [n], nowMs: 1000))
            }
            var soon = OutboxItem(messageId: mid(100), recipient: me, type: 0x0101, frame: [1], nowMs: 1000)
            soon.expiresAtMs = 2000
            var later = OutboxItem(messageId: mid(101), recipient: me, type: 0x0101, frame: [2], nowMs: 1000)
            later.expiresAtMs = 9000
            try step.enqueue(soon)
            try step.enqueue(later)
        }
        let gone = try store.batch { try $0.expireOutbox(nowMs: 5000) }
        XCTAssertEqual(gone.map(\.messageId), [mid(100)])
        XCTAssertEqual(try store.outboxCount(), 51)
        let plan = try store.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN SELECT * FROM outbox WHERE expiresAtMs IS NOT NULL AND expiresAtMs <= 5")
                .map { $0["detail"] as String? ?? "" }.joined(separator: "; ")
        }
        XCTAssertTrue(plan.contains("outbox_expiry"), plan)
    }

    func testTheMigrationDropsTheUnreadIndexAndKeepsTheQueriesOnIndexes() throws {
        let store = try NodeStore.inMemory()
        let (indexes, strangerSQL, plans) = try store.read { db -> ([String], String?, [String]) in
            let indexes = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('outbox', 'seenMessage')")
            let sql = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = 'seenMessage_stranger'")
            var plans: [String] = []
            for query in ["SELECT COUNT(*) FROM seenMessage WHERE fromFriend = 0",
                          "SELECT messageId FROM seenMessage WHERE fromFriend = 0 ORDER BY createdAtMs ASC LIMIT 3",
                          "SELECT 1 FROM outbox WHERE recipient = x'00' AND nextAttemptMs <= 5"] {
                plans.append(try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + query).map { $0["detail"] as String? ?? "" }.joined(separator: "; "))
            }
            return (indexes, sql, plans)
        }
        XCTAssertFalse(indexes.contains("outbox_due"), "\(indexes)")
        XCTAssertTrue(indexes.contains("outbox_expiry"), "\(indexes)")
        XCTAssertTrue(indexes.contains("outbox_recipient_due"), "\(indexes)")
        XCTAssertTrue(strangerSQL?.contains("WHERE fromFriend = 0") == true, strangerSQL ?? "none")
        XCTAssertTrue(plans[0].contains("seenMessage_stranger"), plans[0])
        XCTAssertTrue(plans[1].contains("seenMessage_stranger"), plans[1])
        XCTAssertTrue(plans[2].contains("outbox_recipient_due"), plans[2])
        // The strangers' cap still holds through the partial index; friends' marks are not capped by it.
        var limits = NodeStore.Limits()
        limits.maximumStrangerSeenMessages = 2
        let small = try NodeStore.inMemory(limits: limits)
        for n in 1...4 as ClosedRange<UInt8> {
            XCTAssertTrue(try small.batch { try $0.markHandled(mid(n), createdAtMs: Int64(n), windowMs: 1_000_000, nowMs: 10, fromFriend: false) })
        }
        XCTAssertTrue(try small.batch { try $0.markHandled(mid(9), createdAtMs: 1, windowMs: 1_000_000, nowMs: 10, fromFriend: true) })
        XCTAssertEqual(try small.handledCounts().strangers, 2)
        XCTAssertTrue(try small.wasHandled(mid(4)))
        XCTAssertFalse(try small.wasHandled(mid(1)), "the oldest stranger's mark went")
        XCTAssertTrue(try small.wasHandled(mid(9)))
    }
}

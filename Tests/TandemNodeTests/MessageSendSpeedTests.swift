import Foundation
import GRDB
import Sodium
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import XCTest
@testable import TandemNodeCore

/// A burst of sends (Protocol/messages.md 11.4): the frames a step queues are scheduled as written
/// through the partial index of frames never written, so a send costs what it queued, not the
/// length of the friend's queue; and a batch's frames go on the link in one write after its commit.
@NodeCore
final class MessageSendSpeedTests: XCTestCase {
    typealias Rig = OutboxTests.Rig

    /// Frames for `peer` queued in `step` as a send queues them (not yet written).
    func queue(_ n: Int, to peer: [UInt8], _ rig: Rig, _ step: StoreStep) throws -> [OutboxItem] {
        try (0..<n).map { i in
            let item = rig.outbox.frame(.chatMessage, to: peer, payload: Array("m\(i)".utf8), in: step)
            try step.enqueue(item)
            return item
        }
    }

    func testASendSchedulesOnlyWhatItQueuedWhateverWaitsForAcks() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        // 2,000 frames written and waiting for ACKs (a burst the friend has not answered yet).
        let old = try rig.store.batch { step in
            let items = try queue(2000, to: peer, rig, step)
            XCTAssertEqual(try step.scheduleFirstWrite(for: peer, nowMs: rig.clock.now).count, 2000)
            return items
        }
        XCTAssertEqual(old.count, 2000)
        // The next send's frames: only they are scheduled (and returned to be written).
        let (fresh, scheduled) = try rig.store.batch { step -> ([OutboxItem], [OutboxItem]) in
            let fresh = try queue(3, to: peer, rig, step)
            return (fresh, try step.scheduleFirstWrite(for: peer, nowMs: rig.clock.now))
        }
        XCTAssertEqual(scheduled.map(\.messageId), fresh.map(\.messageId), "what the step queued, oldest first")
        XCTAssertTrue(scheduled.allSatisfy { $0.attempts == 1 && $0.lastError == "awaiting acknowledgement" })
        // The read and the update go through the partial index, not the recipient's whole queue.
        let plans = try rig.store.read { db -> [String] in
            let select = try Row.fetchAll(db, sql: """
                EXPLAIN QUERY PLAN SELECT * FROM outbox INDEXED BY outbox_unsent WHERE recipient = ? AND attempts = 0 AND nextAttemptMs <= ?
                ORDER BY createdAtMs
                """, arguments: [Data(peer), 0])
            return select.map { $0["detail"] as String? ?? "" }
        }
        XCTAssertTrue(plans.contains { $0.contains("outbox_unsent") }, "\(plans)")
        // A frame written once and deferred (attempts > 0) is not in the index.
        let unsent = try rig.store.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox INDEXED BY outbox_unsent WHERE attempts = 0") }
        XCTAssertEqual(unsent, 0)
    }

    /// Sends that share a step hand their frames to the outbox once: one write and one flush on the
    /// link after the commit, in the order they were queued, and nothing before it.
    func testABatchOfSendsGoesOnTheLinkInOneWriteAfterItsCommit() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        let link = OutboxTests.FakeLink(serial: 1)
        rig.transport.setLink(peer, link)
        let commitsBefore = rig.store.commits
        let items = try rig.store.batch { step -> [OutboxItem] in
            let items = try queue(64, to: peer, rig, step)
            rig.outbox.send(to: [peer], in: step)
            XCTAssertTrue(link.written.isEmpty, "nothing goes out before the commit")
            return items
        }
        XCTAssertEqual(rig.store.commits - commitsBefore, 1)
        XCTAssertEqual(link.written.map(\.messageID.bytes), items.map { Array($0.messageId) })
        XCTAssertEqual(link.operations.filter { $0 == "flush" }.count, 1, "one flush for the batch")
    }

    /// Frames stored already scheduled as written (the friend's link was up when they were queued,
    /// messages.md 11.6 session 10): stored with their first attempt counted, never in the index of
    /// frames not written, and written after the commit in one write, behind the older frames of the
    /// same friend that were never written, in the order they were queued. With the link down there
    /// is no such schedule: the frame waits for the delivery loop as before.
    func testFramesStoredScheduledGoBehindOlderUnwrittenOnesInOneWriteAfterTheCommit() async throws {
        let rig = try Rig()
        let peer = SigningKeyPair.generate().publicKey
        let probe = try rig.store.batch { step in rig.outbox.frame(.chatMessage, to: peer, payload: [0], in: step) }
        XCTAssertNil(rig.outbox.scheduledAsWritten(probe), "no link: not scheduled")
        // Queued while the link was down: never written.
        let older = try rig.store.batch { step in try queue(3, to: peer, rig, step) }
        let link = OutboxTests.FakeLink(serial: 1)
        rig.transport.setLink(peer, link)
        let fresh = try rig.store.batch { step -> [OutboxItem] in
            let fresh = try (0..<5).map { i -> OutboxItem in
                let frame = rig.outbox.frame(.chatMessage, to: peer, payload: Array("n\(i)".utf8), in: step)
                let scheduled = try XCTUnwrap(rig.outbox.scheduledAsWritten(frame))
                XCTAssertEqual(scheduled.attempts, 1)
                XCTAssertGreaterThan(scheduled.nextAttemptMs, frame.nextAttemptMs)
                XCTAssertEqual(scheduled.lastError, "awaiting acknowledgement")
                try step.enqueue(scheduled)
                return scheduled
            }
            rig.outbox.send(to: [peer], scheduled: fresh, in: step)
            XCTAssertTrue(link.written.isEmpty, "nothing goes out before the commit")
            return fresh
        }
        XCTAssertEqual(link.written.map(\.messageID.bytes), (older + fresh).map { Array($0.messageId) }, "oldest first, once each")
        XCTAssertEqual(link.operations.filter { $0 == "flush" }.count, 1, "one flush")
        let stored = try rig.store.outbox(for: peer)
        XCTAssertEqual(stored.map(\.messageId), (older + fresh).map(\.messageId))
        XCTAssertTrue(stored.allSatisfy { $0.attempts == 1 && $0.lastError == "awaiting acknowledgement" }, "\(stored.map(\.attempts))")
        let unsent = try rig.store.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox INDEXED BY outbox_unsent WHERE recipient = ? AND attempts = 0", arguments: [Data(peer)]) }
        XCTAssertEqual(unsent, 0)
        // A step that stored its scheduled frames and then rolled back writes nothing.
        let linkWrites = link.written.count
        XCTAssertThrowsError(try rig.store.batch { step in
            let frame = rig.outbox.frame(.chatMessage, to: peer, payload: [9], in: step)
            let scheduled = try XCTUnwrap(rig.outbox.scheduledAsWritten(frame))
            try step.enqueue(scheduled)
            rig.outbox.send(to: [peer], scheduled: [scheduled], in: step)
            throw CancellationError()
        })
        try rig.store.batch { step in rig.outbox.send(to: [], in: step) }
        XCTAssertEqual(link.written.count, linkWrites, "the rolled-back frame never goes out")
        XCTAssertEqual(try rig.store.outbox(for: peer).count, 8)
    }
}

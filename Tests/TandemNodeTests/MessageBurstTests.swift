import Foundation
import GRDB
import Sodium
import TandemNet
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// What a burst's speed rests on (Protocol/messages.md 11.5): soft marks that commit without a
/// sync of their own (`delivered`) or in the next step (`sent`), and the outbox's due recipients
/// found by one seek each.
final class MessageBurstTests: XCTestCase, MessageNodeCalls {
    /// The sender's `delivered` mark commits without a sync (with the removal of the acknowledged
    /// frame). Should a power cut lose that commit, the message is `sent` again with its frame
    /// back in the outbox: the frame goes again (same id), the friend's node holds it once and
    /// answers the copy with an ACK, and the mark comes back — no second copy, no second event.
    func testADeliveredMarkLostInACrashComesBackWithoutADuplicate() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let id = try await send(a.node, to: b.node, "once only")
        _ = try await event(a.node, "message.delivered", where: { $0.fields["id"]?.stringValue == id })
        try await outboxDrains(a.node)

        // The state before the lost commit: the message sent, its frame waiting (re-signed under
        // the same id, as a resend after a restart is: messages.md 2.1).
        let bobKey = b.node.identity.publicKey
        let messages = a.node.messages
        try await NodeCore.perform {
            try messages.store.step { step in
                let idBytes = try XCTUnwrap(parseHex(id))
                try step.read { db in try db.execute(sql: "UPDATE message SET state = 'sent' WHERE id = ?", arguments: [Data(idBytes)]) }
                let m = try XCTUnwrap(try step.message(idBytes))
                let c = try XCTUnwrap(try step.conversation(id: m.conversationId))
                XCTAssertTrue(try messages.requeue(m, c, to: bobKey, step))
                messages.outbox.send(to: [bobKey], in: step)
            }
        }
        let requeued = try await list(a.node, with: b.node).first?["state"]?.stringValue
        XCTAssertTrue(requeued == "sent" || requeued == "delivered", "\(requeued ?? "none")")
        try await outboxDrains(a.node)
        var state: String?
        for _ in 0..<100 {
            state = try await list(a.node, with: b.node).first?["state"]?.stringValue
            if state == "delivered" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTAssertEqual(state, "delivered", "the copy's ACK marks it delivered again")
        let theirs = try await list(b.node, with: a.node)
        XCTAssertEqual(theirs.compactMap { $0["id"]?.stringValue }, [id], "held once")
        let received = try await events(b.node, "message.received").filter { $0.fields["id"]?.stringValue == id }
        XCTAssertEqual(received.count, 1, "announced once")
    }

    /// The `sent` marks a burst no longer writes (messages.md 11.6, session 14): a frame is marked
    /// only once it has waited `sentMarkDelayMs` without its ACK; one acknowledged before then is
    /// never marked; a clock set back does not hold the marks back.
    func testOnlyFramesUnacknowledgedForASecondAreMarkedSent() {
        let (a, b, c) = ([UInt8](repeating: 1, count: 16), [UInt8](repeating: 2, count: 16), [UInt8](repeating: 3, count: 16))
        var w = WrittenFrames()
        w.append([a, b], atMs: 10_000)
        w.append([c], atMs: 10_600)
        XCTAssertFalse(w.hasAged(nowMs: 10_999, delayMs: 1000))
        XCTAssertEqual(w.aged(nowMs: 10_999, delayMs: 1000).count, 0, "nothing is marked within the delay")
        w.acknowledged(b)
        let due = w.aged(nowMs: 11_000, delayMs: 1000)
        XCTAssertEqual(due.count, 2, "a and b are a second old")
        XCTAssertEqual(due.unacknowledged, [a], "b was acknowledged first: no `sent` update for it")
        w.removeFirst(due.count)
        XCTAssertEqual(w.ids, [c])
        // The clock set back an hour: c is not held for an hour.
        XCTAssertTrue(w.hasAged(nowMs: 10_600 - 3_600_000, delayMs: 1000))
        XCTAssertEqual(w.aged(nowMs: 10_600 - 3_600_000, delayMs: 1000).unacknowledged, [c])
        w.removeFirst(5)
        XCTAssertEqual(w.count, 0)
    }

    /// A frame written on a link and not acknowledged makes its message `sent` in a later step (a send
    /// batch, an inbound batch, or the once-a-second round), without a step of its own.
    func testWrittenMessagesBecomeSentWithoutAStepOfTheirOwn() async throws {
        let bobKey = SigningKeyPair.generate()
        let a = try await RunningNode.start()
        defer { a.task.cancel() }
        let b = try await RunningNode.start(identity: bobKey)
        try await befriend(a, b)
        await b.stop()
        // Bob's key on a link whose node handles nothing: written, never acknowledged.
        let ghost = try NodeRuntime(identity: bobKey, configuration: TestSupport.loopbackConfiguration(), logger: TestSupport.quietLogger)
        let (link, _) = try await ghost.connect(host: "127.0.0.1", port: a.port, to: a.node.id)
        defer { link.close() }
        let ids = [try await send(a.node, to: b.node, "one"), try await send(a.node, to: b.node, "two")]
        var states: [String] = []
        for _ in 0..<100 {
            states = try await list(a.node, with: b.node).compactMap { $0["state"]?.stringValue }
            if states == ["sent", "sent"] { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTAssertEqual(states, ["sent", "sent"])
        XCTAssertEqual(a.node.messages.written.withLockedValue { $0.ids }.filter { ids.contains(hexString($0)) }, [], "marked, then let go")
    }

    /// `dueRecipients` finds each recipient with a due frame by one seek (`outbox_recipient_due`),
    /// however many frames of a burst are due behind the first.
    func testDueRecipientsSeekEachRecipient() throws {
        let store = try NodeStore.inMemory()
        let (bob, carol, dave) = ([UInt8](repeating: 2, count: 32), [UInt8](repeating: 3, count: 32), [UInt8](repeating: 4, count: 32))
        try store.batch { step in
            for i in 0..<300 {
                var item = OutboxItem(messageId: [UInt8](repeating: UInt8(i % 256), count: 15) + [UInt8(i / 256)], recipient: bob,
                                      type: 0x0501, frame: [1], nowMs: Int64(i))
                item.nextAttemptMs = Int64(i)
                try step.enqueue(item)
            }
            var later = OutboxItem(messageId: [UInt8](repeating: 9, count: 16), recipient: carol, type: 0x0501, frame: [1], nowMs: 0)
            later.nextAttemptMs = 10_000
            try step.enqueue(later)
            try step.enqueue(OutboxItem(messageId: [UInt8](repeating: 8, count: 16), recipient: dave, type: 0x0501, frame: [1], nowMs: 5))
        }
        XCTAssertEqual(try store.dueRecipients(nowMs: 4), [bob])
        XCTAssertEqual(Set(try store.dueRecipients(nowMs: 5)), [bob, dave])
        XCTAssertEqual(Set(try store.dueRecipients(nowMs: 10_000)), [bob, carol, dave])
        XCTAssertEqual(try store.dueRecipients(nowMs: 10_000, limit: 1).count, 1)
        XCTAssertEqual(try store.dueRecipients(nowMs: -1), [])
        let plan = try store.read { db in
            try Row.fetchAll(db, sql: """
                EXPLAIN QUERY PLAN SELECT 1 FROM outbox WHERE recipient = ? AND nextAttemptMs <= ?
                """, arguments: [Data(bob), 0]).map { $0["detail"] as String }
        }
        XCTAssertTrue(plan.contains { $0.contains("outbox_recipient_due") }, "\(plan)")
    }
}

import Foundation
import XCTest
@_spi(StoreOwner) @testable import TandemStore

final class StoreTests: XCTestCase {
    let alice = [UInt8](repeating: 1, count: 32)
    let bob = [UInt8](repeating: 2, count: 32)

    private func frame(_ id: UInt8, to recipient: [UInt8], type: UInt16 = 0x0101, now: Int64 = 1000) -> OutboxItem {
        OutboxItem(messageId: [UInt8](repeating: id, count: 16), recipient: recipient, type: type, frame: [id, id], nowMs: now)
    }

    /// A store on disk syncs every commit (WAL, `synchronous = FULL`) on the connection that writes:
    /// GRDB's pool sets NORMAL when it turns WAL on, after any `prepareDatabase`, so the setting is
    /// checked where it takes effect.
    func testAStoreOnDiskSyncsEveryCommit() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sync-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path
        XCTAssertEqual(try NodeStore(path: path).synchronousLevel(), 2)
        // And again when an existing store is opened.
        XCTAssertEqual(try NodeStore(path: path).synchronousLevel(), 2)
    }

    /// A batch of soft state (acknowledgements, presence, sightings, event rows) commits without a
    /// sync; the setting is FULL again for whatever writes next; a durable write that joins such a
    /// batch is synced all the same (the write-ahead log, once the batch commits).
    func testABatchOfSoftStateCommitsUnsyncedAndADurableWriteInOneIsSyncedAnyway() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("soft-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try NodeStore(path: dir.appendingPathComponent("node.sqlite").path)
        // The level the step's own connection runs at (read through the step: the store's own reads
        // are on another connection).
        func level(_ step: StoreStep) throws -> Int { try step.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 } }

        var inside = -1
        try store.batch(syncing: false) { step in
            inside = try level(step)
            try step.rememberAddress(bob, host: "192.0.2.7", port: 7, source: "lan", nowMs: 1)
            _ = try step.appendEvent(type: "peer.discovered", timeMs: 1, fields: "{}")
        }
        XCTAssertEqual(inside, 1, "NORMAL inside the batch")
        XCTAssertEqual(store.unsyncedCommits, 1)
        XCTAssertEqual(store.writeAheadLogSyncs, 0)
        XCTAssertEqual(try store.synchronousLevel(), 2, "FULL again after it")
        XCTAssertEqual(try store.addresses(bob).count, 1)

        // A friend request (durable) in a batch that was not to sync: synced after its commit.
        let frame = OutboxItem(messageId: Array(repeating: 1, count: 16), recipient: bob, type: 0x0101, frame: [1, 2, 3], nowMs: 1)
        try store.batch(syncing: false) { step in
            _ = try step.requestFriend(bob, message: "hi", frame: frame, nowMs: 2)
        }
        XCTAssertEqual(store.unsyncedCommits, 1)
        XCTAssertEqual(store.writeAheadLogSyncs, 1)
        XCTAssertEqual(try store.contact(bob)?.relationship, .requested)

        // A batch that syncs (the default), with soft writes only, stays synced.
        try store.batch { step in
            inside = try level(step)
            _ = try step.appendEvent(type: "x", timeMs: 3, fields: "{}")
            try step.setPresence(bob, presence: "away", lastSeenMs: 3)
        }
        XCTAssertEqual(inside, 2)
        XCTAssertEqual(store.unsyncedCommits, 1)
        XCTAssertEqual(store.writeAheadLogSyncs, 1)
        // A soft write alone (once "outside a batch, a batch of one that does not sync"; every write
        // is in an explicit batch now, and whether it syncs is the batch's `syncing`): not synced,
        // and no sync of the log after it.
        try store.batch(syncing: false) { try $0.setPresence(bob, presence: "online", lastSeenMs: 4) }
        XCTAssertEqual(store.unsyncedCommits, 2)
        XCTAssertEqual(store.writeAheadLogSyncs, 1)
        XCTAssertEqual(try store.synchronousLevel(), 2)
        XCTAssertEqual(try store.contact(bob)?.presence, "online")
    }

    /// An event reported with a change is stored in the change's transaction: both or neither.
    func testEventsCommitWithTheChangeTheyReport() throws {
        let store = try NodeStore.inMemory()
        let event = PendingEvent(type: "friend.request.received", timeMs: 1, fields: "{}")
        let result = try store.batch { step in
            try step.receiveFriendRequest(from: bob, displayName: "Bob", message: "hi", record: [], recordVersion: 1,
                                          reply: nil, nowMs: 1000) { _ in [event] }
        }
        XCTAssertEqual(result, .stored(dropped: nil))
        XCTAssertEqual(try store.events(since: 0, limit: 10).map(\.type), ["friend.request.received"])
        // A farewell whose event cannot be stored (a NOT NULL column left empty by a broken event)
        // rolls the farewell back too.
        struct Boom: Error {}
        XCTAssertThrowsError(try store.batch { step in
            try step.write { db -> Void in
                try step.insertEvents([PendingEvent(type: "x", timeMs: 2, fields: "{}")], db)
                throw Boom()
            }
        })
        XCTAssertEqual(try store.lastEventSeq(), 1, "nothing of the failed transaction stays")
        XCTAssertEqual(try store.batch { step in
                           try step.receiveFarewell(from: bob, nowMs: 2000) { _ in [PendingEvent(type: "friend.removed", timeMs: 2, fields: "{}")] }
                       },
                       .pending)
        XCTAssertNil(try store.contact(bob), "a relationship that ends leaves no row")
        XCTAssertEqual(try store.events(since: 1, limit: 10).map(\.type), ["friend.removed"])
    }

    /// The newest committed events are handed out from memory (the tail); what it hands out is
    /// always what the database holds: never an event of a rolled-back savepoint or transaction,
    /// none missing, in order, whatever mix of batches, nested writes and failures stored them.
    func testEventTailHandsOutExactlyWhatWasCommitted() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tail-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("store.sqlite").path
        let store = try NodeStore(path: path)
        struct Boom: Error {}
        var rng = SystemRandomNumberGenerator()
        var n = 0
        func event() -> PendingEvent { n += 1; return PendingEvent(type: "e\(n)", timeMs: Int64(n), fields: #"{"n":\#(n)}"#, decoded: n) }
        for _ in 0..<300 {
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: _ = try store.batch { try $0.appendEvent(type: "append", timeMs: 1, fields: "{}") }
            case 1:
                // A batch of writes, one of which fails and rolls back alone.
                try store.batch { step in
                    try step.write { db in try step.insertEvents([event(), event()], db) }
                    XCTAssertThrowsError(try step.write { db -> Void in try step.insertEvents([event()], db); throw Boom() })
                    _ = try step.appendEvent(type: "in-batch", timeMs: 1, fields: "{}")
                }
            case 2:
                // A whole batch that fails: nothing of it is kept.
                XCTAssertThrowsError(try store.batch { step in
                    try step.write { db in try step.insertEvents([event()], db) }
                    throw Boom()
                })
            case 3:
                // Nested savepoints (a step's write inside another of its writes; once a batch
                // nested in a write): the inner one fails, the outer one commits.
                try store.batch { step in
                    try step.write { db in
                        try step.insertEvents([event()], db)
                        XCTAssertThrowsError(try step.write { db -> Void in try step.insertEvents([event()], db); throw Boom() })
                    }
                }
            default:
                // A batch of one write that fails.
                XCTAssertThrowsError(try store.batch { step in
                    try step.write { db -> Void in try step.insertEvents([event(), event()], db); throw Boom() }
                })
            }
            // From memory, then from the file through a second connection that never wrote.
            let last = try store.lastEventSeq()
            let since = max(0, last - Int64.random(in: 0...20, using: &rng))
            let fromTail = try store.recentEvents(since: since, limit: 1_000)
            let fromDisk = try NodeStore(path: path).events(since: since, limit: 1_000)
            XCTAssertEqual(fromTail.map(\.stored), fromDisk)
            for r in fromTail where r.decoded != nil {
                XCTAssertEqual(r.stored.fields, #"{"n":\#(r.decoded as! Int)}"#, "decoded fields belong to their row")
            }
        }
        // The tail served the recent reads: the newest events come with their decoded fields.
        let newest = try store.recentEvents(since: max(0, try store.lastEventSeq() - 5), limit: 10)
        XCTAssertFalse(newest.isEmpty)
        XCTAssertEqual(try store.events(since: 0, limit: 100_000).count,
                       try NodeStore(path: path).events(since: 0, limit: 100_000).count)
    }

    /// Marks of strangers' frames are capped apart and never evict friends' marks.
    func testStrangersHandledMarksAreCappedApart() throws {
        var limits = NodeStore.Limits()
        limits.maximumStrangerSeenMessages = 10
        let store = try NodeStore.inMemory(limits: limits)
        for i in 0..<5 {
            XCTAssertTrue(try store.batch { try $0.markHandled([UInt8](repeating: UInt8(i), count: 16), createdAtMs: 1000 + Int64(i),
                                                               windowMs: 1_000_000, nowMs: 2000, fromFriend: true) })
        }
        for i in 0..<50 {
            var id = [UInt8](repeating: 0xee, count: 16)
            id[0] = UInt8(i)
            XCTAssertTrue(try store.batch { try $0.markHandled(id, createdAtMs: 1500, windowMs: 1_000_000, nowMs: 2000, fromFriend: false) })
        }
        let counts = try store.handledCounts()
        XCTAssertEqual(counts.strangers, 10)
        XCTAssertEqual(counts.all, 15)
        for i in 0..<5 { XCTAssertTrue(try store.wasHandled([UInt8](repeating: UInt8(i), count: 16)), "friend mark \(i) kept") }
    }

    func testRequestAcceptRoundTrip() throws {
        let store = try NodeStore.inMemory()
        _ = try store.batch { try $0.requestFriend(bob, message: "hi", frame: frame(1, to: bob), nowMs: 1000) }
        XCTAssertEqual(try store.contact(bob)?.relationship, .requested)
        XCTAssertEqual(try store.outboxCount(), 1)
        // Asking again replaces the queued request: one request in flight.
        _ = try store.batch { try $0.requestFriend(bob, message: "hello?", frame: frame(2, to: bob), nowMs: 2000) }
        XCTAssertEqual(try store.outbox(for: bob).map { Array($0.messageId) }, [[UInt8](repeating: 2, count: 16)])
        XCTAssertTrue(try store.batch { try $0.receiveFriendAccept(from: bob, displayName: "Bob", record: [9], recordVersion: 5, nowMs: 3000) })
        XCTAssertEqual(try store.contact(bob)?.relationship, .friend)
        XCTAssertEqual(try store.contact(bob)?.displayName, "Bob")
        XCTAssertEqual(try store.outboxCount(), 0, "an answered request is no longer retried")
        XCTAssertFalse(try store.batch { try $0.receiveFriendAccept(from: bob, displayName: "Bob", record: [9], recordVersion: 5, nowMs: 3000) })
        XCTAssertThrowsError(try store.batch { try $0.requestFriend(bob, message: "", frame: frame(3, to: bob), nowMs: 4000) }) {
            XCTAssertEqual($0 as? FriendStoreError, .alreadyFriends)
        }
    }

    /// Exactly once (Protocol 12.5): the handled mark commits with the change it makes, so a
    /// redelivered request after the user declined it changes nothing, and a redelivered farewell
    /// does not end a friendship made since.
    func testAHandledMarkCommitsWithItsChangeAndRedeliveriesChangeNothing() throws {
        let store = try NodeStore.inMemory()
        let mark = { (id: UInt8, now: Int64) in
            HandledMark(messageId: [UInt8](repeating: id, count: 16), createdAtMs: now, windowMs: 86_400_000, nowMs: now,
                        fromFriend: false)
        }
        let first = try store.batch { try $0.receiveFriendRequest(from: alice, displayName: "A", message: "hi", record: [], recordVersion: 1,
                                                                  reply: nil, nowMs: 1, handled: mark(1, 1)) }
        XCTAssertEqual(first, .stored(dropped: nil))
        XCTAssertTrue(try store.wasHandled([UInt8](repeating: 1, count: 16)))
        try store.batch { try $0.declineFriend(alice, frame: frame(9, to: alice, type: 0x0103), nowMs: 2) }
        let again = try store.batch { try $0.receiveFriendRequest(from: alice, displayName: "A", message: "hi", record: [], recordVersion: 1,
                                                                  reply: nil, nowMs: 3, handled: mark(1, 1)) }
        XCTAssertEqual(again, .duplicate)
        XCTAssertNotEqual(try store.contact(alice)?.relationship, .pending, "the declined request did not come back")

        _ = try store.batch { try $0.requestFriend(bob, message: "", frame: frame(2, to: bob), nowMs: 4) }
        XCTAssertEqual(try store.batch { try $0.receiveFarewell(from: bob, nowMs: 5, handled: mark(3, 5)) }, .requested)
        _ = try store.batch { try $0.requestFriend(bob, message: "", frame: frame(4, to: bob), nowMs: 6) }
        XCTAssertTrue(try store.batch { try $0.receiveFriendAccept(from: bob, displayName: "B", record: [], recordVersion: 1, nowMs: 7,
                                                                   handled: mark(5, 7)) })
        XCTAssertNil(try store.batch { try $0.receiveFarewell(from: bob, nowMs: 8, handled: mark(3, 5)) }, "a redelivered farewell is ignored")
        XCTAssertEqual(try store.contact(bob)?.relationship, .friend)
        XCTAssertFalse(try store.batch { try $0.receiveFriendAccept(from: bob, displayName: "B", record: [], recordVersion: 1, nowMs: 9,
                                                                    handled: mark(5, 7)) })
        XCTAssertFalse(try store.batch { try $0.updateContactRecord(bob, displayName: "B2", record: [], version: 2, nowMs: 10, handled: mark(5, 7)) })
        XCTAssertTrue(try store.batch { try $0.updateContactRecord(bob, displayName: "B2", record: [], version: 2, nowMs: 10, handled: mark(6, 10)) })
        XCTAssertEqual(try store.contact(bob)?.displayName, "B2")
    }

    func testIncomingRequestsAreCappedOldestFirst() throws {
        var limits = NodeStore.Limits()
        limits.maximumPendingRequests = 3
        let store = try NodeStore.inMemory(limits: limits)
        var results: [NodeStore.IncomingRequest] = []
        for i in 0..<5 {
            let key = [UInt8](repeating: UInt8(10 + i), count: 32)
            results.append(try store.batch { try $0.receiveFriendRequest(from: key, displayName: "n\(i)", message: "m", record: [],
                                                                          recordVersion: 1, reply: nil, nowMs: Int64(1000 + i)) })
        }
        XCTAssertEqual(try store.contacts([.pending]).count, 3)
        XCTAssertEqual(results[3], .stored(dropped: [UInt8](repeating: 10, count: 32)))
        XCTAssertEqual(results[4], .stored(dropped: [UInt8](repeating: 11, count: 32)))
        XCTAssertNil(try store.contact([UInt8](repeating: 10, count: 32)))
    }

    func testMutualRequestsMakeFriendsAndBlockedPeersAreIgnored() throws {
        let store = try NodeStore.inMemory()
        _ = try store.batch { try $0.requestFriend(bob, message: "", frame: frame(1, to: bob), nowMs: 1) }
        let r = try store.batch { try $0.receiveFriendRequest(from: bob, displayName: "Bob", message: "", record: [], recordVersion: 1,
                                                              reply: frame(2, to: bob, type: 0x0102), nowMs: 2) }
        XCTAssertEqual(r, .mutual)
        XCTAssertEqual(try store.contact(bob)?.relationship, .friend)
        XCTAssertEqual(try store.outbox(for: bob).map(\.type), [0x0102], "our pending request is replaced by the acceptance")

        try store.batch { try $0.block(alice, nowMs: 3) }
        XCTAssertEqual(try store.batch { try $0.receiveFriendRequest(from: alice, displayName: "", message: "", record: [], recordVersion: 1,
                                                                     reply: nil, nowMs: 4) }, .blocked)
        XCTAssertEqual(try store.contact(alice)?.relationship, .blocked)
        XCTAssertTrue(try store.batch { try $0.unblock(alice, nowMs: 5) })
        XCTAssertFalse(try store.batch { try $0.unblock(alice, nowMs: 6) })
    }

    func testDeclineRemoveAndFarewell() throws {
        let store = try NodeStore.inMemory()
        _ = try store.batch { try $0.receiveFriendRequest(from: alice, displayName: "A", message: "", record: [], recordVersion: 1, reply: nil, nowMs: 1) }
        try store.batch { try $0.declineFriend(alice, frame: frame(1, to: alice, type: 0x0103), nowMs: 2) }
        XCTAssertEqual(try store.contact(alice)?.relationship, Relationship.none)
        XCTAssertThrowsError(try store.batch { try $0.declineFriend(alice, frame: frame(2, to: alice), nowMs: 3) })
        XCTAssertThrowsError(try store.batch { try $0.acceptFriend(alice, frame: frame(3, to: alice), nowMs: 3) })
        XCTAssertThrowsError(try store.batch { try $0.removeFriend(bob, frame: frame(4, to: bob), nowMs: 3) })
        _ = try store.batch { try $0.requestFriend(bob, message: "", frame: frame(5, to: bob), nowMs: 4) }
        XCTAssertEqual(try store.batch { try $0.receiveFarewell(from: bob, nowMs: 5) }, .requested)
        XCTAssertEqual(try store.outboxCount(), 1, "only our decline to alice remains")
        XCTAssertNil(try store.batch { try $0.receiveFarewell(from: bob, nowMs: 6) })
    }

    func testOutboxBackoffExpediteAndAcknowledge() throws {
        let store = try NodeStore.inMemory()
        try store.batch { try $0.enqueue(frame(1, to: bob, now: 0)) }
        try store.batch { try $0.enqueue(frame(1, to: bob, now: 0)) } // idempotent by message id
        XCTAssertEqual(try store.outboxCount(), 1)
        XCTAssertEqual(try store.dueRecipients(nowMs: 0), [bob])
        try store.batch { try $0.deferOutbox(for: bob, error: "unreachable", nowMs: 0) }
        XCTAssertEqual(try store.dueRecipients(nowMs: 999), [])
        XCTAssertEqual(try store.dueRecipients(nowMs: 1000), [bob])
        try store.batch { try $0.deferOutbox(for: bob, error: "unreachable", nowMs: 1000) }
        XCTAssertEqual(try store.dueRecipients(nowMs: 2999), [], "the delay doubles")
        for _ in 0..<30 { try store.batch { try $0.deferOutbox(for: bob, error: "x", nowMs: 0) } }
        XCTAssertEqual(try store.outbox(for: bob).first?.nextAttemptMs, 60_000, "capped")
        try store.batch { try $0.expediteOutbox(for: bob, nowMs: 5) }
        XCTAssertEqual(try store.dueRecipients(nowMs: 5), [bob])
        XCTAssertTrue(try store.batch { try $0.acknowledge([UInt8](repeating: 1, count: 16)) })
        XCTAssertFalse(try store.batch { try $0.acknowledge([UInt8](repeating: 1, count: 16)) })
    }

    func testBackOffOnlyWhatWasSent() throws {
        let store = try NodeStore.inMemory()
        try store.batch { try $0.enqueue(frame(1, to: bob, now: 0)) }
        try store.batch { try $0.enqueue(frame(2, to: bob, now: 0)) } // queued after the attempt read the outbox
        try store.batch { try $0.deferOutbox(for: bob, error: "awaiting acknowledgement", nowMs: 0, only: [[UInt8](repeating: 1, count: 16)]) }
        let items = try store.outbox(for: bob)
        XCTAssertEqual(items.map(\.nextAttemptMs).sorted(), [0, 1000])
        XCTAssertEqual(try store.dueRecipients(nowMs: 0), [bob], "the frame that was not sent stays due")
    }

    func testHandledMessagesAndEvents() throws {
        let store = try NodeStore.inMemory()
        let id = [UInt8](repeating: 7, count: 16)
        XCTAssertTrue(try store.batch { try $0.markHandled(id, createdAtMs: 100, windowMs: 1000, nowMs: 100) })
        XCTAssertFalse(try store.batch { try $0.markHandled(id, createdAtMs: 100, windowMs: 1000, nowMs: 200) })
        _ = try store.batch { try $0.markHandled([UInt8](repeating: 8, count: 16), createdAtMs: 5000, windowMs: 1000, nowMs: 5000) }
        XCTAssertTrue(try store.batch { try $0.markHandled(id, createdAtMs: 100, windowMs: 1000, nowMs: 5000) }, "forgotten after the window")

        let e1 = try store.batch { try $0.appendEvent(type: "a", timeMs: 1, fields: "{}") }
        let e2 = try store.batch { try $0.appendEvent(type: "b", timeMs: 2, fields: #"{"x":1}"#) }
        XCTAssertEqual(e2.seq, e1.seq! + 1)
        XCTAssertEqual(try store.events(since: e1.seq!, limit: 10).map(\.type), ["b"])
        XCTAssertEqual(try store.lastEventSeq(), e2.seq)
    }

    func testAddressesAndSightingsAreBounded() throws {
        var limits = NodeStore.Limits()
        limits.maximumAddressesPerPeer = 2
        limits.maximumSightings = 3
        let store = try NodeStore.inMemory(limits: limits)
        for i in 0..<5 { try store.batch { try $0.rememberAddress(bob, host: "10.0.0.\(i)", port: 7810, source: "lan", nowMs: Int64(i)) } }
        XCTAssertEqual(try store.addresses(bob).map(\.host), ["10.0.0.4", "10.0.0.3"])
        for i in 0..<6 {
            try store.batch { try $0.recordSighting(Sighting(publicKey: [UInt8](repeating: UInt8(i), count: 32), displayName: nil,
                                                             host: "h", port: 1, isFriendBeacon: false, lastSeenMs: Int64(i))) }
        }
        XCTAssertEqual(try store.sightings().count, 3)
    }

    func testDurableOnDiskAcrossReopen() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString).sqlite").path
        defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        do {
            let store = try NodeStore(path: path)
            _ = try store.batch { try $0.requestFriend(bob, message: "hi", frame: frame(1, to: bob), nowMs: 1) }
            try store.batch { try $0.setSetting("display_name", "Alice") }
        }
        let again = try NodeStore(path: path)
        XCTAssertEqual(try again.contact(bob)?.relationship, .requested)
        XCTAssertEqual(try again.outboxCount(), 1)
        XCTAssertEqual(try again.setting("display_name"), "Alice")
    }
}

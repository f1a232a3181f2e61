import Foundation
import GRDB
import XCTest
@testable import TandemRelay

/// The relay's mailbox: quotas, who may take what out, expiry, the running totals, and durability.
final class RelayMailboxTests: XCTestCase {
    static let quotas = RelayMailbox.Quotas(itemsPerRecipient: 4, bytesPerRecipient: 100, itemsPerSender: 3, totalItems: 6,
                                            totalBytes: 1_000, itemBytes: 40, ttlMs: 1_000)

    let alice: [UInt8] = [UInt8](repeating: 0xA1, count: 32)
    let bob: [UInt8] = [UInt8](repeating: 0xB0, count: 32)
    let carol: [UInt8] = [UInt8](repeating: 0xC0, count: 32)
    let dave: [UInt8] = [UInt8](repeating: 0xD0, count: 32)

    func mailbox(_ quotas: RelayMailbox.Quotas = quotas, path: String? = nil) throws -> RelayMailbox {
        try RelayMailbox(path: path, quotas: quotas)
    }

    func item(_ size: Int, _ fill: UInt8 = 0x5A) -> [UInt8] { [UInt8](repeating: fill, count: size) }

    /// The mailbox's running totals agree with what it holds.
    func assertDepth(_ box: RelayMailbox, items: Int, bytes: Int, recipients: [[UInt8]],
                     file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertEqual(box.depth.items, items, "items", file: file, line: line)
        XCTAssertEqual(box.depth.bytes, bytes, "bytes", file: file, line: line)
        let held = try recipients.flatMap { try box.items(for: $0) }
        XCTAssertEqual(held.count, items, "items held", file: file, line: line)
        XCTAssertEqual(held.map(\.sealed.count).reduce(0, +), bytes, "bytes held", file: file, line: line)
    }

    func assertRefused(_ expected: RelayMailbox.Refusal, file: StaticString = #filePath, line: UInt = #line,
                       _ body: () throws -> Int64) {
        do {
            let id = try body()
            XCTFail("stored as \(id), expected \(expected)", file: file, line: line)
        } catch let r as RelayMailbox.Refusal {
            XCTAssertEqual(r, expected, file: file, line: line)
        } catch {
            XCTFail("unexpected error \(error)", file: file, line: line)
        }
    }

    /// A mailbox on disk syncs every commit (`synchronous = FULL` on its writer): a deposit answered
    /// OK survives a power cut, not only a crash of the relay.
    func testAMailboxOnDiskSyncsEveryCommit() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("mailbox-sync-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        XCTAssertEqual(try mailbox(path: dir.appendingPathComponent("m.sqlite").path).synchronousLevel(), 2)
    }

    // MARK: recipients

    func testUnknownRecipientIsRefused() throws {
        let box = try mailbox()
        XCTAssertFalse(try box.isRegistered(alice))
        assertRefused(.unknownRecipient) { try box.put(recipient: alice, sender: bob, source: "a", sealed: item(10), nowMs: 0) }
        try assertDepth(box, items: 0, bytes: 0, recipients: [alice])
        try box.register(alice, nowMs: 0)
        XCTAssertTrue(try box.isRegistered(alice))
        XCTAssertFalse(try box.isRegistered(bob))
        _ = try box.put(recipient: alice, sender: bob, source: "a", sealed: item(10), nowMs: 0)
        // Registering again (a later link) keeps the mailbox.
        try box.register(alice, nowMs: 50)
        try assertDepth(box, items: 1, bytes: 10, recipients: [alice])
    }

    // MARK: quotas

    func testItemSize() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        assertRefused(.tooLarge(40)) { try box.put(recipient: alice, sender: bob, source: "a", sealed: item(41), nowMs: 0) }
        XCTAssertNoThrow(try box.put(recipient: alice, sender: bob, source: "a", sealed: item(40), nowMs: 0))
        try assertDepth(box, items: 1, bytes: 40, recipients: [alice])
    }

    func testItemsPerRecipient() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        try box.register(bob, nowMs: 0)
        // Two senders so the per-sender quota (3) is not what stops it.
        for s in [bob, bob, carol, carol] { _ = try box.put(recipient: alice, sender: s, source: "a", sealed: item(5), nowMs: 0) }
        assertRefused(.recipientFull("4 items")) { try box.put(recipient: alice, sender: dave, source: "a", sealed: item(5), nowMs: 0) }
        // Another recipient is not affected.
        XCTAssertNoThrow(try box.put(recipient: bob, sender: dave, source: "a", sealed: item(5), nowMs: 0))
        try assertDepth(box, items: 5, bytes: 25, recipients: [alice, bob])
        // Taking one out makes room.
        let first = try XCTUnwrap(try box.items(for: alice).first)
        XCTAssertEqual(try box.acknowledge([first.id], recipient: alice), 1)
        XCTAssertNoThrow(try box.put(recipient: alice, sender: dave, source: "a", sealed: item(5), nowMs: 0))
        try assertDepth(box, items: 5, bytes: 25, recipients: [alice, bob])
    }

    func testBytesPerRecipient() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        try box.register(bob, nowMs: 0)
        _ = try box.put(recipient: alice, sender: bob, source: "a", sealed: item(40), nowMs: 0)
        _ = try box.put(recipient: alice, sender: carol, source: "a", sealed: item(40), nowMs: 0)
        // 80 held: 21 more is past the 100 bytes, 20 is exactly at it.
        assertRefused(.recipientFull("100 bytes")) { try box.put(recipient: alice, sender: dave, source: "a", sealed: item(21), nowMs: 0) }
        XCTAssertNoThrow(try box.put(recipient: alice, sender: dave, source: "a", sealed: item(20), nowMs: 0))
        assertRefused(.recipientFull("100 bytes")) { try box.put(recipient: alice, sender: dave, source: "a", sealed: item(1), nowMs: 0) }
        XCTAssertNoThrow(try box.put(recipient: bob, sender: dave, source: "a", sealed: item(40), nowMs: 0))
        try assertDepth(box, items: 4, bytes: 140, recipients: [alice, bob])
    }

    func testItemsPerSender() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        try box.register(carol, nowMs: 0)
        for _ in 0..<3 { _ = try box.put(recipient: alice, sender: bob, source: "a", sealed: item(1), nowMs: 0) }
        assertRefused(.senderQuota(3)) { try box.put(recipient: alice, sender: bob, source: "a", sealed: item(1), nowMs: 0) }
        // Another sender to the same recipient, and the same sender to another recipient, still may.
        XCTAssertNoThrow(try box.put(recipient: alice, sender: dave, source: "a", sealed: item(1), nowMs: 0))
        XCTAssertNoThrow(try box.put(recipient: carol, sender: bob, source: "a", sealed: item(1), nowMs: 0))
        try assertDepth(box, items: 5, bytes: 5, recipients: [alice, carol])
    }

    func testTotalItems() throws {
        let box = try mailbox()
        let recipients = (1...4).map { [UInt8](repeating: $0, count: 32) }
        for r in recipients { try box.register(r, nowMs: 0) }
        // 6 in total over three recipients.
        for r in recipients.prefix(3) {
            _ = try box.put(recipient: r, sender: bob, source: "a", sealed: item(1), nowMs: 0)
            _ = try box.put(recipient: r, sender: carol, source: "a", sealed: item(1), nowMs: 0)
        }
        assertRefused(.relayFull) { try box.put(recipient: recipients[3], sender: bob, source: "a", sealed: item(1), nowMs: 0) }
        try assertDepth(box, items: 6, bytes: 6, recipients: recipients)
        let one = try XCTUnwrap(try box.items(for: recipients[0]).first)
        try box.acknowledge([one.id], recipient: recipients[0])
        XCTAssertNoThrow(try box.put(recipient: recipients[3], sender: bob, source: "a", sealed: item(1), nowMs: 0))
        try assertDepth(box, items: 6, bytes: 6, recipients: recipients)
    }

    func testTotalBytes() throws {
        var q = Self.quotas
        q.totalBytes = 100
        q.bytesPerRecipient = 1_000
        q.itemsPerRecipient = 100
        let box = try mailbox(q)
        try box.register(alice, nowMs: 0)
        try box.register(bob, nowMs: 0)
        _ = try box.put(recipient: alice, sender: carol, source: "a", sealed: item(40), nowMs: 0)
        _ = try box.put(recipient: bob, sender: carol, source: "a", sealed: item(40), nowMs: 0)
        assertRefused(.relayFull) { try box.put(recipient: alice, sender: dave, source: "a", sealed: item(21), nowMs: 0) }
        XCTAssertNoThrow(try box.put(recipient: alice, sender: dave, source: "a", sealed: item(20), nowMs: 0))
        assertRefused(.relayFull) { try box.put(recipient: bob, sender: dave, source: "a", sealed: item(1), nowMs: 0) }
        try assertDepth(box, items: 3, bytes: 100, recipients: [alice, bob])
    }

    // MARK: taking items out

    func testItemsComeOldestFirstWithTheirSender() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        let a = try box.put(recipient: alice, sender: bob, source: "a", sealed: item(3, 1), nowMs: 10)
        let b = try box.put(recipient: alice, sender: carol, source: "a", sealed: item(4, 2), nowMs: 20)
        let c = try box.put(recipient: alice, sender: bob, source: "a", sealed: item(5, 3), nowMs: 30)
        let items = try box.items(for: alice)
        XCTAssertEqual(items.map(\.id), [a, b, c])
        XCTAssertEqual(items.map(\.sender), [bob, carol, bob])
        XCTAssertEqual(items.map(\.sealed), [item(3, 1), item(4, 2), item(5, 3)])
        XCTAssertEqual(items.map(\.storedAtMs), [10, 20, 30])
        XCTAssertTrue(items.allSatisfy { $0.recipient == alice })
        XCTAssertEqual(try box.items(for: alice, limit: 2).map(\.id), [a, b])
        XCTAssertEqual(try box.items(for: bob), [])
    }

    func testAcknowledgeOnlyDeletesTheRecipientsOwnItems() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        try box.register(bob, nowMs: 0)
        let forAlice = try box.put(recipient: alice, sender: carol, source: "a", sealed: item(7), nowMs: 0)
        let forBob = try box.put(recipient: bob, sender: carol, source: "a", sealed: item(9), nowMs: 0)
        // Bob names Alice's item: nothing happens.
        XCTAssertEqual(try box.acknowledge([forAlice], recipient: bob), 0)
        // The sender cannot take its own item back either.
        XCTAssertEqual(try box.acknowledge([forAlice, forBob], recipient: carol), 0)
        try assertDepth(box, items: 2, bytes: 16, recipients: [alice, bob])
        // Bob names both: only his own goes; unknown ids and repeats are ignored.
        XCTAssertEqual(try box.acknowledge([forAlice, forBob, forBob, 9_999], recipient: bob), 1)
        XCTAssertEqual(try box.items(for: alice).map(\.id), [forAlice])
        XCTAssertEqual(try box.items(for: bob), [])
        try assertDepth(box, items: 1, bytes: 7, recipients: [alice, bob])
        XCTAssertEqual(try box.acknowledge([], recipient: alice), 0)
        XCTAssertEqual(try box.acknowledge([forAlice], recipient: alice), 1)
        XCTAssertEqual(try box.acknowledge([forAlice], recipient: alice), 0, "twice")
        try assertDepth(box, items: 0, bytes: 0, recipients: [alice, bob])
    }

    // MARK: expiry

    func testItemsExpireAfterTheirTTL() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        try box.register(bob, nowMs: 0)
        _ = try box.put(recipient: alice, sender: carol, source: "a", sealed: item(10), nowMs: 1_000)
        _ = try box.put(recipient: bob, sender: carol, source: "a", sealed: item(20), nowMs: 1_500)
        let late = try box.put(recipient: alice, sender: dave, source: "a", sealed: item(30), nowMs: 2_000)
        XCTAssertEqual(try box.expire(nowMs: 1_999), 0, "the TTL is 1000 ms")
        try assertDepth(box, items: 3, bytes: 60, recipients: [alice, bob])
        XCTAssertEqual(try box.expire(nowMs: 2_000), 1)
        try assertDepth(box, items: 2, bytes: 50, recipients: [alice, bob])
        XCTAssertEqual(try box.expire(nowMs: 2_999), 1)
        XCTAssertEqual(try box.items(for: alice).map(\.id), [late])
        XCTAssertEqual(try box.items(for: bob), [])
        try assertDepth(box, items: 1, bytes: 30, recipients: [alice, bob])
        XCTAssertEqual(try box.expire(nowMs: 2_999), 0, "again: nothing more")
        XCTAssertEqual(try box.expire(nowMs: 10_000), 1)
        try assertDepth(box, items: 0, bytes: 0, recipients: [alice, bob])
        // An expired item that is then acknowledged counts for nothing.
        XCTAssertEqual(try box.acknowledge([late], recipient: alice), 0)
        try assertDepth(box, items: 0, bytes: 0, recipients: [alice, bob])
        // Expired items freed the quotas.
        for _ in 0..<3 { _ = try box.put(recipient: alice, sender: dave, source: "a", sealed: item(30), nowMs: 20_000) }
        try assertDepth(box, items: 3, bytes: 90, recipients: [alice, bob])
    }

    /// Depth stays in step with the rows over a random mix of puts (some refused), acks and expiry.
    func testDepthStaysConsistentOverRandomOperations() throws {
        var q = Self.quotas
        q.totalItems = 20
        q.totalBytes = 400
        let box = try mailbox(q)
        let people = [alice, bob, carol, dave]
        for p in people { try box.register(p, nowMs: 0) }
        var rng = RelayTestRNG(seed: 42)
        var now: Int64 = 0
        for _ in 0..<500 {
            now += Int64.random(in: 0...40, using: &rng)
            switch Int.random(in: 0..<6, using: &rng) {
            case 0, 1, 2:
                let r = people.randomElement(using: &rng)!, s = people.randomElement(using: &rng)!
                _ = try? box.put(recipient: r, sender: s, source: "a", sealed: item(Int.random(in: 1...45, using: &rng)), nowMs: now)
            case 3, 4:
                let r = people.randomElement(using: &rng)!
                let ids = try people.flatMap { try box.items(for: $0) }.map(\.id).filter { _ in Bool.random(using: &rng) }
                _ = try box.acknowledge(ids, recipient: r)
            default:
                _ = try box.expire(nowMs: now)
            }
            try assertDepth(box, items: box.depth.items, bytes: box.depth.bytes, recipients: people)
            XCTAssertLessThanOrEqual(box.depth.items, q.totalItems)
            XCTAssertLessThanOrEqual(box.depth.bytes, q.totalBytes)
            for p in people {
                let held = try box.items(for: p)
                XCTAssertLessThanOrEqual(held.count, q.itemsPerRecipient)
                XCTAssertLessThanOrEqual(held.map(\.sealed.count).reduce(0, +), q.bytesPerRecipient)
            }
        }
    }

    /// The class is Sendable and its comment promises the quotas are checked in the transaction
    /// that stores the item: puts from several threads at once must not overshoot the totals.
    /// (RelayServer happens to call the mailbox from one serial queue, so it does not hit this today;
    /// any other caller, or a server change that drops the queue, does.)
    func testConcurrentPutsDoNotOvershootTheTotals() throws {
        var q = Self.quotas
        q.totalItems = 1
        q.itemsPerRecipient = 100
        q.itemsPerSender = 100
        q.bytesPerRecipient = 100_000
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("relay-mailbox-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        for round in 0..<150 {
            // On a file (as in production) each write takes long enough for the others to queue behind it.
            let box = try mailbox(q, path: dir.appendingPathComponent("mailbox-\(round).sqlite").path)
            let recipients = (0..<8).map { [UInt8](repeating: UInt8($0 + 1), count: 32) }
            for r in recipients { try box.register(r, nowMs: 0) }
            DispatchQueue.concurrentPerform(iterations: 8) { i in
                _ = try? box.put(recipient: recipients[i], sender: [UInt8](repeating: 0xEE, count: 32), source: "a", sealed: [1, 2, 3], nowMs: 0)
            }
            let held = try recipients.flatMap { try box.items(for: $0) }.count
            XCTAssertLessThanOrEqual(held, 1, "round \(round): \(held) items stored with totalItems = 1")
            XCTAssertEqual(box.depth.items, held)
            if held > 1 { break }
        }
    }

    // MARK: quotas across recipients

    func testEmptyItemIsRefused() throws {
        let box = try mailbox()
        try box.register(alice, nowMs: 0)
        assertRefused(.empty) { try box.put(recipient: alice, sender: bob, source: "a", sealed: [], nowMs: 0) }
        XCTAssertNoThrow(try box.put(recipient: alice, sender: bob, source: "a", sealed: item(1), nowMs: 0))
        try assertDepth(box, items: 1, bytes: 1, recipients: [alice])
    }

    /// Every item is charged at least the minimum: byte quotas then bound the number of items too.
    func testMinimumChargeCountsAgainstEveryByteQuota() throws {
        var q = Self.quotas
        q.minimumChargedBytes = 30
        q.itemsPerRecipient = 100
        q.itemsPerSender = 100
        q.totalItems = 100
        let box = try mailbox(q)
        try box.register(alice, nowMs: 0)
        try box.register(bob, nowMs: 0)
        XCTAssertEqual(box.charge(1), 30)
        XCTAssertEqual(box.charge(30), 30)
        XCTAssertEqual(box.charge(31), 31)
        // 100 bytes per recipient: three 1-byte items are charged 90; a fourth would make 120.
        for _ in 0..<3 { _ = try box.put(recipient: alice, sender: bob, source: "a", sealed: item(1), nowMs: 0) }
        XCTAssertEqual(box.depth.bytes, 90)
        assertRefused(.recipientFull("100 bytes")) { try box.put(recipient: alice, sender: carol, source: "b", sealed: item(1), nowMs: 0) }
        // 10 real bytes still fit under the charge rule? No: charged 30, 90 + 30 > 100.
        assertRefused(.recipientFull("100 bytes")) { try box.put(recipient: alice, sender: carol, source: "b", sealed: item(10), nowMs: 0) }
        XCTAssertNoThrow(try box.put(recipient: bob, sender: carol, source: "b", sealed: item(1), nowMs: 0))
        XCTAssertEqual(box.depth.bytes, 120)
        // Acknowledging gives back the charged size.
        let ids = try box.items(for: alice).map(\.id)
        XCTAssertEqual(try box.acknowledge([ids[0]], recipient: alice), 1)
        XCTAssertEqual(box.depth.bytes, 90)
        XCTAssertEqual(try box.expire(nowMs: 10_000), 3)
        XCTAssertEqual(box.depth.items, 0)
        XCTAssertEqual(box.depth.bytes, 0)
    }

    func testBytesPerSenderAcrossRecipients() throws {
        var q = Self.quotas
        q.bytesPerSender = 50
        let box = try mailbox(q)
        for p in [alice, bob, carol] { try box.register(p, nowMs: 0) }
        _ = try box.put(recipient: alice, sender: dave, source: "a", sealed: item(20), nowMs: 0)
        _ = try box.put(recipient: bob, sender: dave, source: "b", sealed: item(30), nowMs: 0)  // 50 = the quota
        assertRefused(.senderTotal(50)) { try box.put(recipient: carol, sender: dave, source: "c", sealed: item(1), nowMs: 0) }
        // Another sender, from the same address, is not affected.
        XCTAssertNoThrow(try box.put(recipient: carol, sender: alice, source: "a", sealed: item(40), nowMs: 0))
        // Delivered mail no longer counts.
        let id = try box.items(for: alice).map(\.id)
        XCTAssertEqual(try box.acknowledge(id, recipient: alice), 1)
        XCTAssertNoThrow(try box.put(recipient: carol, sender: dave, source: "c", sealed: item(20), nowMs: 0))
        assertRefused(.senderTotal(50)) { try box.put(recipient: carol, sender: dave, source: "c", sealed: item(1), nowMs: 0) }
    }

    func testBytesPerAddressAcrossSendersAndRecipients() throws {
        var q = Self.quotas
        q.bytesPerAddress = 60
        q.totalItems = 100
        let box = try mailbox(q)
        for p in [alice, bob, carol] { try box.register(p, nowMs: 0) }
        _ = try box.put(recipient: alice, sender: bob, source: "10.0.0.9", sealed: item(25), nowMs: 0)
        _ = try box.put(recipient: bob, sender: carol, source: "10.0.0.9", sealed: item(35), nowMs: 0)  // 60 = the quota
        assertRefused(.addressQuota(60)) { try box.put(recipient: carol, sender: dave, source: "10.0.0.9", sealed: item(1), nowMs: 0) }
        XCTAssertNoThrow(try box.put(recipient: carol, sender: dave, source: "10.0.0.10", sealed: item(1), nowMs: 0))
    }

    /// The attack that filled the relay: throwaway recipients and senders, all from one address.
    /// It stops at the address's share, and an honest sender from elsewhere still deposits.
    func testThrowawayKeysFromOneAddressCannotFillTheRelay() throws {
        let q = RelayMailbox.Quotas(itemsPerRecipient: 256, bytesPerRecipient: 1 << 20, itemsPerSender: 64, totalItems: 200_000,
                                    totalBytes: 64 * 1024, itemBytes: 4096, ttlMs: 1_000_000,
                                    bytesPerSender: 64 * 1024 / 64, bytesPerAddress: 64 * 1024 / 16, minimumChargedBytes: 1024)
        let box = try mailbox(q)
        let recipients = (0..<40).map { [UInt8](repeating: UInt8($0 + 1), count: 32) }
        for r in recipients { try box.register(r, nowMs: 0) }
        let honest = [UInt8](repeating: 0xFE, count: 32)
        try box.register(honest, nowMs: 0)
        var stored = 0
        for s in 0..<40 {
            let sender = [UInt8](repeating: UInt8(100 + s), count: 32)
            for r in recipients {
                if (try? box.put(recipient: r, sender: sender, source: "198.51.100.1", sealed: item(10), nowMs: 0)) != nil { stored += 1 }
            }
        }
        XCTAssertEqual(stored, 4, "4 KiB per address at a charge of 1 KiB per item")
        XCTAssertEqual(box.depth.bytes, 4 * 1024)
        XCTAssertNoThrow(try box.put(recipient: honest, sender: alice, source: "203.0.113.5", sealed: item(100), nowMs: 0))
    }

    /// Quotas at the extremes do not trap.
    func testQuotaArithmeticDoesNotOverflow() throws {
        let q = RelayMailbox.Quotas(itemsPerRecipient: .max, bytesPerRecipient: .max, itemsPerSender: .max, totalItems: .max,
                                    totalBytes: .max, itemBytes: .max, ttlMs: .max, bytesPerSender: .max, bytesPerAddress: .max,
                                    minimumChargedBytes: .max)
        let box = try mailbox(q)
        try box.register(alice, nowMs: .max)
        XCTAssertEqual(box.charge(1), .max)
        XCTAssertNoThrow(try box.put(recipient: alice, sender: bob, source: "a", sealed: item(1), nowMs: .max))
        assertRefused(.relayFull) { try box.put(recipient: alice, sender: bob, source: "a", sealed: item(1), nowMs: .max) }
        XCTAssertTrue(RelayMailbox.fits(0, .max, within: .max))
        XCTAssertFalse(RelayMailbox.fits(1, .max, within: .max))
        XCTAssertFalse(RelayMailbox.fits(-1, 1, within: 10))
        XCTAssertFalse(RelayMailbox.fits(11, 0, within: 10))
    }

    // MARK: durability

    /// A mailbox written by the previous schema (v1: no source, no charge) opens, keeps its items
    /// and counts them at their size; new items are charged as usual.
    func testAVersion1MailboxIsMigrated() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("relay-mailbox-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("mailbox.sqlite").path
        do {
            let old = try DatabaseQueue(path: path)
            try old.write { db in
                try db.execute(sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1');
                    CREATE TABLE registered (publicKey BLOB PRIMARY KEY, firstMs INTEGER NOT NULL, lastMs INTEGER NOT NULL);
                    CREATE TABLE item (id INTEGER PRIMARY KEY AUTOINCREMENT, recipient BLOB NOT NULL, sender BLOB NOT NULL,
                                       sealed BLOB NOT NULL, storedAtMs INTEGER NOT NULL, expiresAtMs INTEGER NOT NULL);
                    CREATE INDEX item_recipient ON item(recipient, id);
                    CREATE INDEX item_sender ON item(recipient, sender);
                    CREATE INDEX item_expiry ON item(expiresAtMs);
                    """)
                try db.execute(sql: "INSERT INTO registered VALUES (?, 0, 0)", arguments: [Data(alice)])
                try db.execute(sql: "INSERT INTO item (recipient, sender, sealed, storedAtMs, expiresAtMs) VALUES (?, ?, ?, 0, 1000)",
                               arguments: [Data(alice), Data(bob), Data(item(12))])
                try db.execute(sql: "INSERT INTO item (recipient, sender, sealed, storedAtMs, expiresAtMs) VALUES (?, ?, ?, 0, 1000)",
                               arguments: [Data(alice), Data(bob), Data()])
            }
        }
        var q = Self.quotas
        q.minimumChargedBytes = 20
        let box = try mailbox(q, path: path)
        XCTAssertEqual(box.depth.items, 2)
        XCTAssertEqual(box.depth.bytes, 12, "old items count at their size")
        XCTAssertEqual(try box.items(for: alice).map(\.sealed), [item(12), []])
        _ = try box.put(recipient: alice, sender: carol, source: "a", sealed: item(1), nowMs: 500)
        XCTAssertEqual(box.depth.bytes, 32)
        XCTAssertEqual(try box.expire(nowMs: 1000), 2)
        XCTAssertEqual(box.depth.bytes, 20)
    }

    func testItemsAndDepthSurviveReopening() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("relay-mailbox-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("mailbox.sqlite").path

        var ids: [Int64] = []
        do {
            let box = try mailbox(path: path)
            try box.register(alice, nowMs: 0)
            try box.register(bob, nowMs: 0)
            ids.append(try box.put(recipient: alice, sender: carol, source: "a", sealed: item(11, 1), nowMs: 100))
            ids.append(try box.put(recipient: alice, sender: dave, source: "a", sealed: item(12, 2), nowMs: 200))
            ids.append(try box.put(recipient: bob, sender: carol, source: "a", sealed: item(13, 3), nowMs: 300))
            XCTAssertEqual(try box.acknowledge([ids[2]], recipient: bob), 1)
            try assertDepth(box, items: 2, bytes: 23, recipients: [alice, bob])
        }
        let reopened = try mailbox(path: path)
        XCTAssertEqual(reopened.depth.items, 2)
        XCTAssertEqual(reopened.depth.bytes, 23)
        XCTAssertTrue(try reopened.isRegistered(alice))
        XCTAssertTrue(try reopened.isRegistered(bob))
        XCTAssertFalse(try reopened.isRegistered(carol))
        let items = try reopened.items(for: alice)
        XCTAssertEqual(items.map(\.id), [ids[0], ids[1]])
        XCTAssertEqual(items.map(\.sealed), [item(11, 1), item(12, 2)])
        XCTAssertEqual(items.map(\.sender), [carol, dave])
        XCTAssertEqual(items.map(\.storedAtMs), [100, 200])
        XCTAssertEqual(try reopened.items(for: bob), [])
        // Quotas count what was there before: Alice holds 23 bytes; 40 more make 63, then 38 more would pass 100.
        XCTAssertNoThrow(try reopened.put(recipient: alice, sender: bob, source: "a", sealed: item(40), nowMs: 400))
        assertRefused(.recipientFull("100 bytes")) { try reopened.put(recipient: alice, sender: bob, source: "a", sealed: item(38), nowMs: 400) }
        // The TTL carries over: the old items expire on their original schedule.
        XCTAssertEqual(try reopened.expire(nowMs: 1_100), 1)
        try assertDepth(reopened, items: 2, bytes: 52, recipients: [alice, bob])
        // A new item gets a fresh id after the old ones.
        let next = try reopened.put(recipient: bob, sender: alice, source: "a", sealed: item(5), nowMs: 500)
        XCTAssertGreaterThan(next, ids[2])
    }
}

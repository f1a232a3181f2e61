import Foundation
import GRDB
import NIOConcurrencyHelpers

/// Sealed mail for offline nodes (Protocol/README.md section 14.4), in SQLite (WAL) under the
/// relay's data directory, or in memory. Every put checks the quotas in the same transaction
/// that stores the item, so nothing a sender does grows the file past them.
public final class RelayMailbox: Sendable {
    public struct Quotas: Sendable, Equatable {
        public var itemsPerRecipient: Int
        public var bytesPerRecipient: Int
        public var itemsPerSender: Int
        public var totalItems: Int
        public var totalBytes: Int
        public var itemBytes: Int
        public var ttlMs: Int64

        public init(itemsPerRecipient: Int, bytesPerRecipient: Int, itemsPerSender: Int, totalItems: Int, totalBytes: Int,
                    itemBytes: Int, ttlMs: Int64) {
            self.itemsPerRecipient = itemsPerRecipient
            self.bytesPerRecipient = bytesPerRecipient
            self.itemsPerSender = itemsPerSender
            self.totalItems = totalItems
            self.totalBytes = totalBytes
            self.itemBytes = itemBytes
            self.ttlMs = ttlMs
        }
    }

    public struct Item: Sendable, Equatable {
        public let id: Int64
        public let recipient: [UInt8]
        public let sender: [UInt8]
        public let sealed: [UInt8]
        public let storedAtMs: Int64
    }

    public enum Refusal: Error, Equatable, CustomStringConvertible, Sendable {
        case unknownRecipient
        case tooLarge(Int)
        case recipientFull(String)
        case senderQuota(Int)
        case relayFull

        public var description: String {
            switch self {
            case .unknownRecipient: return "the recipient has never registered at this relay"
            case .tooLarge(let max): return "a mailbox item is at most \(max) bytes"
            case .recipientFull(let what): return "the recipient's mailbox is full (\(what))"
            case .senderQuota(let n): return "you already hold \(n) items in this mailbox"
            case .relayFull: return "the relay's mailbox storage is full"
            }
        }
    }

    private let writer: any DatabaseWriter
    public let quotas: Quotas
    private let totals = NIOLockedValueBox((items: 0, bytes: 0))
    /// Keys whose registration is on disk, with when it was last written: a client that comes
    /// back within the hour costs no write (bounded; forgotten wholesale when full).
    private let recentlyRegistered = NIOLockedValueBox<[[UInt8]: Int64]>([:])
    static let registrationRefreshMs: Int64 = 3_600_000
    static let maximumRemembered = 200_000

    /// `path` nil: in memory (lost at exit).
    public init(path: String?, quotas: Quotas) throws {
        if let path {
            var config = Configuration()
            config.busyMode = .timeout(5)
            writer = try DatabasePool(path: path, configuration: config)
        } else {
            writer = try DatabaseQueue()
        }
        self.quotas = quotas
        try Self.migrator.migrate(writer)
        let t = try writer.read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? 0,
             try Int.fetchOne(db, sql: "SELECT coalesce(sum(length(sealed)), 0) FROM item") ?? 0)
        }
        totals.withLockedValue { $0 = (t.0, t.1) }
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            // Keys that made this relay their home: only they receive mail here.
            try db.create(table: "registered") { t in
                t.primaryKey("publicKey", .blob)
                t.column("firstMs", .integer).notNull()
                t.column("lastMs", .integer).notNull()
            }
            try db.create(table: "item") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("recipient", .blob).notNull()
                t.column("sender", .blob).notNull()
                t.column("sealed", .blob).notNull()
                t.column("storedAtMs", .integer).notNull()
                t.column("expiresAtMs", .integer).notNull()
            }
            try db.create(index: "item_recipient", on: "item", columns: ["recipient", "id"])
            try db.create(index: "item_sender", on: "item", columns: ["recipient", "sender"])
            try db.create(index: "item_expiry", on: "item", columns: ["expiresAtMs"])
        }
        return m
    }

    /// Items and bytes held, over all recipients.
    public var depth: (items: Int, bytes: Int) { totals.withLockedValue { $0 } }

    /// True when `key`'s registration is on disk and fresh enough that `register` would write nothing.
    public func isFreshlyRegistered(_ key: [UInt8], nowMs: Int64) -> Bool {
        recentlyRegistered.withLockedValue { $0[key].map { nowMs - $0 < Self.registrationRefreshMs } ?? false }
    }

    public func register(_ key: [UInt8], nowMs: Int64) throws {
        if isFreshlyRegistered(key, nowMs: nowMs) { return }
        defer {
            recentlyRegistered.withLockedValue { m in
                if m.count >= Self.maximumRemembered { m.removeAll() }
                m[key] = nowMs
            }
        }
        try writer.write { db in
            try db.execute(sql: """
                INSERT INTO registered (publicKey, firstMs, lastMs) VALUES (?, ?, ?)
                ON CONFLICT(publicKey) DO UPDATE SET lastMs = excluded.lastMs
                """, arguments: [Data(key), nowMs, nowMs])
        }
    }

    public func isRegistered(_ key: [UInt8]) throws -> Bool {
        try writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM registered WHERE publicKey = ?", arguments: [Data(key)]) ?? false
        }
    }

    /// Stores one sealed item; durable when this returns. Throws a `Refusal` past any quota.
    public func put(recipient: [UInt8], sender: [UInt8], sealed: [UInt8], nowMs: Int64) throws -> Int64 {
        guard sealed.count <= quotas.itemBytes else { throw Refusal.tooLarge(quotas.itemBytes) }
        // Writes are serialised by the database writer: checking and counting the totals inside the
        // write keeps concurrent puts from passing the same check.
        return try writer.write { db in
            let (items, bytes) = totals.withLockedValue { $0 }
            guard items < quotas.totalItems, bytes + sealed.count <= quotas.totalBytes else { throw Refusal.relayFull }
            let r = Data(recipient)
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM registered WHERE publicKey = ?", arguments: [r]) ?? false else {
                throw Refusal.unknownRecipient
            }
            let row = try Row.fetchOne(db, sql: "SELECT count(*) AS n, coalesce(sum(length(sealed)), 0) AS b FROM item WHERE recipient = ?",
                                       arguments: [r])
            let n: Int = row?["n"] ?? 0
            let b: Int = row?["b"] ?? 0
            guard n < quotas.itemsPerRecipient else { throw Refusal.recipientFull("\(quotas.itemsPerRecipient) items") }
            guard b + sealed.count <= quotas.bytesPerRecipient else { throw Refusal.recipientFull("\(quotas.bytesPerRecipient) bytes") }
            let fromSender = try Int.fetchOne(db, sql: "SELECT count(*) FROM item WHERE recipient = ? AND sender = ?",
                                              arguments: [r, Data(sender)]) ?? 0
            guard fromSender < quotas.itemsPerSender else { throw Refusal.senderQuota(quotas.itemsPerSender) }
            try db.execute(sql: "INSERT INTO item (recipient, sender, sealed, storedAtMs, expiresAtMs) VALUES (?, ?, ?, ?, ?)",
                           arguments: [r, Data(sender), Data(sealed), nowMs, nowMs + quotas.ttlMs])
            // Counted before the commit: should the commit fail, the totals over-count (refusing
            // early), never under-count.
            totals.withLockedValue { $0.items += 1; $0.bytes += sealed.count }
            return db.lastInsertedRowID
        }
    }

    /// Items waiting for `recipient`, oldest first.
    public func items(for recipient: [UInt8], limit: Int = 1000) throws -> [Item] {
        if depth.items == 0 { return [] }
        return try writer.read { db in
            try Row.fetchAll(db, sql: "SELECT id, sender, sealed, storedAtMs FROM item WHERE recipient = ? ORDER BY id LIMIT ?",
                             arguments: [Data(recipient), limit]).map { row in
                Item(id: row["id"], recipient: recipient, sender: Array(row["sender"] as Data),
                     sealed: Array(row["sealed"] as Data), storedAtMs: row["storedAtMs"])
            }
        }
    }

    /// Forgets items the recipient has handled. Only its own items: ids of others' are ignored.
    @discardableResult
    public func acknowledge(_ ids: [Int64], recipient: [UInt8]) throws -> Int {
        guard !ids.isEmpty else { return 0 }
        let (n, b): (Int, Int) = try writer.write { db in
            var n = 0, b = 0
            for id in ids {
                if let size = try Int.fetchOne(db, sql: "SELECT length(sealed) FROM item WHERE id = ? AND recipient = ?",
                                               arguments: [id, Data(recipient)]) {
                    try db.execute(sql: "DELETE FROM item WHERE id = ?", arguments: [id])
                    n += 1
                    b += size
                }
            }
            return (n, b)
        }
        totals.withLockedValue { $0.items -= n; $0.bytes -= b }
        return n
    }

    /// Drops items past their time-to-live. Returns how many.
    @discardableResult
    public func expire(nowMs: Int64) throws -> Int {
        let (n, b): (Int, Int) = try writer.write { db in
            let row = try Row.fetchOne(db, sql: "SELECT count(*) AS n, coalesce(sum(length(sealed)), 0) AS b FROM item WHERE expiresAtMs <= ?",
                                       arguments: [nowMs])
            try db.execute(sql: "DELETE FROM item WHERE expiresAtMs <= ?", arguments: [nowMs])
            return (row?["n"] ?? 0, row?["b"] ?? 0)
        }
        if n > 0 { totals.withLockedValue { $0.items -= n; $0.bytes -= b } }
        return n
    }
}

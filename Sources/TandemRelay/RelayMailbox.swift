import Foundation
import GRDB
import NIOConcurrencyHelpers

/// Sealed mail for offline nodes (Protocol/README.md section 14.4), in SQLite (WAL) under the
/// relay's data directory, or in memory. Every put checks the quotas in the same transaction
/// that stores the item, so nothing a sender does grows the file past them.
///
/// Every item is *charged* at least `minimumChargedBytes`, and byte quotas count charged bytes:
/// so each byte quota also bounds the number of items (rows, index entries) it lets in. Besides
/// the per-recipient quotas, a sender key and a source address each hold at most their share
/// across all recipients, so throwaway keys from one address cannot fill the whole relay.
public final class RelayMailbox: Sendable {
    public struct Quotas: Sendable, Equatable {
        public var itemsPerRecipient: Int
        public var bytesPerRecipient: Int
        public var itemsPerSender: Int
        public var totalItems: Int
        public var totalBytes: Int
        public var itemBytes: Int
        public var ttlMs: Int64
        /// Charged bytes one sender key may hold across all recipients.
        public var bytesPerSender: Int
        /// Charged bytes deposited from one source address (`RelayBook.addressBucket`) across all recipients.
        public var bytesPerAddress: Int
        /// Every item is charged at least this many bytes (an empty item is refused).
        public var minimumChargedBytes: Int

        public init(itemsPerRecipient: Int, bytesPerRecipient: Int, itemsPerSender: Int, totalItems: Int, totalBytes: Int,
                    itemBytes: Int, ttlMs: Int64, bytesPerSender: Int = .max, bytesPerAddress: Int = .max,
                    minimumChargedBytes: Int = 1) {
            self.bytesPerSender = bytesPerSender
            self.bytesPerAddress = bytesPerAddress
            self.minimumChargedBytes = max(1, minimumChargedBytes)
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
        case empty
        case tooLarge(Int)
        case recipientFull(String)
        case senderQuota(Int)
        /// The sender key holds its share of the relay's mail (bytes, across all recipients).
        case senderTotal(Int)
        /// The sender's source address holds its share of the relay's mail.
        case addressQuota(Int)
        case relayFull

        public var description: String {
            switch self {
            case .unknownRecipient: return "the recipient has never registered at this relay"
            case .empty: return "a mailbox item cannot be empty"
            case .tooLarge(let max): return "a mailbox item is at most \(max) bytes"
            case .recipientFull(let what): return "the recipient's mailbox is full (\(what))"
            case .senderQuota(let n): return "you already hold \(n) items in this mailbox"
            case .senderTotal(let n): return "you already hold \(n) bytes of mail at this relay"
            case .addressQuota(let n): return "your address already holds \(n) bytes of mail at this relay"
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
            let pool = try DatabasePool(path: path, configuration: config)
            // A deposit is answered OK only once it is synced to disk (Protocol 14.4): GRDB's pool
            // sets `synchronous = NORMAL` on its writer with WAL, so FULL is set after it.
            try pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
            }
            writer = pool
        } else {
            writer = try DatabaseQueue()
        }
        self.quotas = quotas
        try Self.migrator.migrate(writer)
        let t = try writer.read { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? 0,
             try Int.fetchOne(db, sql: "SELECT coalesce(sum(charged), 0) FROM item") ?? 0)
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
        m.registerMigration("v2") { db in
            // Where each item came from and what it is charged, for the quotas across recipients.
            try db.alter(table: "item") { t in
                t.add(column: "source", .text).notNull().defaults(to: "")
                t.add(column: "charged", .integer).notNull().defaults(to: 0)
            }
            try db.execute(sql: "UPDATE item SET charged = length(sealed)")
            try db.create(index: "item_by_sender", on: "item", columns: ["sender"])
            try db.create(index: "item_by_source", on: "item", columns: ["source"])
        }
        return m
    }

    /// Items and charged bytes held, over all recipients.
    public var depth: (items: Int, bytes: Int) { totals.withLockedValue { $0 } }

    /// True when `key`'s registration is on disk and fresh enough that `register` would write nothing.
    /// The writer connection's `PRAGMA synchronous` (2 = FULL).
    func synchronousLevel() throws -> Int {
        try writer.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    public func isFreshlyRegistered(_ key: [UInt8], nowMs: Int64) -> Bool {
        recentlyRegistered.withLockedValue { $0[key].map { nowMs - $0 < Self.registrationRefreshMs } ?? false }
    }

    public func register(_ key: [UInt8], nowMs: Int64) throws {
        if isFreshlyRegistered(key, nowMs: nowMs) { return }
        try writer.write { db in
            try db.execute(sql: """
                INSERT INTO registered (publicKey, firstMs, lastMs) VALUES (?, ?, ?)
                ON CONFLICT(publicKey) DO UPDATE SET lastMs = excluded.lastMs
                """, arguments: [Data(key), nowMs, nowMs])
        }
        // Remembered only once it is on disk: a failed write must not pass for a registration later.
        recentlyRegistered.withLockedValue { m in
            if m.count >= Self.maximumRemembered { m.removeAll() }
            m[key] = nowMs
        }
    }

    public func isRegistered(_ key: [UInt8]) throws -> Bool {
        try writer.read { db in
            try Bool.fetchOne(db, sql: "SELECT 1 FROM registered WHERE publicKey = ?", arguments: [Data(key)]) ?? false
        }
    }

    /// What an item of `size` bytes is charged.
    public func charge(_ size: Int) -> Int { max(size, quotas.minimumChargedBytes) }

    /// True when `more` charged bytes on top of `used` stay within `quota` (no overflow whatever the values).
    static func fits(_ used: Int, _ more: Int, within quota: Int) -> Bool {
        used >= 0 && more >= 0 && used <= quota && more <= quota - used
    }

    /// Stores one sealed item; durable when this returns. Throws a `Refusal` past any quota.
    /// `source`: the depositing client's address bucket (`RelayBook.addressBucket`).
    public func put(recipient: [UInt8], sender: [UInt8], source: String, sealed: [UInt8], nowMs: Int64) throws -> Int64 {
        guard !sealed.isEmpty else { throw Refusal.empty }
        guard sealed.count <= quotas.itemBytes else { throw Refusal.tooLarge(quotas.itemBytes) }
        let charged = charge(sealed.count)
        // Writes are serialised by the database writer: checking and counting the totals inside the
        // write keeps concurrent puts from passing the same check.
        return try writer.write { db in
            let (items, bytes) = totals.withLockedValue { $0 }
            guard items < quotas.totalItems, Self.fits(bytes, charged, within: quotas.totalBytes) else { throw Refusal.relayFull }
            let r = Data(recipient)
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM registered WHERE publicKey = ?", arguments: [r]) ?? false else {
                throw Refusal.unknownRecipient
            }
            let row = try Row.fetchOne(db, sql: "SELECT count(*) AS n, coalesce(sum(charged), 0) AS b FROM item WHERE recipient = ?",
                                       arguments: [r])
            let n: Int = row?["n"] ?? 0
            let b: Int = row?["b"] ?? 0
            guard n < quotas.itemsPerRecipient else { throw Refusal.recipientFull("\(quotas.itemsPerRecipient) items") }
            guard Self.fits(b, charged, within: quotas.bytesPerRecipient) else {
                throw Refusal.recipientFull("\(quotas.bytesPerRecipient) bytes")
            }
            let s = Data(sender)
            let fromSender = try Int.fetchOne(db, sql: "SELECT count(*) FROM item WHERE recipient = ? AND sender = ?",
                                              arguments: [r, s]) ?? 0
            guard fromSender < quotas.itemsPerSender else { throw Refusal.senderQuota(quotas.itemsPerSender) }
            let senderBytes = try Int.fetchOne(db, sql: "SELECT coalesce(sum(charged), 0) FROM item WHERE sender = ?",
                                               arguments: [s]) ?? 0
            guard Self.fits(senderBytes, charged, within: quotas.bytesPerSender) else { throw Refusal.senderTotal(quotas.bytesPerSender) }
            let sourceBytes = try Int.fetchOne(db, sql: "SELECT coalesce(sum(charged), 0) FROM item WHERE source = ?",
                                               arguments: [source]) ?? 0
            guard Self.fits(sourceBytes, charged, within: quotas.bytesPerAddress) else {
                throw Refusal.addressQuota(quotas.bytesPerAddress)
            }
            let (expiry, overflow) = nowMs.addingReportingOverflow(quotas.ttlMs)
            try db.execute(sql: """
                INSERT INTO item (recipient, sender, sealed, storedAtMs, expiresAtMs, source, charged) VALUES (?, ?, ?, ?, ?, ?, ?)
                """, arguments: [r, s, Data(sealed), nowMs, overflow ? Int64.max : expiry, source, charged])
            // Counted before the commit: should the commit fail, the totals over-count (refusing
            // early), never under-count.
            totals.withLockedValue { $0.items += 1; $0.bytes += charged }
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
                if let size = try Int.fetchOne(db, sql: "SELECT charged FROM item WHERE id = ? AND recipient = ?",
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

    /// Every quota and rule checked against what is stored: the cached totals agree with the rows,
    /// no quota is exceeded, and every item is one `put` would take (non-empty, within the item
    /// size, charged what `charge` says, for a registered recipient). Empty when all hold (the
    /// relay fuzz target asserts it after every step).
    public func violations() throws -> [String] {
        let (items, bytes) = depth
        return try writer.read { db in
            var out: [String] = []
            let n = try Int.fetchOne(db, sql: "SELECT count(*) FROM item") ?? 0
            let b = try Int.fetchOne(db, sql: "SELECT coalesce(sum(charged), 0) FROM item") ?? 0
            if n != items || b != bytes { out.append("totals (\(items) items, \(bytes) B) differ from the rows (\(n), \(b))") }
            if n > quotas.totalItems { out.append("\(n) items > \(quotas.totalItems)") }
            if b > quotas.totalBytes { out.append("\(b) bytes > \(quotas.totalBytes)") }
            for row in try Row.fetchAll(db, sql: "SELECT count(*) AS n, sum(charged) AS b FROM item GROUP BY recipient") {
                let (rn, rb): (Int, Int) = (row["n"], row["b"])
                if rn > quotas.itemsPerRecipient || rb > quotas.bytesPerRecipient {
                    out.append("a recipient holds \(rn) items, \(rb) B (quota \(quotas.itemsPerRecipient), \(quotas.bytesPerRecipient) B)")
                }
            }
            let perPair = try Int.fetchOne(db, sql: "SELECT max(n) FROM (SELECT count(*) AS n FROM item GROUP BY recipient, sender)") ?? 0
            if perPair > quotas.itemsPerSender { out.append("a sender holds \(perPair) items in one mailbox > \(quotas.itemsPerSender)") }
            let perSender = try Int.fetchOne(db, sql: "SELECT max(b) FROM (SELECT sum(charged) AS b FROM item GROUP BY sender)") ?? 0
            if perSender > quotas.bytesPerSender { out.append("a sender holds \(perSender) B > \(quotas.bytesPerSender)") }
            let perSource = try Int.fetchOne(db, sql: "SELECT max(b) FROM (SELECT sum(charged) AS b FROM item GROUP BY source)") ?? 0
            if perSource > quotas.bytesPerAddress { out.append("an address holds \(perSource) B > \(quotas.bytesPerAddress)") }
            for row in try Row.fetchAll(db, sql: """
                SELECT length(sealed) AS size, charged, storedAtMs, expiresAtMs,
                       EXISTS (SELECT 1 FROM registered WHERE publicKey = item.recipient) AS known
                FROM item
                """) {
                let size: Int = row["size"], charged: Int = row["charged"]
                let stored: Int64 = row["storedAtMs"], expires: Int64 = row["expiresAtMs"], known: Bool = row["known"]
                if size < 1 || size > quotas.itemBytes { out.append("an item of \(size) B") }
                if charged != charge(size) { out.append("an item of \(size) B charged \(charged)") }
                if expires < stored { out.append("an item expiring before it was stored") }
                if !known { out.append("an item for a recipient that never registered") }
            }
            return out
        }
    }

    /// Drops items past their time-to-live. Returns how many.
    @discardableResult
    public func expire(nowMs: Int64) throws -> Int {
        let (n, b): (Int, Int) = try writer.write { db in
            let row = try Row.fetchOne(db, sql: "SELECT count(*) AS n, coalesce(sum(charged), 0) AS b FROM item WHERE expiresAtMs <= ?",
                                       arguments: [nowMs])
            try db.execute(sql: "DELETE FROM item WHERE expiresAtMs <= ?", arguments: [nowMs])
            return (row?["n"] ?? 0, row?["b"] ?? 0)
        }
        if n > 0 { totals.withLockedValue { $0.items -= n; $0.bytes -= b } }
        return n
    }
}

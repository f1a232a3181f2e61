import Foundation
import GRDB
import TandemProtocol

// File transfers between friends (Protocol/messages.md 7, migration v9-message-files): reads on
// `StoreReading`, writes only on `StoreStep`. The rows themselves are `StoredFileTransfer` (v6).

/// What the node's file flow keeps of the pending incoming files, for its bounds.
public struct PendingFileTotals: Sendable, Equatable {
    public var count: Int
    public var bytes: Int64
}

extension StoreReading {
    /// Ids bound in one `IN (…)` list (far below SQLite's limit on variables; a page of
    /// `message list` is at most 1,000 messages, two queries).
    static var idsPerQuery: Int { 500 }

    /// `?, ?, …`: `count` placeholders for an `IN (…)` list.
    static func placeholders(_ count: Int) -> String { repeatElement("?", count: count).joined(separator: ", ") }

    /// The transfer attached to message `messageId` (the offer's `message_id`), newest first.
    public func fileTransfer(messageId: [UInt8]) throws -> StoredFileTransfer? {
        try read { db in
            // Prepared once: `message list` asks it for every message it shows.
            try StoredFileTransfer.fetchOne(try db.cachedStatement(sql: "SELECT * FROM fileTransfer WHERE messageId = ? ORDER BY createdAtMs DESC LIMIT 1"),
                                            arguments: [Data(messageId)])
        }
    }

    /// For each of `messageIds` that has one, the transfer `fileTransfer(messageId:)` gives (the
    /// newest), by message id: one query for a page of `message list`, not one per message shown
    /// (~60 k instructions each, messages.md 11.6).
    public func fileTransfers(messageIds: [[UInt8]]) throws -> [Data: StoredFileTransfer] {
        var out: [Data: StoredFileTransfer] = [:]
        for start in stride(from: 0, to: messageIds.count, by: Self.idsPerQuery) {
            let ids = messageIds[start..<min(start + Self.idsPerQuery, messageIds.count)]
            let found = try read { db in
                try StoredFileTransfer.fetchAll(db, sql: "SELECT * FROM fileTransfer WHERE messageId IN (\(Self.placeholders(ids.count))) ORDER BY createdAtMs DESC",
                                                arguments: StatementArguments(ids.map { Data($0) }))
            }
            for t in found {
                guard let id = t.messageId, out[id] == nil else { continue }  // the newest first
                out[id] = t
            }
        }
        return out
    }

    /// Transfers whose file id starts with these hex digits (at most 2).
    public func fileTransfers(idPrefix: String) throws -> [StoredFileTransfer] {
        guard let low = parseHex(idPrefix.count % 2 == 0 ? idPrefix : idPrefix + "0") else { return [] }
        var high = parseHex(idPrefix.count % 2 == 0 ? idPrefix : idPrefix + "f") ?? low
        high += [UInt8](repeating: 0xff, count: max(0, 16 - high.count))
        return try read { db in
            try StoredFileTransfer.fetchAll(db, sql: "SELECT * FROM fileTransfer WHERE fileId BETWEEN ? AND ? LIMIT 2",
                                            arguments: [Data(low), Data(high)])
        }
    }

    /// Transfers not yet ended (incoming offered/receiving/verifying; outgoing not failed), both ways.
    public func openFileTransfers() throws -> [StoredFileTransfer] {
        try read { db in
            try StoredFileTransfer.fetchAll(db, sql: """
                SELECT * FROM fileTransfer WHERE state IN ('offered', 'receiving', 'verifying')
                   OR (direction = 'out' AND state = 'complete' AND deadlineMs > 0)
                ORDER BY createdAtMs
                """)
        }
    }

    /// Incoming transfers not finished: from `peer` (count), and in all (count and bytes).
    public func pendingIncomingFileTotals(peer: [UInt8]) throws -> (fromPeer: Int, all: PendingFileTotals) {
        try read { db in
            let mine = try Int.fetchOne(db, sql: """
                SELECT COUNT(*) FROM fileTransfer WHERE peer = ? AND direction = 'in' AND state IN ('offered', 'receiving', 'verifying')
                """, arguments: [Data(peer)]) ?? 0
            let row = try Row.fetchOne(db, sql: """
                SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS bytes FROM fileTransfer
                WHERE direction = 'in' AND state IN ('offered', 'receiving', 'verifying')
                """)
            return (mine, PendingFileTotals(count: row?["n"] ?? 0, bytes: row?["bytes"] ?? 0))
        }
    }

    public func fileLeaves(_ fileId: [UInt8]) throws -> [UInt8]? {
        try read { db in
            try Data.fetchOne(db, sql: "SELECT leaves FROM fileLeaves WHERE fileId = ?", arguments: [Data(fileId)]).map { Array($0) }
        }
    }

    public func fileBytesMoved(_ fileId: [UInt8]) throws -> Int64 {
        try read { db in try Int64.fetchOne(db, sql: "SELECT bytesMoved FROM fileTransfer WHERE fileId = ?", arguments: [Data(fileId)]) ?? 0 }
    }

    /// The auto-accept limit set for the friend `peer` (nil: none of its own).
    public func fileAutoAcceptBytes(peer: [UInt8]) throws -> Int64? {
        try read { db in
            try Int64.fetchOne(db, sql: "SELECT fileAutoAcceptBytes FROM conversation WHERE peer = ?", arguments: [Data(peer)])
        }
    }
}

extension StoreStep {
    /// An outgoing offer: the transfer row, its leaf hashes and its FILE_OFFER frame, together.
    public func storeOutgoingFile(_ transfer: StoredFileTransfer, leaves: [UInt8], frame: OutboxItem) throws {
        try write { db in
            try transfer.insert(db)
            try db.execute(sql: "INSERT INTO fileLeaves(fileId, leaves) VALUES (?, ?)", arguments: [transfer.fileId, Data(leaves)])
            try frame.insert(db)
        }
    }

    /// Adds to the chunk bytes moved (soft: a lost update only understates a counter).
    public func addFileBytesMoved(_ fileId: [UInt8], _ bytes: Int64) throws {
        try write(durable: false) { db in
            try db.execute(sql: "UPDATE fileTransfer SET bytesMoved = bytesMoved + ? WHERE fileId = ?", arguments: [bytes, Data(fileId)])
        }
    }

    /// The transfer's state and bitmap (soft for progress: a lost bitmap is fetched again), and,
    /// for an outgoing one, whether it is still served (`deadlineMs` 0: no longer).
    public func setFileProgress(_ fileId: [UInt8], state: StoredFileTransfer.State, bitmap: [UInt8], failure: String? = nil,
                                path: String? = nil, durable: Bool, nowMs: Int64) throws {
        try write(durable: durable) { db in
            try db.execute(sql: """
                UPDATE fileTransfer SET state = ?, bitmap = ?, failure = ?, path = COALESCE(?, path), updatedAtMs = ? WHERE fileId = ?
                """, arguments: [state.rawValue, Data(bitmap), failure, path, nowMs, Data(fileId)])
        }
    }

    /// An outgoing file is no longer served (cancelled, or its offer ran out).
    public func endOutgoingFile(_ fileId: [UInt8], state: StoredFileTransfer.State, failure: String?, nowMs: Int64) throws {
        try write { db in
            try db.execute(sql: "UPDATE fileTransfer SET state = ?, failure = ?, deadlineMs = 0, updatedAtMs = ? WHERE fileId = ?",
                           arguments: [state.rawValue, failure, nowMs, Data(fileId)])
            try db.execute(sql: "DELETE FROM fileLeaves WHERE fileId = ?", arguments: [Data(fileId)])
        }
    }

    public func setFileAutoAcceptBytes(peer: [UInt8], _ bytes: Int64?, nowMs: Int64) throws {
        let c = try directConversation(peer: peer, nowMs: nowMs)
        try write { db in
            try db.execute(sql: "UPDATE conversation SET fileAutoAcceptBytes = ? WHERE id = ?", arguments: [bytes, c.id])
        }
    }
}

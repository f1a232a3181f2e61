import Foundation
import GRDB

extension StoreStep {
    /// Stores `count` messages made by `make` (index 0 ..< count) in this step, for filling a store
    /// in bulk (`tandem-bench messages --search` fills a million): no duplicate or bound checks (the
    /// caller made the rows: unique ids and seqs), one prepared insert, and the search index built
    /// once at the end (FTS5 `rebuild`, which re-indexes every message of the store: far cheaper than
    /// a million incremental index inserts, and the reason this is not the path for one message).
    /// The index's insert trigger is dropped for the import and made again in the same
    /// transaction: a failure rolls all of it back.
    public func importMessages(count: Int, _ make: (Int) -> StoredMessage) throws {
        try write { db in
            try db.execute(sql: "DROP TRIGGER IF EXISTS \"__messageFts_ai\"")
            let insert = try db.cachedStatement(sql: """
                INSERT INTO message (id, conversationId, author, seq, lamport, sentLamport, text, replyTo, sentAtMs, receivedAtMs,
                                     state, retracted, expiresAtMs, storedBytes)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            var maxLamport: [Int64: Int64] = [:]
            for i in 0..<max(0, count) {
                let m = make(i)
                try insert.execute(arguments: [m.id, m.conversationId, m.author, m.seq, m.lamport, m.sentLamport, m.text, m.replyTo,
                                               m.sentAtMs, m.receivedAtMs, m.state.rawValue, m.retracted, m.expiresAtMs, m.storedBytes])
                if m.state != .held { maxLamport[m.conversationId] = max(maxLamport[m.conversationId] ?? 0, m.lamport) }
            }
            for (cid, lamport) in maxLamport {
                try db.execute(sql: "UPDATE conversation SET maxLamport = MAX(maxLamport, ?) WHERE id = ?", arguments: [lamport, cid])
            }
            try db.execute(sql: MigrationMessageBurst.insertTrigger)
            try db.execute(sql: "INSERT INTO messageFts(messageFts) VALUES ('rebuild')")
        }
    }
}

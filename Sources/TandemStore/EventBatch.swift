import Foundation
import GRDB

// A batch's event rows in as few statements as there are bits in its size (Protocol/messages.md
// 11.6, session 9): a send batch's `message.sent` events went in one statement each, with a record
// encoded per row; now in multi-row INSERTs of 64, 32, … 1 rows, through cached statements.

extension StoreStep {
    /// Rows per statement at most (3 values each: far below SQLite's bound on a statement's values).
    static let eventRowsPerStatement = 64

    /// `INSERT INTO event … VALUES (?, ?, ?), …` with 2^k rows, k = 0…6: index k.
    private static let eventInserts: [String] = (0...6).map { k in
        "INSERT INTO event(type, timeMs, fields) VALUES " + repeatElement("(?, ?, ?)", count: 1 << k).joined(separator: ", ")
    }

    /// Stores `events` in this order with consecutive seqs (those `appendEvent` one at a time would
    /// give), returned in the same order; delivered after the commit as any event row. All or none:
    /// a failure leaves no row of them (and the step goes on).
    public func appendEvents(_ events: [PendingEvent]) throws -> [StoredEvent] {
        guard !events.isEmpty else { return [] }
        let body = { (db: Database) throws -> [StoredEvent] in
            var stored: [StoredEvent] = []
            stored.reserveCapacity(events.count)
            var rest = events[...]
            while !rest.isEmpty {
                // The largest power of two that fits: a batch of n takes at most popcount-many statements (n ≤ 127).
                var k = 6
                while 1 << k > rest.count { k -= 1 }
                let chunk = rest.prefix(1 << k)
                rest = rest.dropFirst(chunk.count)
                var values: [(any DatabaseValueConvertible)?] = []
                values.reserveCapacity(chunk.count * 3)
                for p in chunk { values.append(p.type); values.append(p.timeMs); values.append(p.fields) }
                try db.cachedStatement(sql: Self.eventInserts[k]).execute(arguments: StatementArguments(values))
                // AUTOINCREMENT gives a statement's rows the next seqs, in the order of its VALUES:
                // the last row has the connection's last inserted rowid.
                let last = db.lastInsertedRowID
                for (i, p) in chunk.enumerated() {
                    let e = StoredEvent(seq: last - Int64(chunk.count - 1 - i), type: p.type, timeMs: p.timeMs, fields: p.fields)
                    stored.append(e)
                }
            }
            if let first = stored.first?.seq, let last = stored.last?.seq, last / 1000 > (first - 1) / 1000 {
                // A thousandth seq among them: the housekeeping `appendEvent` does, once. A prune
                // that fails (it undoes itself) leaves the old rows for the next thousandth event.
                try? db.cachedStatement(sql: "DELETE FROM event WHERE seq <= ?").execute(arguments: [last - Int64(self.limits.maximumEvents)])
            }
            return stored
        }
        // One statement needs no savepoint (`writeOne`); several do, so that a failure leaves none.
        let stored = events.count == 1 || events.count.nonzeroBitCount == 1 && events.count <= Self.eventRowsPerStatement
            ? try writeOne(durable: false, body) : try write(durable: false, body)
        for (e, p) in zip(stored, events) { inserted(e, decoded: p.decoded) }
        return stored
    }
}

import Foundation
import GRDB

extension StoreReading {
    /// The signed frames of `messageIds` still waiting for `key`, by id, in one read (a write of a
    /// burst's window refill took one read transaction per frame: messages.md 11.6). Ids no longer
    /// queued (acknowledged since they were listed) are absent.
    public func outboxFrames(_ messageIds: [[UInt8]], to key: [UInt8]) throws -> [[UInt8]: [UInt8]] {
        guard !messageIds.isEmpty else { return [:] }
        return try read { db in
            let statement = try db.cachedStatement(sql: "SELECT frame FROM outbox WHERE messageId = ? AND recipient = ?")
            let recipient = Data(key)
            var frames: [[UInt8]: [UInt8]] = [:]
            frames.reserveCapacity(messageIds.count)
            for id in messageIds {
                if let frame = try Data.fetchOne(statement, arguments: [Data(id), recipient]) { frames[id] = Array(frame) }
            }
            return frames
        }
    }

    /// The frames waiting for `key` after its oldest `skip` (in the outbox's order), at most `limit`,
    /// with their bytes, in one read: a window refill skips the frames in flight on the link (the
    /// oldest, written oldest first) without reading their rows — SQLite steps over an OFFSET in the
    /// index alone, so only the rows returned are read (messages.md 11.6, session 14).
    public func outboxFrames(for key: [UInt8], after skip: Int, limit: Int) throws -> [(head: OutboxHead, frame: [UInt8])] {
        try read { db in
            try Row.fetchAll(try db.cachedStatement(sql: """
                SELECT messageId, type, nextAttemptMs, frame FROM outbox WHERE recipient = ? ORDER BY createdAtMs LIMIT ? OFFSET ?
                """), arguments: [Data(key), max(0, limit), max(0, skip)]).map { row in
                let frame = Array(try row.decode(Data.self, atIndex: 3))
                return (OutboxHead(messageId: Array(try row.decode(Data.self, atIndex: 0)), type: try row.decode(Int.self, atIndex: 1),
                                   nextAttemptMs: try row.decode(Int64.self, atIndex: 2), frameBytes: frame.count),
                        frame)
            }
        }
    }
}

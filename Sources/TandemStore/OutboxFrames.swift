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
}

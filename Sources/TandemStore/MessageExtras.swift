import Foundation
import GRDB

// Reads and writes of messaging that came after `Messages.swift`: cheers counted for `stats`.

extension StoreReading {
    /// Cheers others sent on `subject`'s results (its own cheers on others are not counted).
    public func cheersCount(subject: [UInt8]) throws -> Int {
        try read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM cheer WHERE subject = ? AND author != ?",
                             arguments: [Data(subject), Data(subject)]) ?? 0
        }
    }
}

extension StoreReading {
    /// The envelope a thread participant signed for message `messageId`, as its inviter kept it.
    public func threadFrame(_ messageId: [UInt8]) throws -> [UInt8]? {
        try read { db in
            try Data.fetchOne(db, sql: "SELECT envelope FROM threadFrame WHERE messageId = ?", arguments: [Data(messageId)]).map { Array($0) }
        }
    }
}

extension StoreStep {
    /// Keeps the author's envelope of a thread MESSAGE this node forwards (as the inviter), for a
    /// later GAP_REQUEST. Nothing when the message is not stored (or already kept).
    public func keepThreadFrame(_ messageId: [UInt8], envelope: [UInt8]) throws {
        try write { db in
            try db.execute(sql: """
                INSERT OR IGNORE INTO threadFrame (messageId, envelope)
                SELECT ?, ? WHERE EXISTS (SELECT 1 FROM message WHERE id = ? AND retracted = 0)
                """, arguments: [Data(messageId), Data(envelope), Data(messageId)])
        }
    }
}

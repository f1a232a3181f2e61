import Foundation
import GRDB
import TandemProtocol

// Files in a challenge's thread (Protocol/messages.md 7.7). No table of their own: a thread's file is a
// `fileTransfer` row in the thread's conversation. At the thread's inviter, a file another participant
// offered is fetched like any incoming file and, once whole and checked against `file_hash`, served to
// the other participants until the row's `deadlineMs` (the offer's 8 days); its leaf hashes go into
// `fileLeaves` then, as an offered file's do.

extension StoreReading {
    /// Received files of threads still within their offer's lifetime (`deadlineMs` above 0): the
    /// ones the node serves as a thread's inviter are among them (the caller knows which challenges
    /// it invited).
    public func receivedThreadFiles() throws -> [StoredFileTransfer] {
        try read { db in
            try StoredFileTransfer.fetchAll(db, sql: """
                SELECT f.* FROM fileTransfer f JOIN conversation c ON c.id = f.conversationId
                WHERE f.direction = 'in' AND f.state = 'complete' AND f.deadlineMs > 0 AND c.challengeId IS NOT NULL
                ORDER BY f.createdAtMs
                """)
        }
    }
}

extension StoreStep {
    /// The leaf hashes of a received thread file the inviter serves (computed from the whole file once
    /// it matched `file_hash`).
    public func keepServedFileLeaves(_ fileId: [UInt8], leaves: [UInt8]) throws {
        try write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO fileLeaves(fileId, leaves) VALUES (?, ?)", arguments: [Data(fileId), Data(leaves)])
        }
    }

    /// A received thread file is no longer served (its offer ran out, or the file is gone): its
    /// deadline is cleared and its leaf hashes go; the row and the file stay.
    public func endServedFile(_ fileId: [UInt8], nowMs: Int64) throws {
        try write { db in
            try db.execute(sql: "UPDATE fileTransfer SET deadlineMs = 0, updatedAtMs = ? WHERE fileId = ?", arguments: [nowMs, Data(fileId)])
            try db.execute(sql: "DELETE FROM fileLeaves WHERE fileId = ?", arguments: [Data(fileId)])
        }
    }
}

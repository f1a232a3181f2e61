import Foundation
import GRDB

/// Migration `v9-message-thread-frames` (Protocol/messages.md 4 and 5.2): a thread's inviter keeps
/// the envelope each other participant signed for its MESSAGE, so it can forward that very frame
/// again when a participant's GAP_REQUEST asks for it (it cannot sign one in the author's name).
/// The row goes with its message: deleted with it (expiry, a conversation's removal) and when the
/// message is retracted. Also the partial index `message_unread`, which keeps `message list`
/// (marking what it shows as read) from visiting every older message of the friend.
/// Frozen once shipped: string names only, no app types.
enum MigrationThreadFrames {
    static func threadFrames(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE threadFrame (
                messageId BLOB NOT NULL PRIMARY KEY REFERENCES message(id) ON DELETE CASCADE,
                -- The author's whole envelope, byte for byte (159 ... 20 639 bytes, messages.md 3).
                envelope BLOB NOT NULL CHECK (typeof(envelope) = 'blob' AND length(envelope) BETWEEN 159 AND 20639)
            );
            CREATE TRIGGER threadFrame_retracted AFTER UPDATE OF retracted ON message WHEN new.retracted = 1
            BEGIN
                DELETE FROM threadFrame WHERE messageId = new.id;
            END;
            -- The friend's messages not yet shown: `message list` marks those up to the newest shown
            -- as read, and without this index visits every older row of the author each time.
            CREATE INDEX message_unread ON message(conversationId, author, seq) WHERE state = 'received';
            """)
    }
}

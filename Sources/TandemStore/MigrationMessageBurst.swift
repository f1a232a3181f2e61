import GRDB

/// "v9-message-burst" (Protocol/messages.md 8 and 11.5): new messages reach the search index once
/// per step, not once per message.
///
/// FTS5 writes what it was given to disk as a new segment at every savepoint of the transaction it
/// is in (and a statement that fires a trigger opens one): with the index fed by a trigger per
/// inserted row, every message of a step became a segment of its own, with the index structure
/// rewritten and merged each time (many pages per commit). Now the insert trigger only notes the
/// row in `messageFtsPending`, and the step indexes every noted row with one statement right before
/// it commits (`StoreStep.indexPendingMessages`): one segment per step. A row deleted or whose text
/// changes while it is still noted is not in the index yet, so the delete and update triggers leave
/// the index alone for it (the delete trigger drops the note; the update's new text is what the
/// step then indexes). Every committed step leaves the table empty: the index is complete for
/// every committed message, as before.
///
/// The same migration replaces the outbox's index on `recipient` by one on `(recipient,
/// nextAttemptMs)` (`StoreReading.dueRecipients`).
enum MigrationMessageBurst {
    static let insertTrigger = """
        CREATE TRIGGER "__messageFts_ai" AFTER INSERT ON message BEGIN
            INSERT INTO messageFtsPending(rid) VALUES (new.rowid);
        END;
        """

    static func messageBurst(_ db: Database) throws {
        // `outbox_recipient_due` serves what `outbox_recipient` did (its first column) and lets
        // `dueRecipients` seek each recipient's earliest due frame instead of walking every due one.
        try db.execute(sql: """
            DROP INDEX outbox_recipient;
            CREATE INDEX outbox_recipient_due ON outbox(recipient, nextAttemptMs);
            CREATE TABLE messageFtsPending (rid INTEGER PRIMARY KEY);
            DROP TRIGGER "__messageFts_ai";
            DROP TRIGGER "__messageFts_ad";
            DROP TRIGGER "__messageFts_au";
            \(insertTrigger)
            CREATE TRIGGER "__messageFts_ad" AFTER DELETE ON message BEGIN
                INSERT INTO messageFts(messageFts, rowid, text) SELECT 'delete', old.rowid, old.text
                    WHERE NOT EXISTS (SELECT 1 FROM messageFtsPending WHERE rid = old.rowid);
                DELETE FROM messageFtsPending WHERE rid = old.rowid;
            END;
            CREATE TRIGGER "__messageFts_au" AFTER UPDATE OF text ON message
                WHEN NOT EXISTS (SELECT 1 FROM messageFtsPending WHERE rid = old.rowid) BEGIN
                INSERT INTO messageFts(messageFts, rowid, text) VALUES ('delete', old.rowid, old.text);
                INSERT INTO messageFts(rowid, text) VALUES (new.rowid, new.text);
            END;
            """)
    }
}

extension StoreStep {
    /// Whether messages are noted for search and not indexed yet.
    static func hasNotedMessages(_ db: Database) throws -> Bool {
        try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM messageFtsPending)")) ?? false
    }

    /// Indexes the noted messages (the insert trigger notes each new row) for search with one
    /// statement, and clears the notes: one FTS5 segment for all of them. Run in an unsynced step
    /// right before it commits, and after a synced step in a transaction of its own
    /// (`NodeStore.indexNotedMessages`, Protocol/messages.md 8).
    static func indexNotedMessages(_ db: Database) throws {
        guard try hasNotedMessages(db) else { return }
        try db.cachedStatement(sql: """
            INSERT INTO messageFts(rowid, text) SELECT m.rowid, m.text FROM messageFtsPending p JOIN message m ON m.rowid = p.rid
            """).execute()
        try db.cachedStatement(sql: "DELETE FROM messageFtsPending").execute()
    }
}

import GRDB

/// "v9-message-speed" (Protocol/messages.md 8, "Search and list at a million messages"):
///
/// - the search index again, with prefix indexes of 2 and 3 characters (`message search` matches
///   every word as a prefix: a short one no longer walks every term that starts with it), and with
///   its update trigger fired only by a change of `text` (a retract) — not by every change of a
///   message's `state` (sent, delivered, read), which re-indexed the text each time;
/// - `outbox_recipient_order`, the outbox's waiting frames of one recipient oldest first (the
///   outbox reads the oldest few of a burst at each write, `NodeStore.outbox(for:limit:)`).
enum MigrationMessageSpeed {
    /// Keeps the search index in step with new messages (also made again by `importMessages`).
    static let insertTrigger = """
        CREATE TRIGGER "__messageFts_ai" AFTER INSERT ON message BEGIN
            INSERT INTO messageFts(rowid, text) VALUES (new.rowid, new.text);
        END;
        """

    static func messageSpeed(_ db: Database) throws {
        try db.dropFTS5SynchronizationTriggers(forTable: "messageFts")
        try db.execute(sql: """
            DROP TABLE messageFts;
            CREATE VIRTUAL TABLE messageFts USING fts5(text, content='message', content_rowid='rowid', tokenize='unicode61', prefix='2 3');
            \(insertTrigger)
            CREATE TRIGGER "__messageFts_ad" AFTER DELETE ON message BEGIN
                INSERT INTO messageFts(messageFts, rowid, text) VALUES ('delete', old.rowid, old.text);
            END;
            CREATE TRIGGER "__messageFts_au" AFTER UPDATE OF text ON message BEGIN
                INSERT INTO messageFts(messageFts, rowid, text) VALUES ('delete', old.rowid, old.text);
                INSERT INTO messageFts(rowid, text) VALUES (new.rowid, new.text);
            END;
            INSERT INTO messageFts(messageFts) VALUES ('rebuild');
            CREATE INDEX outbox_recipient_order ON outbox(recipient, createdAtMs);
            """)
    }
}

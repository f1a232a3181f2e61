import GRDB

/// Migration `v7-outbox-per-recipient`: the outbox is keyed by (message id, recipient), so one
/// signed message can wait for several recipients under the same id (a thread's inviter writes its
/// own message to every participant with one id, Protocol/messages.md 4 step 3). Frozen once
/// shipped: string names only, no app types.
enum MigrationV7 {
    static func outboxPerRecipient(_ db: Database) throws {
        try db.execute(sql: """
            CREATE TABLE outbox_v7 (
                messageId BLOB NOT NULL,
                recipient BLOB NOT NULL,
                type INTEGER NOT NULL,
                frame BLOB NOT NULL,
                createdAtMs INTEGER NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                nextAttemptMs INTEGER NOT NULL,
                lastError TEXT,
                expiresAtMs INTEGER,
                PRIMARY KEY (messageId, recipient)
            );
            INSERT INTO outbox_v7 (messageId, recipient, type, frame, createdAtMs, attempts, nextAttemptMs, lastError, expiresAtMs)
                SELECT messageId, recipient, type, frame, createdAtMs, attempts, nextAttemptMs, lastError, expiresAtMs FROM outbox;
            DROP TABLE outbox;
            ALTER TABLE outbox_v7 RENAME TO outbox;
            CREATE INDEX outbox_due ON outbox(nextAttemptMs);
            CREATE INDEX outbox_recipient ON outbox(recipient);
            """)
    }
}

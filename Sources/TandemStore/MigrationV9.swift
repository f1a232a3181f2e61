import GRDB

/// Migration `v9-message-files` (Protocol/messages.md 7 and 8): what file transfers need beyond the
/// `fileTransfer` rows of `v6-messages`. Frozen once shipped: string names only, no app types.
enum MigrationV9 {
    static func messageFiles(_ db: Database) throws {
        try db.execute(sql: """
            -- Chunk bytes moved: sent (outgoing, every copy counted) or verified and kept (incoming).
            ALTER TABLE fileTransfer ADD COLUMN bytesMoved INTEGER NOT NULL DEFAULT 0;
            CREATE INDEX fileTransfer_message ON fileTransfer(messageId) WHERE messageId IS NOT NULL;
            -- The sender's leaf hashes of an offered file (32 bytes per chunk, in order): paths are
            -- built from them without reading the file again.
            CREATE TABLE fileLeaves (
                fileId BLOB NOT NULL PRIMARY KEY REFERENCES fileTransfer(fileId) ON DELETE CASCADE,
                leaves BLOB NOT NULL CHECK (typeof(leaves) = 'blob' AND length(leaves) % 32 = 0 AND length(leaves) >= 32)
            );
            -- Files offered by this friend up to this size are fetched without asking (NULL: the
            -- node's setting, `file_auto_accept_bytes`, else the default).
            ALTER TABLE conversation ADD COLUMN fileAutoAcceptBytes INTEGER
                CHECK (fileAutoAcceptBytes IS NULL OR (typeof(fileAutoAcceptBytes) = 'integer' AND fileAutoAcceptBytes >= 0));
            """)
    }
}

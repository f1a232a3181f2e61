import GRDB

/// Migration `v6-messages` (Protocol/messages.md 8): conversations, messages, reactions, cheers, file
/// transfers, and an FTS5 index over message text kept in sync by triggers. Frozen once shipped:
/// string names only, no app types.
enum MigrationV6 {
    static func messages(_ db: Database) throws {
        try db.execute(sql: """
            -- A conversation: the direct one with a friend (peer) or a challenge's thread (challengeId).
            -- Per-conversation settings live here; read receipts are a direct conversation's setting.
            CREATE TABLE conversation (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                peer BLOB UNIQUE CHECK (peer IS NULL OR (typeof(peer) = 'blob' AND length(peer) = 32)),
                challengeId BLOB UNIQUE CHECK (challengeId IS NULL OR (typeof(challengeId) = 'blob' AND length(challengeId) = 16)),
                -- The disappearing timer (0 = off), and who set it when (last writer wins).
                disappearAfterMs INTEGER NOT NULL DEFAULT 0 CHECK (typeof(disappearAfterMs) = 'integer' AND disappearAfterMs >= 0),
                settingsVersion INTEGER NOT NULL DEFAULT 0,
                settingsAuthor BLOB,
                muted INTEGER NOT NULL DEFAULT 0 CHECK (muted IN (0, 1)),
                readReceipts INTEGER NOT NULL DEFAULT 0 CHECK (readReceipts IN (0, 1)),
                -- This node's last outbound seq and the largest lamport sent or seen.
                ownSeq INTEGER NOT NULL DEFAULT 0 CHECK (typeof(ownSeq) = 'integer' AND ownSeq >= 0),
                maxLamport INTEGER NOT NULL DEFAULT 0 CHECK (typeof(maxLamport) = 'integer' AND maxLamport >= 0),
                -- Read receipts: the last READ this node sent, and the peer's last one (our seqs).
                readSentUpToSeq INTEGER NOT NULL DEFAULT 0,
                peerReadUpToSeq INTEGER NOT NULL DEFAULT 0,
                createdAtMs INTEGER NOT NULL,
                CHECK ((peer IS NULL) <> (challengeId IS NULL))
            );
            -- One row per message, both directions. id = the id of the envelope its author signed.
            CREATE TABLE message (
                id BLOB NOT NULL PRIMARY KEY CHECK (typeof(id) = 'blob' AND length(id) = 16),
                conversationId INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE,
                author BLOB NOT NULL CHECK (typeof(author) = 'blob' AND length(author) = 32),
                seq INTEGER NOT NULL CHECK (typeof(seq) = 'integer' AND seq >= 1),
                -- The display lamport (ConversationOrder.DisplayKey), and the one the author sent.
                lamport INTEGER NOT NULL CHECK (typeof(lamport) = 'integer' AND lamport >= 1),
                sentLamport INTEGER NOT NULL,
                text TEXT NOT NULL CHECK (typeof(text) = 'text'),
                replyTo BLOB CHECK (replyTo IS NULL OR length(replyTo) = 16),
                sentAtMs INTEGER NOT NULL,
                receivedAtMs INTEGER NOT NULL,
                -- Outbound: queued | sent | delivered | read. Inbound: held (above a gap) | received | read.
                state TEXT NOT NULL CHECK (state IN ('queued', 'sent', 'delivered', 'read', 'held', 'received')),
                retracted INTEGER NOT NULL DEFAULT 0 CHECK (retracted IN (0, 1)),
                expiresAtMs INTEGER,
                -- What the row costs its author's bound (text and fixed overhead).
                storedBytes INTEGER NOT NULL,
                UNIQUE (conversationId, author, seq)
            );
            CREATE INDEX message_display ON message(conversationId, lamport, author, seq);
            CREATE INDEX message_expiry ON message(expiresAtMs) WHERE expiresAtMs IS NOT NULL;
            CREATE INDEX message_author ON message(author);
            -- One reaction per message and author (a new one replaces it; empty emoji removes it).
            CREATE TABLE reaction (
                messageId BLOB NOT NULL REFERENCES message(id) ON DELETE CASCADE,
                author BLOB NOT NULL CHECK (length(author) = 32),
                emoji TEXT NOT NULL CHECK (typeof(emoji) = 'text' AND length(CAST(emoji AS BLOB)) BETWEEN 1 AND 64),
                atMs INTEGER NOT NULL,
                PRIMARY KEY (messageId, author)
            );
            -- Cheers on ledger entries: the challenge, whose result, who cheered.
            CREATE TABLE cheer (
                challengeId BLOB NOT NULL CHECK (length(challengeId) = 16),
                subject BLOB NOT NULL CHECK (length(subject) = 32),
                author BLOB NOT NULL CHECK (length(author) = 32),
                emoji TEXT NOT NULL,
                text TEXT NOT NULL,
                atMs INTEGER NOT NULL,
                PRIMARY KEY (challengeId, subject, author)
            );
            -- File transfers, both directions. `bitmap`: one bit per verified chunk (FileReceiver).
            CREATE TABLE fileTransfer (
                fileId BLOB NOT NULL PRIMARY KEY CHECK (length(fileId) = 16),
                conversationId INTEGER NOT NULL REFERENCES conversation(id) ON DELETE CASCADE,
                direction TEXT NOT NULL CHECK (direction IN ('in', 'out')),
                peer BLOB NOT NULL CHECK (length(peer) = 32),
                name TEXT NOT NULL,
                size INTEGER NOT NULL CHECK (size BETWEEN 1 AND 4294967296),
                fileHash BLOB NOT NULL CHECK (length(fileHash) = 32),
                chunkRoot BLOB NOT NULL CHECK (length(chunkRoot) = 32),
                messageId BLOB CHECK (messageId IS NULL OR length(messageId) = 16),
                state TEXT NOT NULL CHECK (state IN ('offered', 'receiving', 'verifying', 'complete', 'failed')),
                failure TEXT,
                bitmap BLOB NOT NULL,
                -- The partial or finished file (receiver), or the file offered (sender).
                path TEXT,
                createdAtMs INTEGER NOT NULL,
                updatedAtMs INTEGER NOT NULL,
                deadlineMs INTEGER NOT NULL
            );
            CREATE INDEX fileTransfer_pending ON fileTransfer(peer, state);
            """)
        // Full-text search over message text; triggers keep it in step with `message` (a retract
        // empties the text, an expiry deletes the row: both leave the index).
        try db.create(virtualTable: "messageFts", using: FTS5()) { t in
            t.synchronize(withTable: "message")
            t.tokenizer = .unicode61()
            t.column("text")
        }
    }
}

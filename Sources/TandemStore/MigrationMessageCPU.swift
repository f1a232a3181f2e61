import GRDB

/// "v9-message-cpu" (Protocol/messages.md 8 and 11.6): fewer index entries written per message.
///
/// - `outbox_due` (nextAttemptMs) is read by no query since `v9-message-burst` (the delivery loop
///   seeks each recipient through `outbox_recipient_due`; expiry reads `expiresAtMs`), yet every
///   frame queued, scheduled and acknowledged wrote it: dropped.
/// - `seenMessage_stranger` (fromFriend, createdAtMs) served only the strangers' cap (`fromFriend =
///   0`), yet every friend's frame handled added an entry: now a partial index over strangers'
///   marks only, which both of its queries (the count and the oldest) still use.
enum MigrationMessageCPU {
    static func messageCPU(_ db: Database) throws {
        try db.execute(sql: """
            DROP INDEX outbox_due;
            DROP INDEX seenMessage_stranger;
            CREATE INDEX seenMessage_stranger ON seenMessage(createdAtMs) WHERE fromFriend = 0;
            """)
    }
}

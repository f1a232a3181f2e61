import GRDB

/// "v9-message-cpu" (Protocol/messages.md 8 and 11.6): fewer index entries written per message.
///
/// - `outbox_due` (nextAttemptMs) is read by no query since `v9-message-burst` (the delivery loop
///   seeks each recipient through `outbox_recipient_due`; expiry reads `expiresAtMs`), yet every
///   frame queued, scheduled and acknowledged wrote it: dropped.
/// - `seenMessage_stranger` (fromFriend, createdAtMs) served only the strangers' cap (`fromFriend =
///   0`), yet every friend's frame handled added an entry: now a partial index over strangers'
///   marks only, which both of its queries (the count and the oldest) still use.
/// - `outbox_expiry` (expiresAtMs, partial: frames that expire): the once-a-second expiry of the
///   delivery loop read the whole outbox (a burst's thousands of frames with their bytes) to find
///   none; frames to friends never expire and are not in it.
enum MigrationMessageCPU {
    static func messageCPU(_ db: Database) throws {
        try db.execute(sql: """
            DROP INDEX outbox_due;
            DROP INDEX seenMessage_stranger;
            CREATE INDEX seenMessage_stranger ON seenMessage(createdAtMs) WHERE fromFriend = 0;
            CREATE INDEX outbox_expiry ON outbox(expiresAtMs) WHERE expiresAtMs IS NOT NULL;
            """)
    }
}

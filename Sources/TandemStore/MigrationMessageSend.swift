import GRDB

/// "v9-message-send-speed" (Protocol/messages.md 11.5): `outbox_unsent`, the frames of one
/// recipient that were never written (`attempts = 0`), oldest first. A send with the friend's link
/// up schedules the frames it just queued as written (`StoreStep.scheduleFirstWrite`); through the
/// recipient index that read every frame waiting for the friend, so during a burst, with thousands
/// waiting for ACKs, each send cost the length of the queue. Through this partial index it costs
/// the frames not yet written: those of the step that asks.
enum MigrationMessageSend {
    static func sendSpeed(_ db: Database) throws {
        try db.execute(sql: "CREATE INDEX outbox_unsent ON outbox(recipient, createdAtMs) WHERE attempts = 0")
    }
}

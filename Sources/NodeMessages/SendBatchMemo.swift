import TandemProtocol
import TandemNodeCore
import TandemStore

/// What the sends of one batch (`drainSends`, one store step) learn about their recipients, kept
/// for the rest of the batch: the friend a `to` parameter names, and whether a key is a friend.
/// A burst to one friend read the friend's contact three times per send (the name resolved, the
/// friendship checked, the frame's expiry decided); now once per batch (messages.md 11.6).
///
/// Since session 9 also the direct conversation, carried from send to send (its own seq and lamport
/// moved on by each send that stored its message) instead of read per send.
///
/// Valid for one step only: no send changes a contact, and nothing else runs on the core between
/// the sends of a batch, so what the first send read holds for the last. The store checks each
/// send's seq against the conversation row all the same (`sendMessage`): a memo out of step fails
/// a send, it cannot reuse a seq.
@NodeCore
final class SendBatchMemo {
    private var named: [String: [UInt8]] = [:]
    // Keyed by `ByteKey`: hashed in one go, not a byte at a time (messages.md 11.6).
    private var friends: [ByteKey: Bool] = [:]
    private var conversations: [ByteKey: ConversationRow] = [:]
    /// The batch's `message.sent` events, in send order: stored together at the batch's end, in one
    /// multi-row INSERT (a send that fails drops its own: `drainSends`).
    var events: [PendingEvent] = []
    /// The batch's frames stored already scheduled as written (`Outbox.scheduledAsWritten`: the
    /// friend's link was up), in send order: handed to the outbox once for the batch (a send that
    /// fails drops its own: `drainSends`).
    var scheduled: [OutboxItem] = []

    /// The friend `text` names, resolved by `resolve` the first time it is asked in this batch.
    func friend(named text: String, _ resolve: () throws -> [UInt8]) rethrows -> [UInt8] {
        if let key = named[text] { return key }
        let key = try resolve()
        named[text] = key
        friends[ByteKey(key)] = true
        return key
    }

    /// The direct conversation with `key` as the batch's sends left it, read by `read` the first
    /// time (`sent` moves its seq and lamport on; a send that failed forgets it, `forgetConversations`).
    func directConversation(_ key: [UInt8], _ read: () throws -> ConversationRow) rethrows -> ConversationRow {
        if let c = conversations[ByteKey(key)] { return c }
        let c = try read()
        conversations[ByteKey(key)] = c
        return c
    }

    /// A send to `key` stored its message (seq and lamport, the conversation's new own seq and
    /// largest lamport), once its savepoint was released.
    func sent(to key: [UInt8], seq: Int64, lamport: Int64) {
        let key = ByteKey(key)
        guard var c = conversations[key] else { return }
        c.ownSeq = seq
        c.maxLamport = max(c.maxLamport, lamport)
        conversations[key] = c
    }

    /// A send failed (its savepoint rolled back): what the batch holds of conversations is read again.
    func forgetConversations() { conversations = [:] }

    /// Whether `key` is a friend, asked of `isFriend` the first time in this batch.
    func isFriend(_ key: [UInt8], _ isFriend: ([UInt8]) -> Bool) -> Bool {
        if let known = friends[ByteKey(key)] { return known }
        let known = isFriend(key)
        friends[ByteKey(key)] = known
        return known
    }
}

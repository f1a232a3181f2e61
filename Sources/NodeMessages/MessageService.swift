import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import Sodium
import TandemBlocking
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Messages between friends and a challenge's group thread (Protocol/messages.md): sending through
/// the outbox (a message row and its frame in one step), receiving (only friends, and thread
/// participants through the forwarding rule; per-friend rate and stored-bytes bounds; exactly once
/// and in order per conversation and author through `ConversationOrder`), reactions, cheers,
/// retracts, read receipts under the reciprocal rule, and gap requests answered from the message table.
///
/// Everything here runs on the node core, inside the step it is given: load, the pure machine,
/// store the rows with the frames they send and the handled mark, then act after the commit
/// (ACKs, GAP_REQUESTs, event delivery).
@NodeCore
public final class MessageService: Sendable {
    /// The receiver's bounds (messages.md 3.2); the defaults are `ChatLimits`'.
    package struct Limits: Sendable {
        /// MESSAGE, REACTION, CHEER and RETRACT frames per friend: a bucket of `burst` …
        package var burst = Double(ChatLimits.messageBurst)
        /// … refilled at this many per minute.
        package var perMinute = Double(ChatLimits.messagesPerMinute)
        package var storedBytesPerAuthor = ChatLimits.storedBytesPerFriend
        package init() {}
    }

    let identity: SigningKeyPair
    let store: NodeStore
    let peers: PeerManager
    let outbox: Outbox
    let events: EventBus
    let health: StoreHealth
    let logger: Logger
    let limits: Limits
    let clock: @Sendable () -> Int64

    /// Per-friend token buckets for the frames that store something.
    private var buckets: [ByteKey: (tokens: Double, atMs: Int64)] = [:]
    /// Bytes stored per author, as of the last sum plus what was stored since: never below the
    /// truth (retracts and expiries only lower it), so while it is well below the bound the store
    /// need not sum the author's rows for each message. Read again near the bound.
    private var storedBytes: [ByteKey: Int64] = [:]
    /// Inbound ordering per conversation id, as committed.
    private var orders: [Int64: ConversationOrder] = [:]
    /// Orders changed by the step `stagedIn` (not yet committed): they replace `orders` after its
    /// commit, and are dropped if it never commits (the next step finds another `stagedIn`). The
    /// step is held strongly, so no later step can be mistaken for it.
    private var staged: [Int64: ConversationOrder] = [:]
    private var stagedIn: StoreStep?
    /// Direct conversations an inbound step read for its MESSAGEs, by peer (`inboundConversation`):
    /// valid for the step `conversationsIn` only (weak: a later step is never mistaken for it).
    private var conversations: [ByteKey: ConversationRow] = [:]
    /// Canonical ID texts by key (`canonicalID`).
    /// (The tables keyed by a public key take `ByteKey`: hashed in one go, messages.md 11.6.)
    private var canonicalIDs: [ByteKey: String] = [:]
    private weak var conversationsIn: StoreStep?
    /// Authors' shown names read by the step `namesIn` for `message.received` (`announcedName`).
    private var names: [ByteKey: String] = [:]
    private weak var namesIn: StoreStep?
    /// MESSAGEs the inbound batch `receiptsIn` stored from relay mail, by author, in order: a
    /// DELIVERED per author goes into the same step when the batch ends (`batchEnded`).
    var owedReceipts: [[UInt8]: [[UInt8]]] = [:]
    var receiptsIn: StoreStep?
    /// Our MESSAGE frames the outbox wrote on a link or left in a mailbox (`framesWritten`, noted as
    /// it is posted: no task wakes for it), not yet marked `sent`. A frame still unacknowledged
    /// `sentMarkDelayMs` after it was written is marked by the next step the service takes part in
    /// (a send batch, an inbound batch, or the once-a-second round), not by a step and a turn of the
    /// core of its own; one whose ACK comes first goes from `queued` straight to `delivered` and
    /// costs no `sent` update at all (in a burst nearly every message: messages.md 11.6, session 14).
    /// Soft state: lost in a crash, the message shows `queued` until it is delivered.
    nonisolated let written = NIOLockedValueBox(WrittenFrames())
    /// How long a written frame waits for its ACK before its message is marked `sent`.
    nonisolated static let sentMarkDelayMs: Int64 = 1000
    /// The step that marked `written` frames (once per step).
    var sentIn: StoreStep?
    /// `on-message` hooks (`<hooks>/on-message`, `<hooks>/on-message.d/*`), run for each message
    /// received in a conversation that is not muted, one at a time, on the blocking pool.
    let hooks: HookRunner?
    let hookQueue = MessageHookQueue(backlog: MessageService.hookBacklog)
    /// Hook jobs of the step `hookJobsIn`, queued once it commits.
    var hookJobs: [MessageHookQueue.Job] = []
    weak var hookJobsIn: StoreStep?
    /// At most this many received messages wait for their hooks; more are dropped (logged).
    nonisolated static let hookBacklog = 256
    /// `message.send` requests waiting for the core, handled in batches (group commit).
    nonisolated let sendLane = MessageSendLane()

    package nonisolated init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, outbox: Outbox, events: EventBus,
                             health: StoreHealth, signals: NodeSignals, hooksDirectory: String? = nil, limits: Limits = Limits(),
                             logger: Logger,
                             clock: @escaping @Sendable () -> Int64 = { Int64(wallClockMilliseconds()) }) {
        self.identity = identity
        self.store = store
        self.peers = peers
        self.outbox = outbox
        self.events = events
        self.health = health
        self.limits = limits
        self.logger = logger
        self.clock = clock
        self.hooks = hooksDirectory.map { HookRunner(directory: $0) }
        signals.observe { [written] in
            guard case .framesWritten(let type, _, let ids) = $0, type == MessageType.chatMessage.rawValue else { return }
            let atMs = clock()
            written.withLockedValue { $0.append(ids, atMs: atMs) }
        }
    }

    /// Runs the `on-message` hooks of each received message, in order, until the queue finishes:
    /// what waited together goes to the blocking pool at once, where the hooks are looked for once
    /// (none installed: nothing more is done for those messages).
    nonisolated func runHooks() async {
        guard let hooks else {
            await hookQueue.run { _ in }
            return
        }
        await hookQueue.run { jobs in
            do {
                let results = try await NIOThreadPool.singleton.runIfActive { () -> [HookResult] in
                    guard !hooks.eventHooks("on-message").isEmpty else { return [] }
                    return jobs.flatMap { hooks.runEvent("on-message", variables: $0.variables) }
                }
                for r in results where r.failed {
                    logger.warning(r.skipped ? "on-message hook not run" : "on-message hook failed", metadata: ["hook": "\(r)"])
                }
            } catch {
                logger.error("on-message hooks could not run", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Marks the MESSAGE frames written at least `sentMarkDelayMs` ago and still unacknowledged
    /// `sent` (until the friend's ACK says delivered) in `step`; those frames leave `written` once it
    /// commits (a step that fails leaves them for the next).
    func markSent(in step: StoreStep) {
        guard sentIn !== step else { return }
        let (count, ids) = written.withLockedValue { $0.aged(nowMs: now(), delayMs: Self.sentMarkDelayMs) }
        guard count > 0 else { return }
        sentIn = step
        if !ids.isEmpty { health.attempt("mark messages sent") { try step.markMessagesSent(ids) } }
        step.afterCommit { [self] in
            sentIn = nil
            // Steps run one at a time on the core: what was appended meanwhile stays, behind.
            written.withLockedValue { $0.removeFirst(count) }
        }
    }

    /// Marks what was written `sent` in a step of its own (the once-a-second round), if anything is due.
    func markSent() {
        guard written.withLockedValue({ $0.hasAged(nowMs: now(), delayMs: Self.sentMarkDelayMs) }) else { return }
        health.attempt("mark messages sent") { try store.step(syncing: false) { step in markSent(in: step) } }
    }

    var me: [UInt8] { identity.publicKey }
    func now() -> Int64 { clock() }
    func idText(_ key: [UInt8]) -> JSONValue { .string(canonicalID(key)) }

    /// `key`'s canonical ID text, made once per key (its checksum and base32 were 2 % of the
    /// sender's core thread in a burst: every `message.sent` and `message.delivered` names the friend).
    func canonicalID(_ key: [UInt8]) -> String {
        let key = ByteKey(key)
        if let text = canonicalIDs[key] { return text }
        let text = NodeID(publicKey: key.bytes).canonical
        if canonicalIDs.count >= 1024 { canonicalIDs = [:] }  // bounded: friends are few, strangers' keys are not kept
        canonicalIDs[key] = text
        return text
    }

    func name(_ key: [UInt8], _ r: StoreReading) -> String {
        if key == me { return health.read("read the display name", or: nil) { try r.setting("display_name") } ?? "" }
        // The nickname this node gave them, else their display name (what the person knows them as).
        return health.read("read a contact's name", or: "") { try r.shownName(key) }
    }

    /// `key`'s shown name for the events of `step`, read once per author and step (a burst's inbound
    /// batch read it for each of its up to 128 MESSAGEs). A name the same step changes (a friend's
    /// CONTACT_UPDATE among its frames) shows in the events of the next step.
    func announcedName(_ key: [UInt8], _ step: StoreStep) -> String {
        if namesIn !== step {
            names = [:]
            namesIn = step
        }
        if let known = names[ByteKey(key)] { return known }
        let shown = name(key, step)
        names[ByteKey(key)] = shown
        return shown
    }

    // MARK: - Ordering state

    /// The conversation's inbound order as this step sees it (restored from the store on first use).
    func order(_ c: ConversationRow, _ step: StoreStep) throws -> ConversationOrder {
        guard let id = c.id else { throw MessageStoreError.noSuchConversation }
        if stagedIn !== step {
            // The previous step that staged orders never committed (its after-commit action would
            // have cleared them): what it staged is void.
            staged = [:]
            stagedIn = nil
        }
        if let o = staged[id] ?? orders[id] { return o }
        var o = ConversationOrder()
        for a in try step.inboundOrderState(conversationId: id) {
            o.restore(ownSeq: UInt64(clamping: c.ownSeq), maximumLamport: UInt64(clamping: c.maxLamport), author: a.author,
                      released: a.released, lastLamport: a.lastLamport, held: a.held)
        }
        orders[id] = o
        return o
    }

    /// Keeps `o` as the conversation's order once `step` commits.
    func stage(_ o: ConversationOrder, conversation id: Int64, _ step: StoreStep) {
        if stagedIn !== step {
            staged = [:]
            stagedIn = step
            step.afterCommit { [self] in
                for (k, v) in staged { orders[k] = v }
                staged = [:]
                stagedIn = nil
            }
        }
        staged[id] = o
    }

    /// The direct conversation with `peer` for a MESSAGE of the step: read once per peer and step
    /// (a burst's inbound batch read it for each of its frames). What a MESSAGE uses of it — its
    /// id, peer, `muted`, and the seq and lamport the order is restored from on first use — no
    /// frame of the step changes (`muted` only a local intent, a step of its own; the order is
    /// kept apart, `order(_:_:)`).
    func inboundConversation(peer: [UInt8], _ step: StoreStep) throws -> ConversationRow {
        if conversationsIn !== step {
            conversations = [:]
            conversationsIn = step
        }
        if let c = conversations[ByteKey(peer)] { return c }
        let c = try step.directConversation(peer: peer, nowMs: now())
        conversations[ByteKey(peer)] = c
        return c
    }

    // MARK: - Bounds

    /// The stored-bytes bound to hand the store for a row of `cost` by `author`: `Int64.max` (no
    /// sum) while the estimate stays below half the bound, else the bound itself (the store sums).
    func bytesBound(author: [UInt8], cost: Int64, _ step: StoreStep) -> Int64 {
        let estimate = storedBytes[ByteKey(author)] ?? health.read("sum an author's stored bytes", or: limits.storedBytesPerAuthor) {
            try step.storedMessageBytes(author: author)
        }
        storedBytes[ByteKey(author)] = estimate
        return estimate.addingSaturated(cost) < limits.storedBytesPerAuthor / 2 ? .max : limits.storedBytesPerAuthor
    }

    /// A row of `cost` by `author` was stored (in a step that may yet fail: the estimate only grows).
    func stored(author: [UInt8], cost: Int64, bound: Int64) {
        let author = ByteKey(author)
        if bound != .max {
            // The store summed: start again from the truth next time.
            storedBytes[author] = nil
        } else {
            storedBytes[author, default: 0] = storedBytes[author, default: 0].addingSaturated(cost)
        }
    }

    /// Takes a token from `key`'s bucket; false when it is empty (the frame is then neither handled
    /// nor acknowledged: the sender's outbox retries later).
    func allowFrame(from key: [UInt8]) -> Bool {
        let key = ByteKey(key)
        let nowMs = now()
        if buckets.count >= 4096, buckets[key] == nil {
            buckets = buckets.filter { $0.value.tokens < limits.burst - 1 }
            if buckets.count >= 4096 { return false }
        }
        var b = buckets[key] ?? (limits.burst, nowMs)
        let elapsed = Double(max(0, nowMs.subtractingSaturated(b.atMs)))
        b.tokens = min(limits.burst, b.tokens + elapsed / 60_000 * limits.perMinute)
        b.atMs = nowMs
        guard b.tokens >= 1 else {
            buckets[key] = b
            return false
        }
        b.tokens -= 1
        buckets[key] = b
        return true
    }

    // MARK: - Delivery

    /// Our frame reached the friend's store (its ACK came after its commit): a MESSAGE is delivered.
    package func delivered(_ messageID: [UInt8], type: MessageType, to recipient: [UInt8], _ step: StoreStep) {
        delivered([(messageID, type)], to: recipient, step)
    }

    /// A run of acknowledgements of one ACKS: each MESSAGE marked delivered, and their
    /// `message.delivered` events stored together at the run's end, in its order with consecutive
    /// seqs (one multi-row INSERT instead of a statement and a hand-over each: messages.md 11.6,
    /// sessions 10 and 14). Nothing else stores an event in between (the router tells a run before any
    /// other event of the step).
    package func delivered(_ deliveries: [(messageID: [UInt8], type: MessageType)], to recipient: [UInt8], _ step: StoreStep) {
        var pending: [PendingEvent] = []
        pending.reserveCapacity(deliveries.count)
        let to = idText(recipient)
        for d in deliveries where d.type == .chatMessage {
            // Acknowledged before it was marked `sent`: it never will be (a step that fails to commit
            // leaves the message `queued`, and the frame's copy is acknowledged again).
            written.withLockedValue { $0.acknowledged(d.messageID) }
            let changed = health.read("mark a message delivered", or: false) { try step.markMessageDelivered(d.messageID) }
            guard changed else { continue }
            pending.append(events.record("message.delivered", ["id": .string(hexString(d.messageID)), "to": to]))
        }
        events.emit(pending, in: step)
    }
}

/// Our MESSAGE frames written on a link or left in a mailbox and not yet marked `sent`
/// (`MessageService.written`), oldest first.
package struct WrittenFrames: Sendable {
    private var order: [(id: [UInt8], atMs: Int64)] = []
    /// Of those, the ones not acknowledged since.
    private var unacknowledged: Set<ByteKey> = []

    package init() {}

    package var count: Int { order.count }
    package var ids: [[UInt8]] { order.map(\.id) }

    mutating func append(_ ids: [[UInt8]], atMs: Int64) {
        for id in ids {
            order.append((id, atMs))
            unacknowledged.insert(ByteKey(id))
        }
    }

    mutating func acknowledged(_ id: [UInt8]) { unacknowledged.remove(ByteKey(id)) }

    /// Written at least `delayMs` before `nowMs`, or "after" it (the clock was set back: not held
    /// until it passes that time again).
    static func isAged(_ atMs: Int64, nowMs: Int64, delayMs: Int64) -> Bool {
        let age = nowMs.subtractingSaturated(atMs)
        return age >= delayMs || age < 0
    }

    /// How many of the oldest are aged (`isAged`), and which of those are still unacknowledged.
    func aged(nowMs: Int64, delayMs: Int64) -> (count: Int, unacknowledged: [[UInt8]]) {
        var n = 0
        var ids: [[UInt8]] = []
        while n < order.count, Self.isAged(order[n].atMs, nowMs: nowMs, delayMs: delayMs) {
            if unacknowledged.contains(ByteKey(order[n].id)) { ids.append(order[n].id) }
            n += 1
        }
        return (n, ids)
    }

    func hasAged(nowMs: Int64, delayMs: Int64) -> Bool {
        guard let first = order.first else { return false }
        return Self.isAged(first.atMs, nowMs: nowMs, delayMs: delayMs)
    }

    /// The oldest `n` were marked (or acknowledged): forgotten.
    mutating func removeFirst(_ n: Int) {
        let n = min(n, order.count)
        for e in order[..<n] { unacknowledged.remove(ByteKey(e.id)) }
        order.removeFirst(n)
    }
}

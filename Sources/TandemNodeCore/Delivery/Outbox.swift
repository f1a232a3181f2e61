import Foundation
import Logging
import NIOConcurrencyHelpers
import Sodium
import TandemNet
import TandemProtocol
import TandemStore

/// A link the outbox writes on (a `PeerLink` in a node; a recording fake in tests).
package protocol OutboxLink: AnyObject, Sendable {
    /// Unique among the process's links: each frame is written once per link.
    var serial: UInt64 { get }
    func write(_ envelope: Envelope)
    func flush()
    /// Writes `envelopes` in order and flushes once.
    func writeAndFlush(_ envelopes: [Envelope])
    /// The peer takes MESSAGEs with the zero signature on this link (README 5.4): those the outbox
    /// holds unsigned go as they are; on any other link they are signed as they are written.
    var takesLinkAuthenticated: Bool { get }
}

extension OutboxLink {
    package var takesLinkAuthenticated: Bool { false }

    package func writeAndFlush(_ envelopes: [Envelope]) {
        for e in envelopes { write(e) }
        flush()
    }
}

extension PeerLink: OutboxLink {
    package func write(_ envelope: Envelope) { send(envelope, flush: false) }
    package func flush() { channel.flush() }
    /// One hop onto the link's event loop for all of them, and one flush (one `writev` where the
    /// socket takes it), instead of a hop and a wake-up per frame.
    package func writeAndFlush(_ envelopes: [Envelope]) {
        guard !envelopes.isEmpty else { return }
        let channel = self.channel
        channel.eventLoop.execute {
            PathTrace.stamp(.frameOnLoop, if: .chatMessage, in: envelopes)
            for e in envelopes { channel.write(e, promise: nil) }
            channel.flush()
        }
    }
}

/// How a dial ended.
package enum DialOutcome: Sendable {
    case link(OutboxLink)
    /// Unreachable, and its home relay says it is offline: its mailbox there takes mail.
    case offline(RelayAddress)
    case unreachable
}

/// How the outbox reaches peers: the links up now, dialling (Protocol 12.8), relay mailboxes.
package protocol OutboxTransport: Sendable {
    /// The link to use for `key` now, if one is up.
    func link(to key: [UInt8]) -> OutboxLink?
    func dial(_ key: [UInt8]) async -> DialOutcome
    /// Leaves `envelopes` in a mailbox at `relay`; returns the ids it stored.
    func deposit(_ envelopes: [Envelope], via relay: RelayAddress) async throws -> [[UInt8]]
}

/// Frames owed to peers, from signing to acknowledgement (Protocol/README.md 12.5, 12.7, 12.8), for
/// every flow alike (friends, challenges, relay mail): it signs the frames the flows store with
/// their changes, delivers them until the recipient acknowledges them, backs off and dials in the
/// policy's order, moves frames to an offline peer's relay mailbox, acknowledges what peers send
/// (within a budget for strangers), and owes a PRESENCE after the frames that make it meaningful.
///
/// Its store work runs on the node core; the delivery loop (`run`) waits, dials and deposits off it.
/// Each frame is written at most once per link until `resendAfterMs` passes without an ACK.
@NodeCore
package final class Outbox: Sendable {
    package struct Configuration: Sendable {
        /// How often due frames and offline friends are looked at.
        package var retryTick: Duration = .milliseconds(500)
        var resendAfterMs: Int64 = 30_000
        /// Frames per recipient written on its link and not yet acknowledged (`DeliveryBook.window`).
        /// 1,024 since session 14 (was 256): a burst's frames to a friend keep the receiver busy while
        /// the sender's core is taken by its sends (messages.md 11.1, 11.6).
        package var window = 1024
        /// …and their bytes, at most (`DeliveryBook.windowBytes`): 1,024 frames of a few words are
        /// ~150 KB, of the largest messages (16 KiB) 16 MiB — too much for a slow link to drain within
        /// its unwritable timeout (README 5.12). 1 MiB holds 64 of those.
        package var windowBytes = 1 << 20
        package init() {}
    }

    /// Frames to someone who is not a friend expire: a farewell after a day, anything else (a
    /// request, a group member's challenge frames) after 8 days, the mailbox age limit.
    nonisolated static let farewellToStrangerTtlMs: Int64 = 86_400_000
    nonisolated static let frameToStrangerTtlMs: Int64 = 8 * 86_400_000
    /// How long handled message ids are remembered: longer than the oldest frame any path accepts
    /// (24 h on links; 8 days for relay mail), so a copy that comes late is still recognised.
    nonisolated static let handledWindowMs: Int64 = 9 * 24 * 3_600_000

    let identity: SigningKeyPair
    let store: NodeStore
    let transport: OutboxTransport
    let presence: PresenceState
    let events: EventBus
    let health: StoreHealth
    let configuration: Configuration
    let logger: Logger
    let clock: @Sendable () -> Int64
    /// What was written on which link, dial backoff, owed PRESENCE frames.
    nonisolated let book: NIOLockedValueBox<DeliveryBook>
    private let replies = NIOLockedValueBox(ReplyBudget())
    private let lastFullRound = NIOLockedValueBox(Int64.min)
    let wake = Wakeup()
    private let signals: AsyncStream<NodeSignal>?
    /// Where `framesWritten` is posted.
    private let poster: NodeSignals?
    /// What the step `sendingIn` queued for links (`send(to:in:)`): written together once it
    /// commits, each link's frames in one write. Held strongly, so no later step is mistaken for
    /// it; a step that never commits leaves them to the next step, which drops them (the frames
    /// were never stored).
    private var sendingIn: StoreStep?
    private var sendingKeys: [[UInt8]] = []
    private var sendingReady: [[UInt8]: [OutboxItem]] = [:]
    /// The ACKs the step `ackingIn` owes, by link serial, signed and written after its commit,
    /// one write and one flush per link.
    private var ackingIn: StoreStep?
    private var acks: [UInt64: (link: PeerLink, ids: [[UInt8]])] = [:]
    /// Recipients whose window the step `refillingIn` opened (acknowledgements came while frames
    /// waited for room): their next frames are written once it commits, one write each.
    private var refillingIn: StoreStep?
    private var refills: [[UInt8]] = []
    /// Acknowledgements this node signed: ids acknowledged one to an ACK, ids acknowledged in ACKS,
    /// and the ACKS frames that carried them (README 12.5).
    package struct Acknowledgements: Sendable, Equatable {
        package var single = 0
        package var batched = 0
        package var acksFrames = 0
    }
    private nonisolated let signedAcknowledgements = NIOLockedValueBox(Acknowledgements())
    package nonisolated var acknowledgements: Acknowledgements { signedAcknowledgements.withLockedValue { $0 } }

    package nonisolated init(identity: SigningKeyPair, store: NodeStore, transport: OutboxTransport, presence: PresenceState,
         events: EventBus, health: StoreHealth, signals: NodeSignals?, configuration: Configuration = Configuration(),
         logger: Logger, clock: @escaping @Sendable () -> Int64 = { Int64(wallClockMilliseconds()) }) {
        self.identity = identity
        self.store = store
        self.transport = transport
        self.presence = presence
        self.events = events
        self.health = health
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        self.book = NIOLockedValueBox(DeliveryBook(resendAfterMs: configuration.resendAfterMs, window: configuration.window,
                                                   windowBytes: configuration.windowBytes))
        self.signals = signals?.subscribe { $0 == .reachable }
        self.poster = signals
    }

    package func now() -> Int64 { clock() }

    // MARK: - Signing (on the core)

    /// `r`: the step being built when there is one (it sees what the step changed), else the store.
    package func isFriend(_ key: [UInt8], in r: StoreReading) -> Bool {
        health.read("read a contact", or: nil) { try r.relationship(key) } == .friend
    }

    /// Signs a frame for `recipient` as an outbox row, for the flow to store with its change.
    /// `messageID`: the id to sign under (one message sent to several recipients keeps one id).
    /// `recipientIsFriend`: when the caller already knows (one contact read less per frame).
    /// `linkAuthenticated`: a type that may go so (`MessageType.mayBeLinkAuthenticated`) is stored
    /// unsigned, and signed only where it must be (`signedForEgress`): on a link whose peer does not
    /// take it unsigned, and in relay mail (README 5.4).
    package func frame(_ type: MessageType, to recipient: [UInt8], payload: [UInt8], messageID: MessageID = .random(),
                       recipientIsFriend: Bool? = nil, linkAuthenticated: Bool = false, in r: StoreReading) -> OutboxItem {
        let nowMs = now()
        let env = linkAuthenticated && type.mayBeLinkAuthenticated
            ? Envelope.unsigned(type: type, messageID: messageID, author: identity.publicKey, recipient: recipient,
                                createdAt: UInt64(clamping: nowMs), payload: payload)
            : Envelope.sign(type: type, messageID: messageID, author: identity, recipient: recipient,
                            createdAt: UInt64(clamping: nowMs), payload: payload)
        var item = OutboxItem(messageId: env.messageID.bytes, recipient: recipient, type: type.rawValue, frame: env.bytes, nowMs: nowMs)
        let farewell = type == .friendDecline || type == .friendRemove
        if farewell || !(recipientIsFriend ?? isFriend(recipient, in: r)) {
            item.expiresAtMs = nowMs.addingSaturated(farewell ? Self.farewellToStrangerTtlMs : Self.frameToStrangerTtlMs)
        }
        return item
    }

    /// What the delivery book tracks a frame by: its id and its recipient (one message can wait for
    /// several recipients under one id).
    nonisolated static func bookKey(_ messageID: [UInt8], _ recipient: [UInt8]) -> [UInt8] { messageID + recipient }
    nonisolated static func bookKey(_ item: OutboxItem) -> [UInt8] { Array(item.messageId) + Array(item.recipient) }

    /// Nudges the delivery loop: at once when it waits, else as soon as its current round ends.
    func poke() { wake.poke() }

    /// `item` as it is stored when its recipient's link is up at the time it is queued: scheduled as
    /// a first write leaves it (one attempt, the next round in at most a second unless an ACK
    /// removes it first), so the step that queues it need not read it back and update it
    /// (`scheduleFirstWrite`: a read of the row with its bytes, an update of the row and two of its
    /// indexes, per frame; messages.md 11.6, session 10). Nil when the link is down: the frame is
    /// queued as never written and waits for the delivery loop. A frame stored this way must be
    /// handed to `send(to:scheduled:in:)` in the same step, once the write that stored it stands.
    package func scheduledAsWritten(_ item: OutboxItem) -> OutboxItem? {
        guard transport.link(to: Array(item.recipient)) != nil else { return nil }
        var scheduled = item
        scheduled.attempts = 1
        scheduled.nextAttemptMs = now().addingSaturated(min(configuration.resendAfterMs, 1000))
        scheduled.lastError = "awaiting acknowledgement"
        return scheduled
    }

    /// On the core, right after frames for `keys` were stored: a recipient with a link up gets
    /// them now, from here (no hop through the delivery loop; each frame is still written once per
    /// link); the others wait for the loop, which is woken.
    /// `scheduled`: frames stored in this step already scheduled as written (`scheduledAsWritten`),
    /// in the order they were queued; they are written after the commit with the rest, behind any
    /// older frame of the same recipient that was never written (the receiver takes a friend's
    /// messages in order).
    package func send(to keys: [[UInt8]], scheduled: [OutboxItem] = [], in step: StoreStep) {
        // Frames for a peer with a link up are scheduled as written in the step's own transaction,
        // which returns them (no read transaction of their own): writing them after the commit then
        // needs no commit and no read of its own. Only the frames just scheduled are written here;
        // older ones that wait for an ACK are the delivery loop's, when due.
        if sendingIn !== step {
            // The first send of this step (an earlier step that never committed left its list
            // behind: void, its frames were rolled back with it).
            sendingIn = step
            sendingKeys = []
            sendingReady = [:]
            // The frames of every send in the step are written once they are durable, together.
            step.afterCommit { [self] in
                let (keys, ready) = (sendingKeys, sendingReady)
                sendingIn = nil
                sendingKeys = []
                sendingReady = [:]
                writeNow(to: keys, ready: ready)
            }
        }
        let nowMs = now()
        for key in Set(keys) where transport.link(to: key) != nil {
            health.attempt("schedule the first write of queued frames") {
                let due = try step.scheduleFirstWrite(for: key, nowMs: nowMs, delayMs: min(configuration.resendAfterMs, 1000))
                if !due.isEmpty { sendingReady[key, default: []].append(contentsOf: due) }
            }
        }
        // Whatever the link does meanwhile: with the link gone after the commit, `writeNow` makes
        // them due again at once.
        for item in scheduled { sendingReady[Array(item.recipient), default: []].append(item) }
        sendingKeys.append(contentsOf: keys)
    }

    private func writeNow(to keys: [[UInt8]], ready: [[UInt8]: [OutboxItem]]) {
        var others = false
        var seen = Set<[UInt8]>()
        for key in keys where seen.insert(key).inserted {
            if let link = transport.link(to: key) {
                write(to: key, on: link, items: ready[key])
            } else if ready[key] != nil {
                // The link closed after the frames were scheduled as written: due now again.
                health.attempt("expedite the outbox") { _ = try store.step(syncing: false) { step in expedite(key, step) } }
            } else {
                others = true
            }
        }
        if others { poke() }
    }

    /// Frames for `key` are due now (a link came up, a fresh address was seen). True when any wait.
    @discardableResult
    package func expedite(_ key: [UInt8], resetBackoff: Bool = false, _ step: StoreStep) -> Bool {
        if resetBackoff { book.withLockedValue { $0.dialSucceeded(key) } }
        // A link from someone nothing waits for (a stranger, typically) costs no write and no round.
        guard health.read("read the outbox", or: true, { try step.hasOutbox(for: key) }) else { return false }
        health.attempt("expedite the outbox") { try step.expediteOutbox(for: key, nowMs: now()) }
        poke()
        return true
    }

    // MARK: - What peers send (on the core)

    /// The mark that records `envelope` as handled, in the transaction of the change it makes
    /// (Protocol 12.5, "Exactly once"); marks from non-friends are kept apart and capped on their own.
    /// `fromFriend`: when the caller already knows (one store read less).
    package func handledMark(_ envelope: Envelope, fromFriend: Bool? = nil, in r: StoreReading) -> HandledMark {
        HandledMark(messageId: envelope.messageID.bytes, createdAtMs: Int64(clamping: envelope.createdAt),
                    windowMs: Self.handledWindowMs, nowMs: now(), fromFriend: fromFriend ?? isFriend(envelope.author, in: r))
    }

    /// Acknowledges a durable frame on the link it came by, after the change it made committed
    /// (frames from a relay mailbox are acknowledged to the relay instead, by the relay client).
    package func acknowledge(_ envelope: Envelope, on link: PeerLink?, _ step: StoreStep) {
        guard let link else { return }
        if ackingIn !== step {
            ackingIn = step
            acks = [:]
            // Once the changes the frames made are durable: every ACK of the step, one write per link.
            step.afterCommit { [self] in
                let owed = acks
                ackingIn = nil
                acks = [:]
                for (_, entry) in owed { writeAcks(entry.ids, on: entry.link) }
            }
        }
        acks[link.serial, default: (link, [])].ids.append(envelope.messageID.bytes)
    }

    /// Signs the acknowledgements of `ids` (the frames of one committed step that came on `link`,
    /// in their order) and writes them on `link` in one go: one ACKS for up to 256 of them when the
    /// peer announced ACKS on this link (its PRESENCE, README 12.5), else an ACK each (an older
    /// node, or its PRESENCE has not come yet); a single frame gets a single ACK either way. The
    /// signing happens on the link's event loop, not here: the core's one thread is what every
    /// flow waits for.
    private func writeAcks(_ ids: [[UInt8]], on link: PeerLink) {
        guard let recipient = link.remotePublicKey else { return }
        let identity = self.identity
        let channel = link.channel
        // An id once per ACKS (a validating receiver refuses a list that names one twice).
        var seen = Set<[UInt8]>(minimumCapacity: ids.count)
        let ids = ids.filter { seen.insert($0).inserted }
        let batched = ids.count > 1 && link.takesAcks
        // Unsigned when the peer takes it on this link (README 5.4): it never leaves the link.
        let unsigned = link.takesLinkAuthenticated
        let payloads: [(MessageType, [UInt8])]
        if batched {
            payloads = stride(from: 0, to: ids.count, by: AcksMessage.maximumIDs).map { start in
                var acks = Tandem_V1_Acks()
                acks.messageIds = ids[start..<min(start + AcksMessage.maximumIDs, ids.count)].map { Data($0) }
                return (.acks, (try? acks.serializedBytes()) ?? [])  // a message of set fields always serializes
            }
        } else {
            payloads = ids.map { id in
                var ack = Tandem_V1_Ack()
                ack.messageID = Data(id)
                return (.ack, (try? ack.serializedBytes()) ?? [])  // as above
            }
        }
        signedAcknowledgements.withLockedValue {
            if batched { $0.batched += ids.count; $0.acksFrames += payloads.count } else { $0.single += ids.count }
        }
        channel.eventLoop.execute {
            PathTrace.stamp(.ackOnLoop)
            let nowMs = wallClockMilliseconds()  // as a link's own replies are stamped
            for (type, payload) in payloads {
                let envelope = Envelope.make(type: type, author: identity, recipient: recipient, createdAt: nowMs,
                                             payload: payload, unsignedOnLink: unsigned)
                channel.write(envelope, promise: nil)
            }
            channel.flush()
        }
    }

    /// An ACK (or a REPLAYED error) from the recipient of one of our frames: delivered. Only the
    /// recipient of a frame can acknowledge it. Returns the acknowledged frame's type (nil when no
    /// frame of ours to `author` had this id), so the router can tell the flow that owns the type
    /// (`FrameFlow.delivered`) in the same step. `announce` says whether `outbox.delivered` is stored
    /// for the frame's type (not when the flow that owns it announces the delivery itself).
    @discardableResult
    package func delivered(_ messageID: [UInt8], by author: [UInt8], _ step: StoreStep,
                           announce: (MessageType?) -> Bool = { _ in true }) -> MessageType? {
        health.read("remove an acknowledged frame", or: nil) { () throws -> MessageType? in
            guard let raw = try step.acknowledgeReturningType(messageID, from: author) else { return nil }
            let refill = book.withLockedValue { book -> Bool in
                book.done(Self.bookKey(messageID, author), recipient: author)
                // Frames wait for room: written once a quarter of the window is free (fewer, larger writes).
                return book.isHolding(author) && book.room(author) >= max(1, book.window / 4)
            }
            if refill { refillAfterCommit(author, step) }
            let type = MessageType(rawValue: UInt16(clamping: raw))
            guard announce(type) else { return type }
            events.emit("outbox.delivered", ["to": .string(NodeID(publicKey: author).canonical),
                                             "message_id": .string(hexString(messageID))], in: step)
            return type
        }
    }

    /// After `step` commits, the frames waiting for room in `key`'s window are written on its link.
    private func refillAfterCommit(_ key: [UInt8], _ step: StoreStep) {
        if refillingIn !== step {
            refillingIn = step
            refills = []
            step.afterCommit { [self] in
                let keys = refills
                refillingIn = nil
                refills = []
                for key in keys {
                    guard let link = transport.link(to: key) else { continue }  // the delivery loop's, when the link is back
                    write(to: key, on: link, refilling: true)
                }
            }
        }
        if !refills.contains(key) { refills.append(key) }
    }

    /// A replay error about one of our frames means its first copy reached the peer (whose ACK
    /// may be lost or still on its way): delivered. Returns the frame's id and type when it was ours.
    func peerReportedError(_ error: Tandem_V1_Error, from key: [UInt8], _ step: StoreStep) -> (messageID: [UInt8], type: MessageType)? {
        guard error.code == .replayed, error.refMessageID.count == 16 else { return nil }
        let id = Array(error.refMessageID)
        return delivered(id, by: key, step).map { (id, $0) }
    }

    nonisolated static let durable: Set<MessageType> = [.friendRequest, .friendAccept, .friendDecline, .friendRemove, .contactUpdate, .backupOffer]

    nonisolated static func isDurable(_ type: MessageType) -> Bool {
        durable.contains(type) || MessageType.challengeRange.contains(type.rawValue) || type.isAcknowledgedMessage
    }

    /// A payload that broke its message's rules: logged, answered with MALFORMED on its link, and
    /// acknowledged when durable so the sender's outbox stops resending it. Nothing is stored.
    ///
    /// For a non-friend each signed reply is one token of the stranger budget (README 12.4, 5.9.2):
    /// the ACK first (it is what stops an honest sender's outbox), then the ERROR; with one token
    /// left only the ACK goes, with none nothing. So a burst of malformed frames from one stranger
    /// key draws at most 20 signed replies a minute, not 20 pairs.
    package func refuseMalformed(_ envelope: Envelope, _ e: PayloadError, on link: PeerLink?, _ step: StoreStep) {
        logger.info("malformed payload", metadata: ["type": "\(envelope.type)", "from": "\(NodeID(publicKey: envelope.author).short)",
                                                    "detail": "\(e.detail)"])
        guard let link else { return }
        let durable = Self.isDurable(envelope.type)
        let ack = durable && mayReply(to: envelope.author, on: link, in: step)
        guard ack || !durable, mayReply(to: envelope.author, on: link, in: step) else {
            if ack { acknowledge(envelope, on: link, step) }
            return
        }
        // Both paid for: the ERROR goes first, then the ACK (as a sender reads them).
        let rejection = FrameRejection(.malformed, e.detail, messageID: envelope.messageID, author: envelope.author, type: envelope.type)
        if let reply = FrameVerifier.errorReply(to: rejection, from: identity, linkPeer: envelope.author, now: UInt64(clamping: now())) {
            step.afterCommit { link.send(reply) }
        }
        if ack { acknowledge(envelope, on: link, step) }
    }

    /// A durable frame that cannot change anything here (from a stranger or a blocked key, about a
    /// relationship or challenge that does not exist): no row, no handled-id mark, no transaction;
    /// acknowledged so an honest sender stops retrying, within the reply budget for non-friends.
    package func dropUnrelated(_ envelope: Envelope, on link: PeerLink?, _ step: StoreStep) {
        guard let link, Self.isDurable(envelope.type), mayReply(to: envelope.author, on: link, in: step) else { return }
        acknowledge(envelope, on: link, step)
    }

    /// Whether one reply to this author may be signed now: always for friends; for anyone else,
    /// one token of a per-sender and per-address budget (a signature costs CPU). Call it once per
    /// signed reply (an ACK and an ERROR for the same frame are two).
    func mayReply(to author: [UInt8], on link: PeerLink, in r: StoreReading) -> Bool {
        if isFriend(author, in: r) { return true }
        let origin = Self.origin(of: link)
        return replies.withLockedValue { $0.allow(sender: author, address: origin, nowMs: now()) }
    }

    /// Where a frame came from, for throttles and events: the peer's IP address on a direct
    /// link, "relay:<relay>" for a tunnel, "mailbox" for mail.
    package nonisolated static func origin(of link: PeerLink?) -> String {
        guard let link else { return "mailbox" }
        if let relay = link.relay { return "relay:" + NodeID(publicKey: relay).short }
        return link.directRemoteHost ?? "?"
    }

    // MARK: - The delivery loop

    /// Delivers due frames and dials wanted peers until cancelled; woken by `poke()`, by a
    /// `reachable` signal, and every `retryTick`.
    package nonisolated func run() async {
        await withTaskGroup(of: Void.self) { group in
            if let signals {
                group.addTask { [wake] in for await _ in signals { wake.poke() } }
            }
            while !Task.isCancelled {
                await deliverDue()
                await wake.wait(upTo: configuration.retryTick)
            }
            group.cancelAll()
        }
    }

    /// One round: expire, then deliver to every recipient with due frames and dial wanted peers
    /// with no link (friends, and partners of challenges that are on), in parallel.
    func deliverDue() async {
        let recipients = await NodeCore.run { self.planRound() }
        await withTaskGroup(of: Void.self) { group in
            for key in recipients {
                group.addTask { await self.deliver(to: key) }
            }
        }
    }

    /// On the core: who this round goes to. Expiry and the dialling of wanted peers with no link
    /// happen at most once per `retryTick`; a round a poke starts (a frame was just queued, a link
    /// came up) only looks at what is due.
    func planRound() -> [[UInt8]] {
        let nowMs = now()
        let tickMs = Int64(configuration.retryTick.components.seconds) * 1000
            + Int64(configuration.retryTick.components.attoseconds / 1_000_000_000_000_000)
        let full = lastFullRound.withLockedValue { last -> Bool in
            guard nowMs.subtractingSaturated(last) >= tickMs else { return false }
            last = nowMs
            return true
        }
        var recipients = health.read("read the due outbox recipients", or: []) { try store.dueRecipients(nowMs: nowMs) }
        guard full else { return recipients }
        do {
            try store.step(syncing: false) { step in
                for gone in try step.expireOutbox(nowMs: nowMs) {
                    events.emit("outbox.expired", ["to": .string(NodeID(publicKey: gone.recipient).canonical),
                                                   "message_id": .string(hexString(gone.messageId)),
                                                   "type": .string(MessageType(rawValue: UInt16(clamping: gone.type)).description)],
                                in: step)
                }
            }
            events.published()
        } catch {
            health.failed("expire outbox frames", error)
        }
        // Friends without a link are tried too, with backoff, so they come online when reachable.
        let wanted = health.read("read the peers to keep connected", or: []) { try store.peersToKeepConnected() }
        for key in wanted where transport.link(to: key) == nil && !recipients.contains(key) {
            if book.withLockedValue({ $0.shouldDial(key, nowMs: nowMs) }) { recipients.append(key) }
        }
        return recipients
    }

    func deliver(to key: [UInt8]) async {
        let link: OutboxLink
        if let existing = transport.link(to: key) {
            link = existing
        } else {
            switch await transport.dial(key) {
            case .link(let opened):
                link = opened
            case .offline(let relay):
                book.withLockedValue { $0.dialFailed(key, nowMs: now()) }
                await depositMail(for: key, at: relay)
                return
            case .unreachable:
                book.withLockedValue { $0.dialFailed(key, nowMs: now()) }
                await NodeCore.run {
                    self.health.attempt("defer the outbox") {
                        try self.store.step(syncing: false) { step in
                            try step.deferOutbox(for: key, error: "unreachable", nowMs: self.now())
                        }
                    }
                }
                return
            }
        }
        book.withLockedValue { $0.dialSucceeded(key) }
        await NodeCore.run { self.write(to: key, on: link) }
    }

    /// On the core: writes what waits for `key` on `link`, each frame once per link, then the
    /// PRESENCE owed to it (after the frames that make it meaningful, Protocol 12.7).
    /// `items`: what waits for `key`, when the caller read it already (else read here).
    /// `refilling`: acknowledgements made room in the window (`refillAfterCommit`): what is written
    /// is not re-scheduled here (see the end).
    func write(to key: [UInt8], on link: OutboxLink, items known: [OutboxItem]? = nil, refilling: Bool = false) {
        let items: [OutboxHead]
        var frames: [[UInt8]: [UInt8]] = [:]
        /// More frames wait past those read (a refill reads only up to a quarter of the window).
        var moreWait = false
        let nowMs = now()
        // No free place in the window (a burst runs ahead of the ACKs): nothing could be written, so
        // nothing is read; what waits is held and goes out when ACKs make room (messages.md 11.6).
        // Every send batch of a burst used to read the recipient's 512 oldest frames here for nothing.
        let (holding, free) = book.withLockedValue { ($0.isHolding(key), $0.freePlaces(key, link: link.serial, nowMs: nowMs)) }
        guard free > 0 else {
            book.withLockedValue { $0.hold(key) }
            writeOwedPresence(to: key, on: link, nowMs: nowMs)
            return
        }
        do {
            // The oldest frames: those in the window, then those waiting for room in it. Frames just
            // queued (`known`) go as they are only when none older wait for room: else the oldest go
            // first, and the book sees them (a write of the new ones alone would pass the older).
            // Read without their bytes: only those written now are read whole, below. The frames
            // in flight on this link hold `window - free` places and come first (written oldest
            // first), so `window + free` rows hold every frame that can be written now (a refill
            // after a quarter of the window: 320, not 512).
            if !holding, let known {
                items = known.map { OutboxHead(messageId: Array($0.messageId), type: $0.type, nextAttemptMs: $0.nextAttemptMs,
                                               frameBytes: $0.frame.count) }
                for item in known { frames[Array(item.messageId)] = Array(item.frame) }
            } else if refilling, case let flying = book.withLockedValue({ $0.inFlight(to: key, link: link.serial, nowMs: nowMs) }),
                      flying.frames > 0 {
                // A refill: the frames in flight on this link are the oldest (written oldest first,
                // and the acknowledged ones are gone), so the frames to write follow them. One read
                // of the rows after them with their bytes, not `window + free` heads and then the
                // frames: the rows in flight are stepped over in the index. At most the free places,
                // at most a quarter of the window (the room a refill waits for) or 64, and at most
                // what the window's free bytes take at the size of the frames in flight (large frames:
                // the rows past them are not read in vain); one row more tells whether frames still
                // wait. Should the order not hold (a clock set back queued a frame before them), the
                // frame skipped is due and the delivery loop's next round writes it; one returned that
                // is in flight is not written again (the book).
                var cap = min(free, max(64, configuration.window / 4))
                let averageBytes = flying.bytes / flying.frames
                if averageBytes > 0 {
                    cap = min(cap, max(1, (configuration.windowBytes - min(flying.bytes, configuration.windowBytes)) / averageBytes + 1))
                }
                let rows = try store.outboxFrames(for: key, after: flying.frames, limit: cap + 1)
                items = rows.map(\.head)
                for row in rows { frames[row.head.messageId] = row.frame }
                // Read fewer than the free places and found more: the book cannot see the rest wait.
                moreWait = cap < free && rows.count > cap
            } else {
                items = try store.outboxHeads(for: key, limit: configuration.window + free)
            }
        } catch {
            health.failed("read the outbox", error)
            return
        }
        let fresh = Set(book.withLockedValue { book -> [[UInt8]] in
            let out = book.toWrite(items.map { Self.bookKey($0.messageId, key) }, sizes: items.map(\.frameBytes), to: key,
                                   link: link.serial, nowMs: nowMs)
            if moreWait { book.hold(key) }  // frames past those read wait for room: the next ACKs refill
            return out
        })
        var written: [Int: [[UInt8]]] = [:]
        defer {
            for (type, ids) in written {
                poster?.post(.framesWritten(type: UInt16(clamping: type), recipient: key, ids: ids))
            }
        }
        var envelopes: [Envelope] = []
        // The bytes of the frames written now that were not handed in, in one read.
        let toRead = items.filter { fresh.contains(Self.bookKey($0.messageId, key)) && frames[$0.messageId] == nil }.map(\.messageId)
        do {
            frames.merge(try store.outboxFrames(toRead, to: key)) { known, _ in known }
        } catch {
            health.failed("read the outbox", error)
        }
        for item in items where fresh.contains(Self.bookKey(item.messageId, key)) {
            guard let bytes = frames[item.messageId] else { continue }  // acknowledged since it was listed (or unreadable): nothing to write
            guard let env = try? Envelope.parse(bytes) else {  // logged, counted and dropped below
                // Written by this node, so only a damaged store gets here: drop the row, say so.
                logger.error("unreadable outbox frame dropped", metadata: ["message_id": "\(hexString(item.messageId))"])
                health.attempt("drop an unreadable outbox frame") {
                    try store.step(syncing: false) { step in _ = try step.acknowledge(item.messageId) }
                }
                continue
            }
            // Unsigned in the outbox (a direct MESSAGE): signed here unless this link's peer takes it so.
            envelopes.append(link.takesLinkAuthenticated ? env : env.signed(by: identity))
            written[item.type, default: []].append(item.messageId)
        }
        // All of them in one write and one flush.
        link.writeAndFlush(envelopes)
        writeOwedPresence(to: key, on: link, nowMs: nowMs)
        // Written now, or due and not written (waiting for room in the window, or written on this
        // link before and not yet acknowledged): resent only if no ACK comes in time. Frames that
        // are scheduled later already (written earlier, or queued with this write in view,
        // `send(to:)`) keep their schedule: the delivery book, not this schedule, decides what is
        // written again, and a refill in a burst would otherwise touch every frame of the window.
        // When nothing is due, nothing needs a commit.
        // A refill (acknowledgements made room during a burst) schedules nothing: it ran after every
        // quarter of the window and re-scheduled up to `window + free` rows in a step of its own each
        // time (an eighth of the sender's core thread in a burst, messages.md 11.6, session 14). The
        // frames it wrote stay as they were scheduled when queued; any that are due by now make their
        // recipient due, and the delivery loop's next round (every `retryTick`) finds them in flight,
        // writes nothing again within `resendAfterMs`, and re-schedules them then — once per round,
        // not once per refill.
        guard !refilling, items.contains(where: { $0.nextAttemptMs <= nowMs }) else { return }
        let writtenNow = Set(written.values.joined())
        let read = Set(items.filter { $0.nextAttemptMs <= nowMs || writtenNow.contains($0.messageId) }.map(\.messageId))
        health.attempt("schedule the resend") {
            try store.step(syncing: false) { step in
                try step.deferOutbox(for: key, error: "awaiting acknowledgement", nowMs: nowMs,
                                     maximumDelayMs: configuration.resendAfterMs, only: read)
            }
        }
    }

    /// The PRESENCE owed after the frames just written follows them on the link, flushed apart: its
    /// signature is not worth delaying the FRIEND_ACCEPT it follows.
    private func writeOwedPresence(to key: [UInt8], on link: OutboxLink, nowMs: Int64) {
        if book.withLockedValue({ $0.takeOwedPresence(key) }), isFriend(key, in: store) {
            link.write(presence.envelope(from: identity, to: key, nowMs: nowMs))
            link.flush()
        }
    }

    /// Moves the peer's waiting frames into its mailbox at its home relay; each one the relay
    /// stored leaves the outbox (the relay delivers it when the peer comes back).
    func depositMail(for key: [UInt8], at relay: RelayAddress) async {
        let items = await NodeCore.run { self.health.read("read the outbox", or: []) { try self.store.outbox(for: key) } }
        // An unreadable frame (a damaged store) is dropped, logged and counted at the next direct write.
        // Mail is opened away from any link: a frame held unsigned (a direct MESSAGE) is signed now (README 14.4).
        let envelopes = items.compactMap { try? Envelope.parse(Array($0.frame)) }.filter { MailboxSeal.isMailable($0.type) }  // see above
            .map { $0.signed(by: identity) }
        var deposited: [[UInt8]] = []
        var failure: String?
        if !envelopes.isEmpty {
            do {
                deposited = try await transport.deposit(envelopes, via: relay)
            } catch {
                logger.info("cannot leave mail at the relay", metadata: ["relay": "\(relay)", "error": "\(error)"])
                failure = "offline; mailbox: \(error)"
            }
        }
        await NodeCore.run {
            self.health.attempt("record the deposited frames") {
                try self.store.step(syncing: false) { step in
                    for id in deposited {
                        guard self.health.read("remove a deposited frame", or: false, { try step.acknowledge(id, from: key) }) else { continue }
                        self.book.withLockedValue { $0.done(Self.bookKey(id, key), recipient: key) }
                        self.events.emit("outbox.deposited", ["to": .string(NodeID(publicKey: key).canonical),
                                                              "message_id": .string(hexString(id)), "relay": .string(relay.description)],
                                         in: step)
                    }
                    // Left at the relay: as good as written on a link (the flows may record them as sent).
                    let gone = Set(deposited)
                    var byType: [Int: [[UInt8]]] = [:]
                    for item in items where gone.contains(Array(item.messageId)) { byType[item.type, default: []].append(Array(item.messageId)) }
                    for (type, ids) in byType { self.poster?.post(.framesWritten(type: UInt16(clamping: type), recipient: key, ids: ids)) }
                    if deposited.count < items.count {
                        try step.deferOutbox(for: key, error: failure ?? "offline", nowMs: self.now())
                    }
                }
            }
            self.events.published()
        }
    }
}

/// Replies (acknowledgements, ERRORs) signed for non-friends: per sender and per address (burst,
/// then refill per minute). A signature costs CPU; a stranger gets a bounded share.
struct ReplyBudget {
    private var senders = TokenBuckets<[UInt8]>()
    private var addresses = TokenBuckets<String>()
    nonisolated static let perSenderPerMinute = 20.0
    nonisolated static let perAddressPerMinute = 120.0

    mutating func allow(sender: [UInt8], address: String, nowMs: Int64) -> Bool {
        guard addresses.take(address, rate: Self.perAddressPerMinute, nowMs: nowMs) else { return false }
        return senders.take(sender, rate: Self.perSenderPerMinute, nowMs: nowMs)
    }
}

/// Token buckets per key (burst `rate`, refilled at `rate` per minute), at most `maximumTracked`
/// keys: when full, buckets that are (nearly) full are forgotten, as they hold no debt worth
/// remembering; if none can be, the token is refused.
package struct TokenBuckets<Key: Hashable> {
    private var buckets: [Key: (tokens: Double, at: Int64)] = [:]
    nonisolated static var maximumTracked: Int { 10_000 }

    package init() {}

    package mutating func take(_ key: Key, rate: Double, nowMs: Int64) -> Bool {
        if buckets.count >= Self.maximumTracked, buckets[key] == nil {
            for k in buckets.filter({ $0.value.tokens >= rate - 1 }).keys.prefix(buckets.count / 2) { buckets[k] = nil }
            if buckets.count >= Self.maximumTracked { return false }
        }
        var b = buckets[key] ?? (rate, nowMs)
        b.tokens = min(rate, b.tokens + Double(max(0, nowMs.subtractingSaturated(b.at))) / 60_000 * rate)
        b.at = nowMs
        guard b.tokens >= 1 else { buckets[key] = b; return false }
        b.tokens -= 1
        buckets[key] = b
        return true
    }
}

import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemStore

/// Friends, contact records, presence and the outbox: the node's first L3 flows.
///
/// Every change a user asks for is one store transaction holding the new state and the signed
/// frame that announces it; the outbox delivers that frame until the peer acknowledges it.
public final class FriendService: @unchecked Sendable {
    public struct Configuration: Sendable {
        /// Heartbeat: a PRESENCE frame on every friend link this often.
        public var heartbeat: TimeAmount = .seconds(10)
        /// A friend silent for this long is considered gone and its link is closed.
        public var silenceLimit: TimeAmount = .seconds(30)
        /// How often due outbox frames and offline friends are retried.
        public var retryTick: TimeAmount = .milliseconds(500)
        /// Friend requests accepted per sender key and per source address (burst, then refill per minute).
        public var requestsPerSenderPerMinute = 5
        public var requestsPerAddressPerMinute = 30
        public var maximumMessageBytes = 280
        public init() {}
    }

    /// How long handled message ids are remembered: longer than the oldest frame any path accepts
    /// (24 h on links; 8 days for relay mail, RelayClient.mailboxMaximumAgeMs), so a copy that
    /// comes late is still recognised.
    static let handledWindowMs: Int64 = 9 * 24 * 3_600_000

    let identity: SigningKeyPair
    let store: NodeStore
    let peers: PeerManager
    let events: EventBus
    let configuration: Configuration
    let logger: Logger
    private let listenPort: NIOLockedValueBox<Int> = NIOLockedValueBox(0)
    private let status = NIOLockedValueBox(Tandem_V1_PresenceStatus.idle)
    private let throttle = NIOLockedValueBox(RequestThrottle())
    /// What was written on which link, dial backoff, owed PRESENCE frames (Protocol 12.5, 12.7).
    let book = NIOLockedValueBox(DeliveryBook())
    /// Store writes that failed on a path that had to go on (see `logStoreError`).
    let storeErrors = NIOLockedValueBox(0)
    /// The delivery loop's wake-up: the loop's continuation while it waits, or a poke that came
    /// while it was busy (kept, so the loop goes round again instead of sleeping through it).
    private struct Wake {
        var waiter: CheckedContinuation<Void, Never>?
        var pending = false
    }
    private let wake = NIOLockedValueBox(Wake())
    /// Called when the friend set changes (discovery re-announces).
    public var onFriendsChanged: (@Sendable () -> Void)?
    /// Peers other than friends to keep links to (partners in a group challenge).
    var keepConnected: (@Sendable () -> [[UInt8]])?
    /// Tunnels and mailboxes through relays, when the node has the relay client.
    var relays: RelayClient?

    public init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, events: EventBus,
                configuration: Configuration = Configuration(), logger: Logger) {
        self.identity = identity
        self.store = store
        self.peers = peers
        self.events = events
        self.configuration = configuration
        self.logger = logger
    }

    public var id: NodeID { NodeID(publicKey: identity.publicKey) }

    public func setListenPort(_ port: Int) { listenPort.withLockedValue { $0 = port } }

    /// Called once the listener is bound: when the port differs from the one friends were last
    /// told, a newer contact record goes to every friend.
    public func announceListenPortIfChanged() throws {
        let port = listenPort.withLockedValue { $0 }
        guard port > 0, try store.setting("advertised_port") != String(port) else { return }
        let firstRun = try store.setting("advertised_port") == nil
        try store.setSetting("advertised_port", String(port))
        guard !firstRun else { return }
        try announceRecord()
    }

    // MARK: - Identity data

    public var displayName: String {
        stored("read the display name", or: nil) { try store.setting("display_name") } ?? ""
    }

    /// Our signed contact record's content.
    func contactRecord() -> Tandem_V1_ContactRecord {
        var r = Tandem_V1_ContactRecord()
        r.publicKey = Data(identity.publicKey)
        r.displayName = displayName
        let port = listenPort.withLockedValue { $0 }
        if port > 0 { r.addresses = [":\(port)"] }
        if let home = stored("read the home relays", or: nil, { try store.relays().first }) {
            r.homeRelay = RelayAddress(id: NodeID(publicKey: home.publicKey), host: home.host, port: home.port).description
        }
        r.version = stored("read the record version", or: nil) { try store.setting("record_version") }.flatMap(UInt64.init) ?? 1
        return r
    }

    func now() -> Int64 { Int64(wallClockMilliseconds()) }

    /// Signs a frame for `recipient` and wraps it as an outbox row.
    /// Frames to someone who is not a friend expire: a farewell after a day, anything else (a
    /// request, a group member's challenge frames) after 8 days, the mailbox age limit.
    static let farewellToStrangerTtlMs: Int64 = 86_400_000
    static let frameToStrangerTtlMs: Int64 = 8 * 86_400_000

    func outboxFrame(_ type: MessageType, to recipient: [UInt8], payload: [UInt8]) -> OutboxItem {
        let nowMs = now()
        let env = Envelope.sign(type: type, author: identity, recipient: recipient, createdAt: UInt64(clamping: nowMs), payload: payload)
        var item = OutboxItem(messageId: env.messageID.bytes, recipient: recipient, type: type.rawValue, frame: env.bytes, nowMs: nowMs)
        if !isFriend(recipient) || type == .friendDecline || type == .friendRemove {
            let ttl = (type == .friendDecline || type == .friendRemove) ? Self.farewellToStrangerTtlMs : Self.frameToStrangerTtlMs
            item.expiresAtMs = nowMs.addingSaturated(ttl)
        }
        return item
    }

    /// Nudges the delivery loop: at once when it waits, else as soon as its current round ends.
    public func poke() {
        let waiter = wake.withLockedValue { w -> CheckedContinuation<Void, Never>? in
            guard let c = w.waiter else {
                w.pending = true
                return nil
            }
            w.waiter = nil
            return c
        }
        waiter?.resume()
    }

    // MARK: - User intents (control socket)

    public func request(_ key: [UInt8], message: String, address: (String, Int)?, relay: RelayAddress? = nil) throws -> Contact {
        guard key != identity.publicKey else { throw TandemError("that is your own ID", exitCode: TandemError.usageExitCode) }
        guard message.utf8.count <= configuration.maximumMessageBytes else {
            throw TandemError("the message is longer than \(configuration.maximumMessageBytes) bytes", exitCode: TandemError.usageExitCode)
        }
        var req = Tandem_V1_FriendRequest()
        req.message = message
        req.contact = contactRecord()
        if let address {
            try store.rememberAddress(key, host: address.0, port: address.1, source: "manual", nowMs: now())
        }
        if let relay {
            try store.setPeerRelay(key, relay: relay.id.publicKey, host: relay.host, port: relay.port, source: "manual", nowMs: now())
        }
        if let existing = try store.contact(key), existing.relationship == .pending {
            // They asked first: asking back is accepting.
            return try accept(key)
        }
        let item = outboxFrame(.friendRequest, to: key, payload: try req.serializedBytes())
        let contact = try mapStoreError { try store.requestFriend(key, message: message, frame: item, nowMs: now()) }
        events.emit("friend.request.sent", ["id": .string(NodeID(publicKey: key).canonical), "message": .string(message)])
        poke()
        return contact
    }

    public func accept(_ key: [UInt8]) throws -> Contact {
        var acc = Tandem_V1_FriendAccept()
        acc.contact = contactRecord()
        let item = outboxFrame(.friendAccept, to: key, payload: try acc.serializedBytes())
        let c = try mapStoreError { try store.acceptFriend(key, frame: item, nowMs: now()) }
        events.emit("friend.accepted", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(c.displayName), "by": "me"])
        friendsChanged()
        becameFriend(key, name: c.displayName)
        poke()
        return c
    }

    public func decline(_ key: [UInt8]) throws {
        let item = outboxFrame(.friendDecline, to: key, payload: try Tandem_V1_FriendFarewell().serializedBytes())
        try mapStoreError { try store.declineFriend(key, frame: item, nowMs: now()) }
        events.emit("friend.declined", ["id": .string(NodeID(publicKey: key).canonical), "by": "me"])
        poke()
    }

    public func remove(_ key: [UInt8]) throws {
        let item = outboxFrame(.friendRemove, to: key, payload: try Tandem_V1_FriendFarewell().serializedBytes())
        try mapStoreError { try store.removeFriend(key, frame: item, nowMs: now()) }
        events.emit("friend.removed", ["id": .string(NodeID(publicKey: key).canonical), "by": "me"])
        friendsChanged()
        poke()
    }

    public func block(_ key: [UInt8]) throws {
        guard key != identity.publicKey else { throw TandemError("that is your own ID", exitCode: TandemError.usageExitCode) }
        let wasFriend = try store.contact(key)?.relationship == .friend
        try store.block(key, nowMs: now())
        peers.link(to: key)?.close()
        events.emit("friend.blocked", ["id": .string(NodeID(publicKey: key).canonical)])
        if wasFriend { friendsChanged() }
    }

    public func unblock(_ key: [UInt8]) throws -> Bool {
        let done = try store.unblock(key, nowMs: now())
        if done { events.emit("friend.unblocked", ["id": .string(NodeID(publicKey: key).canonical)]) }
        return done
    }

    /// Sets our display name and tells every friend.
    public func setName(_ name: String) throws {
        guard name.utf8.count <= 64 else { throw TandemError("a display name is at most 64 bytes", exitCode: TandemError.usageExitCode) }
        guard !name.contains(where: { $0.isNewline }) else { throw TandemError("a display name is one line", exitCode: TandemError.usageExitCode) }
        try store.setSetting("display_name", name)
        try announceRecord()
        events.emit("name.changed", ["name": .string(name)])
    }

    /// Tells every friend our newer contact record (after the name, the port or the home relay changed).
    func announceRecord() throws {
        try store.setSetting("record_version", String(now()))
        var update = Tandem_V1_ContactUpdate()
        update.contact = contactRecord()
        let payload: [UInt8] = try update.serializedBytes()
        for friend in try store.friendKeys() {
            try store.enqueue(outboxFrame(.contactUpdate, to: friend, payload: payload))
        }
        poke()
    }

    public func setStatus(_ s: Tandem_V1_PresenceStatus) {
        status.withLockedValue { $0 = s }
        for friend in stored("read the friends", or: [], { try store.friendKeys() }) where peers.link(to: friend) != nil {
            sendPresence(to: friend)
        }
    }

    private func friendsChanged() { onFriendsChanged?() }

    func isFriend(_ key: [UInt8]) -> Bool { stored("read a contact", or: nil) { try store.contact(key) }?.relationship == .friend }

    /// A new friend whose link is already up is online from now on.
    private func becameFriend(_ key: [UInt8], name: String) {
        guard peers.link(to: key) != nil else { return }
        events.emit("peer.online", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(name)])
        greet(key)
    }

    /// A PRESENCE to a friend whose link just came up (or who just became one): at once when nothing
    /// waits for it in the outbox, else right after those frames on the same link (the FRIEND_ACCEPT
    /// that makes the PRESENCE meaningful comes first; Protocol 12.7).
    private func greet(_ key: [UInt8]) {
        let waiting = stored("read the outbox", or: false) { try store.hasOutbox(for: key) }
        if book.withLockedValue({ $0.presenceDue(key, framesWaiting: waiting) }) {
            sendPresence(to: key)
        } else {
            logStoreError("expedite the outbox") { try store.expediteOutbox(for: key, nowMs: now()) }
            poke()
        }
    }

    private func mapStoreError<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let e as FriendStoreError {
            switch e {
            case .alreadyFriends: throw TandemError("you are already friends", exitCode: 1)
            case .blocked: throw TandemError("that ID is blocked (tandem friend unblock ID first)", exitCode: 1)
            case .noPendingRequest: throw TandemError("there is no pending friend request from that ID (see tandem friend requests)", exitCode: TandemError.nothingToActOnExitCode)
            case .notAFriend: throw TandemError("that ID is not a friend", exitCode: TandemError.nothingToActOnExitCode)
            case .isSelf: throw TandemError("that is your own ID", exitCode: TandemError.usageExitCode)
            }
        }
    }

    // MARK: - Frames from peers

    /// A frame for the friends flow, from a link or from mail. Every payload becomes a validated
    /// message first (`TandemProtocol/Messages.swift`); what a stranger sends is bounded before
    /// anything is written: only a FRIEND_REQUEST (throttled) or an answer to our own request
    /// creates or changes a row, and everything else from someone with no relationship is dropped
    /// with at most a throttled acknowledgement (Protocol/README.md 12.9, "Strangers").
    public func handle(_ envelope: Envelope, from link: PeerLink?) {
        let author = envelope.author
        let contact: Contact?
        do {
            contact = try store.contact(author)
        } catch {
            logger.error("cannot read the contact of a frame's author", metadata: ["error": "\(error)"])
            return
        }
        let relationship = contact?.relationship ?? Relationship.none
        if relationship == .blocked {
            // Dropped silently; acknowledged (within the stranger budget) so the sender stops retrying.
            dropUnrelated(envelope, on: link)
            return
        }
        do {
            switch envelope.type {
            case .friendRequest:
                try receiveRequest(envelope, from: link)
            case .friendAccept:
                let m = try FriendAcceptMessage(payload: envelope.payload, author: author)
                guard relationship == .requested || relationship == .friend else { return dropUnrelated(envelope, on: link) }
                try receiveAccept(envelope, m, from: link)
            case .friendDecline, .friendRemove:
                _ = try FarewellMessage(payload: envelope.payload, type: envelope.type)
                guard relationship != .none else { return dropUnrelated(envelope, on: link) }
                try receiveFarewell(envelope, from: link)
            case .contactUpdate:
                let m = try ContactUpdateMessage(payload: envelope.payload, author: author)
                guard relationship == .friend else { return dropUnrelated(envelope, on: link) }
                try receiveContactUpdate(envelope, m, from: link)
            case .presence:
                let m = try PresenceMessage(payload: envelope.payload)
                receivePresence(envelope, m, contact: contact)
            case .ack:
                let m = try AckMessage(payload: envelope.payload)
                // Only the recipient of an outbox frame can acknowledge it.
                if try store.acknowledge(m.messageID, from: author) {
                    book.withLockedValue { $0.done(m.messageID) }
                    events.emit("outbox.delivered", ["to": .string(NodeID(publicKey: author).canonical),
                                                     "message_id": .string(hexString(m.messageID))])
                }
            default:
                logger.debug("frame type not handled by friends", metadata: ["type": "\(envelope.type)"])
            }
        } catch let e as PayloadError {
            refuseMalformed(envelope, e, on: link)
        } catch {
            logger.error("cannot handle frame", metadata: ["type": "\(envelope.type)", "error": "\(error)"])
        }
    }

    static let durable: Set<MessageType> = [.friendRequest, .friendAccept, .friendDecline, .friendRemove, .contactUpdate]

    static func isDurable(_ type: MessageType) -> Bool {
        durable.contains(type) || (0x0201...0x02ff).contains(type.rawValue)
    }

    /// A payload that broke its message's rules: logged, answered with MALFORMED on its link, and
    /// acknowledged when durable so the sender's outbox stops resending it. Nothing is stored.
    func refuseMalformed(_ envelope: Envelope, _ e: PayloadError, on link: PeerLink?) {
        logger.info("malformed payload", metadata: ["type": "\(envelope.type)", "from": "\(NodeID(publicKey: envelope.author).short)",
                                                    "detail": "\(e.detail)"])
        guard let link, strangerBudget(envelope.author, link) else { return }
        let rejection = FrameRejection(.malformed, e.detail, messageID: envelope.messageID, author: envelope.author, type: envelope.type)
        if let reply = FrameVerifier.errorReply(to: rejection, from: identity, linkPeer: envelope.author, now: UInt64(clamping: now())) {
            link.send(reply)
        }
        if Self.isDurable(envelope.type) { sendAck(envelope, on: link) }
    }

    /// A durable frame that cannot change anything here (from a stranger or a blocked key, about a
    /// relationship or challenge that does not exist): no row, no handled-id mark, no transaction;
    /// acknowledged so an honest sender stops retrying, within a per-sender/per-address budget
    /// for anyone who is not a friend.
    func dropUnrelated(_ envelope: Envelope, on link: PeerLink?) {
        guard let link, Self.isDurable(envelope.type), strangerBudget(envelope.author, link) else { return }
        sendAck(envelope, on: link)
    }

    /// Whether a reply to this author may be signed now: always for friends; for anyone else,
    /// within the acknowledgement budget (RequestThrottle).
    private func strangerBudget(_ author: [UInt8], _ link: PeerLink) -> Bool {
        if isFriend(author) { return true }
        let origin = Self.origin(of: link)
        return throttle.withLockedValue { $0.allowReply(sender: author, address: origin, nowMs: now()) }
    }

    /// Acknowledges a durable frame on the link it came by (frames from a relay mailbox are
    /// acknowledged to the relay instead, by the relay client).
    func sendAck(_ envelope: Envelope, on link: PeerLink?) {
        guard let link else { return }
        var ack = Tandem_V1_Ack()
        ack.messageID = Data(envelope.messageID.bytes)
        link.send(type: .ack, payload: (try? ack.serializedBytes()) ?? [])
    }

    /// The mark that records `envelope` as handled, in the transaction of the change it makes
    /// (Protocol 12.5, "Exactly once"); marks from non-friends are kept apart and capped on their own.
    func handledMark(_ envelope: Envelope) -> HandledMark {
        HandledMark(messageId: envelope.messageID.bytes, createdAtMs: Int64(clamping: envelope.createdAt),
                    windowMs: Self.handledWindowMs, nowMs: now(), fromFriend: isFriend(envelope.author))
    }

    private func receiveRequest(_ envelope: Envelope, from link: PeerLink?) throws {
        let author = envelope.author
        let host = Self.origin(of: link)
        let allowed = throttle.withLockedValue {
            $0.allow(sender: author, address: host, nowMs: now(), perSender: configuration.requestsPerSenderPerMinute,
                     perAddress: configuration.requestsPerAddressPerMinute)
        }
        guard allowed else {
            // Not acknowledged: an honest sender retries later. One event per 10 s at most, so a flood
            // cannot fill the event log either.
            let report = throttle.withLockedValue { $0.noteThrottled(nowMs: now()) }
            if let dropped = report {
                events.emit("friend.request.throttled", ["address": .string(host), "dropped": .int(Int64(dropped))])
            }
            return
        }
        let req = try FriendRequestMessage(payload: envelope.payload, author: author)
        let record = req.contact
        var accept = Tandem_V1_FriendAccept()
        accept.contact = contactRecord()
        let reply = outboxFrame(.friendAccept, to: author, payload: try accept.serializedBytes())
        let id = NodeID(publicKey: author).canonical
        // The handled mark, the change and its events commit in one transaction; the ACK follows it.
        let result = try store.receiveFriendRequest(from: author, displayName: record.displayName, message: req.message,
                                                    record: record.canonicalBytes, recordVersion: record.storedVersion,
                                                    reply: reply, nowMs: now(), handled: handledMark(envelope)) { result in
            switch result {
            case .stored(let dropped):
                let received = events.record("friend.request.received", ["id": .string(id), "name": .string(record.displayName),
                                                                         "message": .string(req.message), "address": .string(host)])
                guard let dropped else { return [received] }
                return [events.record("friend.request.dropped", ["id": .string(NodeID(publicKey: dropped).canonical), "reason": "cap"]),
                        received]
            case .refreshed:
                return [events.record("friend.request.received", ["id": .string(id), "name": .string(record.displayName),
                                                                  "message": .string(req.message), "address": .string(host),
                                                                  "repeat": true])]
            case .mutual:
                return [events.record("friend.accepted", ["id": .string(id), "name": .string(record.displayName), "by": "both"])]
            case .alreadyFriends, .blocked, .duplicate:
                return []
            }
        }
        sendAck(envelope, on: link)
        events.published()
        switch result {
        case .stored, .refreshed, .mutual, .alreadyFriends:
            rememberRecordAddresses(record, author: author, link: link)
        case .blocked, .duplicate:
            break
        }
        switch result {
        case .stored, .refreshed:
            break
        case .mutual:
            friendsChanged()
            becameFriend(author, name: record.displayName)
            poke()
        case .alreadyFriends:
            poke()
        case .blocked, .duplicate:
            break
        }
    }

    private func receiveAccept(_ envelope: Envelope, _ m: FriendAcceptMessage, from link: PeerLink?) throws {
        let record = m.contact
        let accepted = events.record("friend.accepted", ["id": .string(NodeID(publicKey: envelope.author).canonical),
                                                         "name": .string(record.displayName), "by": "them"])
        let changed = try store.receiveFriendAccept(from: envelope.author, displayName: record.displayName,
                                                    record: record.canonicalBytes, recordVersion: record.storedVersion,
                                                    nowMs: now(), handled: handledMark(envelope), events: [accepted])
        sendAck(envelope, on: link)
        guard changed else { return }
        events.published()
        rememberRecordAddresses(record, author: envelope.author, link: link)
        friendsChanged()
        becameFriend(envelope.author, name: record.displayName)
    }

    private func receiveFarewell(_ envelope: Envelope, from link: PeerLink?) throws {
        let id = NodeID(publicKey: envelope.author).canonical
        let type = envelope.type == .friendDecline ? "friend.declined" : "friend.removed"
        let before = try store.receiveFarewell(from: envelope.author, nowMs: now(), handled: handledMark(envelope), events: { _ in
            [events.record(type, ["id": .string(id), "by": "them"])]
        })
        sendAck(envelope, on: link)
        guard let before else { return }
        events.published()
        if before == .friend { friendsChanged() }
    }

    private func receiveContactUpdate(_ envelope: Envelope, _ m: ContactUpdateMessage, from link: PeerLink?) throws {
        let record = m.contact
        let updated = events.record("contact.updated", ["id": .string(NodeID(publicKey: envelope.author).canonical),
                                                        "name": .string(record.displayName)])
        let changed = try store.updateContactRecord(envelope.author, displayName: record.displayName, record: record.canonicalBytes,
                                                    version: record.storedVersion, nowMs: now(), handled: handledMark(envelope),
                                                    events: [updated])
        sendAck(envelope, on: link)
        guard changed else { return }
        events.published()
        rememberRecordAddresses(record, author: envelope.author, link: link)
    }

    private func receivePresence(_ envelope: Envelope, _ p: PresenceMessage, contact: Contact?) {
        guard contact?.relationship == .friend else { return }
        let name = p.status.rawValue
        let changed = contact?.presence != name
        do {
            try store.setPresence(envelope.author, presence: name, lastSeenMs: now())
        } catch {
            logger.error("cannot store presence", metadata: ["error": "\(error)"])
        }
        if changed {
            events.emit("presence.changed", ["id": .string(NodeID(publicKey: envelope.author).canonical), "status": .string(name)])
        }
    }

    /// Where a frame came from, for throttles and events: the peer's IP address on a direct
    /// link, "relay:<relay>" for a tunnel, "mailbox" for mail.
    static func origin(of link: PeerLink?) -> String {
        guard let link else { return "mailbox" }
        if let relay = link.relay { return "relay:" + NodeID(publicKey: relay).short }
        return link.directRemoteHost ?? "?"
    }

    /// A record's ":port" addresses are paired with the host the link came from (observed; not for
    /// tunnels and mail, whose far end is a relay); a host the record names itself is the peer's
    /// claim and kept only where the dialling policy allows (Protocol 12.8). Its home relay is
    /// remembered under the same rule.
    private func rememberRecordAddresses(_ record: ContactRecord, author: [UInt8], link: PeerLink?) {
        let remoteHost = link?.directRemoteHost
        // A relay we know ourselves (one of our home relays, or the one whose tunnel carries this
        // link) is no claim: we reach it by our own address (14.7). Any other follows the policy.
        let known: (RelayAddress) -> Bool = { [relays] relay in
            link?.relay == relay.id.publicKey || (relays?.homeRelays().contains { $0.id == relay.id } ?? false)
        }
        if let relay = record.homeRelay,
           known(relay) || DialPolicy.mayRemember(claimed: relay.host, port: relay.port, claimerHost: remoteHost) {
            logStoreError("remember a peer's relay") {
                try store.setPeerRelay(author, relay: relay.id.publicKey, host: relay.host, port: relay.port, source: "record", nowMs: now())
            }
        }
        guard let remoteHost else { return }
        for a in record.addresses.prefix(PayloadLimits.addressCount) {
            guard let (h, p) = try? NodeConfiguration.parseHostPort(a, defaultHost: remoteHost), p > 0 else { continue }
            let observed = h == remoteHost || h == "0.0.0.0" || h == "::"
            let host = observed ? remoteHost : h
            guard observed || DialPolicy.mayRemember(claimed: host, port: p, claimerHost: remoteHost) else { continue }
            let source: AddressSource = observed ? .observed : .claimed
            logStoreError("remember a peer's address") {
                try store.rememberAddress(author, host: host, port: p, source: source.rawValue, nowMs: now())
            }
        }
    }

    /// A store write whose failure must not stop the flow it belongs to: logged and counted, never
    /// swallowed silently.
    func logStoreError(_ what: String, _ body: () throws -> Void) {
        do {
            try body()
        } catch {
            logStoreErrorCount(what, error)
        }
    }

    /// A store read whose failure must not stop the flow: logged and counted like a failed write,
    /// and `fallback` used instead.
    func stored<T>(_ what: String, or fallback: T, _ body: () throws -> T) -> T {
        do {
            return try body()
        } catch {
            logStoreErrorCount(what, error)
            return fallback
        }
    }

    func logStoreErrorCount(_ what: String, _ error: Error) {
        storeErrors.withLockedValue { $0 += 1 }
        logger.error("store access failed", metadata: ["what": "\(what)", "error": "\(error)"])
    }

    /// A beacon from another node on the LAN: remember where it is; reach friends and waiting
    /// recipients right away.
    public func sighted(_ s: PeerSighting) {
        let nowMs = now()
        let known = stored("read the LAN sightings", or: []) { try store.sightings(since: nowMs - 60_000) }
            .contains { $0.publicKey == Data(s.publicKey) }
        logStoreError("record a LAN sighting") {
            try store.recordSighting(Sighting(publicKey: s.publicKey, displayName: s.displayName, host: s.host, port: s.port,
                                              isFriendBeacon: s.isFriendBeacon, lastSeenMs: nowMs))
        }
        // A beacon's source on a LAN is never a public address; one that is, is spoofed: not dialled.
        if DialPolicy.mayDialSighting(host: s.host) {
            logStoreError("remember a LAN address") {
                try store.rememberAddress(s.publicKey, host: s.host, port: s.port, source: AddressSource.lan.rawValue, nowMs: nowMs)
            }
        }
        if !known {
            events.emit("peer.discovered", ["id": .string(NodeID(publicKey: s.publicKey).canonical),
                                            "name": s.displayName.map(JSONValue.string) ?? .null,
                                            "address": .string("\(s.host):\(s.port)"), "friend": .bool(s.isFriendBeacon)])
        }
        if peers.link(to: s.publicKey) == nil {
            book.withLockedValue { $0.dialSucceeded(s.publicKey) } // a fresh address: retry now
            logStoreError("expedite the outbox") { try store.expediteOutbox(for: s.publicKey, nowMs: nowMs) }
            poke()
        }
    }

    public func peerConnected(_ key: [UInt8], link: PeerLink) {
        let contact: Contact?
        do {
            contact = try store.contact(key)
        } catch {
            logStoreErrorCount("read a contact", error)
            contact = nil
        }
        // A link from someone nothing waits for (a stranger, typically) costs no write and no round.
        let waiting = stored("read the outbox", or: true) { try store.hasOutbox(for: key) }
        if waiting {
            logStoreError("expedite the outbox") { try store.expediteOutbox(for: key, nowMs: now()) }
        }
        if contact?.relationship == .friend {
            events.emit("peer.online", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(contact?.displayName ?? "")])
            greet(key)
        }
        if waiting { poke() }
    }

    public func peerDisconnected(_ key: [UInt8]) {
        if let contact = stored("read a contact", or: nil, { try store.contact(key) }), contact.relationship == .friend {
            logStoreError("clear a presence") { try store.setPresence(key, presence: nil, lastSeenMs: now()) }
            events.emit("peer.offline", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(contact.displayName)])
        }
    }

    public func peerReportedError(_ error: Tandem_V1_Error, from key: [UInt8]) {
        // A replay error about one of our outbox frames means the peer already has it.
        if error.code == .replayed, error.refMessageID.count == 16 {
            // Delivered: its first copy reached the peer (whose ACK may be lost or still on its way).
            logStoreError("acknowledge a frame the peer already had") {
                if try store.acknowledge(Array(error.refMessageID), from: key) {
                    book.withLockedValue { $0.done(Array(error.refMessageID)) }
                    events.emit("outbox.delivered", ["to": .string(NodeID(publicKey: key).canonical),
                                                     "message_id": .string(hexString(error.refMessageID))])
                }
            }
        }
    }

    func sendPresence(to key: [UInt8], on link: PeerLink? = nil) {
        var p = Tandem_V1_Presence()
        p.status = status.withLockedValue { $0 }
        p.heartbeatSeconds = UInt32(configuration.heartbeat.nanoseconds / 1_000_000_000)
        (link ?? peers.link(to: key))?.send(type: .presence, payload: (try? p.serializedBytes()) ?? [])
    }

    // MARK: - Delivery loop

    /// Delivers due outbox frames, keeps friends connected, sends heartbeats, notices silence.
    public func run() async {
        var lastHeartbeat = ContinuousClock.now
        while !Task.isCancelled {
            await deliverDue()
            if ContinuousClock.now - lastHeartbeat >= Duration.nanoseconds(configuration.heartbeat.nanoseconds) {
                lastHeartbeat = ContinuousClock.now
                heartbeat()
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    // A frame queued during the round just done must not wait for the next tick.
                    let poked = wake.withLockedValue { w -> Bool in
                        if w.pending {
                            w.pending = false
                            return true
                        }
                        w.waiter = c
                        return false
                    }
                    if poked { return c.resume() }
                    let ms = configuration.retryTick.nanoseconds / 1_000_000
                    Task { [weak self] in
                        try? await Task.sleep(for: .milliseconds(ms))
                        self?.poke()
                    }
                }
            } onCancel: { [weak self] in self?.poke() }
        }
    }

    private func heartbeat() {
        let limit = UInt64(configuration.silenceLimit.nanoseconds / 1_000_000)
        let nowMs = UInt64(now())
        for key in peers.connectedPeers {
            guard isFriend(key) else { continue }
            if let last = peers.lastFrame(from: key), nowMs > last + limit {
                logger.info("friend went silent, closing link", metadata: ["peer": "\(NodeID(publicKey: key).short)"])
                peers.link(to: key)?.close()
                continue
            }
            sendPresence(to: key)
        }
    }

    private func deliverDue() async {
        let nowMs = now()
        do {
            for gone in try store.expireOutbox(nowMs: nowMs) {
                events.emit("outbox.expired", ["to": .string(NodeID(publicKey: gone.recipient).canonical),
                                               "message_id": .string(hexString(gone.messageId)),
                                               "type": .string(MessageType(rawValue: UInt16(clamping: gone.type)).description)])
            }
        } catch {
            logger.error("cannot expire outbox frames", metadata: ["error": "\(error)"])
        }
        var recipients = stored("read the due outbox recipients", or: []) { try store.dueRecipients(nowMs: nowMs) }
        // Friends without a link are tried too, with backoff, so they come online when reachable.
        let wanted = stored("read the friends", or: []) { try store.friendKeys() } + (keepConnected?() ?? [])
        for friend in wanted where peers.link(to: friend) == nil && !recipients.contains(friend) {
            if book.withLockedValue({ $0.shouldDial(friend, nowMs: nowMs) }) { recipients.append(friend) }
        }
        await withTaskGroup(of: Void.self) { group in
            for key in recipients {
                group.addTask { await self.deliver(to: key) }
            }
        }
    }

    private func deliver(to key: [UInt8]) async {
        let link: PeerLink
        if let existing = peers.link(to: key) {
            link = existing
        } else {
            switch await dial(key) {
            case .link(let opened):
                link = opened
            case .offline(let relay):
                await depositMail(for: key, at: relay)
                return
            case .unreachable:
                logStoreError("defer the outbox") { try store.deferOutbox(for: key, error: "unreachable", nowMs: now()) }
                return
            }
        }
        book.withLockedValue { $0.dialSucceeded(key) }
        let items: [OutboxItem]
        do {
            items = try store.outbox(for: key)
        } catch {
            logStoreErrorCount("read the outbox", error)
            return
        }
        // Each frame once per link: a round that races the dial's own write skips what it wrote.
        let nowMs = now()
        let fresh = Set(book.withLockedValue { $0.toWrite(items.map { Array($0.messageId) }, link: link.serial, nowMs: nowMs) })
        for item in items where fresh.contains(Array(item.messageId)) {
            guard let env = try? Envelope.parse(Array(item.frame)) else {
                // Written by this node, so only a damaged store gets here: drop the row, say so.
                logger.error("unreadable outbox frame dropped", metadata: ["message_id": "\(hexString(item.messageId))"])
                logStoreError("drop an unreadable outbox frame") { _ = try store.acknowledge(Array(item.messageId)) }
                continue
            }
            link.send(env, flush: false)
        }
        // A PRESENCE owed to this peer follows the frames that make it meaningful, on the same link.
        if book.withLockedValue({ $0.takeOwedPresence(key) }), isFriend(key) {
            sendPresence(to: key, on: link)
        }
        link.channel.flush()
        // Written now or before on this link: resent only if no ACK arrives in time. Frames queued
        // since the read above were not written and stay due (a quit notice queued just now goes out
        // on the next round, not a second later).
        let read = Set(items.map { Array($0.messageId) })
        guard !read.isEmpty else { return }
        logStoreError("schedule the resend") {
            try store.deferOutbox(for: key, error: "awaiting acknowledgement", nowMs: now(), maximumDelayMs: 30_000, only: read)
        }
    }

    enum DialOutcome {
        case link(PeerLink)
        /// Unreachable, and its home relay says it is offline: its mailbox there takes mail.
        case offline(RelayAddress)
        case unreachable
    }

    /// Tries what the dialling policy orders (Protocol 12.8): addresses the user typed, LAN
    /// sightings, addresses the peer was observed at, then at most two it merely claimed (a claimed
    /// DNS name only when it resolves to a global address); then a tunnel through its home relay.
    private func dial(_ key: [UInt8]) async -> DialOutcome {
        let known: [KnownAddress]
        do {
            known = try store.addresses(key)
        } catch {
            logger.error("cannot read a peer's addresses", metadata: ["error": "\(error)"])
            known = []
        }
        let candidates = DialPolicy.order(known.map {
            DialPolicy.Candidate(host: $0.host, port: $0.port, source: AddressSource(stored: $0.source))
        })
        for a in candidates {
            var host = a.host
            if a.source == .claimed, AddressScope(host: host) == .name {
                guard let resolved = Self.resolveGlobal(host, port: a.port) else {
                    logger.debug("claimed name not dialled", metadata: ["peer": "\(NodeID(publicKey: key).short)", "host": "\(host)"])
                    continue
                }
                host = resolved
            }
            do {
                return .link(try await peers.connect(to: key, host: host, port: a.port, timeout: .seconds(3)))
            } catch {
                logger.debug("dial failed", metadata: ["peer": "\(NodeID(publicKey: key).short)", "address": "\(host):\(a.port)",
                                                       "error": "\(error)"])
            }
        }
        if let relays, let r = stored("read a peer's relay", or: nil, { try store.peerRelay(key) }) {
            let relay = RelayAddress(id: NodeID(publicKey: r.publicKey), host: r.host, port: r.port)
            do {
                return .link(try await relays.openTunnel(to: key, via: relay))
            } catch is RelayClient.Offline {
                book.withLockedValue { $0.dialFailed(key, nowMs: now()) }
                return .offline(relays.preferredAddress(of: relay))
            } catch {
                logger.debug("tunnel failed", metadata: ["peer": "\(NodeID(publicKey: key).short)", "relay": "\(relay)",
                                                         "error": "\(error)"])
            }
        }
        book.withLockedValue { $0.dialFailed(key, nowMs: now()) }
        return .unreachable
    }

    /// The first address a DNS name resolves to, when it is global (a claimed name must not lead
    /// the node to loopback or a private network).
    static func resolveGlobal(_ host: String, port: Int) -> String? {
        guard let address = try? SocketAddress.makeAddressResolvingHost(host, port: port), let ip = address.ipAddress,
              AddressScope(host: ip) == .global else { return nil }
        return ip
    }

    /// Moves the peer's waiting frames into its mailbox at its home relay; each one the relay
    /// stored leaves the outbox (the relay delivers it when the peer comes back).
    private func depositMail(for key: [UInt8], at relay: RelayAddress) async {
        guard let relays else { return }
        let items = stored("read the outbox", or: []) { try store.outbox(for: key) }
        let envelopes = items.compactMap { try? Envelope.parse(Array($0.frame)) }.filter { MailboxSeal.isMailable($0.type) }
        guard !envelopes.isEmpty else {
            logStoreError("defer the outbox") { try store.deferOutbox(for: key, error: "offline", nowMs: now()) }
            return
        }
        do {
            let deposited = try await relays.deposit(envelopes, via: relay)
            for id in deposited {
                if stored("remove a deposited frame", or: false, { try store.acknowledge(id) }) {
                    book.withLockedValue { $0.done(id) }
                    events.emit("outbox.deposited", ["to": .string(NodeID(publicKey: key).canonical), "message_id": .string(hexString(id)),
                                                     "relay": .string(relay.description)])
                }
            }
            if deposited.count < items.count {
                logStoreError("defer the outbox") { try store.deferOutbox(for: key, error: "offline", nowMs: now()) }
            }
        } catch {
            logger.info("cannot leave mail at the relay", metadata: ["relay": "\(relay)", "error": "\(error)"])
            logStoreError("defer the outbox") { try store.deferOutbox(for: key, error: "offline; mailbox: \(error)", nowMs: now()) }
        }
    }
}

/// Per-sender and per-address limits for friend requests and for replies to strangers. Bounded maps.
struct RequestThrottle {
    private var senders: [[UInt8]: (tokens: Double, at: Int64)] = [:]
    private var addresses: [String: (tokens: Double, at: Int64)] = [:]
    private var throttledSinceReport = 0
    private var lastReportMs: Int64 = 0
    static let maximumTracked = 10_000

    /// Counts a throttled request; returns how many were dropped since the last report when a new
    /// report is due (at most one per 10 s).
    mutating func noteThrottled(nowMs: Int64) -> Int? {
        throttledSinceReport += 1
        guard nowMs - lastReportMs >= 10_000 else { return nil }
        defer { throttledSinceReport = 0; lastReportMs = nowMs }
        return throttledSinceReport
    }

    /// One token from `key`'s bucket (burst `rate`, refilled at `rate` per minute). When the table
    /// is full, buckets that are (nearly) full are forgotten, as they hold no debt worth remembering;
    /// if none can be, the token is refused.
    private static func take<K: Hashable>(_ map: inout [K: (tokens: Double, at: Int64)], _ key: K, rate: Double, nowMs: Int64) -> Bool {
        if map.count >= maximumTracked, map[key] == nil {
            for k in map.filter({ $0.value.tokens >= rate - 1 }).keys.prefix(map.count / 2) { map[k] = nil }
            if map.count >= maximumTracked { return false }
        }
        var b = map[key] ?? (rate, nowMs)
        b.tokens = min(rate, b.tokens + Double(max(0, nowMs.subtractingSaturated(b.at))) / 60_000 * rate)
        b.at = nowMs
        guard b.tokens >= 1 else { map[key] = b; return false }
        b.tokens -= 1
        map[key] = b
        return true
    }

    mutating func allow(sender: [UInt8], address: String, nowMs: Int64, perSender: Int, perAddress: Int) -> Bool {
        guard Self.take(&addresses, address, rate: Double(perAddress), nowMs: nowMs) else { return false }
        return Self.take(&senders, sender, rate: Double(perSender), nowMs: nowMs)
    }

    /// Replies (acknowledgements, ERRORs) signed for non-friends: per sender and per address
    /// (burst, then refill per minute). A signature costs CPU; a stranger gets a bounded share.
    private var replySenders: [[UInt8]: (tokens: Double, at: Int64)] = [:]
    private var replyAddresses: [String: (tokens: Double, at: Int64)] = [:]
    static let repliesPerSenderPerMinute = 20.0
    static let repliesPerAddressPerMinute = 120.0

    mutating func allowReply(sender: [UInt8], address: String, nowMs: Int64) -> Bool {
        guard Self.take(&replyAddresses, address, rate: Self.repliesPerAddressPerMinute, nowMs: nowMs) else { return false }
        return Self.take(&replySenders, sender, rate: Self.repliesPerSenderPerMinute, nowMs: nowMs)
    }
}

import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Friend requests and contacts (Protocol/README.md 12): what the user asks for (request,
/// accept, decline, remove, block, name), the friend frames peers send, contact records and the
/// addresses they teach, and LAN sightings.
///
/// Every change is one store transaction holding the new state, the signed frame that announces it
/// (the outbox delivers it until acknowledged) and its events. Everything here runs on the node
/// core; the `async` intents are the way in from elsewhere.
@NodeCore
public final class FriendService: Sendable {
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

    let identity: SigningKeyPair
    let store: NodeStore
    let peers: PeerManager
    let outbox: Outbox
    let presence: PresenceService
    let relays: RelayClient
    let events: EventBus
    let health: StoreHealth
    let signals: NodeSignals
    let configuration: Configuration
    let logger: Logger
    private let listenPort: NIOLockedValueBox<Int> = NIOLockedValueBox(0)
    private let throttle = NIOLockedValueBox(RequestThrottle())
    /// Our contact record as last built: it changes only with the name, the port, the home relay
    /// and the record version, each of which clears it (`recordChanged`).
    private let recordCache = NIOLockedValueBox<Tandem_V1_ContactRecord?>(nil)

    package nonisolated init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, outbox: Outbox,
         presence: PresenceService, relays: RelayClient, events: EventBus, health: StoreHealth, signals: NodeSignals,
         configuration: Configuration = Configuration(), logger: Logger) {
        self.identity = identity
        self.store = store
        self.peers = peers
        self.outbox = outbox
        self.presence = presence
        self.relays = relays
        self.events = events
        self.health = health
        self.signals = signals
        self.configuration = configuration
        self.logger = logger
    }

    public var id: NodeID { NodeID(publicKey: identity.publicKey) }

    func now() -> Int64 { outbox.now() }

    /// Called on the core once the listener is bound: when the port differs from the one friends
    /// were last told, a newer contact record goes to every friend.
    package func listening(on port: Int, _ step: StoreStep) throws {
        listenPort.withLockedValue { $0 = port }
        recordChanged()
        guard port > 0, try step.setting("advertised_port") != String(port) else { return }
        let firstRun = try step.setting("advertised_port") == nil
        try step.setSetting("advertised_port", String(port))
        guard !firstRun else { return }
        try announceRecord(step)
    }

    // MARK: - Identity data

    public var displayName: String { displayName(store) }

    /// Our display name as `r` (a step being built, or the store) has it.
    func displayName(_ r: StoreReading) -> String {
        health.read("read the display name", or: nil) { try r.setting("display_name") } ?? ""
    }

    /// Something our contact record holds changed: it is built again when next needed.
    package nonisolated func recordChanged() { recordCache.withLockedValue { $0 = nil } }

    /// Our signed contact record's content.
    package func contactRecord(_ r: StoreReading) -> Tandem_V1_ContactRecord {
        if let cached = recordCache.withLockedValue({ $0 }) { return cached }
        let record = buildContactRecord(r)
        recordCache.withLockedValue { $0 = record }
        return record
    }

    private func buildContactRecord(_ reader: StoreReading) -> Tandem_V1_ContactRecord {
        var r = Tandem_V1_ContactRecord()
        r.publicKey = Data(identity.publicKey)
        r.displayName = displayName(reader)
        let port = listenPort.withLockedValue { $0 }
        if port > 0 { r.addresses = [":\(port)"] }
        if let home = health.read("read the home relays", or: nil, { try reader.relays().first }) {
            r.homeRelay = RelayAddress(id: NodeID(publicKey: home.publicKey), host: home.host, port: home.port).description
        }
        r.version = health.read("read the record version", or: nil) { try reader.setting("record_version") }.flatMap(UInt64.init) ?? 1
        return r
    }

    // MARK: - User intents (from the control socket, tests, demos: run on the core)

    public func request(_ key: [UInt8], message: String, address: (String, Int)?, relay: RelayAddress? = nil) async throws -> Contact {
        let address = address.map { HostPort(host: $0.0, port: $0.1) }
        return try intent { step in try self.requestNow(key, message: message, address: address, relay: relay, step) }
    }

    public func accept(_ key: [UInt8]) async throws -> Contact { try intent { step in try self.acceptNow(key, step) } }
    public func decline(_ key: [UInt8]) async throws { try intent { step in try self.declineNow(key, step) } }
    public func remove(_ key: [UInt8]) async throws { try intent { step in try self.removeNow(key, step) } }
    public func setName(_ name: String) async throws { try intent { step in try self.setNameNow(name, step) } }

    /// One user intent: on the core, one transaction; events, frames and the answer after its commit.
    private func intent<T>(_ body: (StoreStep) throws -> T) throws -> T {
        defer { events.published() }
        return try store.step { step in try body(step) }
    }

    /// Tells the other services once the change is durable (a signal about a change that rolls
    /// back would be wrong), after the step's events are handed out: waking their tasks costs time
    /// the step's commit and its events should not wait for.
    private func signalAfterCommit(_ signal: NodeSignal, _ step: StoreStep) {
        step.afterCommit { [signals] in signals.post(signal) }
    }

    struct HostPort: Sendable {
        var host: String
        var port: Int
    }

    func requestNow(_ key: [UInt8], message: String, address: HostPort?, relay: RelayAddress? = nil, _ step: StoreStep) throws -> Contact {
        guard key != identity.publicKey else { throw NodeError.invalidArgument("that is your own ID") }
        guard message.utf8.count <= configuration.maximumMessageBytes else {
            throw NodeError.invalidArgument("the message is longer than \(configuration.maximumMessageBytes) bytes")
        }
        var req = Tandem_V1_FriendRequest()
        req.message = message
        req.contact = contactRecord(step)
        if let address {
            try step.rememberAddress(key, host: address.host, port: address.port, source: "manual", nowMs: now())
        }
        if let relay {
            try step.setPeerRelay(key, relay: relay.id.publicKey, host: relay.host, port: relay.port, source: "manual", nowMs: now())
        }
        if let existing = try step.contact(key), existing.relationship == .pending {
            // They asked first: asking back is accepting.
            return try acceptNow(key, step)
        }
        let item = outbox.frame(.friendRequest, to: key, payload: try req.serializedBytes(), in: step)
        let contact = try mapStoreError { try step.requestFriend(key, message: message, frame: item, nowMs: now()) }
        events.emit("friend.request.sent", ["id": .string(NodeID(publicKey: key).canonical), "message": .string(message)], in: step)
        outbox.send(to: [key], in: step)
        return contact
    }

    func acceptNow(_ key: [UInt8], _ step: StoreStep) throws -> Contact {
        var acc = Tandem_V1_FriendAccept()
        acc.contact = contactRecord(step)
        let item = outbox.frame(.friendAccept, to: key, payload: try acc.serializedBytes(), in: step)
        let c = try mapStoreError { try step.acceptFriend(key, frame: item, nowMs: now()) }
        events.emit("friend.accepted", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(c.displayName), "by": "me"], in: step)
        presence.becameFriend(key, name: c.displayName, sending: true, step)
        outbox.send(to: [key], in: step)
        signalAfterCommit(.friendsChanged, step)
        return c
    }

    func declineNow(_ key: [UInt8], _ step: StoreStep) throws {
        let item = outbox.frame(.friendDecline, to: key, payload: try Tandem_V1_FriendFarewell().serializedBytes(), in: step)
        try mapStoreError { try step.declineFriend(key, frame: item, nowMs: now()) }
        events.emit("friend.declined", ["id": .string(NodeID(publicKey: key).canonical), "by": "me"], in: step)
        outbox.send(to: [key], in: step)
    }

    func removeNow(_ key: [UInt8], _ step: StoreStep) throws {
        let item = outbox.frame(.friendRemove, to: key, payload: try Tandem_V1_FriendFarewell().serializedBytes(), in: step)
        try mapStoreError { try step.removeFriend(key, frame: item, nowMs: now()) }
        events.emit("friend.removed", ["id": .string(NodeID(publicKey: key).canonical), "by": "me"], in: step)
        outbox.send(to: [key], in: step)
        signalAfterCommit(.friendsChanged, step)
    }

    func blockNow(_ key: [UInt8], _ step: StoreStep) throws {
        guard key != identity.publicKey else { throw NodeError.invalidArgument("that is your own ID") }
        let wasFriend = try step.contact(key)?.relationship == .friend
        try step.block(key, nowMs: now())
        peers.link(to: key)?.close()
        events.emit("friend.blocked", ["id": .string(NodeID(publicKey: key).canonical)], in: step)
        if wasFriend { signalAfterCommit(.friendsChanged, step) }
    }

    func unblockNow(_ key: [UInt8], _ step: StoreStep) throws -> Bool {
        let done = try step.unblock(key, nowMs: now())
        if done { events.emit("friend.unblocked", ["id": .string(NodeID(publicKey: key).canonical)], in: step) }
        return done
    }

    /// Sets our display name and tells every friend.
    func setNameNow(_ name: String, _ step: StoreStep) throws {
        guard name.utf8.count <= 64 else { throw NodeError.invalidArgument("a display name is at most 64 bytes") }
        guard !name.contains(where: { $0.isNewline }) else { throw NodeError.invalidArgument("a display name is one line") }
        try step.setSetting("display_name", name)
        recordChanged()
        try announceRecord(step)
        events.emit("name.changed", ["name": .string(name)], in: step)
        signalAfterCommit(.nameChanged, step)
    }

    /// Tells every friend our newer contact record (after the name, the port or the home relay changed).
    package func announceRecord(_ step: StoreStep) throws {
        try step.setSetting("record_version", String(now()))
        recordChanged()
        var update = Tandem_V1_ContactUpdate()
        update.contact = contactRecord(step)
        let payload: [UInt8] = try update.serializedBytes()
        let friends = try step.friendKeys()
        for friend in friends {
            try step.enqueue(outbox.frame(.contactUpdate, to: friend, payload: payload, in: step))
        }
        outbox.send(to: friends, in: step)
    }

    private func mapStoreError<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let e as FriendStoreError {
            switch e {
            case .alreadyFriends: throw NodeError.refused("you are already friends")
            case .blocked: throw NodeError.refused("that ID is blocked (tandem friend unblock ID first)")
            case .noPendingRequest: throw NodeError.nothingToActOn("there is no pending friend request from that ID (see tandem friend requests)")
            case .notAFriend: throw NodeError.nothingToActOn("that ID is not a friend")
            case .isSelf: throw NodeError.invalidArgument("that is your own ID")
            }
        }
    }

    // MARK: - Frames from peers (on the core)

    /// A frame for the friends flow, from a link or from mail. Every payload becomes a validated
    /// message first (`TandemProtocol/Messages.swift`); what a stranger sends is bounded before
    /// anything is written: only a FRIEND_REQUEST (throttled) or an answer to our own request
    /// creates or changes a row, and everything else from someone with no relationship is dropped
    /// with at most a throttled acknowledgement (Protocol/README.md 12.9, "Strangers").
    package func handle(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) {
        let author = envelope.author
        let contact: Contact?
        do {
            contact = try step.contact(author)
        } catch {
            logger.error("cannot read the contact of a frame's author", metadata: ["error": "\(error)"])
            return
        }
        let relationship = contact?.relationship ?? Relationship.none
        if relationship == .blocked {
            // Dropped silently; acknowledged (within the stranger budget) so the sender stops retrying.
            outbox.dropUnrelated(envelope, on: link, step)
            return
        }
        do {
            switch envelope.type {
            case .friendRequest:
                try receiveRequest(envelope, from: link, relationship: relationship, step)
            case .friendAccept:
                let m = try FriendAcceptMessage(payload: envelope.payload, author: author)
                guard relationship == .requested || relationship == .friend else { return outbox.dropUnrelated(envelope, on: link, step) }
                try receiveAccept(envelope, m, from: link, relationship: relationship, step)
            case .friendDecline, .friendRemove:
                _ = try FarewellMessage(payload: envelope.payload, type: envelope.type)
                guard relationship != .none else { return outbox.dropUnrelated(envelope, on: link, step) }
                try receiveFarewell(envelope, from: link, step)
            case .contactUpdate:
                let m = try ContactUpdateMessage(payload: envelope.payload, author: author)
                guard relationship == .friend else { return outbox.dropUnrelated(envelope, on: link, step) }
                try receiveContactUpdate(envelope, m, from: link, step)
            case .presence:
                presence.receive(envelope, try PresenceMessage(payload: envelope.payload), contact: contact, on: link, step)
            case .ack:
                // Not routed here: the frame router hands acknowledgements to the outbox and to
                // the flow that owns the acknowledged frame (`NodeFrameRouter.acknowledged`).
                break
            default:
                logger.debug("frame type not handled by friends", metadata: ["type": "\(envelope.type)"])
            }
        } catch let e as PayloadError {
            outbox.refuseMalformed(envelope, e, on: link, step)
        } catch {
            logger.error("cannot handle frame", metadata: ["type": "\(envelope.type)", "error": "\(error)"])
        }
    }

    private func receiveRequest(_ envelope: Envelope, from link: PeerLink?, relationship: Relationship, _ step: StoreStep) throws {
        let author = envelope.author
        let host = Outbox.origin(of: link)
        let allowed = throttle.withLockedValue {
            $0.allow(sender: author, address: host, nowMs: now(), perSender: configuration.requestsPerSenderPerMinute,
                     perAddress: configuration.requestsPerAddressPerMinute)
        }
        guard allowed else {
            // Not acknowledged: an honest sender retries later. One event per 10 s at most, so a flood
            // cannot fill the event log either.
            let report = throttle.withLockedValue { $0.noteThrottled(nowMs: now()) }
            if let dropped = report {
                events.emit("friend.request.throttled", ["address": .string(host), "dropped": .int(Int64(dropped))], in: step)
            }
            return
        }
        let req = try FriendRequestMessage(payload: envelope.payload, author: author)
        let record = req.contact
        // Our acceptance is queued only when the request is mutual or comes from a friend: signed then.
        var reply: OutboxItem?
        if relationship == .requested || relationship == .friend {
            var accept = Tandem_V1_FriendAccept()
            accept.contact = contactRecord(step)
            reply = outbox.frame(.friendAccept, to: author, payload: try accept.serializedBytes(), in: step)
        }
        let id = NodeID(publicKey: author).canonical
        // The handled mark, the change and its events commit in one transaction; the ACK follows it.
        let result = try step.receiveFriendRequest(from: author, displayName: record.displayName, message: req.message,
                                                    record: record.canonicalBytes, recordVersion: record.storedVersion,
                                                    reply: reply, nowMs: now(),
                                                    handled: outbox.handledMark(envelope, fromFriend: relationship == .friend, in: step)) { result in
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
        outbox.acknowledge(envelope, on: link, step)
        events.published()
        switch result {
        case .stored, .refreshed, .mutual, .alreadyFriends:
            rememberRecordAddresses(record, author: author, link: link, step)
        case .blocked, .duplicate:
            break
        }
        switch result {
        case .stored, .refreshed:
            break
        case .mutual:
            presence.becameFriend(author, name: record.displayName, sending: true, step)
            outbox.send(to: [author], in: step)
            signalAfterCommit(.friendsChanged, step)
        case .alreadyFriends:
            outbox.send(to: [author], in: step)
        case .blocked, .duplicate:
            break
        }
    }

    private func receiveAccept(_ envelope: Envelope, _ m: FriendAcceptMessage, from link: PeerLink?, relationship: Relationship, _ step: StoreStep) throws {
        let record = m.contact
        let accepted = events.record("friend.accepted", ["id": .string(NodeID(publicKey: envelope.author).canonical),
                                                         "name": .string(record.displayName), "by": "them"])
        let changed = try step.receiveFriendAccept(from: envelope.author, displayName: record.displayName,
                                                    record: record.canonicalBytes, recordVersion: record.storedVersion,
                                                    nowMs: now(), handled: outbox.handledMark(envelope, fromFriend: relationship == .friend, in: step),
                                                    events: [accepted])
        outbox.acknowledge(envelope, on: link, step)
        guard changed else { return }
        events.published()
        rememberRecordAddresses(record, author: envelope.author, link: link, step)
        signalAfterCommit(.friendsChanged, step)
        presence.becameFriend(envelope.author, name: record.displayName, step)
    }

    private func receiveFarewell(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) throws {
        let id = NodeID(publicKey: envelope.author).canonical
        let type = envelope.type == .friendDecline ? "friend.declined" : "friend.removed"
        let before = try step.receiveFarewell(from: envelope.author, nowMs: now(), handled: outbox.handledMark(envelope, in: step), events: { _ in
            [events.record(type, ["id": .string(id), "by": "them"])]
        })
        outbox.acknowledge(envelope, on: link, step)
        guard let before else { return }
        events.published()
        if before == .friend { signalAfterCommit(.friendsChanged, step) }
    }

    private func receiveContactUpdate(_ envelope: Envelope, _ m: ContactUpdateMessage, from link: PeerLink?, _ step: StoreStep) throws {
        let record = m.contact
        let updated = events.record("contact.updated", ["id": .string(NodeID(publicKey: envelope.author).canonical),
                                                        "name": .string(record.displayName)])
        let changed = try step.updateContactRecord(envelope.author, displayName: record.displayName, record: record.canonicalBytes,
                                                    version: record.storedVersion, nowMs: now(), handled: outbox.handledMark(envelope, in: step),
                                                    events: [updated])
        outbox.acknowledge(envelope, on: link, step)
        guard changed else { return }
        events.published()
        rememberRecordAddresses(record, author: envelope.author, link: link, step)
    }

    /// A record's ":port" addresses are paired with the host the link came from (observed; not for
    /// tunnels and mail, whose far end is a relay); a host the record names itself is the peer's
    /// claim and kept only where the dialling policy allows (Protocol 12.8). Its home relay is
    /// remembered under the same rule.
    private func rememberRecordAddresses(_ record: ContactRecord, author: [UInt8], link: PeerLink?, _ step: StoreStep) {
        let remoteHost = link?.directRemoteHost
        // A relay we know ourselves (one of our home relays, or the one whose tunnel carries this
        // link) is no claim: we reach it by our own address (14.7). Any other follows the policy.
        let known: (RelayAddress) -> Bool = { [relays] relay in
            link?.relay == relay.id.publicKey || relays.homeRelays().contains { $0.id == relay.id }
        }
        if let relay = record.homeRelay,
           known(relay) || DialPolicy.mayRemember(claimed: relay.host, port: relay.port, claimerHost: remoteHost) {
            health.attempt("remember a peer's relay") {
                try step.setPeerRelay(author, relay: relay.id.publicKey, host: relay.host, port: relay.port, source: "record", nowMs: now())
            }
        }
        guard let remoteHost else { return }
        for a in record.addresses.prefix(PayloadLimits.addressCount) {
            guard let (h, p) = try? TandemNet.HostPort.parse(a, defaultHost: remoteHost), p > 0 else { continue }  // a peer's bad address is skipped
            let observed = h == remoteHost || h == "0.0.0.0" || h == "::"
            let host = observed ? remoteHost : h
            guard observed || DialPolicy.mayRemember(claimed: host, port: p, claimerHost: remoteHost) else { continue }
            let source: AddressSource = observed ? .observed : .claimed
            health.attempt("remember a peer's address") {
                try step.rememberAddress(author, host: host, port: p, source: source.rawValue, nowMs: now())
            }
        }
    }

    /// A beacon from another node on the LAN: remember where it is; reach friends and waiting
    /// recipients right away.
    package func sighted(_ s: PeerSighting, _ step: StoreStep) {
        let nowMs = now()
        let known = health.read("read the LAN sightings", or: []) { try step.sightings(since: nowMs - 60_000) }
            .contains { $0.publicKey == Data(s.publicKey) }
        health.attempt("record a LAN sighting") {
            try step.recordSighting(Sighting(publicKey: s.publicKey, displayName: s.displayName, host: s.host, port: s.port,
                                              isFriendBeacon: s.isFriendBeacon, lastSeenMs: nowMs))
        }
        // A beacon's source on a LAN is never a public address; one that is, is spoofed: not dialled.
        if DialPolicy.mayDialSighting(host: s.host) {
            health.attempt("remember a LAN address") {
                try step.rememberAddress(s.publicKey, host: s.host, port: s.port, source: AddressSource.lan.rawValue, nowMs: nowMs)
            }
        }
        if !known {
            events.emit("peer.discovered", ["id": .string(NodeID(publicKey: s.publicKey).canonical),
                                            "name": s.displayName.map(JSONValue.string) ?? .null,
                                            "address": .string("\(s.host):\(s.port)"), "friend": .bool(s.isFriendBeacon)], in: step)
        }
        if peers.link(to: s.publicKey) == nil {
            // A fresh address: what waits is tried now, with no dial backoff.
            outbox.expedite(s.publicKey, resetBackoff: true, step)
        }
    }

}

/// Friend requests accepted per sender and per source address (burst, then refill per minute),
/// with a report of what was throttled at most every 10 s. Bounded maps.
struct RequestThrottle {
    private var senders = TokenBuckets<[UInt8]>()
    private var addresses = TokenBuckets<String>()
    private var throttledSinceReport = 0
    private var lastReportMs: Int64 = 0

    /// Counts a throttled request; returns how many were dropped since the last report when a new
    /// report is due (at most one per 10 s).
    mutating func noteThrottled(nowMs: Int64) -> Int? {
        throttledSinceReport += 1
        guard nowMs - lastReportMs >= 10_000 else { return nil }
        defer { throttledSinceReport = 0; lastReportMs = nowMs }
        return throttledSinceReport
    }

    mutating func allow(sender: [UInt8], address: String, nowMs: Int64, perSender: Int, perAddress: Int) -> Bool {
        guard addresses.take(address, rate: Double(perAddress), nowMs: nowMs) else { return false }
        return senders.take(sender, rate: Double(perSender), nowMs: nowMs)
    }
}

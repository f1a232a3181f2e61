import Foundation
import Logging
import NIOConcurrencyHelpers
import Sodium
import TandemNet
import TandemProtocol
import TandemStore

/// Our health as friends see it while we share it (`tandem share health on`): today's health and
/// the instant it becomes 100 again (the next local midnight), so a PRESENCE after midnight says
/// 100 without anyone having to wake up for it.
package struct SharedHealth: Sendable, Equatable {
    package var health: Int
    package var resetsAtMs: Int64
    package init(health: Int, resetsAtMs: Int64) { (self.health, self.resetsAtMs) = (health, resetsAtMs) }

    package func health(nowMs: Int64) -> Int { nowMs >= resetsAtMs ? 100 : max(0, min(100, health)) }
}

/// The status friends see (idle, focusing), our shared health, and the heartbeat interval a PRESENCE announces.
package final class PresenceState: Sendable {
    private let status = NIOLockedValueBox(Tandem_V1_PresenceStatus.idle)
    private let sharedHealth = NIOLockedValueBox<SharedHealth?>(nil)
    let heartbeatSeconds: UInt32
    /// A change friends should hear now, not at the next heartbeat (the newest one is kept: a
    /// PRESENCE says the state at the moment it is made, so changes made while one waits need no
    /// PRESENCE of their own). Read by `PresenceService.run` only.
    let changes: AsyncStream<Void>
    private let changed: AsyncStream<Void>.Continuation

    /// What our PRESENCE says of our health: nil stops sharing. Set by local focus (which owns the
    /// pool) whenever the pool or the sharing switch changes; when what friends see changes (the
    /// number, or shared / not shared), every friend with a link gets a PRESENCE at once.
    package func share(health: SharedHealth?) {
        let differs = sharedHealth.withLockedValue { old in
            defer { old = health }
            return old?.health != health?.health
        }
        if differs { changed.yield() }
    }

    /// The health our PRESENCE carries at `nowMs`, nil while not shared.
    package func sharedHealth(nowMs: Int64) -> Int? {
        sharedHealth.withLockedValue { $0 }?.health(nowMs: nowMs)
    }

    package nonisolated init(heartbeatSeconds: UInt32) {
        self.heartbeatSeconds = heartbeatSeconds
        (changes, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    var current: Tandem_V1_PresenceStatus { status.withLockedValue { $0 } }

    /// Sets the status; true when it changed.
    func set(_ s: Tandem_V1_PresenceStatus) -> Bool {
        status.withLockedValue { old in defer { old = s }; return old != s }
    }

    func payload() -> [UInt8] {
        var p = Tandem_V1_Presence()
        p.status = current
        p.heartbeatSeconds = heartbeatSeconds
        if let h = sharedHealth(nowMs: Int64(clamping: wallClockMilliseconds())) { p.health = UInt32(h) }
        // This node takes ACKS (README 12.5): a friend may acknowledge a batch of our frames at once.
        p.takesAcks = true
        // It takes a friend's direct MESSAGEs unsigned on this link (README 5.4, messages.md 11.6).
        p.takesLinkAuthenticated = true
        return (try? p.serializedBytes()) ?? []  // a message of set fields always serializes
    }

    func envelope(from identity: SigningKeyPair, to key: [UInt8], nowMs: Int64) -> Envelope {
        Envelope.sign(type: .presence, author: identity, recipient: key, createdAt: UInt64(clamping: nowMs), payload: payload())
    }
}

/// Who of our friends is online and how (Protocol/README.md 12.7): `peer.online`/`peer.offline`
/// as links come and go, a PRESENCE on every friend link at each heartbeat and when our status
/// changes, the friend's PRESENCE stored, and a friend silent past the limit disconnected.
/// Its store work runs on the node core.
@NodeCore
package final class PresenceService: Sendable {
    let state: PresenceState
    let store: NodeStore
    let peers: PeerManager
    let outbox: Outbox
    let events: EventBus
    let health: StoreHealth
    let heartbeat: Duration
    let silenceLimitMs: UInt64
    let logger: Logger

    package nonisolated init(state: PresenceState, store: NodeStore, peers: PeerManager, outbox: Outbox, events: EventBus, health: StoreHealth,
         heartbeat: Duration, silenceLimit: Duration, logger: Logger) {
        self.state = state
        self.store = store
        self.peers = peers
        self.outbox = outbox
        self.events = events
        self.health = health
        self.heartbeat = heartbeat
        self.silenceLimitMs = UInt64(silenceLimit.components.seconds) * 1000 + UInt64(silenceLimit.components.attoseconds / 1_000_000_000_000_000)
        self.logger = logger
    }

    private func now() -> Int64 { outbox.now() }

    private func friend(_ key: [UInt8], _ step: StoreReading) -> Contact? {
        guard let c = health.read("read a contact", or: nil, { try step.contact(key) }), c.relationship == .friend else { return nil }
        return c
    }

    // MARK: On the core

    /// Our status changed (a challenge started or ended): every friend with a link hears it once
    /// the step that changed it is durable, after that step's frames (a QUIT goes before the IDLE
    /// it causes) and events.
    package func setStatus(_ s: Tandem_V1_PresenceStatus, _ step: StoreStep) {
        guard state.set(s) else { return }
        let friends = health.read("read the friends", or: [], { try step.friendKeys() })
        step.afterCommit { [self] in
            for key in friends { send(to: key) }
        }
    }

    func send(to key: [UInt8], on link: PeerLink? = nil) {
        (link ?? peers.link(to: key))?.send(type: .presence, payload: state.payload())
    }

    func linkUp(_ key: [UInt8], _ step: StoreStep) {
        let waiting = outbox.expedite(key, step)
        guard let contact = friend(key, step) else { return }
        events.emit("peer.online", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(contact.displayName)], in: step)
        greet(key, framesWaiting: waiting, step)
    }

    func linkDown(_ key: [UInt8], _ step: StoreStep) {
        guard let contact = friend(key, step) else { return }
        health.attempt("clear a presence") {
            try step.setPresence(key, presence: nil, lastSeenMs: now())
            try step.setFriendHealth(key, health: nil, atMs: now())
        }
        events.emit("peer.offline", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(contact.displayName)], in: step)
    }

    /// A new friend whose link is already up is online from now on. `sending`: the caller queued
    /// frames for them in this step and sends them itself (`Outbox.send(to:)`), so nothing needs
    /// expediting and the PRESENCE follows those frames.
    package func becameFriend(_ key: [UInt8], name: String, sending: Bool = false, _ step: StoreStep) {
        guard peers.link(to: key) != nil else { return }
        events.emit("peer.online", ["id": .string(NodeID(publicKey: key).canonical), "name": .string(name)], in: step)
        greet(key, framesWaiting: sending || outbox.expedite(key, step), step)
    }

    /// A PRESENCE to a friend whose link just came up (or who just became one): at once when nothing
    /// waits for it in the outbox, else right after those frames on the same link (the FRIEND_ACCEPT
    /// that makes the PRESENCE meaningful comes first; Protocol 12.7).
    ///
    /// Sent once the step's commit is durable and its events are out: signing and writing it
    /// inside the step would delay the commit (and the events a user waits for) by a signature.
    private func greet(_ key: [UInt8], framesWaiting: Bool, _ step: StoreStep) {
        guard outbox.book.withLockedValue({ $0.presenceDue(key, framesWaiting: framesWaiting) }) else { return }
        step.afterCommit { [self] in send(to: key) }
    }

    /// A friend's PRESENCE (anyone else's is dropped). `link`: the link it came by, on which the
    /// friend's frames are acknowledged with ACKS from now on when it announces them (README 12.5).
    package func receive(_ envelope: Envelope, _ p: PresenceMessage, contact: Contact?, on link: PeerLink? = nil, _ step: StoreStep) {
        guard contact?.relationship == .friend else { return }
        // For every link to the friend, not only the one it came on (README 12.7).
        let announced = PeerManager.Announcement(takesAcks: p.takesAcks, takesLinkAuthenticated: p.takesLinkAuthenticated)
        link?.setTakesAcks(p.takesAcks)
        link?.setTakesLinkAuthenticated(p.takesLinkAuthenticated)
        peers.announced(envelope.author, announced)
        let name = p.status.rawValue
        let before = health.read("read a friend's health", or: nil, { try step.friendHealth(envelope.author)?.health })
        health.attempt("store a presence") {
            try step.setPresence(envelope.author, presence: name, lastSeenMs: now())
            try step.setFriendHealth(envelope.author, health: p.health, atMs: now())
        }
        if contact?.presence != name || before != p.health {
            var fields: [String: JSONValue] = ["id": .string(NodeID(publicKey: envelope.author).canonical), "status": .string(name)]
            if let h = p.health, let state = p.healthState {
                fields["health"] = .int(Int64(h))
                fields["state"] = .string(state.rawValue)
            }
            events.emit("presence.changed", fields, in: step)
        }
    }

    /// One heartbeat: a friend silent past the limit is disconnected, every other friend link
    /// gets a PRESENCE.
    func beat() {
        let nowMs = UInt64(clamping: now())
        for key in peers.connectedPeers where friend(key, store) != nil {
            if let last = peers.lastFrame(from: key), nowMs > last + silenceLimitMs {
                logger.info("friend went silent, closing link", metadata: ["peer": "\(NodeID(publicKey: key).short)"])
                peers.link(to: key)?.close()
                continue
            }
            send(to: key)
        }
    }

    /// A change of what our PRESENCE says (shared health): every friend link gets a PRESENCE now.
    func announce() {
        for key in peers.connectedPeers where friend(key, store) != nil { send(to: key) }
    }

    /// The heartbeat, and a PRESENCE at each change `state` announces, until cancelled.
    package nonisolated func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: heartbeat)  // cancelled: the loop ends
                    guard !Task.isCancelled else { return }
                    await NodeCore.run { self.beat() }
                }
            }
            group.addTask { [self] in
                for await _ in state.changes {  // ends when cancelled
                    guard !Task.isCancelled else { return }
                    await NodeCore.run { self.announce() }
                }
            }
        }
    }
}

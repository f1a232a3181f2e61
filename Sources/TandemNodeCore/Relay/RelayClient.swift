import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemStore

/// The node's side of tandem-relays (Protocol/README.md section 14): one link per home relay,
/// kept up with backoff and registered (so friends can tunnel to us and leave mail), plus links
/// opened on demand to friends' home relays to open tunnels and deposit mail there.
///
/// Everything it starts runs as a child task of `run()` (connects, incoming tunnels, the home relay
/// loop), so nothing outlives the node's service group.
public final class RelayClient: Sendable {
    /// A relay said goodbye before the link was up (full, shutting down): come back no sooner than asked.
    struct TurnedAway: Error, CustomStringConvertible {
        let reason: String
        let retryAfterMs: Int64
        var description: String { reason }
    }

    /// A relay refused a tunnel because the node is not connected there.
    public struct Offline: Error, CustomStringConvertible {
        public let relay: RelayAddress
        public var description: String { "not connected to relay \(relay.host):\(relay.port)" }
    }

    let identity: SigningKeyPair
    let store: NodeStore
    let peers: PeerManager
    let gate: FrameGate
    let options: PeerPipeline.Options
    let events: EventBus
    let logger: Logger
    /// Mail goes to the node core like any inbound frame; its store reads run there too.
    let inbound: InboundLane
    let health: StoreHealth
    /// `reachable` is posted when a home relay comes up (what waits may be deliverable now).
    let signals: NodeSignals

    /// How often an idle relay link is pinged (the relay drops links silent for 120 s).
    let keepalive: TimeAmount = .seconds(30)
    /// Links to relays that are not ours are closed after this long unused.
    let visitIdleMs: Int64 = 60_000
    nonisolated static let mailboxMaximumAgeMs: UInt64 = 8 * 24 * 3_600_000

    private let sessions = NIOLockedValueBox<[[UInt8]: RelaySession]>([:])
    private let connecting = NIOLockedValueBox(Connecting())
    /// What `run()` starts as its children.
    private enum Job: Sendable {
        /// Open a session (the first waiter for a relay asked).
        case connect(RelayAddress, home: Bool)
        /// Keep a home relay connected (the loop found it down and due).
        case home(RelayAddress)
        /// Join an incoming tunnel (a TUNNEL_INCOMING).
        case tunnel(from: [UInt8], token: [UInt8], relay: RelayAddress)
    }
    /// Callers waiting for a connection, per relay: the first one's request starts it, all share it.
    private struct Connecting {
        var waiters: [[UInt8]: [UInt64: CheckedContinuation<RelaySession, Error>]] = [:]
        var nextWaiter: UInt64 = 0
        /// `run()` consumes jobs (before it, a caller connects by itself).
        var running = false
        /// `run()` ended: nobody connects any more.
        var stopped = false
        /// Incoming tunnels queued or joining (at most `maximumQueuedTunnels`).
        var tunnels = 0
        /// Home relays a `.home` job is out for (one at a time each).
        var homes: Set<[UInt8]> = []
    }
    private static let maximumQueuedTunnels = 64
    private let jobs: AsyncStream<Job>
    private let jobInput: AsyncStream<Job>.Continuation
    private let backoff = NIOLockedValueBox<[[UInt8]: RelayBackoff]>([:])
    private let incoming = NIOLockedValueBox(IncomingTunnelSlots())
    private let wake = Wakeup()

    package init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, gate: FrameGate, options: PeerPipeline.Options,
         events: EventBus, inbound: InboundLane, health: StoreHealth, signals: NodeSignals, logger: Logger) {
        self.inbound = inbound
        self.health = health
        self.signals = signals
        self.identity = identity
        self.store = store
        self.peers = peers
        self.gate = gate
        self.options = options
        self.events = events
        self.logger = logger
        // Unbounded in form; bounded by its sources: one connect per relay at a time, home relays
        // once per loop turn, tunnels by `maximumQueuedTunnels`.
        (jobs, jobInput) = AsyncStream.makeStream(of: Job.self)
    }

    func now() -> Int64 { Int64(wallClockMilliseconds()) }

    /// Our home relays, as stored.
    package func homeRelays() -> [RelayAddress] {
        health.read("read the home relays", or: []) { try store.relays() }.map { RelayAddress(id: NodeID(publicKey: $0.publicKey), host: $0.host, port: $0.port) }
    }

    /// A relay is its ID: when a peer names one of our home relays, by whatever address (a DNS name
    /// vs an IP, inside vs outside a NAT), the address we use for it, and so the link we already
    /// have, is the one to take (Protocol 14.7).
    func preferredAddress(of relay: RelayAddress) -> RelayAddress {
        homeRelays().first { $0.id == relay.id } ?? relay
    }

    /// The open session with a relay, if any.
    func session(_ key: [UInt8]) -> RelaySession? {
        sessions.withLockedValue { $0[key] }.flatMap { $0.isOpen ? $0 : nil }
    }

    /// An open session with `relay`, connecting (and registering, for a home relay) when there is none.
    func session(for relay: RelayAddress, home: Bool) async throws -> RelaySession {
        if let s = session(relay.id.publicKey), s.relay == relay, !home || s.home { return s }
        do {
            return try await sharedSession(relay, home: home)
        } catch is Inline {
            // No loop yet (a node not started, a harness): this caller connects by itself.
            return try await open(relay, home: home)
        }
    }

    /// Waits for the connection to `relay` that `run()` opens for all who ask meanwhile.
    private func sharedSession(_ relay: RelayAddress, home: Bool) async throws -> RelaySession {
        let key = relay.id.publicKey
        let id = connecting.withLockedValue { c in
            defer { c.nextWaiter += 1 }
            return c.nextWaiter
        }
        // Others may wait for the same connection: a cancelled waiter leaves, the connecting (a child
        // of `run()`) goes on.
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<RelaySession, Error>) in
                enum Start { case no, connect, inline, stopped, cancelled }
                let start = connecting.withLockedValue { s -> Start in
                    if s.stopped { return .stopped }
                    if !s.running { return .inline }
                    if Task.isCancelled { return .cancelled }
                    let first = s.waiters[key] == nil
                    s.waiters[key, default: [:]][id] = c
                    return first ? .connect : .no
                }
                switch start {
                case .no: break
                case .connect: jobInput.yield(.connect(relay, home: home))
                case .stopped: c.resume(throwing: NodeError.unavailable("the node is stopping"))
                case .cancelled: c.resume(throwing: CancellationError())
                case .inline: c.resume(throwing: Inline())
                }
            }
        } onCancel: {
            let c = connecting.withLockedValue { $0.waiters[key]?.removeValue(forKey: id) }
            c?.resume(throwing: CancellationError())
        }
    }

    /// `session(for:home:)` before `run()`: the caller opens the session itself.
    private struct Inline: Error {}

    /// Opens the session a relay's waiters wait for, and hands it (or the failure) to all of them.
    private func connect(_ relay: RelayAddress, home: Bool) async {
        let result: Result<RelaySession, Error>
        do { result = .success(try await open(relay, home: home)) } catch { result = .failure(error) }
        let waiters = connecting.withLockedValue { $0.waiters.removeValue(forKey: relay.id.publicKey) } ?? [:]
        for (_, w) in waiters { w.resume(with: result) }
    }

    private func open(_ relay: RelayAddress, home: Bool) async throws -> RelaySession {
        let session = RelaySession(relay: relay, home: home, client: self)
        session.attach(try await RelayClientConnection.connect(to: relay, identity: identity, gate: gate, options: options,
                                                               group: peers.group, logger: logger, connectTimeout: .seconds(5),
                                                               delegate: session))
        sessions.withLockedValue { old in
            if let previous = old[relay.id.publicKey], previous !== session { previous.close() }
            old[relay.id.publicKey] = session
        }
        // The relay may have said goodbye (full, shutting down) before we even stored the session.
        func turnedAway(_ error: Error) -> Error {
            guard let (reason, retry) = session.goodbyeInfo else { return error }
            return TurnedAway(reason: reason, retryAfterMs: retry)
        }
        if home {
            let mailboxItems: UInt32
            do {
                mailboxItems = try await session.register(agent: "tandem/0.1.0")
            } catch {
                session.close()
                throw turnedAway(error)
            }
            backoff.withLockedValue { _ = $0.removeValue(forKey: relay.id.publicKey) }
            await events.emit("relay.connected", ["relay": .string(relay.description), "mailbox_items": .int(Int64(mailboxItems))])
            logger.info("registered at relay", metadata: ["relay": "\(relay)", "mail": "\(mailboxItems)"])
            signals.post(.reachable)
        }
        return session
    }

    // MARK: tunnels and mail

    /// Asks `relay` for a tunnel to `key` and runs the Secret Handshake with `key` through it.
    /// Throws `Offline` when the relay says the node is not there.
    func openTunnel(to key: [UInt8], via named: RelayAddress) async throws -> PeerLink {
        let relay = preferredAddress(of: named)
        let home = homeRelays().contains(relay)
        let session = try await session(for: relay, home: home)
        let token: [UInt8]
        switch try await session.request(.tunnelOpen(target: key)) {
        case .tunnel(let t):
            token = t
        case .refused(.offline, _):
            throw Offline(relay: relay)
        case .refused(_, let detail):
            throw NodeError.failed("relay \(relay.host):\(relay.port) refused the tunnel: \(detail)")
        case .stored:
            throw NodeError.failed("relay \(relay.host):\(relay.port) answered the tunnel request as if it were mail")
        }
        return try await RelayTunnel.connect(relay: relay, token: token, remote: key, identity: identity,
                                             gate: gate, delegate: peers, options: options, group: peers.group, logger: logger).0
    }

    /// Leaves signed frames in `relay`'s mailbox for their recipient. Returns the message ids the
    /// relay stored (durably); the rest stay in the outbox.
    func deposit(_ envelopes: [Envelope], via named: RelayAddress) async throws -> [[UInt8]] {
        let relay = preferredAddress(of: named)
        let home = homeRelays().contains(relay)
        let session = try await session(for: relay, home: home)
        var stored: [[UInt8]] = []
        for env in envelopes where MailboxSeal.isMailable(env.type) {
            let reply = try await session.request(.mailboxPut(recipient: env.recipient, sealed: try MailboxSeal.seal(env)))
            let refusal: String
            switch reply {
            case .stored:
                stored.append(env.messageID.bytes)
                continue
            case .refused(_, let detail):
                refusal = detail
            case .tunnel:
                refusal = "the relay answered the mail as if it were a tunnel request"
            }
            logger.info("relay refused mail", metadata: ["relay": "\(relay)", "detail": "\(refusal)"])
            if stored.isEmpty { throw NodeError.failed("relay refused the mail: \(refusal)") }
            break
        }
        return stored
    }

    /// A TUNNEL_INCOMING: join as the handshake server (a child of `run()`); the link lands in the
    /// peer manager. Called on the relay link's event loop.
    func accept(from: [UInt8], token: [UInt8], via relay: RelayAddress) {
        let queued = connecting.withLockedValue { s -> Bool in
            guard s.running, !s.stopped, s.tunnels < Self.maximumQueuedTunnels else { return false }
            s.tunnels += 1
            return true
        }
        guard queued else {
            logger.notice("too many incoming tunnels waiting, ignoring one", metadata: ["from": "\(NodeID(publicKey: from).short)"])
            return
        }
        jobInput.yield(.tunnel(from: from, token: token, relay: relay))
    }

    private func join(from: [UInt8], token: [UInt8], via relay: RelayAddress) async {
        defer { connecting.withLockedValue { $0.tunnels -= 1 } }
        // The contact is read on the core.
        let relationship: Relationship? = await NodeCore.run {
            do {
                return try self.store.contact(from)?.relationship
            } catch {
                // Unknown: treated as a stranger's, which is the stricter share.
                self.logger.error("cannot read the contact of an incoming tunnel", metadata: ["error": "\(error)"])
                return nil
            }
        }
        if relationship == .blocked { return }
        let verdict = incoming.withLockedValue { $0.admit(from, isFriend: relationship == .friend) }
        let slot: IncomingTunnelSlots.Slot
        switch verdict {
        case .admitted(let s):
            slot = s
        case .full, .initiatorBusy, .strangersFull:
            logger.notice("too many incoming tunnels at once, ignoring one",
                          metadata: ["from": "\(NodeID(publicKey: from).short)", "why": "\(verdict)"])
            return
        }
        defer { incoming.withLockedValue { $0.release(slot) } }
        do {
            let (link, _) = try await RelayTunnel.connect(relay: relay, token: token, remote: nil, identity: identity,
                                                         gate: gate, delegate: peers, options: options, group: peers.group,
                                                         logger: logger)
            // The handshake proved who connected; it must be who the relay announced.
            if link.remotePublicKey != from {
                logger.notice("tunnel peer is not the one announced, closing", metadata: ["from": "\(NodeID(publicKey: from).short)"])
                link.close()
            }
        } catch {
            logger.info("incoming tunnel failed", metadata: ["from": "\(NodeID(publicKey: from).short)", "error": "\(error)"])
        }
    }

    /// A MAILBOX_ITEM: open, check, hand over, then acknowledge (items that can never be
    /// handled are acknowledged too, so the relay forgets them).
    func received(item itemID: UInt64, sealed: [UInt8], session: RelaySession) {
        let env: Envelope
        do {
            env = try MailboxSeal.open(sealed, identity: identity, curveSecretKey: try identity.curve25519SecretKey(),
                                       now: wallClockMilliseconds(), maximumAge: Self.mailboxMaximumAgeMs)
        } catch {
            logger.info("mailbox item dropped", metadata: ["relay": "\(session.relay)", "error": "\(error)"])
            session.acknowledge(itemID)
            return
        }
        // Handled on the core like a link's frame (the relay link pauses while the core is full);
        // acknowledged to the relay once handled.
        let done: @Sendable () -> Void = { [self] in
            // A friend request the node did not take (throttled, or the store failed) stays at the
            // relay: it comes again at the next registration. Anything else was handled, or can
            // never be (a stranger's invite, a malformed payload), and is acknowledged.
            if env.type == .friendRequest,
               !health.read("read a handled mark", or: false, { try store.wasHandled(env.messageID.bytes) }),
               health.read("read a contact", or: nil, { try store.contact(env.author) })?.relationship != .blocked {
                logger.info("mail not taken now; the relay keeps it", metadata: ["relay": "\(session.relay)", "type": "\(env.type)"])
                return
            }
            session.acknowledge(itemID)
        }
        inbound.enqueue(.mail(env, relay: session.relay, done: done), author: env.author, pausing: session.link)
    }

    func sessionClosed(_ session: RelaySession, reason: String?, retryAfterMs: Int64) {
        let removed = sessions.withLockedValue { s -> Bool in
            guard s[session.relay.id.publicKey] === session else { return false }
            s[session.relay.id.publicKey] = nil
            return true
        }
        guard removed, session.home, session.wasRegistered else { return }
        noteFailure(session.relay, reason ?? "the relay closed the link", minimumDelayMs: retryAfterMs, resetCount: true)
        // Called on the relay link's event loop: the event row is stored on the core.
        let (events, relay) = (self.events, session.relay.description)
        NodeCore.submit { events.emit("relay.disconnected", ["relay": .string(relay), "reason": .string(reason ?? "closed")]) }
        poke()
    }

    private func noteFailure(_ relay: RelayAddress, _ error: String, minimumDelayMs: Int64 = 0, resetCount: Bool = false) {
        let nowMs = now()
        backoff.withLockedValue { b in
            b[relay.id.publicKey, default: RelayBackoff()].failed(error, nowMs: nowMs, minimumDelayMs: minimumDelayMs,
                                                                  resetCount: resetCount)
        }
    }

    /// Closes the link to a relay (after `tandem relay remove`).
    func disconnect(_ key: [UInt8]) {
        let s = sessions.withLockedValue { $0.removeValue(forKey: key) }
        s?.close()
        backoff.withLockedValue { _ = $0.removeValue(forKey: key) }
    }

    func poke() { wake.poke() }

    // MARK: the loop

    /// Keeps home relays connected and registered, pings idle links, closes unused visits; runs
    /// connects and incoming tunnels as its children, until cancelled.
    package func run() async {
        connecting.withLockedValue { $0.running = true }
        await withDiscardingTaskGroup { group in
            group.addTask { await self.maintain() }
            for await job in jobs {
                switch job {
                case .connect(let relay, let home): group.addTask { await self.connect(relay, home: home) }
                case .home(let relay): group.addTask { await self.connectHome(relay) }
                case .tunnel(let from, let token, let relay): group.addTask { await self.join(from: from, token: token, via: relay) }
                }
            }
            // Cancelled (the node stops): the children end too.
            group.cancelAll()
        }
        let waiters = connecting.withLockedValue { s in
            s.stopped = true
            defer { s.waiters = [:] }
            return s.waiters.values.flatMap(\.values)
        }
        for w in waiters { w.resume(throwing: NodeError.unavailable("the node is stopping")) }
        for (_, s) in sessions.withLockedValue({ $0 }) { s.close() }
    }

    /// The loop: home relays down and due get a connect, idle links a ping, unused visits a close.
    private func maintain() async {
        var lastPing: [[UInt8]: Int64] = [:]
        while !Task.isCancelled {
            let nowMs = now()
            let homes = homeRelays()
            for relay in homes {
                if let s = session(relay.id.publicKey), s.relay == relay, s.home, s.isRegistered {
                    if nowMs - (lastPing[relay.id.publicKey] ?? 0) >= Int64(keepalive.nanoseconds / 1_000_000) {
                        lastPing[relay.id.publicKey] = nowMs
                        s.ping()
                    }
                    continue
                }
                let due = backoff.withLockedValue { $0[relay.id.publicKey]?.isDue(nowMs: nowMs) ?? true }
                guard due, connecting.withLockedValue({ c in
                    c.waiters[relay.id.publicKey] == nil && c.homes.insert(relay.id.publicKey).inserted
                }) else { continue }
                jobInput.yield(.home(relay))
            }
            // Visits to others' relays end when unused; links to removed home relays too.
            let homeKeys = Set(homes.map(\.id.publicKey))
            for (key, s) in sessions.withLockedValue({ $0 }) where !homeKeys.contains(key) {
                if s.home || nowMs - s.lastUsedMs > visitIdleMs { disconnect(key) }
                else if nowMs - (lastPing[key] ?? 0) >= Int64(keepalive.nanoseconds / 1_000_000) {
                    lastPing[key] = nowMs
                    s.ping()
                }
            }
            await wake.wait(upTo: .seconds(1))
        }
    }

    /// Connects and registers at a home relay; a failure sets its backoff.
    private func connectHome(_ relay: RelayAddress) async {
        defer { connecting.withLockedValue { _ = $0.homes.remove(relay.id.publicKey) } }
        do {
            _ = try await session(for: relay, home: true)
        } catch let away as TurnedAway {
            noteFailure(relay, away.reason, minimumDelayMs: away.retryAfterMs)
            await NodeCore.run {
                _ = self.events.emit("relay.disconnected", ["relay": .string(relay.description), "reason": .string(away.reason)])
            }
            logger.info("home relay turned us away", metadata: ["relay": "\(relay)", "reason": "\(away.reason)"])
        } catch {
            noteFailure(relay, "\(error)")
            logger.info("cannot reach home relay", metadata: ["relay": "\(relay)", "error": "\(error)"])
        }
    }

    /// What `tandem relay list` shows.
    package func status() -> [JSONValue] {
        let stored = health.read("read the relays", or: []) { try store.relays() }
        return stored.map { r in
            let relay = RelayAddress(id: NodeID(publicKey: r.publicKey), host: r.host, port: r.port)
            let s = session(r.publicKey)
            let b = backoff.withLockedValue { $0[r.publicKey] }
            return .object([
                "id": .string(relay.id.canonical),
                "address": .string(relay.description),
                "connected": .bool(s?.isRegistered ?? false),
                "since": JSONValue.iso(s?.connectedAtMs),
                "mail_received": .int(Int64(s?.mailReceived ?? 0)),
                "last_error": b?.lastError.map(JSONValue.string) ?? .null,
                "next_attempt": (s == nil && b != nil) ? JSONValue.iso(b!.nextAttemptMs) : .null,
                "added_at": JSONValue.iso(r.atMs),
            ])
        }
    }
}

/// The node's side of one link to a relay: its `RelayClientConnection` (the session and the callers
/// waiting for answers), the node's time limits and errors, and what the node does with what the
/// relay sends unasked.
final class RelaySession: RelayClientConnectionDelegate {
    let relay: RelayAddress
    let home: Bool
    private weak let client: RelayClient?
    /// Set once connected (`attach`); the connection calls this session as its delegate from then on.
    private let connection = NIOLockedValueBox<RelayClientConnection?>(nil)

    init(relay: RelayAddress, home: Bool, client: RelayClient) {
        self.relay = relay
        self.home = home
        self.client = client
    }

    func attach(_ connection: RelayClientConnection) {
        self.connection.withLockedValue { $0 = connection }
    }

    private var attached: RelayClientConnection? { connection.withLockedValue { $0 } }

    /// The link to the relay (paused while the node core is full of its mail).
    var link: PeerLink? { attached?.link }

    var isOpen: Bool { attached?.isOpen ?? false }
    var isRegistered: Bool { attached?.isRegistered ?? false }
    /// Whether registration ever completed on this link.
    var wasRegistered: Bool { attached?.wasRegistered ?? false }
    /// The relay's goodbye (reason, retry after ms), if it said one.
    var goodbyeInfo: (String, Int64)? { attached?.goodbye }
    var lastUsedMs: Int64 { attached?.lastUsedMs ?? 0 }
    var connectedAtMs: Int64 { attached?.connectedAtMs ?? 0 }
    var mailReceived: Int { attached?.mailReceived ?? 0 }

    /// MAILBOX_ACK for one item.
    func acknowledge(_ itemID: UInt64) {
        attached?.acknowledge(itemID)
    }

    /// Keepalive: the link closes when the relay does not answer a PING within 15 s.
    func ping() {
        attached?.probe(timeout: .seconds(15))
    }

    func close() { attached?.close() }

    /// Sends a request and waits (15 s at most) for its RELAY_REPLY.
    func request(_ request: RelayClientSession.Request) async throws -> RelayClientSession.Reply {
        guard let connection = attached else { throw NodeError.failed("not connected") }
        do {
            return try await connection.request(request, timeout: .seconds(15))
        } catch let error as RelayClientError {
            throw error.isTimeout ? NodeError.unavailable(error.description) : NodeError.failed(error.description)
        }
    }

    /// RELAY_REGISTER; returns the number of mail items waiting once the relay confirms (10 s at most).
    func register(agent: String) async throws -> UInt32 {
        guard let connection = attached else { throw NodeError.failed("not connected") }
        do {
            return try await connection.register(agent: agent, timeout: .seconds(10))
        } catch let error as RelayClientError {
            throw NodeError.failed(error.description)
        }
    }

    // MARK: RelayClientConnectionDelegate (on the link's event loop)

    func relayConnection(_ connection: RelayClientConnection, tunnelIncomingFrom from: [UInt8], token: [UInt8]) {
        client?.accept(from: from, token: token, via: relay)
    }

    func relayConnection(_ connection: RelayClientConnection, mail itemID: UInt64, sealed: [UInt8]) {
        client?.received(item: itemID, sealed: sealed, session: self)
    }

    func relayConnectionClosed(_ connection: RelayClientConnection, ending: RelayClientSession.Ending) {
        client?.sessionClosed(self, reason: ending.reason, retryAfterMs: ending.retryAfterMs)
    }
}

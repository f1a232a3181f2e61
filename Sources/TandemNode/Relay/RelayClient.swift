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
public final class RelayClient: @unchecked Sendable {
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
    /// Handles one opened, checked envelope from a mailbox; returns when it is durably handled.
    var onMail: (@Sendable (Envelope) -> Void)?
    /// A friend's tunnel arrived or a home relay came up: deliver what waits.
    var onReachable: (@Sendable () -> Void)?

    /// How often an idle relay link is pinged (the relay drops links silent for 120 s).
    let keepalive: TimeAmount = .seconds(30)
    /// Links to relays that are not ours are closed after this long unused.
    let visitIdleMs: Int64 = 60_000
    static let mailboxMaximumAgeMs: UInt64 = 8 * 24 * 3_600_000

    private let sessions = NIOLockedValueBox<[[UInt8]: RelaySession]>([:])
    private let connecting = NIOLockedValueBox<[[UInt8]: Task<RelaySession, Error>]>([:])
    private let backoff = NIOLockedValueBox<[[UInt8]: (failures: Int, nextMs: Int64, error: String?)]>([:])
    private let incoming = NIOLockedValueBox(IncomingTunnelSlots())
    private let wake = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(nil)

    init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, gate: FrameGate, options: PeerPipeline.Options,
         events: EventBus, logger: Logger) {
        self.identity = identity
        self.store = store
        self.peers = peers
        self.gate = gate
        self.options = options
        self.events = events
        self.logger = logger
    }

    func now() -> Int64 { Int64(wallClockMilliseconds()) }

    /// Our home relays, as stored.
    func homeRelays() -> [RelayAddress] {
        ((try? store.relays()) ?? []).map { RelayAddress(id: NodeID(publicKey: $0.publicKey), host: $0.host, port: $0.port) }
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
        let task = connecting.withLockedValue { c -> Task<RelaySession, Error> in
            if let t = c[relay.id.publicKey] { return t }
            let t = Task { try await self.open(relay, home: home) }
            c[relay.id.publicKey] = t
            return t
        }
        defer { connecting.withLockedValue { _ = $0.removeValue(forKey: relay.id.publicKey) } }
        return try await task.value
    }

    private func open(_ relay: RelayAddress, home: Bool) async throws -> RelaySession {
        let session = RelaySession(relay: relay, home: home, client: self)
        let (link, waiter) = try await PeerConnector.connect(host: relay.host, port: relay.port, remote: relay.id.publicKey,
                                                             identity: identity, gate: gate, delegate: session, options: options,
                                                             group: peers.group, logger: logger, connectTimeout: .seconds(5))
        session.attach(link, waiter: waiter)
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
            var r = Tandem_V1_RelayRegister()
            r.agent = "tandem/0.1.0"
            let registered: Tandem_V1_RelayRegistered
            do {
                registered = try await session.register(r)
            } catch {
                session.close()
                throw turnedAway(error)
            }
            backoff.withLockedValue { _ = $0.removeValue(forKey: relay.id.publicKey) }
            events.emit("relay.connected", ["relay": .string(relay.description), "mailbox_items": .int(Int64(registered.mailboxItems))])
            logger.info("registered at relay", metadata: ["relay": "\(relay)", "mail": "\(registered.mailboxItems)"])
            onReachable?()
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
        var m = Tandem_V1_TunnelOpen()
        m.target = Data(key)
        let reply = try await session.request(.tunnelOpen) { id in m.requestID = id; return try m.serializedBytes() }
        switch reply.status {
        case .ok:
            break
        case .offline:
            throw Offline(relay: relay)
        default:
            throw TandemError("relay \(relay.host):\(relay.port) refused the tunnel: \(reply.detail)")
        }
        return try await RelayTunnel.connect(relay: relay, token: Array(reply.token), remote: key, identity: identity,
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
            var m = Tandem_V1_MailboxPut()
            m.recipient = Data(env.recipient)
            m.sealed = Data(try MailboxSeal.seal(env))
            let reply = try await session.request(.mailboxPut) { id in m.requestID = id; return try m.serializedBytes() }
            guard reply.status == .ok else {
                logger.info("relay refused mail", metadata: ["relay": "\(relay)", "detail": "\(reply.detail)"])
                if stored.isEmpty { throw TandemError("relay refused the mail: \(reply.detail)") }
                break
            }
            stored.append(env.messageID.bytes)
        }
        return stored
    }

    /// A TUNNEL_INCOMING: join as the handshake server; the link lands in the peer manager.
    func accept(_ m: Tandem_V1_TunnelIncoming, via relay: RelayAddress) {
        let from = Array(m.from)
        guard from.count == 32, m.token.count == TunnelJoin.tokenLength else { return }
        let relationship: Relationship?
        do {
            relationship = try store.contact(from)?.relationship
        } catch {
            // Unknown: treated as a stranger's, which is the stricter share.
            logger.error("cannot read the contact of an incoming tunnel", metadata: ["error": "\(error)"])
            relationship = nil
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
        Task {
            defer { incoming.withLockedValue { $0.release(slot) } }
            do {
                let (link, _) = try await RelayTunnel.connect(relay: relay, token: Array(m.token), remote: nil, identity: identity,
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
    }

    /// A MAILBOX_ITEM: open, check, hand over, then acknowledge (items that can never be
    /// handled are acknowledged too, so the relay forgets them).
    func received(_ item: Tandem_V1_MailboxItem, session: RelaySession) {
        let sealed = Array(item.sealed)
        do {
            let env = try MailboxSeal.open(sealed, identity: identity, curveSecretKey: try identity.curve25519SecretKey(),
                                           now: wallClockMilliseconds(), maximumAge: Self.mailboxMaximumAgeMs)
            events.emit("mailbox.received", ["from": .string(NodeID(publicKey: env.author).canonical),
                                             "message_type": .string(env.type.description), "relay": .string(session.relay.description)])
            onMail?(env)
            // A friend request the node did not take (throttled, or the store failed) stays at the
            // relay: it comes again at the next registration. Anything else was handled, or can
            // never be (a stranger's invite, a malformed payload), and is acknowledged.
            if env.type == .friendRequest, (try? store.wasHandled(env.messageID.bytes)) != true,
               (try? store.contact(env.author))?.relationship != .blocked {
                logger.info("mail not taken now; the relay keeps it", metadata: ["relay": "\(session.relay)", "type": "\(env.type)"])
                return
            }
        } catch {
            logger.info("mailbox item dropped", metadata: ["relay": "\(session.relay)", "error": "\(error)"])
        }
        var ack = Tandem_V1_MailboxAck()
        ack.itemIds = [item.itemID]
        session.send(.mailboxAck, (try? ack.serializedBytes()) ?? [])
    }

    func sessionClosed(_ session: RelaySession, reason: String?, retryAfterMs: Int64) {
        let removed = sessions.withLockedValue { s -> Bool in
            guard s[session.relay.id.publicKey] === session else { return false }
            s[session.relay.id.publicKey] = nil
            return true
        }
        guard removed, session.home, session.wasRegistered else { return }
        noteFailure(session.relay, reason ?? "the relay closed the link", minimumDelayMs: retryAfterMs, resetCount: true)
        events.emit("relay.disconnected", ["relay": .string(session.relay.description), "reason": .string(reason ?? "closed")])
        poke()
    }

    private func noteFailure(_ relay: RelayAddress, _ error: String, minimumDelayMs: Int64 = 0, resetCount: Bool = false) {
        let nowMs = now()
        backoff.withLockedValue { b in
            var e = b[relay.id.publicKey] ?? (0, 0, nil)
            if resetCount { e.failures = 0 }
            e.failures += 1
            // 1 s, 2 s, 4 s ... 60 s, with up to 25 % jitter so a relay's clients do not come back at once.
            let base = min(60_000, 500 << min(e.failures, 7))
            let jitter = Int64(Sodium.randomUInt64() % UInt64(base / 4 + 1))
            let next = nowMs.addingSaturated(max(Int64(base) + jitter, minimumDelayMs))
            // A relay's "retry after" already noted for this failure is never shortened.
            e.nextMs = e.nextMs > nowMs ? max(e.nextMs, next) : next
            e.error = error
            b[relay.id.publicKey] = e
        }
    }

    /// Closes the link to a relay (after `tandem relay remove`).
    func disconnect(_ key: [UInt8]) {
        let s = sessions.withLockedValue { $0.removeValue(forKey: key) }
        s?.close()
        backoff.withLockedValue { _ = $0.removeValue(forKey: key) }
    }

    func poke() {
        let c = wake.withLockedValue { w -> CheckedContinuation<Void, Never>? in defer { w = nil }; return w }
        c?.resume()
    }

    // MARK: the loop

    /// Keeps home relays connected and registered, pings idle links, closes unused visits.
    func run() async {
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
                let due = backoff.withLockedValue { ($0[relay.id.publicKey]?.nextMs ?? 0) <= nowMs }
                guard due, connecting.withLockedValue({ $0[relay.id.publicKey] == nil }) else { continue }
                Task {
                    do {
                        _ = try await self.session(for: relay, home: true)
                    } catch let away as TurnedAway {
                        self.noteFailure(relay, away.reason, minimumDelayMs: away.retryAfterMs)
                        self.events.emit("relay.disconnected", ["relay": .string(relay.description), "reason": .string(away.reason)])
                        self.logger.info("home relay turned us away", metadata: ["relay": "\(relay)", "reason": "\(away.reason)"])
                    } catch {
                        self.noteFailure(relay, "\(error)")
                        self.logger.info("cannot reach home relay", metadata: ["relay": "\(relay)", "error": "\(error)"])
                    }
                }
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
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    wake.withLockedValue { $0 = c }
                    Task { [weak self] in
                        try? await Task.sleep(for: .seconds(1))
                        self?.poke()
                    }
                }
            } onCancel: { [weak self] in self?.poke() }
        }
        for (_, s) in sessions.withLockedValue({ $0 }) { s.close() }
    }

    /// What `tandem relay list` shows.
    func status() -> [JSONValue] {
        let stored = (try? store.relays()) ?? []
        return stored.map { r in
            let relay = RelayAddress(id: NodeID(publicKey: r.publicKey), host: r.host, port: r.port)
            let s = session(r.publicKey)
            let b = backoff.withLockedValue { $0[r.publicKey] }
            return .object([
                "id": .string(relay.id.canonical),
                "address": .string(relay.description),
                "connected": .bool(s?.isRegistered ?? false),
                "since": FriendService.iso(s?.connectedAtMs),
                "mail_received": .int(Int64(s?.mailReceived ?? 0)),
                "last_error": b?.error.map(JSONValue.string) ?? .null,
                "next_attempt": (s == nil && b != nil) ? FriendService.iso(b!.nextMs) : .null,
                "added_at": FriendService.iso(r.atMs),
            ])
        }
    }
}

/// One authenticated link to a relay.
final class RelaySession: PeerLinkDelegate, @unchecked Sendable {
    let relay: RelayAddress
    let home: Bool
    private weak var client: RelayClient?
    private struct State {
        var link: PeerLink?
        var waiter: LinkWaiter?
        var pending: [UInt64: CheckedContinuation<Tandem_V1_RelayReply, Error>] = [:]
        var registration: CheckedContinuation<Tandem_V1_RelayRegistered, Error>?
        var registered = false
        var closed = false
        var goodbye: (String, Int64)?
        var nextRequest: UInt64 = 0
        var lastUsedMs: Int64
        var connectedAtMs: Int64
        var mailReceived = 0
    }
    private let state: NIOLockedValueBox<State>

    init(relay: RelayAddress, home: Bool, client: RelayClient) {
        self.relay = relay
        self.home = home
        self.client = client
        let now = Int64(wallClockMilliseconds())
        self.state = NIOLockedValueBox(State(lastUsedMs: now, connectedAtMs: now))
    }

    func attach(_ link: PeerLink, waiter: LinkWaiter) {
        state.withLockedValue { $0.link = link; $0.waiter = waiter }
    }

    var isOpen: Bool { state.withLockedValue { !$0.closed && $0.link?.channel.isActive == true } }
    var isRegistered: Bool { state.withLockedValue { $0.registered && !$0.closed } }
    /// Whether registration ever completed on this link.
    var wasRegistered: Bool { state.withLockedValue { $0.registered } }
    /// The relay's goodbye (reason, retry after ms), if it said one.
    var goodbyeInfo: (String, Int64)? { state.withLockedValue { $0.goodbye } }
    var lastUsedMs: Int64 { state.withLockedValue { $0.lastUsedMs } }
    var connectedAtMs: Int64 { state.withLockedValue { $0.connectedAtMs } }
    var mailReceived: Int { state.withLockedValue { $0.mailReceived } }

    func send(_ type: MessageType, _ payload: [UInt8]) {
        state.withLockedValue { $0.link }?.send(type: type, payload: payload)
    }

    func ping() {
        guard let waiter = state.withLockedValue({ $0.waiter }) else { return }
        Task { [weak self] in
            do { _ = try await waiter.ping(timeout: .seconds(15)) } catch { self?.close() }
        }
    }

    func close() { state.withLockedValue { $0.link }?.close() }

    /// Sends a request carrying a fresh request id and waits (15 s at most) for its RELAY_REPLY.
    func request(_ type: MessageType, _ payload: (UInt64) throws -> [UInt8]) async throws -> Tandem_V1_RelayReply {
        let (id, link) = state.withLockedValue { s -> (UInt64, PeerLink?) in
            s.nextRequest += 1
            s.lastUsedMs = Int64(wallClockMilliseconds())
            return (s.nextRequest, s.closed ? nil : s.link)
        }
        guard let link else { throw TandemError("the link to relay \(relay.host):\(relay.port) is closed") }
        let bytes = try payload(id)
        let timer = link.channel.eventLoop.scheduleTask(in: .seconds(15)) { [weak self] in
            self?.finish(id, .failure(TandemError("relay \(self?.relay.host ?? ""):\(self?.relay.port ?? 0) did not answer within 15 s",
                                                  exitCode: TandemError.timeoutExitCode)))
        }
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { c in
            let closed = state.withLockedValue { s -> Bool in
                if s.closed { return true }
                s.pending[id] = c
                return false
            }
            if closed { return c.resume(throwing: TandemError("the link to relay \(relay.host):\(relay.port) is closed")) }
            link.send(type: type, payload: bytes)
        }
    }

    private func finish(_ id: UInt64, _ result: Result<Tandem_V1_RelayReply, Error>) {
        state.withLockedValue { $0.pending.removeValue(forKey: id) }?.resume(with: result)
    }

    func register(_ r: Tandem_V1_RelayRegister) async throws -> Tandem_V1_RelayRegistered {
        guard let link = state.withLockedValue({ $0.link }) else { throw TandemError("not connected") }
        let timer = link.channel.eventLoop.scheduleTask(in: .seconds(10)) { [weak self] in
            self?.state.withLockedValue { s -> CheckedContinuation<Tandem_V1_RelayRegistered, Error>? in
                defer { s.registration = nil }
                return s.registration
            }?.resume(throwing: TandemError("the relay did not confirm the registration within 10 s"))
        }
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { c in
            let closed = state.withLockedValue { s -> Bool in
                if s.closed { return true }
                s.registration = c
                return false
            }
            if closed { return c.resume(throwing: TandemError("the relay closed the link")) }
            link.send(type: .relayRegister, payload: (try? r.serializedBytes()) ?? [])
        }
    }

    // MARK: PeerLinkDelegate

    func link(_ link: PeerLink, received envelope: Envelope) {
        guard envelope.author == relay.id.publicKey else { return }
        switch envelope.type {
        case .relayReply:
            guard let m = try? Tandem_V1_RelayReply(serializedBytes: envelope.payload) else { return }
            finish(m.requestID, .success(m))
        case .relayRegistered:
            guard let m = try? Tandem_V1_RelayRegistered(serializedBytes: envelope.payload) else { return }
            let c = state.withLockedValue { s -> CheckedContinuation<Tandem_V1_RelayRegistered, Error>? in
                s.registered = true
                defer { s.registration = nil }
                return s.registration
            }
            c?.resume(returning: m)
        case .tunnelIncoming:
            guard let m = try? Tandem_V1_TunnelIncoming(serializedBytes: envelope.payload) else { return }
            client?.accept(m, via: relay)
        case .mailboxItem:
            guard let m = try? Tandem_V1_MailboxItem(serializedBytes: envelope.payload) else { return }
            state.withLockedValue { $0.mailReceived += 1 }
            client?.received(m, session: self)
        case .relayGoodbye:
            // Validated (retry after at most 1 h); a malformed goodbye still ends the link, with the
            // default backoff.
            let m = try? RelayGoodbyeMessage(payload: envelope.payload)
            state.withLockedValue { $0.goodbye = (m?.reason ?? "goodbye", m?.retryAfterMs ?? 0) }
        default:
            break
        }
    }

    func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {}

    func linkClosed(_ link: PeerLink, error: Error?) {
        let (pending, registration, goodbye) = state.withLockedValue { s in
            s.closed = true
            defer { s.pending = [:]; s.registration = nil }
            return (s.pending, s.registration, s.goodbye)
        }
        let reason = goodbye?.0 ?? error.map { "\($0)" }
        let e = TandemError("the link to relay \(relay.host):\(relay.port) closed\(reason.map { ": \($0)" } ?? "")")
        for (_, c) in pending { c.resume(throwing: e) }
        registration?.resume(throwing: e)
        client?.sessionClosed(self, reason: reason, retryAfterMs: goodbye?.1 ?? 0)
    }
}

import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOExtras
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNode
import TandemProtocol

/// Counters the relay exports at /metrics.
public final class RelayMetrics: Sendable {
    public struct Snapshot: Sendable {
        public var connectionsAccepted = 0
        public var refusals: [String: Int] = [:]
        public var handshakesFailed = 0
        public var tunnelsOpened = 0
        public var tunnelsRefused = 0
        public var bytesRelayed = 0
        public var mailboxStored = 0
        public var mailboxDelivered = 0
        public var mailboxRefused = 0
        public var mailboxExpired = 0
        public var idleClosed = 0
        public var registrationsFailed = 0
    }

    private let box = NIOLockedValueBox(Snapshot())
    public init() {}
    public var snapshot: Snapshot { box.withLockedValue { $0 } }
    func update(_ body: (inout Snapshot) -> Void) { box.withLockedValue(body) }
    func refused(_ reason: String) { box.withLockedValue { $0.refusals[reason, default: 0] += 1 } }
}

/// A tandem-relay: authenticated client links, spliced end-to-end tunnels, and sealed mail for
/// offline clients (Protocol/README.md section 14). A `Service`: graceful shutdown tells every
/// client goodbye.
public final class RelayServer: Service, @unchecked Sendable {
    public let identity: SigningKeyPair
    public let configuration: RelayConfiguration
    public let mailbox: RelayMailbox
    public let metrics = RelayMetrics()
    let gate: FrameGate
    let group: EventLoopGroup
    let logger: Logger
    let book: NIOLockedValueBox<RelayBook>
    private let bound: EventLoopPromise<SocketAddress>
    private let nextID = NIOLockedValueBox<UInt64>(0)

    struct Session {
        let link: PeerLink
        let key: [UInt8]
        /// The source address bucket (`RelayBook.addressBucket`) the link came from.
        let address: String
        var lastFrameMs: Int64
        let rate: ByteRate
    }
    /// Authenticated client links by client id.
    private let sessions = NIOLockedValueBox<[UInt64: Session]>([:])
    /// Tunnel ends waiting for their partner, by connection id.
    private let waiting = NIOLockedValueBox<[UInt64: Channel]>([:])
    private let mailboxQueue = DispatchQueue(label: "tandem-relay.mailbox")
    private let shuttingDown = NIOLockedValueBox(false)
    /// When expired mail was last swept (once a minute).
    private let lastExpiry = NIOLockedValueBox<Int64>(0)

    public init(identity: SigningKeyPair, configuration: RelayConfiguration, mailbox: RelayMailbox,
                group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
                maximumConnections: Int? = nil) {
        self.identity = identity
        self.configuration = configuration
        self.mailbox = mailbox
        self.group = group
        self.logger = logger
        self.gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics(), replayCapacity: 200_000)
        let fdBudget = maximumConnections ?? RelayServer.connectionBudget(configuration: configuration)
        self.book = NIOLockedValueBox(RelayBook(limits: .init(
            maximumClients: configuration.maximumClients, maximumPending: configuration.maximumPendingConnections,
            maximumPendingPerAddress: configuration.maximumPendingPerAddress,
            maximumTunnelsPerClient: configuration.maximumTunnelsPerClient,
            tunnelJoinTimeoutMs: configuration.tunnelJoinTimeoutSeconds * 1000, maximumConnections: fdBudget,
            maximumClientsPerAddress: configuration.maximumClientsPerAddress,
            maximumTunnelsPerPair: configuration.maximumTunnelsPerPair,
            maximumMailboxJobs: configuration.mailboxQueueJobs,
            maximumMailboxJobsPerClient: configuration.mailboxQueueJobsPerClient)))
        self.bound = group.next().makePromise()
    }

    deinit { bound.fail(TandemError("the relay was never started")) }

    /// Raises the soft limit on open files to the hard limit and returns how many connections
    /// the relay may hold: that limit less a reserve for the store, logs and the metrics port.
    public static func connectionBudget(configuration: RelayConfiguration) -> Int {
        var lim = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &lim) == 0 else { return 1024 }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lim)
            _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &lim)
        }
        return max(16, Int(min(lim.rlim_cur, 1 << 24)) - 64)
    }

    public var id: NodeID { NodeID(publicKey: identity.publicKey) }

    public var boundAddress: SocketAddress {
        get async throws { try await bound.futureResult.get() }
    }

    /// What clients paste: "ID@host:port" (the public address when set, else the bound one).
    public func address(bound: SocketAddress) -> String {
        if let p = configuration.publicAddress, !p.isEmpty { return "\(id.canonical)@\(p)" }
        var host = bound.ipAddress ?? configuration.listenHost
        if host == "0.0.0.0" || host == "::" { host = "127.0.0.1" }
        return RelayAddress(id: id, host: host, port: bound.port ?? configuration.listenPort).description
    }

    private func newID() -> UInt64 { nextID.withLockedValue { $0 += 1; return $0 } }

    private func now() -> Int64 { Int64(wallClockMilliseconds()) }

    // MARK: running

    public func run() async throws {
        let quiesce = ServerQuiescingHelper(group: group)
        let channel: Channel
        do {
            channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 1024)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .serverChannelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        try ch.pipeline.syncOperations.addHandler(quiesce.makeServerChannelHandler(channel: ch))
                    }
                }
                .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
                .childChannelOption(.writeBufferWaterMark,
                                    value: .init(low: configuration.tunnelQueueBytes / 2, high: configuration.tunnelQueueBytes))
                .childChannelInitializer { [self] ch in
                    ch.eventLoop.makeCompletedFuture { try accept(ch) }
                }
                .bind(host: configuration.listenHost, port: configuration.listenPort).get()
        } catch {
            let e = TandemError("cannot listen on \(configuration.listenHost):\(configuration.listenPort): \(error)")
            bound.fail(e)
            throw e
        }
        let address = channel.localAddress!
        bound.succeed(address)
        logger.info("relay listening", metadata: ["address": "\(self.address(bound: address))"])
        let sweeper = group.next().scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { [weak self] _ in
            self?.sweep()
        }
        try await withGracefulShutdownHandler {
            try await withTaskCancellationHandler {
                try await channel.closeFuture.get()
            } onCancel: { [self] in
                shutdown(quiesce)
            }
        } onGracefulShutdown: { [self] in
            shutdown(quiesce)
        }
        sweeper.cancel()
        logger.info("relay stopped")
    }

    private func shutdown(_ quiesce: ServerQuiescingHelper) {
        let first = shuttingDown.withLockedValue { s -> Bool in defer { s = true }; return !s }
        guard first else { return }
        logger.info("relay shutting down: telling clients")
        for (_, s) in sessions.withLockedValue({ $0 }) {
            goodbye(s.link, reason: "the relay is shutting down", retryAfterMs: 5_000)
        }
        quiesce.initiateShutdown(promise: nil)
    }

    private func goodbye(_ link: PeerLink, reason: String, retryAfterMs: UInt64 = 0) {
        var g = Tandem_V1_RelayGoodbye()
        g.reason = reason
        g.retryAfterMs = retryAfterMs
        link.send(type: .relayGoodbye, payload: (try? g.serializedBytes()) ?? []).whenComplete { _ in link.close() }
    }

    /// Once a second: idle links, tunnels whose ends did not both join, expired mail.
    private func sweep() {
        let nowMs = now()
        let idleMs = configuration.idleTimeoutSeconds * 1000
        for (_, s) in sessions.withLockedValue({ $0 }) where nowMs - s.lastFrameMs > idleMs {
            metrics.update { $0.idleClosed += 1 }
            goodbye(s.link, reason: "idle for \(configuration.idleTimeoutSeconds) s")
        }
        let expired = book.withLockedValue { $0.expireJoins(nowMs: nowMs) }
        for (_, ends) in expired {
            for c in ends {
                if let ch = waiting.withLockedValue({ $0.removeValue(forKey: c) }) { answer(ch, .timeout, close: true) }
            }
        }
        let expiryDue = lastExpiry.withLockedValue { last -> Bool in
            guard nowMs - last >= 60_000 else { return false }
            last = nowMs
            return true
        }
        if expiryDue {
            mailboxQueue.async { [self] in
                if let n = try? mailbox.expire(nowMs: now()), n > 0 { metrics.update { $0.mailboxExpired += n } }
            }
        }
    }

    // MARK: accepting

    private func accept(_ channel: Channel) throws {
        let ip = channel.remoteAddress?.ipAddress ?? "?"
        // Per-address limits count by address bucket (an IPv6 /64 as one address).
        let address = RelayBook.addressBucket(ip)
        let admission = book.withLockedValue { $0.admit(address: address) }
        metrics.update { $0.connectionsAccepted += 1 }
        switch admission {
        case .admitted:
            break
        case .tooManyConnections:
            metrics.refused("connections")
            logger.notice("refusing a connection: too many connections", metadata: ["from": "\(ip)"])
            channel.close(promise: nil)
            return
        case .tooManyPending:
            metrics.refused("pending")
            channel.close(promise: nil)
            return
        }
        let id = newID()
        channel.closeFuture.whenComplete { [self] _ in
            book.withLockedValue { $0.connectionClosed() }
        }
        try channel.pipeline.syncOperations.addHandler(FrontHandler(server: self, connection: id, address: address,
                                                                    timeout: .seconds(configuration.handshakeTimeoutSeconds)))
    }

    /// The first bytes said "Secret Handshake": this is a client link.
    func startClientLink(_ channel: Channel, connection: UInt64, address: String) throws {
        var options = PeerPipeline.Options()
        options.handshakeTimeout = .seconds(configuration.handshakeTimeoutSeconds)
        options.maximumEnvelopeLength = 64 * 1024
        // Every byte the client sends is charged to its rate before anything decodes it: the
        // handshake, frames the relay rejects, and valid frames alike.
        let rate = ByteRate(bytesPerSecond: configuration.clientBytesPerSecond)
        try channel.pipeline.syncOperations.addHandler(InboundRateHandler(rate: rate))
        // One read per readable event, so a held read takes effect at once, not after several
        // more reads of up to 64 KiB each.
        try channel.syncOptions?.setOption(ChannelOptions.maxMessagesPerRead, value: 1)
        let delegate = ClientDelegate(server: self, connection: connection, address: address, rate: rate)
        try PeerPipeline.configure(channel: channel, identity: identity, serverPublicKey: nil, gate: gate,
                                   delegate: delegate, options: options, logger: logger)
    }

    /// The first bytes were a tunnel join.
    func join(_ channel: Channel, connection: UInt64, address: String, token: [UInt8]) {
        book.withLockedValue { $0.leavePending(address: address) }
        let result = book.withLockedValue { $0.join(token: token, connection: connection, nowMs: now()) }
        switch result {
        case .unknownToken:
            metrics.refused("tunnel_token")
            answer(channel, .unknownToken, close: true)
        case .waiting:
            waiting.withLockedValue { $0[connection] = channel }
            channel.closeFuture.whenComplete { [self] _ in
                if waiting.withLockedValue({ $0.removeValue(forKey: connection) }) != nil {
                    book.withLockedValue { $0.dropTunnel(token) }
                }
            }
        case .refused(let other):
            metrics.refused("tunnel_target_full")
            if let otherChannel = waiting.withLockedValue({ $0.removeValue(forKey: other) }) {
                answer(otherChannel, .refused, close: true)
            }
            answer(channel, .refused, close: true)
        case .paired(let other, let tunnel):
            guard let otherChannel = waiting.withLockedValue({ $0.removeValue(forKey: other) }) else {
                book.withLockedValue { $0.dropTunnel(token) }
                answer(channel, .unknownToken, close: true)
                return
            }
            splice(otherChannel, channel, token: token, tunnel: tunnel)
        }
    }

    private func answer(_ channel: Channel, _ answer: TunnelJoin.Answer, close: Bool) {
        let buf = channel.allocator.buffer(bytes: [answer.rawValue])
        let f = channel.writeAndFlush(buf)
        if close { f.whenComplete { _ in channel.close(promise: nil) } }
    }

    private func rate(of client: UInt64) -> ByteRate {
        sessions.withLockedValue { $0[client]?.rate } ?? ByteRate(bytesPerSecond: configuration.clientBytesPerSecond)
    }

    private func splice(_ a: Channel, _ b: Channel, token: [UInt8], tunnel: RelayBook.Tunnel) {
        metrics.update { $0.tunnelsOpened += 1 }
        // The ends cannot tell which client each is (the token is shared); both count against the
        // initiator's rate, the one who asked for the tunnel.
        let rateA = rate(of: tunnel.initiator)
        let onBytes: @Sendable (Int) -> Void = { [weak self] n in self?.metrics.update { $0.bytesRelayed += n } }
        let closed = NIOLockedValueBox(false)
        let onClose: @Sendable () -> Void = { [weak self] in
            guard closed.withLockedValue({ c -> Bool in defer { c = true }; return !c }) else { return }
            self?.book.withLockedValue { $0.dropTunnel(token) }
        }
        let queue = configuration.tunnelQueueBytes
        // In three steps, so no byte reaches an end before its own answer: both ends get their
        // splice handler (reading off), then both get 0x00, then both start reading.
        let added = [(a, b), (b, a)].map { me, partner in
            me.eventLoop.submit {
                try me.pipeline.syncOperations.addHandler(SpliceHandler(partner: partner, rate: rateA, queueLimit: queue,
                                                                        onBytes: onBytes, onClose: onClose))
            }
        }
        added[0].and(added[1]).flatMap { _ in
            let answered = [a, b].map { ch in
                ch.writeAndFlush(ch.allocator.buffer(bytes: [TunnelJoin.Answer.joined.rawValue]))
            }
            return answered[0].and(answered[1])
        }.whenComplete { result in
            switch result {
            case .success:
                for ch in [a, b] { ch.pipeline.fireUserInboundEventTriggered(SpliceStart()) }
            case .failure:
                a.close(promise: nil)
                b.close(promise: nil)
            }
        }
    }

    // MARK: client links

    func established(_ link: PeerLink, connection: UInt64, address: String, rate: ByteRate) {
        book.withLockedValue { $0.leavePending(address: address) }
        guard let key = link.remotePublicKey else { return }
        if shuttingDown.withLockedValue({ $0 }) {
            goodbye(link, reason: "the relay is shutting down", retryAfterMs: 5_000)
            return
        }
        let verdict = book.withLockedValue { $0.authenticated(connection, key: key, address: address) }
        switch verdict {
        case .accepted:
            break
        case .full:
            metrics.refused("clients")
            logger.notice("refusing a client: the relay is full", metadata: ["clients": "\(configuration.maximumClients)"])
            goodbye(link, reason: "the relay is full (\(configuration.maximumClients) clients)", retryAfterMs: 60_000)
            return
        case .tooManyFromAddress:
            metrics.refused("clients_per_address")
            logger.notice("refusing a client: too many from its address",
                          metadata: ["from": "\(address)", "limit": "\(configuration.maximumClientsPerAddress)"])
            goodbye(link, reason: "too many clients from your address (\(configuration.maximumClientsPerAddress))",
                    retryAfterMs: 60_000)
            return
        }
        sessions.withLockedValue {
            $0[connection] = Session(link: link, key: key, address: address, lastFrameMs: now(), rate: rate)
        }
        logger.debug("client connected", metadata: ["client": "\(NodeID(publicKey: key).short)", "from": "\(address)"])
    }

    func closed(_ link: PeerLink, connection: UInt64, address: String, wasEstablished: Bool) {
        if !wasEstablished {
            book.withLockedValue { $0.leavePending(address: address) }
            metrics.update { $0.handshakesFailed += 1 }
        }
        sessions.withLockedValue { _ = $0.removeValue(forKey: connection) }
        book.withLockedValue { $0.clientClosed(connection) }
    }

    func received(_ envelope: Envelope, on link: PeerLink, connection: UInt64) {
        let nowMs = now()
        guard let session = sessions.withLockedValue({ s -> Session? in
            s[connection]?.lastFrameMs = nowMs
            return s[connection]
        }) else { return }
        // The bytes were charged to the client's rate as they were read (InboundRateHandler).
        switch envelope.type {
        case .ping, .pong, .error:
            return
        case .relayRegister:
            register(session, connection: connection)
        case .tunnelOpen:
            guard let m = try? Tandem_V1_TunnelOpen(serializedBytes: envelope.payload) else { return reject(envelope, link) }
            openTunnel(m, session: session, connection: connection)
        case .mailboxPut:
            guard let m = try? Tandem_V1_MailboxPut(serializedBytes: envelope.payload) else { return reject(envelope, link) }
            put(m, session: session, connection: connection)
        case .mailboxAck:
            guard let m = try? Tandem_V1_MailboxAck(serializedBytes: envelope.payload) else { return reject(envelope, link) }
            let ids = m.itemIds.prefix(1024).map { Int64(bitPattern: $0) }
            // With the queue full the acknowledgement is dropped: the items come again at the
            // next registration, and the node recognises them (14.4).
            _ = mailboxJob(connection) { [self] in
                do {
                    let n = try mailbox.acknowledge(ids, recipient: session.key)
                    metrics.update { $0.mailboxDelivered += n }
                } catch {
                    logger.error("mailbox acknowledgement failed", metadata: ["error": "\(error)"])
                }
            }
        default:
            reject(envelope, link, code: .unknownType, "a relay does not handle \(envelope.type)")
        }
    }

    private func reject(_ envelope: Envelope, _ link: PeerLink, code: Tandem_V1_ErrorCode = .malformed,
                        _ detail: String = "the payload does not parse") {
        let r = FrameRejection(code, detail, messageID: envelope.messageID, author: envelope.author, type: envelope.type)
        if let reply = FrameVerifier.errorReply(to: r, from: identity, linkPeer: envelope.author, now: wallClockMilliseconds()) {
            link.send(reply)
        }
    }

    private func reply(_ link: PeerLink, _ requestID: UInt64, _ status: Tandem_V1_RelayStatus, _ detail: String = "",
                       token: [UInt8] = [], itemID: Int64 = 0) {
        var r = Tandem_V1_RelayReply()
        r.requestID = requestID
        r.status = status
        r.detail = detail
        r.token = Data(token)
        r.itemID = UInt64(bitPattern: itemID)
        link.send(type: .relayReply, payload: (try? r.serializedBytes()) ?? [])
    }

    /// Runs `body` on the mailbox queue if the book admits one more job for `connection`.
    private func mailboxJob(_ connection: UInt64, _ body: @escaping @Sendable () -> Void) -> RelayBook.MailboxJob {
        let verdict = book.withLockedValue { $0.startMailboxJob(client: connection) }
        switch verdict {
        case .accepted:
            mailboxQueue.async { [self] in
                defer { book.withLockedValue { $0.finishMailboxJob(client: connection) } }
                body()
            }
        case .busy, .tooManyFromClient:
            metrics.refused("mailbox_queue")
        }
        return verdict
    }

    /// The link becomes its key's home link; the link it replaces is told goodbye.
    private func makeHome(_ session: Session, connection: UInt64) {
        let replaced = book.withLockedValue { $0.register(connection) }
        if let replaced, let old = sessions.withLockedValue({ $0[replaced] }) {
            goodbye(old.link, reason: "replaced by a newer link from the same node")
        }
    }

    /// RELAY_REGISTERED only once the registration is on disk (it is what lets others leave mail
    /// for the node): when the store fails, or the mailbox queue is full, the client is told
    /// goodbye and comes back later, and the link never becomes a home link.
    private func register(_ session: Session, connection: UInt64) {
        // A client registered within the hour, with no mail waiting anywhere, is answered at once;
        // anything else goes through the mailbox's queue (a database write or read).
        if mailbox.depth.items == 0, mailbox.isFreshlyRegistered(session.key, nowMs: now()) {
            makeHome(session, connection: connection)
            sendRegistered(session, items: [])
            return
        }
        let verdict = mailboxJob(connection) { [self] in
            let items: [RelayMailbox.Item]
            do {
                try mailbox.register(session.key, nowMs: now())
                items = try mailbox.items(for: session.key)
            } catch {
                metrics.update { $0.registrationsFailed += 1 }
                logger.error("mailbox registration failed", metadata: ["error": "\(error)"])
                goodbye(session.link, reason: "the relay cannot record the registration now", retryAfterMs: 30_000)
                return
            }
            makeHome(session, connection: connection)
            sendRegistered(session, items: items)
        }
        switch verdict {
        case .accepted:
            break
        case .busy, .tooManyFromClient:
            goodbye(session.link, reason: "the relay is busy", retryAfterMs: 5_000)
        }
    }

    private func sendRegistered(_ session: Session, items: [RelayMailbox.Item]) {
        var r = Tandem_V1_RelayRegistered()
        r.mailboxItems = UInt32(items.count)
        r.maxTunnels = UInt32(configuration.maximumTunnelsPerClient)
        r.maxBytesPerSecond = UInt64(configuration.clientBytesPerSecond)
        r.mailboxMaxItems = UInt32(configuration.mailboxItemsPerRecipient)
        r.mailboxMaxBytes = UInt64(configuration.mailboxBytesPerRecipient)
        r.mailboxMaxItemBytes = UInt32(configuration.mailboxItemBytes)
        session.link.send(type: .relayRegistered, payload: (try? r.serializedBytes()) ?? [])
        for item in items { deliver(item, on: session.link) }
    }

    private func deliver(_ item: RelayMailbox.Item, on link: PeerLink) {
        var m = Tandem_V1_MailboxItem()
        m.itemID = UInt64(bitPattern: item.id)
        m.sender = Data(item.sender)
        m.sealed = Data(item.sealed)
        m.storedAtMs = UInt64(item.storedAtMs)
        link.send(type: .mailboxItem, payload: (try? m.serializedBytes()) ?? [])
    }

    private func openTunnel(_ m: Tandem_V1_TunnelOpen, session: Session, connection: UInt64) {
        let token = Sodium.randomBytes(TunnelJoin.tokenLength)
        let result = book.withLockedValue { $0.openTunnel(from: connection, to: Array(m.target), token: token, nowMs: now()) }
        switch result {
        case .ready(let target):
            guard let t = sessions.withLockedValue({ $0[target] }) else {
                book.withLockedValue { $0.dropTunnel(token) }
                return reply(session.link, m.requestID, .offline, "the target is not connected")
            }
            var incoming = Tandem_V1_TunnelIncoming()
            incoming.from = Data(session.key)
            incoming.token = Data(token)
            t.link.send(type: .tunnelIncoming, payload: (try? incoming.serializedBytes()) ?? [])
            reply(session.link, m.requestID, .ok, token: token)
        case .offline:
            metrics.update { $0.tunnelsRefused += 1 }
            reply(session.link, m.requestID, .offline, "the target is not connected to this relay")
        case .limit(let why):
            metrics.update { $0.tunnelsRefused += 1 }
            reply(session.link, m.requestID, .limit, why)
        case .badRequest(let why):
            reply(session.link, m.requestID, .badRequest, why)
        }
    }

    private func put(_ m: Tandem_V1_MailboxPut, session: Session, connection: UInt64) {
        let recipient = Array(m.recipient)
        guard recipient.count == 32 else { return reply(session.link, m.requestID, .badRequest, "a recipient is a 32-byte key") }
        let sealed = Array(m.sealed)
        // Refused before taking a place in the queue (the mailbox checks them again).
        guard !sealed.isEmpty else {
            metrics.update { $0.mailboxRefused += 1 }
            return reply(session.link, m.requestID, .badRequest, RelayMailbox.Refusal.empty.description)
        }
        guard sealed.count <= mailbox.quotas.itemBytes else {
            metrics.update { $0.mailboxRefused += 1 }
            return reply(session.link, m.requestID, .badRequest, RelayMailbox.Refusal.tooLarge(mailbox.quotas.itemBytes).description)
        }
        let verdict = mailboxJob(connection) { [self] in
            do {
                let id = try mailbox.put(recipient: recipient, sender: session.key, source: session.address, sealed: sealed,
                                         nowMs: now())
                metrics.update { $0.mailboxStored += 1 }
                reply(session.link, m.requestID, .ok, itemID: id)
                // The recipient may be online after all: hand it over now.
                if let home = book.withLockedValue({ $0.homeClient(of: recipient) }),
                   let link = sessions.withLockedValue({ $0[home]?.link }) {
                    deliver(RelayMailbox.Item(id: id, recipient: recipient, sender: session.key, sealed: sealed,
                                              storedAtMs: now()), on: link)
                }
            } catch let refusal as RelayMailbox.Refusal {
                metrics.update { $0.mailboxRefused += 1 }
                let status: Tandem_V1_RelayStatus
                switch refusal {
                case .unknownRecipient: status = .unknownRecipient
                case .empty, .tooLarge: status = .badRequest
                case .recipientFull, .senderQuota, .senderTotal, .addressQuota: status = .limit
                case .relayFull: status = .unavailable
                }
                reply(session.link, m.requestID, status, refusal.description)
            } catch {
                logger.error("mailbox write failed", metadata: ["error": "\(error)"])
                reply(session.link, m.requestID, .unavailable, "the relay could not store the item")
            }
        }
        switch verdict {
        case .accepted:
            break
        case .busy:
            metrics.update { $0.mailboxRefused += 1 }
            reply(session.link, m.requestID, .unavailable, "the relay is busy; try again later")
        case .tooManyFromClient:
            metrics.update { $0.mailboxRefused += 1 }
            reply(session.link, m.requestID, .limit,
                  "at most \(configuration.mailboxQueueJobsPerClient) mailbox requests of one link may wait at once")
        }
    }

    // MARK: metrics

    /// The Prometheus text for /metrics.
    public func renderMetrics() -> String {
        let m = metrics.snapshot
        let b = book.withLockedValue { ($0.clientCount, $0.registeredCount, $0.splicedTunnelCount, $0.tunnels.count,
                                        $0.pendingCount, $0.connectionCount, $0.mailboxJobs) }
        let depth = mailbox.depth
        var out = ""
        out += PrometheusText.gauge("tandem_relay_clients", help: "Authenticated client links.", value: b.0)
        out += PrometheusText.gauge("tandem_relay_registered_clients", help: "Clients registered here as their home relay.", value: b.1)
        out += PrometheusText.gauge("tandem_relay_tunnels", help: "Spliced tunnels.", value: b.2)
        out += PrometheusText.gauge("tandem_relay_tunnels_waiting", help: "Tunnels waiting for their ends to join.", value: b.3 - b.2)
        out += PrometheusText.gauge("tandem_relay_pending_connections", help: "Connections that have not finished the handshake or join.", value: b.4)
        out += PrometheusText.gauge("tandem_relay_connections", help: "Open connections of every kind.", value: b.5)
        out += PrometheusText.counter("tandem_relay_connections_accepted_total", help: "TCP connections accepted.", value: m.connectionsAccepted)
        out += PrometheusText.counter("tandem_relay_handshakes_failed_total", help: "Connections closed before finishing the handshake.", value: m.handshakesFailed)
        out += PrometheusText.counter("tandem_relay_refusals_total", help: "Connections and clients refused, by limit.",
                                      samples: ["connections", "pending", "clients", "clients_per_address", "tunnel_token",
                                                "tunnel_early_data", "tunnel_target_full", "mailbox_queue"].map { (["reason": $0], m.refusals[$0] ?? 0) })
        out += PrometheusText.counter("tandem_relay_tunnels_opened_total", help: "Tunnels spliced.", value: m.tunnelsOpened)
        out += PrometheusText.counter("tandem_relay_tunnels_refused_total", help: "Tunnel requests refused (offline target or limit).", value: m.tunnelsRefused)
        out += PrometheusText.counter("tandem_relay_bytes_relayed_total", help: "Bytes forwarded through tunnels.", value: m.bytesRelayed)
        out += PrometheusText.gauge("tandem_relay_mailbox_items", help: "Mail items held.", value: depth.items)
        out += PrometheusText.gauge("tandem_relay_mailbox_bytes", help: "Bytes of mail held.", value: depth.bytes)
        out += PrometheusText.counter("tandem_relay_mailbox_stored_total", help: "Mail items stored.", value: m.mailboxStored)
        out += PrometheusText.counter("tandem_relay_mailbox_delivered_total", help: "Mail items acknowledged by their recipient.", value: m.mailboxDelivered)
        out += PrometheusText.counter("tandem_relay_mailbox_refused_total", help: "Mail items refused (quota, unknown recipient, size).", value: m.mailboxRefused)
        out += PrometheusText.counter("tandem_relay_mailbox_expired_total", help: "Mail items dropped after their time-to-live.", value: m.mailboxExpired)
        out += PrometheusText.counter("tandem_relay_idle_closed_total", help: "Client links closed for idleness.", value: m.idleClosed)
        out += PrometheusText.gauge("tandem_relay_mailbox_queue", help: "Mailbox jobs queued or running.", value: b.6)
        out += PrometheusText.counter("tandem_relay_registrations_failed_total",
                                      help: "Registrations answered with RELAY_GOODBYE because the mailbox could not record them.",
                                      value: m.registrationsFailed)
        return out
    }
}

/// Relays the link events of one client connection to the server.
final class ClientDelegate: PeerLinkDelegate, @unchecked Sendable {
    weak var server: RelayServer?
    let connection: UInt64
    let address: String
    let rate: ByteRate
    private let wasEstablished = NIOLockedValueBox(false)

    init(server: RelayServer, connection: UInt64, address: String, rate: ByteRate) {
        self.server = server
        self.connection = connection
        self.address = address
        self.rate = rate
    }

    func linkEstablished(_ link: PeerLink) {
        wasEstablished.withLockedValue { $0 = true }
        server?.established(link, connection: connection, address: address, rate: rate)
    }

    func link(_ link: PeerLink, received envelope: Envelope) {
        server?.received(envelope, on: link, connection: connection)
    }

    func linkClosed(_ link: PeerLink, error: Error?) {
        server?.closed(link, connection: connection, address: address, wasEstablished: wasEstablished.withLockedValue { $0 })
    }
}

/// The first handler of every accepted connection: reads just enough to tell a tunnel join from
/// a Secret Handshake, then hands the connection on and removes itself. Drops connections that
/// say nothing within the handshake timeout.
final class FrontHandler: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private weak var server: RelayServer?
    private let connection: UInt64
    private let address: String
    private let timeout: TimeAmount
    private var buffer: ByteBuffer?
    private var timer: Scheduled<Void>?
    private var decided = false

    init(server: RelayServer, connection: UInt64, address: String, timeout: TimeAmount) {
        self.server = server
        self.connection = connection
        self.address = address
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = bound.value
            if !handler.decided { context.close(promise: nil) }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        if buffer == nil { buffer = incoming } else { buffer!.writeBuffer(&incoming) }
        guard !decided, let server else { return }
        switch TunnelJoin.classify(&buffer!) {
        case .needMoreData:
            return
        case .join(let token):
            decided = true
            timer?.cancel()
            if buffer!.readableBytes > 0 {
                // A client must wait for the relay's answer before sending: this one did not.
                server.book.withLockedValue { $0.leavePending(address: address) }
                server.metrics.refused("tunnel_early_data")
                context.close(promise: nil)
                return
            }
            let channel = context.channel
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            server.join(channel, connection: connection, address: address, token: token)
        case .handshake:
            decided = true
            timer?.cancel()
            do {
                try server.startClientLink(context.channel, connection: connection, address: address)
            } catch {
                context.close(promise: nil)
                return
            }
            let pending = buffer!
            buffer = nil
            context.fireChannelRead(wrapInboundOut(pending))
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        if !decided, let server {
            decided = true
            server.book.withLockedValue { $0.leavePending(address: address) }
            server.metrics.update { $0.handshakesFailed += 1 }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}

import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol

/// A tandem-relay: authenticated client links, spliced end-to-end tunnels, and sealed mail for
/// offline clients (Protocol/README.md section 14). A `Service`: graceful shutdown tells every
/// client goodbye.
public final class RelayServer: Service, Sendable {
    public let identity: SigningKeyPair
    public let configuration: RelayConfiguration
    public let mailbox: RelayMailbox
    public let metrics = RelayMetrics()
    let gate: FrameGate
    let group: EventLoopGroup
    let logger: Logger
    let book: NIOLockedValueBox<RelayBook>
    private let bound: EventLoopPromise<SocketAddress>
    /// Whether `run` completed `bound` (deinit completes it otherwise).
    private let boundCompleted = NIOLockedValueBox(false)
    let nextID = NIOLockedValueBox<UInt64>(0)

    struct Session {
        let link: any RelayClientLink
        let key: [UInt8]
        /// The source address bucket (`RelayBook.addressBucket`) the link came from.
        let address: String
        var lastFrameMs: Int64
        let rate: ByteRate
    }
    /// Authenticated client links by client id.
    let sessions = NIOLockedValueBox<[UInt64: Session]>([:])
    /// Tunnel ends waiting for their partner, by connection id.
    let waiting = NIOLockedValueBox<[UInt64: Channel]>([:])
    /// Runs one mailbox job (a store read or write) off the event loops: on the mailbox lane in
    /// production, inline or deferred in the harness (`RelayHarness`).
    let runMailboxJob: @Sendable (@escaping @Sendable () -> Void) -> Void
    /// The mailbox lane (production only): one thread of its own, so jobs run one at a time in
    /// the order they were admitted, as the node's vault and backup lanes do. Stopped when `run`
    /// ends; a job still queued then is dropped (its client retries against the next relay run).
    private let mailboxLane: NIOThreadPool?
    /// Wall-clock milliseconds (a manual clock in the harness).
    let clock: @Sendable () -> Int64
    let shuttingDown = NIOLockedValueBox(false)
    /// When expired mail was last swept (once a minute).
    let lastExpiry = NIOLockedValueBox<Int64>(0)

    public convenience init(identity: SigningKeyPair, configuration: RelayConfiguration, mailbox: RelayMailbox,
                            group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
                            maximumConnections: Int? = nil) {
        let lane = NIOThreadPool(numberOfThreads: 1)
        lane.start()
        self.init(identity: identity, configuration: configuration, mailbox: mailbox, group: group, logger: logger,
                  maximumConnections: maximumConnections, clock: { Int64(wallClockMilliseconds()) },
                  runMailboxJob: { job in lane.submit { state in if state == .active { job() } } }, mailboxLane: lane)
    }

    init(identity: SigningKeyPair, configuration: RelayConfiguration, mailbox: RelayMailbox, group: EventLoopGroup,
         logger: Logger, maximumConnections: Int?, clock: @escaping @Sendable () -> Int64,
         runMailboxJob: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void, mailboxLane: NIOThreadPool? = nil) {
        self.clock = clock
        self.runMailboxJob = runMailboxJob
        self.mailboxLane = mailboxLane
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

    // Only a promise nobody completed: completing one off its loop schedules on that loop, and by
    // the time a server that ran is released its loops may be shut down (NIO then prints an error
    // line on stderr, beside the one line a refused start prints).
    deinit {
        if !boundCompleted.withLockedValue({ $0 }) { bound.fail(TandemError("the relay was never started")) }
        mailboxLane?.shutdownGracefully { _ in }
    }

    private func completeBound(_ result: Result<SocketAddress, Error>) {
        boundCompleted.withLockedValue { $0 = true }
        bound.completeWith(result)
    }

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
        let host = HostPort.reachable(fromBound: bound.ipAddress ?? configuration.listenHost)
        return RelayAddress(id: id, host: host, port: bound.port ?? configuration.listenPort).description
    }

    func newID() -> UInt64 { nextID.withLockedValue { $0 += 1; return $0 } }

    func now() -> Int64 { clock() }

    /// Connection ids of the authenticated client links (for the harness's checks).
    func sessionConnections() -> [UInt64] { sessions.withLockedValue { Array($0.keys) } }

    /// Tunnel ends waiting for their partner.
    var waitingCount: Int { waiting.withLockedValue { $0.count } }

    // MARK: running

    public func run() async throws {
        let server: QuiescingServer
        do {
            let queue = configuration.tunnelQueueBytes
            server = try await QuiescingServer.bind(.init(host: configuration.listenHost, port: configuration.listenPort,
                                                          backlog: 1024, writeBufferWaterMark: .init(low: queue / 2, high: queue)),
                                                    group: group) { [self] ch in try accept(ch) }
        } catch {
            let e = TandemError("cannot listen on \(configuration.listenHost):\(configuration.listenPort): \(error)")
            completeBound(.failure(e))
            throw e
        }
        let address = server.localAddress
        completeBound(.success(address))
        logger.info("relay listening", metadata: ["address": "\(self.address(bound: address))"])
        let sweeper = group.next().scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { [weak self] _ in
            self?.sweep()
        }
        try await server.run { [self] in tellClientsGoodbye() }
        sweeper.cancel()
        try? await mailboxLane?.shutdownGracefully()
        logger.info("relay stopped")
    }

    /// Once, at shutdown: every client is told goodbye (come back in 5 s) before the links quiesce.
    func tellClientsGoodbye() {
        let first = shuttingDown.withLockedValue { s -> Bool in defer { s = true }; return !s }
        guard first else { return }
        logger.info("relay shutting down: telling clients")
        for (_, s) in sessions.withLockedValue({ $0 }) {
            goodbye(s.link, reason: "the relay is shutting down", retryAfterMs: 5_000)
        }
    }

    func goodbye(_ link: any RelayClientLink, reason: String, retryAfterMs: UInt64 = 0) {
        var g = Tandem_V1_RelayGoodbye()
        g.reason = reason
        g.retryAfterMs = retryAfterMs
        link.sendThenClose(type: .relayGoodbye, payload: (try? g.serializedBytes()) ?? [])
    }

    /// Once a second: idle links, tunnels whose ends did not both join, expired mail.
    func sweep() {
        let nowMs = now()
        let idleMs = configuration.idleTimeoutSeconds * 1000
        for (_, s) in sessions.withLockedValue({ $0 }) where nowMs - s.lastFrameMs > idleMs {
            metrics.update { $0.idleClosed += 1 }
            goodbye(s.link, reason: "idle for \(configuration.idleTimeoutSeconds) s")
        }
        let expired = book.withLockedValue { $0.expireJoins(nowMs: nowMs) }
        for (_, ends) in expired { dismissWaiting(ends, with: .timeout) }
        let expiryDue = lastExpiry.withLockedValue { last -> Bool in
            guard nowMs - last >= 60_000 else { return false }
            last = nowMs
            return true
        }
        if expiryDue {
            runMailboxJob { [self] in
                if let n = try? mailbox.expire(nowMs: now()), n > 0 { metrics.update { $0.mailboxExpired += n } }
            }
        }
    }
}

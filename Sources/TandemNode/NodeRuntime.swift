import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol
import TandemStore

/// A running node: its identity, its shared frame rules and its services, in one service group.
public final class NodeRuntime: Sendable {
    public let identity: SigningKeyPair
    public let configuration: NodeConfiguration
    public let metrics = TransportMetrics()
    public let gate: FrameGate
    public let listener: NodeListener
    public let group: EventLoopGroup
    /// Where the node keeps its files; nil for throwaway nodes (`tandem ping`, the demo, tests), which
    /// then have no control socket.
    public let dataDirectory: DataDirectory?
    /// Everything that happens becomes an event here.
    public let eventBus: EventBus
    /// The control methods the CLI can call.
    public let router: ControlRouter
    /// The control socket (`<data-dir>/control.sock`), when there is a data directory.
    public let controlServer: ControlServer?
    /// The node's store: `<data-dir>/node.sqlite`, or in memory for throwaway nodes.
    public let store: NodeStore
    /// Every authenticated link, inbound and outbound.
    public let peers: PeerManager
    /// Friends, presence and the outbox.
    public let friends: FriendService
    public let discoverable: DiscoverableSetting
    /// Clock offsets to peers.
    public let clock: ClockSync
    /// Challenges, solo sessions and the ledger.
    public let challenges: ChallengeService
    /// UDP beacons on the LAN, when configured.
    public let discovery: DiscoveryService?
    /// Home relays, tunnels and mailboxes.
    public let relays: RelayClient
    let flows: FlowQueue
    private let logger: Logger

    /// - Parameters:
    ///   - dataDirectory: serve a control socket there (nil: none).
    ///   - eventLog: where events are stored (default: the last 10,000 in memory).
    public init(identity: SigningKeyPair, configuration: NodeConfiguration,
                dataDirectory: DataDirectory? = nil, eventLog: EventLog? = nil,
                group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
                logger: Logger) throws {
        self.identity = identity
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.dataDirectory = dataDirectory
        self.gate = FrameGate(localPublicKey: identity.publicKey, metrics: metrics,
                              replayCapacity: configuration.replayCapacity, limits: configuration.linkLimits)
        let store: NodeStore
        try dataDirectory?.create()
        do {
            store = try dataDirectory.map { try NodeStore(path: $0.storeFile.path) } ?? NodeStore.inMemory()
        } catch {
            throw TandemError("cannot open the node's store in \(dataDirectory?.path ?? "memory"): \(error)")
        }
        self.store = store
        // Rows that fail validation are set aside before any service reads them (never fatal).
        let quarantined: [QuarantinedRow]
        do {
            quarantined = try store.quarantineInvalidRows(nowMs: Int64(clamping: wallClockMilliseconds()))
        } catch {
            throw TandemError("cannot check the node's store in \(dataDirectory?.path ?? "memory"): \(error)")
        }
        for row in quarantined {
            logger.warning("stored row quarantined", metadata: ["kind": "\(row.kind)", "key": "\(hexString(row.rowKey))",
                                                             "reason": "\(row.reason)"])
        }
        let peers = PeerManager(identity: identity, gate: gate, options: configuration.link, group: group, logger: logger)
        self.peers = peers
        self.listener = NodeListener(identity: identity, configuration: configuration, gate: gate,
                                     delegate: peers, group: group, logger: logger)
        self.eventBus = EventBus(log: eventLog ?? StoreEventLog(store: store),
                                 logger: logger)
        let friends = FriendService(identity: identity, store: store, peers: peers, events: eventBus,
                                    configuration: configuration.friends, logger: logger)
        self.friends = friends
        let clock = ClockSync(peers: peers)
        self.clock = clock
        let challenges = ChallengeService(identity: identity, store: store, peers: peers, events: eventBus, friends: friends,
                                          clock: clock, logger: logger)
        self.challenges = challenges
        let frameRouter = NodeFrameRouter(friends: friends, clock: clock, challenges: challenges)
        // Link frames reach the flows through one bounded serial queue, off the event loops.
        let flows = FlowQueue(router: frameRouter)
        self.flows = flows
        peers.handler = flows
        let relays = RelayClient(identity: identity, store: store, peers: peers, gate: gate, options: configuration.link,
                                 events: eventBus, logger: logger)
        relays.onMail = { frameRouter.handleMail($0) }
        relays.onReachable = { friends.poke() }
        friends.relays = relays
        self.relays = relays
        let announce = AnnounceHook()
        let discoverable = DiscoverableSetting(store: store, onChange: { announce.fire() })
        self.discoverable = discoverable
        friends.onFriendsChanged = { announce.fire() }
        if let discoveryConfig = configuration.discovery {
            let listener = self.listener
            let port = NIOLockedValueBox(0)
            let discovery = DiscoveryService(
                identity: identity, configuration: discoveryConfig, group: group, logger: logger,
                state: {
                    if port.withLockedValue({ $0 }) == 0, let p = listener.boundAddressNow?.port {
                        port.withLockedValue { $0 = p }
                    }
                    return DiscoveryState(discoverable: discoverable.isDiscoverable, displayName: friends.displayName,
                                          tcpPort: port.withLockedValue { $0 }, friends: (try? store.friendKeys()) ?? [])
                },
                onSighting: { flows.sighted($0) })
            announce.target = { discovery.announceNow() }
            self.discovery = discovery
        } else {
            self.discovery = nil
        }
        let router = ControlRouter()
        self.router = router
        let listener = self.listener
        self.controlServer = dataDirectory.map {
            ControlServer(directory: $0, router: router, group: group, logger: logger,
                          startAfter: { _ = try await listener.boundAddress })
        }
        eventBus.registerControlMethods(on: router)
        friends.registerControlMethods(on: router, discoverable: discoverable)
        challenges.registerControlMethods(on: router)
        relays.registerControlMethods(on: router, friends: friends)
        registerStatus()
        for row in quarantined {
            eventBus.emit("store.quarantined", ["kind": .string(row.kind), "key": .string(hexString(row.rowKey)),
                                                "reason": .string(row.reason)])
        }
    }

    private func registerStatus() {
        router.register("node.status") { [self] _ in
            let address = try? await listener.boundAddress
            var o: [String: JSONValue] = [:]
            o["id"] = .string(id.canonical)
            o["display"] = .string(id.display)
            o["name"] = .string(friends.displayName)
            o["listen"] = address.map { .string($0.hostPort) } ?? .null
            o["data_dir"] = dataDirectory.map { .string($0.path) } ?? .null
            o["friends"] = .int(Int64(try store.friendKeys().count))
            o["pending_requests"] = .int(Int64(try store.contacts([.pending]).count))
            o["outbox"] = .int(Int64(try store.outboxCount()))
            o["links"] = .int(Int64(peers.connectedPeers.count))
            o["discoverable"] = .bool(discoverable.isDiscoverable)
            o["relays"] = .array(relays.status())
            let quarantined = try store.quarantined(limit: 10)
            o["quarantined"] = .int(Int64(try store.quarantinedCount()))
            o["quarantine"] = .array(quarantined.map {
                .object(["kind": .string($0.kind), "key": .string(hexString($0.rowKey)), "reason": .string($0.reason), "at_ms": .int($0.atMs)])
            })
            o["store_errors"] = .int(Int64(friends.storeErrors.withLockedValue { $0 }))
            o["frames_dropped_queue_full"] = .int(Int64(flows.dropped))
            o["transport"] = transportStatus()
            return .object(o)
        }
    }

    /// Transport counters and what the node's limits hold right now (Protocol 5.12).
    private func transportStatus() -> JSONValue {
        let m = metrics.snapshot
        func counts(_ d: [String: Int]) -> JSONValue { .object(d.mapValues { .int(Int64($0)) }) }
        return .object([
            "frames_accepted": .int(Int64(m.framesAccepted)),
            "frames_rejected": counts(m.framesRejected),
            "error_replies_suppressed": .int(Int64(m.errorRepliesSuppressed)),
            "replies_dropped_unwritable": .int(Int64(m.repliesDroppedUnwritable)),
            "links_closed": counts(m.linksClosed),
            "handshakes_refused": .int(Int64(m.handshakesRefused)),
            "reads_paused": .int(Int64(m.readsPaused)),
            "handshakes_pending": .int(Int64(listener.pendingHandshakes)),
            "partial_frame_bytes": .int(Int64(gate.frameBudget.used)),
            "replay_cache_entries": .int(Int64(gate.replayCacheCount)),
        ])
    }

    public var id: NodeID { NodeID(publicKey: identity.publicKey) }

    /// The services, in dependency order (shut down in reverse): the listener, the control socket,
    /// then the announcer of `node.started` (last, so `node.stopping` still reaches subscribers).
    public var services: [Service] {
        var services: [Service] = [listener]
        if let controlServer { services.append(controlServer) }
        services.append(FriendLoop(friends: friends, peers: peers, listener: listener))
        services.append(ChallengeLoop(challenges: challenges, listener: listener))
        services.append(RelayLoop(relays: relays, listener: listener))
        if let discovery { services.append(DiscoveryAfterListener(discovery: discovery, listener: listener)) }
        services.append(NodeAnnouncer(node: self))
        return services
    }

    /// Runs until SIGINT/SIGTERM (when `signals`) or until the task is cancelled.
    public func run(signals: Bool = true) async throws {
        // One node per data directory: refuse before the listener binds anything.
        try controlServer?.claimDataDirectory()
        let serviceGroup = ServiceGroup(configuration: .init(
            services: services.map { .init(service: $0) },
            gracefulShutdownSignals: signals ? [.sigterm, .sigint] : [],
            logger: logger))
        try await serviceGroup.run()
    }

    /// Opens an authenticated link to a peer.
    public func connect(host: String, port: Int, to remote: NodeID,
                        delegate: PeerLinkDelegate? = nil) async throws -> (PeerLink, LinkWaiter) {
        try await PeerConnector.connect(host: host, port: port, remote: remote.publicKey, identity: identity,
                                        gate: gate, delegate: delegate, options: configuration.link,
                                        group: group, logger: logger)
    }
}

/// Lets the discoverable setting and the friend list re-announce once discovery exists.
final class AnnounceHook: @unchecked Sendable {
    private let lock = NIOLockedValueBox<(@Sendable () -> Void)?>(nil)
    var target: (@Sendable () -> Void)? {
        get { lock.withLockedValue { $0 } }
        set { lock.withLockedValue { $0 = newValue } }
    }
    func fire() { target?() }
}

/// Starts beaconing once the TCP port is known (beacons announce it).
struct DiscoveryAfterListener: Service {
    let discovery: DiscoveryService
    let listener: NodeListener

    func run() async throws {
        _ = try await listener.boundAddress
        try await discovery.run()
    }
}

/// Runs the friends' delivery loop once the listener is bound; closes every link at shutdown.
struct FriendLoop: Service {
    let friends: FriendService
    let peers: PeerManager
    let listener: NodeListener

    func run() async throws {
        if let port = try? await listener.boundAddress.port {
            friends.setListenPort(port)
            try? friends.announceListenPortIfChanged()
        }
        await cancelWhenGracefulShutdown { await friends.run() }
        peers.closeAll()
    }
}

/// Resumes stored challenges and runs their timers once the listener is bound.
struct ChallengeLoop: Service {
    let challenges: ChallengeService
    let listener: NodeListener

    func run() async throws {
        _ = try? await listener.boundAddress
        await cancelWhenGracefulShutdown { await challenges.run() }
    }
}

/// Keeps the home relays connected once the listener is bound.
struct RelayLoop: Service {
    let relays: RelayClient
    let listener: NodeListener

    func run() async throws {
        _ = try? await listener.boundAddress
        await cancelWhenGracefulShutdown { await relays.run() }
    }
}

/// Emits `node.started` (fields: id, address) once the listener is bound, and `node.stopping`
/// when the node shuts down gracefully.
struct NodeAnnouncer: Service {
    let node: NodeRuntime

    func run() async throws {
        let address = try await node.listener.boundAddress
        node.eventBus.emit("node.started", ["id": .string(node.id.canonical), "address": .string(address.hostPort)])
        // Stay up until shutdown: a service that returns would end the whole group.
        try? await gracefulShutdown()
        if !Task.isCancelled {
            node.eventBus.emit("node.stopping", ["id": .string(node.id.canonical)])
        }
    }
}

import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore
import NodeFriends
import NodeChallenges
import NodeBackup
import NodeVault
import NodeFocus
import NodeMessages
import NodeWeb

/// A running node: its identity, its shared frame rules and its services, in one service group.
///
/// The feature services are `package`: the CLI's commands reach them through the control socket,
/// and tests and the bench (in this package) through these properties; nothing outside the package
/// sees them.
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
    package let store: NodeStore
    /// Every authenticated link, inbound and outbound.
    package let peers: PeerManager
    /// Friends, presence and the outbox.
    package let friends: FriendService
    package let discoverable: DiscoverableSetting
    /// Clock offsets to peers.
    package let clock: ClockSync
    /// Challenges, solo sessions and the ledger.
    package let challenges: ChallengeService
    /// UDP beacons on the LAN, when configured.
    package let discovery: DiscoveryService?
    /// Home relays, tunnels and mailboxes.
    package let relays: RelayClient
    /// The encrypted vault (`<data-dir>/vault`).
    package let vault: VaultService
    /// Backups: what this node holds for friends, and its pushes to them.
    package let backup: BackupService
    /// Local focus: modes, keys, the lock and its blocking.
    package let focus: FocusService
    /// Messages between friends and challenges' threads.
    package let messages: MessageService
    package let messageFiles: MessageFiles
    /// The local web dashboard, when configured (`--web`).
    package let web: WebDashboard?
    /// Inbound frames and link events on their way to the node core (`@NodeCore`), bounded.
    let inbound: InboundLane
    /// Frames owed to peers, until acknowledged.
    let outbox: Outbox
    /// Who of our friends is online; our status.
    let presence: PresenceService
    /// Cross-service notifications.
    let signals: NodeSignals
    /// Store failures on paths that went on.
    let health: StoreHealth
    let frameRouter: NodeFrameRouter
    /// What LAN beacons say, refreshed on the core when it changes (the beacon loop reads no store).
    private let beaconState = NIOLockedValueBox(DiscoveryState(discoverable: false, displayName: "", tcpPort: 0, friends: []))
    private let logger: Logger

    /// - Parameters:
    ///   - dataDirectory: serve a control socket there (nil: none).
    ///   - eventLog: where events are stored (default: the node's store).
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
            throw NodeError.failed("cannot open the node's store in \(dataDirectory?.path ?? "memory"): \(error)")
        }
        self.store = store
        // Rows that fail validation are set aside before any service reads them (never fatal).
        let quarantined: [QuarantinedRow]
        do {
            quarantined = try store.stepWaiting { step in try step.quarantineInvalidRows(nowMs: Int64(clamping: wallClockMilliseconds())) }
        } catch {
            throw NodeError.failed("cannot check the node's store in \(dataDirectory?.path ?? "memory"): \(error)")
        }
        for row in quarantined {
            logger.warning("stored row quarantined", metadata: ["kind": "\(row.kind)", "key": "\(hexString(row.rowKey))",
                                                             "reason": "\(row.reason)"])
        }
        // Built in dependency order, each with what it needs; nothing is wired in afterwards.
        let health = StoreHealth(logger: logger)
        let signals = NodeSignals()
        let inbound = InboundLane(preparing: [MessageFiles.chunkPreparation])
        (self.health, self.signals, self.inbound) = (health, signals, inbound)
        let peers = PeerManager(identity: identity, gate: gate, options: configuration.link, group: group, logger: logger,
                                handler: inbound)
        self.peers = peers
        self.listener = NodeListener(identity: identity, host: configuration.host, port: configuration.port,
                                     link: configuration.link, gate: gate,
                                     delegate: peers, group: group, logger: logger)
        let events = EventBus(log: eventLog ?? StoreEventLog(store: store), logger: logger)
        self.eventBus = events
        let relays = RelayClient(identity: identity, store: store, peers: peers, gate: gate, options: configuration.link,
                                 events: events, inbound: inbound, health: health, signals: signals, logger: logger)
        self.relays = relays
        let friendsConfig = configuration.friends
        let presenceState = PresenceState(heartbeatSeconds: UInt32(clamping: friendsConfig.heartbeat.nanoseconds / 1_000_000_000))
        var outboxConfig = Outbox.Configuration()
        outboxConfig.retryTick = .nanoseconds(friendsConfig.retryTick.nanoseconds)
        let outbox = Outbox(identity: identity, store: store,
                            transport: Dialer(store: store, peers: peers, relays: relays, health: health, logger: logger),
                            presence: presenceState, events: events, health: health, signals: signals,
                            configuration: outboxConfig, logger: logger)
        self.outbox = outbox
        let presence = PresenceService(state: presenceState, store: store, peers: peers, outbox: outbox, events: events,
                                       health: health, heartbeat: .nanoseconds(friendsConfig.heartbeat.nanoseconds),
                                       silenceLimit: .nanoseconds(friendsConfig.silenceLimit.nanoseconds), logger: logger)
        self.presence = presence
        let friends = FriendService(identity: identity, store: store, peers: peers, outbox: outbox, presence: presence,
                                    relays: relays, events: events, health: health, signals: signals,
                                    configuration: friendsConfig, logger: logger)
        self.friends = friends
        let clock = ClockSync(peers: peers, signals: signals)
        self.clock = clock
        let focus = try FocusService(identity: identity, store: store, events: events, health: health, signals: signals,
                                     configuration: configuration.focus, daylight: configuration.focus.daylight ?? DaylightClassifier(),
                                     dataDirectory: dataDirectory, logger: logger, presence: presenceState)
        self.focus = focus
        let challenges = ChallengeService(identity: identity, store: store, peers: peers, events: events, outbox: outbox,
                                          presence: presence, clock: clock, focus: focus, health: health, signals: signals, logger: logger)
        self.challenges = challenges
        let backup = BackupService(identity: identity, store: store, peers: peers,
                                   dialer: Dialer(store: store, peers: peers, relays: relays, health: health, logger: logger),
                                   outbox: outbox, events: events, health: health, signals: signals, dataDirectory: dataDirectory,
                                   logger: logger, kitProvider: RecoveryKit.provider)
        self.backup = backup
        let messages = MessageService(identity: identity, store: store, peers: peers, outbox: outbox, events: events, health: health,
                                      signals: signals,
                                      hooksDirectory: configuration.focus.hooksDirectory
                                          ?? dataDirectory.map { $0.url.appendingPathComponent("hooks").path },
                                      limits: configuration.messageLimits, logger: logger)
        self.messages = messages
        // Every node seals its break-in log under its identity (Protocol/vault.md, the PIN guard).
        var vaultConfiguration = configuration.vault
        if vaultConfiguration.breakInLogKey == nil { vaultConfiguration.breakInLogKey = VaultService.breakInLogKey(identity: identity) }
        // PIN slots mix in a secret held outside vault/ (Protocol/vault.md, keys file version 2).
        if vaultConfiguration.pinPepper == nil { vaultConfiguration.pinPepper = VaultService.pinPepper(identity: identity) }
        let vault = VaultService(directory: dataDirectory.map { $0.url.appendingPathComponent("vault") }, store: store,
                                  events: events, health: health, configuration: vaultConfiguration, group: group, logger: logger,
                                  signals: signals)
        self.vault = vault
        let messageFiles = MessageFiles(identity: identity, store: store, peers: peers, outbox: outbox, events: events, health: health,
                                        messages: messages, directory: dataDirectory.map { $0.url.appendingPathComponent("files") },
                                        limits: configuration.fileLimits, vault: vault, logger: logger)
        self.messageFiles = messageFiles
        // The feature flows' routes: each owns its frame types; friends take the rest.
        self.frameRouter = NodeFrameRouter(flows: [challenges, backup, messageFiles, messages], fallback: friends, presence: presence, outbox: outbox,
                                           clock: clock, store: store, events: events, health: health)
        let discoverable = DiscoverableSetting(store: store, signals: signals, health: health)
        self.discoverable = discoverable
        if let discoveryConfig = configuration.discovery {
            let beaconState = self.beaconState
            self.discovery = DiscoveryService(
                identity: identity, configuration: discoveryConfig, group: group, logger: logger,
                state: { beaconState.withLockedValue { $0 } },
                onSighting: { inbound.sighted($0) })
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
        events.registerControlMethods(on: router)
        friends.registerControlMethods(on: router, discoverable: discoverable)
        challenges.registerControlMethods(on: router)
        relays.registerControlMethods(on: router, record: friends)
        vault.registerControlMethods(on: router)
        backup.registerControlMethods(on: router)
        focus.registerControlMethods(on: router)
        messages.registerControlMethods(on: router)
        messageFiles.registerControlMethods(on: router)
        if let webConfiguration = configuration.web {
            let web = WebDashboard(configuration: webConfiguration, router: router, events: events, vault: vault, logger: logger)
            web.registerControlMethods(on: router)
            self.web = web
        } else {
            WebDashboard.registerDisabled(on: router)
            self.web = nil
        }
        registerStatus()
        // Stored on the core, in a step of their own, before anything the services do there.
        for row in quarantined {
            let fields: [String: JSONValue] = ["kind": .string(row.kind), "key": .string(hexString(row.rowKey)), "reason": .string(row.reason)]
            NodeCore.submit { events.emit("store.quarantined", fields) }
        }
    }

    /// On the core: what beacons say now.
    @NodeCore func refreshBeaconState() {
        let port = listener.boundAddressNow?.port ?? 0
        let state = DiscoveryState(discoverable: discoverable.isDiscoverable, displayName: friends.displayName, tcpPort: port,
                                   friends: health.read("read the friends", or: []) { try store.friendKeys() })
        beaconState.withLockedValue { $0 = state }
    }

    private func registerStatus() {
        // Weak: the router belongs to this runtime, so a strong capture would keep both alive for ever.
        router.register("node.status") { [weak self] _ in
            guard let self else { throw NodeError.failed("the node has stopped") }
            let address = try? await listener.boundAddress  // not bound (failed to): status says no address
            return try await NodeCore.perform { try self.status(address: address) }
        }
    }

    /// On the core: what `tandem status` shows.
    @NodeCore private func status(address: SocketAddress?) throws -> JSONValue {
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
            // Without discovery (--no-discovery) no beacon goes out, whatever the setting says.
            o["discovery"] = .bool(discovery != nil)
            o["discoverable"] = .bool(discovery != nil && discoverable.isDiscoverable)
            o["relays"] = .array(relays.status())
            let quarantined = try store.quarantined(limit: 10)
            o["quarantined"] = .int(Int64(try store.quarantinedCount()))
            o["quarantine"] = .array(quarantined.map {
                .object(["kind": .string($0.kind), "key": .string(hexString($0.rowKey)), "reason": .string($0.reason), "at_ms": .int($0.atMs)])
            })
            o["store_errors"] = .int(Int64(health.errors))
            o["frames_dropped_queue_full"] = .int(Int64(inbound.dropped))
            o["links_paused_queue_full"] = .int(Int64(inbound.pausedLinks))
            o["frames_waiting"] = .int(Int64(inbound.pendingFrames))
            o["transport"] = transportStatus()
            o["focus"] = focus.statusJSON()
            o["web"] = web?.statusJSON ?? ["state": "off"]
            return .object(o)
    }

    /// Transport counters and what the node's limits hold right now (Protocol 5.12).
    private func transportStatus() -> JSONValue {
        let m = metrics.snapshot
        func counts(_ d: [String: Int]) -> JSONValue { .object(d.mapValues { .int(Int64($0)) }) }
        return .object([
            "frames_accepted": .int(Int64(m.framesAccepted)),
            "link_messages_accepted": .int(Int64(m.linkMessagesAccepted)),
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
    /// the core's inbound stream, the flows' loops, then the announcer of `node.started` (last, so
    /// `node.stopping` still reaches subscribers).
    public var services: [Service] {
        var services: [Service] = [listener]
        if let controlServer { services.append(controlServer) }
        services.append(CoreInbound(inbound: inbound, router: frameRouter))
        services.append(FriendLoops(node: self))
        services.append(ChallengeLoop(challenges: challenges, listener: listener))
        services.append(RelayLoop(relays: relays, listener: listener))
        services.append(vault)
        services.append(backup)
        services.append(focus)
        services.append(MessageLoop(messages: messages))
        services.append(MessageFileLoop(files: messageFiles))
        if let discovery { services.append(DiscoveryAfterListener(node: self, discovery: discovery)) }
        if let web { services.append(web) }
        services.append(NodeAnnouncer(node: self))
        return services
    }

    /// How long a graceful shutdown may take before what is left is cancelled.
    public static let shutdownLimit: Duration = .seconds(5)

    /// How long the services may take to end once cancelled (after `shutdownLimit`, or at once when
    /// the task running them is cancelled) before ServiceLifecycle stops the process.
    public static let cancellationLimit: Duration = .seconds(30)

    /// Runs until SIGINT/SIGTERM (when `signals`) or until the task is cancelled.
    public func run(signals: Bool = true) async throws {
        // One node per data directory: refuse before the listener binds anything.
        try controlServer?.claimDataDirectory()
        // Each service named by its type: ServiceLifecycle's default name is `"\(service)"`, a
        // reflection of the whole value (a service struct's stored state, recursively): ~100 M
        // instructions at the start of an in-process pair of nodes (messages.md 11.6).
        var configuration = ServiceGroupConfiguration(
            services: services.map { .init(service: $0, serviceName: String(describing: type(of: $0))) },
            gracefulShutdownSignals: signals ? [.sigterm, .sigint] : [],
            logger: logger)
        configuration.maximumGracefulShutdownDuration = Self.shutdownLimit
        // After cancellation a service that is still running is stuck; ServiceLifecycle then stops the
        // process with a fatal error. 2 s was reached by a healthy node on a machine loaded 14 times over
        // (an in-process test crashed); Self.cancellationLimit only catches a real hang.
        configuration.maximumCancellationDuration = Self.cancellationLimit
        let serviceGroup = ServiceGroup(configuration: configuration)
        try await serviceGroup.run()
        self.signals.finish()
    }

    /// Opens an authenticated link to a peer.
    public func connect(host: String, port: Int, to remote: NodeID,
                        delegate: PeerLinkDelegate? = nil) async throws -> (PeerLink, LinkWaiter) {
        try await PeerConnector.connect(host: host, port: port, remote: remote.publicKey, identity: identity,
                                        gate: gate, delegate: delegate, options: configuration.link,
                                        group: group, logger: logger)
    }
}

/// Hands inbound frames and link events to the flows, on the core, until shutdown.
struct CoreInbound: Service {
    let inbound: InboundLane
    let router: NodeFrameRouter

    func run() async throws {
        await cancelWhenGracefulShutdown { await inbound.consume(with: router) }
    }
}

/// Starts beaconing once the TCP port is known (beacons announce it), and re-announces when what
/// beacons say changes.
struct DiscoveryAfterListener: Service {
    let node: NodeRuntime
    let discovery: DiscoveryService

    func run() async throws {
        _ = try await node.listener.boundAddress
        await NodeCore.run { node.refreshBeaconState() }
        let changes = node.signals.subscribe(keepingNewest: 1) { [.friendsChanged, .discoverableChanged, .nameChanged].contains($0) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await changes.coalesced(over: NodeSignals.settle) {
                    await NodeCore.run { node.refreshBeaconState() }
                    discovery.announceNow()
                }
            }
            try await discovery.run()
            group.cancelAll()
        }
    }
}

/// Delivery, presence heartbeats and the port announcement, once the listener is bound; closes
/// every link at shutdown (each says box-stream goodbye).
struct FriendLoops: Service {
    let node: NodeRuntime

    func run() async throws {
        if let port = try? await node.listener.boundAddress.port {  // not bound: the listener service reports it
            let friends = node.friends
            await NodeCore.run {
                defer { node.eventBus.published() }
                node.health.attempt("announce the listening port") { try node.store.step { step in try friends.listening(on: port, step) } }
            }
        }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await node.outbox.run() }
                group.addTask { await node.presence.run() }
            }
        }
        node.peers.closeAll()
    }
}

/// Resumes stored challenges and runs their timers once the listener is bound.
struct ChallengeLoop: Service {
    let challenges: ChallengeService
    let listener: NodeListener

    func run() async throws {
        _ = try? await listener.boundAddress  // not bound: the listener service reports it
        await cancelWhenGracefulShutdown { await challenges.run() }
    }
}

/// Expires disappearing messages.
struct MessageLoop: Service {
    let messages: MessageService

    func run() async throws {
        await cancelWhenGracefulShutdown { await messages.run() }
    }
}

/// File transfers' disk lanes and timers (NodeMessages/MessageFileFlow.swift).
struct MessageFileLoop: Service {
    let files: MessageFiles

    func run() async throws {
        await cancelWhenGracefulShutdown { await files.run() }
    }
}

/// Keeps the home relays connected once the listener is bound.
struct RelayLoop: Service {
    let relays: RelayClient
    let listener: NodeListener

    func run() async throws {
        _ = try? await listener.boundAddress  // not bound: the listener service reports it
        await cancelWhenGracefulShutdown { await relays.run() }
    }
}

/// Emits `node.started` (fields: id, address) once the listener is bound, and `node.stopping`
/// when the node shuts down gracefully.
struct NodeAnnouncer: Service {
    let node: NodeRuntime

    func run() async throws {
        let address = try await node.listener.boundAddress
        await node.eventBus.emit("node.started", ["id": .string(node.id.canonical), "address": .string(address.hostPort)])
        // Stay up until shutdown: a service that returns would end the whole group.
        try? await gracefulShutdown()  // cancelled: also the end
        if !Task.isCancelled {
            await node.eventBus.emit("node.stopping", ["id": .string(node.id.canonical)])
        }
    }
}

import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemProtocol

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
    private let logger: Logger

    /// - Parameters:
    ///   - dataDirectory: serve a control socket there (nil: none).
    ///   - eventLog: where events are stored (default: the last 10,000 in memory).
    public init(identity: SigningKeyPair, configuration: NodeConfiguration,
                dataDirectory: DataDirectory? = nil, eventLog: EventLog? = nil,
                group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
                delegate: PeerLinkDelegate? = nil, logger: Logger) {
        self.identity = identity
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.dataDirectory = dataDirectory
        self.gate = FrameGate(localPublicKey: identity.publicKey, metrics: metrics,
                              replayCapacity: configuration.replayCapacity)
        self.listener = NodeListener(identity: identity, configuration: configuration, gate: gate,
                                     delegate: delegate, group: group, logger: logger)
        self.eventBus = EventBus(log: eventLog ?? InMemoryEventLog(), logger: logger)
        let router = ControlRouter()
        self.router = router
        let listener = self.listener
        self.controlServer = dataDirectory.map {
            ControlServer(directory: $0, router: router, group: group, logger: logger,
                          startAfter: { _ = try await listener.boundAddress })
        }
        eventBus.registerControlMethods(on: router)
    }

    public var id: NodeID { NodeID(publicKey: identity.publicKey) }

    /// The services, in dependency order (shut down in reverse): the listener, the control socket,
    /// then the announcer of `node.started` (last, so `node.stopping` still reaches subscribers).
    public var services: [Service] {
        var services: [Service] = [listener]
        if let controlServer { services.append(controlServer) }
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

extension SocketAddress {
    /// "host:port" (IPv6 in brackets).
    public var hostPort: String {
        let host = ipAddress ?? "?"
        let p = port ?? 0
        if case .v6 = self { return "[\(host)]:\(p)" }
        return "\(host):\(p)"
    }
}

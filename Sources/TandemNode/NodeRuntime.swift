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
    private let logger: Logger

    public init(identity: SigningKeyPair, configuration: NodeConfiguration,
                group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
                delegate: PeerLinkDelegate? = nil, logger: Logger) {
        self.identity = identity
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.gate = FrameGate(localPublicKey: identity.publicKey, metrics: metrics,
                              replayCapacity: configuration.replayCapacity)
        self.listener = NodeListener(identity: identity, configuration: configuration, gate: gate,
                                     delegate: delegate, group: group, logger: logger)
    }

    public var id: NodeID { NodeID(publicKey: identity.publicKey) }

    /// The services, in dependency order (shut down in reverse).
    public var services: [Service] { [listener] }

    /// Runs until SIGINT/SIGTERM (when `signals`) or until the task is cancelled.
    public func run(signals: Bool = true) async throws {
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

extension SocketAddress {
    /// "host:port" (IPv6 in brackets).
    public var hostPort: String {
        let host = ipAddress ?? "?"
        let p = port ?? 0
        if case .v6 = self { return "[\(host)]:\(p)" }
        return "\(host):\(p)"
    }
}

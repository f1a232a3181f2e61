import Logging
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet

/// A running relay: its server (front door, sessions, splicing, mailbox RPC) and, when configured,
/// its metrics endpoint, in one service group with a bounded graceful shutdown. The relay's
/// composition root, beside the node's `NodeRuntime`: the `tandem-relay` command, the relay demo
/// and tests build a relay through it.
public final class RelayRuntime: Sendable {
    public let identity: SigningKeyPair
    public let configuration: RelayConfiguration
    public let server: RelayServer
    private let logger: Logger

    /// How long a graceful shutdown may take before what is left is cancelled.
    public static let shutdownLimit: Duration = .seconds(10)

    public init(identity: SigningKeyPair, configuration: RelayConfiguration, mailbox: RelayMailbox, logger: Logger) {
        self.identity = identity
        self.configuration = configuration
        self.logger = logger
        server = RelayServer(identity: identity, configuration: configuration, mailbox: mailbox, logger: logger)
    }

    /// The server, then the metrics endpoint (when `metricsHost` is set), then `extra` (shut down
    /// in reverse).
    public func services(extra: [Service] = []) -> [Service] {
        var services: [Service] = [server]
        if let host = configuration.metricsHost {
            services.append(MetricsService(host: host, port: configuration.metricsPort, server: server, logger: logger))
        }
        return services + extra
    }

    /// Runs until SIGINT/SIGTERM (when `signals`) or until the task is cancelled.
    public func run(signals: Bool = true, extra: [Service] = []) async throws {
        var c = ServiceGroupConfiguration(services: services(extra: extra).map { .init(service: $0) },
                                          gracefulShutdownSignals: signals ? [.sigterm, .sigint] : [], logger: logger)
        c.maximumGracefulShutdownDuration = Self.shutdownLimit
        c.maximumCancellationDuration = .seconds(2)
        try await ServiceGroup(configuration: c).run()
    }
}

/// Serves /metrics while the relay runs.
struct MetricsService: Service {
    let host: String
    let port: Int
    let server: RelayServer
    let logger: Logger

    func run() async throws {
        let metrics = MetricsServer(host: host, port: port, group: MultiThreadedEventLoopGroup.singleton, logger: logger,
                                    render: { [server] in server.renderMetrics() })
        let address = try await metrics.start()
        logger.info("metrics at http://\(address.hostPort)/metrics")
        try? await gracefulShutdown()
        await metrics.stop()
    }
}

import Logging
import NIOCore
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
    /// The relay's own event loops (`configuration.eventLoops`), shut down when `run` returns.
    private let group: MultiThreadedEventLoopGroup
    private let logger: Logger

    /// How long a graceful shutdown may take before what is left is cancelled.
    public static let shutdownLimit: Duration = .seconds(10)

    /// How long the services may take to end once cancelled (after `shutdownLimit`, or at once when
    /// the task running them is cancelled) before ServiceLifecycle stops the process.
    public static let cancellationLimit: Duration = .seconds(30)

    public init(identity: SigningKeyPair, configuration: RelayConfiguration, mailbox: RelayMailbox, logger: Logger) {
        self.identity = identity
        self.configuration = configuration
        self.logger = logger
        group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, min(configuration.eventLoops, RelayConfiguration.maximumEventLoops)))
        server = RelayServer(identity: identity, configuration: configuration, mailbox: mailbox, group: group, logger: logger)
    }

    /// The server, then the metrics endpoint (when `metricsHost` is set), then `extra` (shut down
    /// in reverse).
    public func services(extra: [Service] = []) -> [Service] {
        var services: [Service] = [server]
        if let host = configuration.metricsHost {
            services.append(MetricsService(host: host, port: configuration.metricsPort, server: server, group: group, logger: logger))
        }
        return services + extra
    }

    /// Runs until SIGINT/SIGTERM (when `signals`) or until the task is cancelled.
    public func run(signals: Bool = true, extra: [Service] = []) async throws {
        var c = ServiceGroupConfiguration(services: services(extra: extra).map { .init(service: $0) },
                                          gracefulShutdownSignals: signals ? [.sigterm, .sigint] : [], logger: logger)
        c.maximumGracefulShutdownDuration = Self.shutdownLimit
        // After cancellation a service that is still running is stuck; ServiceLifecycle then stops the
        // process with a fatal error. 2 s was reached by a healthy node on a machine loaded 14 times over
        // (an in-process test crashed); Self.cancellationLimit only catches a real hang.
        c.maximumCancellationDuration = Self.cancellationLimit
        defer { shutDownLoops() }
        try await ServiceGroup(configuration: c).run()
    }

    /// Stops the event loops (once the services have stopped; later calls do nothing).
    private func shutDownLoops() {
        group.shutdownGracefully { _ in }
    }
}

/// Serves /metrics while the relay runs.
struct MetricsService: Service {
    let host: String
    let port: Int
    let server: RelayServer
    let group: EventLoopGroup
    let logger: Logger

    func run() async throws {
        let metrics = MetricsServer(host: host, port: port, group: group, logger: logger,
                                    render: { [server] in server.renderMetrics() })
        let address = try await metrics.start()
        logger.info("metrics at http://\(address.hostPort)/metrics")
        try? await gracefulShutdown()
        await metrics.stop()
    }
}

import NIOCore
import NIOExtras
import NIOPosix
import ServiceLifecycle

/// One listening TCP socket whose shutdown is graceful: on the service group's graceful shutdown
/// (or cancellation of `run`) it stops accepting and sends `ChannelShouldQuiesceEvent` to every
/// open connection, so each can say goodbye in its own protocol and close. The node's listener,
/// the relay, its metrics endpoint and the dev echo server are all one of these.
public final class QuiescingServer: Sendable {
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        /// The listen backlog.
        public var backlog: Int32 = 256
        /// TCP_NODELAY on accepted connections.
        public var noDelay = true
        /// The write-buffer water marks of accepted connections (nil: NIO's default).
        public var writeBufferWaterMark: ChannelOptions.Types.WriteBufferWaterMark?

        public init(host: String, port: Int, backlog: Int32 = 256, noDelay: Bool = true,
                    writeBufferWaterMark: ChannelOptions.Types.WriteBufferWaterMark? = nil) {
            self.host = host
            self.port = port
            self.backlog = backlog
            self.noDelay = noDelay
            self.writeBufferWaterMark = writeBufferWaterMark
        }
    }

    private let channel: Channel
    private let quiesce: ServerQuiescingHelper

    /// The address actually bound (useful with port 0).
    public let localAddress: SocketAddress

    private init(channel: Channel, quiesce: ServerQuiescingHelper) {
        self.channel = channel
        self.quiesce = quiesce
        self.localAddress = channel.localAddress!
    }

    /// Binds and starts accepting. `initializeChild` runs on each accepted connection's event loop
    /// before it is read; throwing closes that connection. Throws the bind error as NIO reports it
    /// (callers phrase it; `describe(_:)` has the short forms).
    public static func bind(_ configuration: Configuration, group: EventLoopGroup,
                            initializeChild: @escaping @Sendable (Channel) throws -> Void) async throws -> QuiescingServer {
        let quiesce = ServerQuiescingHelper(group: group)
        var bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: configuration.backlog)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    try ch.pipeline.syncOperations.addHandler(quiesce.makeServerChannelHandler(channel: ch))
                }
            }
        if configuration.noDelay {
            bootstrap = bootstrap.childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
        }
        if let marks = configuration.writeBufferWaterMark {
            bootstrap = bootstrap.childChannelOption(.writeBufferWaterMark, value: marks)
        }
        let channel = try await bootstrap
            .childChannelInitializer { ch in ch.eventLoop.makeCompletedFuture { try initializeChild(ch) } }
            .bind(host: configuration.host, port: configuration.port).get()
        return QuiescingServer(channel: channel, quiesce: quiesce)
    }

    /// Stops accepting and asks every open connection to quiesce. Idempotent.
    public func initiateShutdown() {
        quiesce.initiateShutdown(promise: nil)
    }

    /// Stops accepting, asks open connections to quiesce, and returns once the listening socket is
    /// closed (open connections end in their own time).
    public func shutdown() async {
        initiateShutdown()
        try? await channel.closeFuture.get()
    }

    /// Waits until the listening socket is closed. Graceful shutdown and cancellation both call
    /// `onShutdown` (tell clients goodbye, log), then `initiateShutdown()`.
    public func run(onShutdown: @escaping @Sendable () -> Void = {}) async throws {
        try await withGracefulShutdownHandler {
            try await withTaskCancellationHandler {
                try await channel.closeFuture.get()
            } onCancel: {
                onShutdown()
                self.initiateShutdown()
            }
        } onGracefulShutdown: {
            onShutdown()
            self.initiateShutdown()
        }
    }
}

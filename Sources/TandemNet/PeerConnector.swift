import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemProtocol

/// Opens outbound links: TCP connect, Secret Handshake as client (the server must prove the
/// expected key), then signed frames.
public enum PeerConnector {
    /// Connects and returns once the handshake is done. Frames other than PONG/ERROR go to `delegate`.
    /// `localAddress`: the address to connect from (nil: the system's choice).
    public static func connect(host: String, port: Int, remote: [UInt8], identity: SigningKeyPair,
                               gate: FrameGate, delegate: PeerLinkDelegate? = nil,
                               options: PeerPipeline.Options = .init(),
                               group: EventLoopGroup, logger: Logger,
                               connectTimeout: TimeAmount = .seconds(10),
                               localAddress: SocketAddress? = nil) async throws -> (PeerLink, LinkWaiter) {
        let waiter = LinkWaiter(next: delegate, eventLoop: group.next())
        var bootstrap = ClientBootstrap(group: group)
            .connectTimeout(connectTimeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
        if let localAddress { bootstrap = bootstrap.bind(to: localAddress) }
        let channel: Channel
        do {
            channel = try await bootstrap
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        let link = try PeerPipeline.configure(channel: ch, identity: identity, serverPublicKey: remote,
                                                              gate: gate, delegate: waiter, options: options, logger: logger)
                        waiter.link = link
                    }
                }
                .connect(host: host, port: port)
                .valueUnlessCancelled { $0.close(promise: nil) }
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw TandemError("cannot connect to \(host):\(port): \(describe(error))", exitCode: TandemError.unreachableExitCode)
        }
        do {
            try await waiter.established.futureResult.valueUnlessCancelled()
        } catch {
            channel.close(promise: nil)
            if error is CancellationError { throw error }
            throw TandemError("\(host):\(port): \(error)", exitCode: TandemError.authenticationExitCode)
        }
        return (waiter.link!, waiter)
    }
}

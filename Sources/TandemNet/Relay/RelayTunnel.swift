import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemProtocol

/// One end of a relay tunnel (Protocol/README.md section 14.3): a fresh TCP connection to the
/// relay, the 40-byte join preamble, the relay's one-byte answer, and then whatever runs end to
/// end through the splice. Used by the node's dialling and by tools that drive both ends
/// themselves (`tandem-bench relay`).
public enum RelayTunnel {
    /// Opens a fresh TCP connection to `relay`, sends the join preamble for `token`, waits for the
    /// relay's answer, and then hands the joined channel to `configure` (on its event loop) to
    /// install whatever runs end to end through the splice. Returns the channel once joined.
    public static func join(relay: RelayAddress, token: [UInt8], group: EventLoopGroup,
                            timeout: TimeAmount = .seconds(10),
                            configure: @escaping @Sendable (Channel) throws -> Void) async throws -> Channel {
        let joined = group.next().makePromise(of: Void.self)
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(.seconds(5))
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        let handler = TunnelJoinHandler(token: token, timeout: timeout) { ch in
                            try configure(ch)
                            joined.succeed(())
                        } failed: { error in
                            joined.fail(error)
                        }
                        try ch.pipeline.syncOperations.addHandler(handler)
                    }
                }
                .connect(host: relay.host, port: relay.port)
                .valueUnlessCancelled { $0.close(promise: nil) }
        } catch {
            joined.fail(error)
            if error is CancellationError { throw error }
            throw TandemError("cannot connect to relay \(relay.host):\(relay.port): \(describe(error))", exitCode: TandemError.unreachableExitCode)
        }
        do {
            try await joined.futureResult.valueUnlessCancelled()
        } catch {
            channel.close(promise: nil)
            if error is CancellationError { throw error }
            throw TandemError("tunnel through \(relay.host):\(relay.port): \(error)", exitCode: TandemError.unreachableExitCode)
        }
        return channel
    }

    /// Joins the tunnel and runs an ordinary peer link through it: the Secret Handshake as client
    /// with `remote` (the side that asked for the tunnel), or as server when `remote` is nil (the
    /// side that got TUNNEL_INCOMING). Returns once the handshake is done, with the link's waiter
    /// (for `ping()`).
    public static func connect(relay: RelayAddress, token: [UInt8], remote: [UInt8]?, identity: SigningKeyPair,
                               gate: FrameGate, delegate: PeerLinkDelegate? = nil, options: PeerPipeline.Options = .init(),
                               group: EventLoopGroup, logger: Logger,
                               timeout: TimeAmount = .seconds(10)) async throws -> (PeerLink, LinkWaiter) {
        let waiter = LinkWaiter(next: delegate, eventLoop: group.next())
        let channel = try await join(relay: relay, token: token, group: group, timeout: timeout) { ch in
            waiter.link = try PeerPipeline.configure(channel: ch, identity: identity, serverPublicKey: remote, gate: gate,
                                                     delegate: waiter, options: options, logger: logger,
                                                     relay: relay.id.publicKey)
        }
        do {
            try await waiter.established.futureResult.valueUnlessCancelled()
        } catch {
            channel.close(promise: nil)
            if error is CancellationError { throw error }
            throw TandemError("tunnel through \(relay.host):\(relay.port): \(error)", exitCode: TandemError.unreachableExitCode)
        }
        return (waiter.link!, waiter)
    }
}

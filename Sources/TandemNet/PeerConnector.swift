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
    public static func connect(host: String, port: Int, remote: [UInt8], identity: SigningKeyPair,
                               gate: FrameGate, delegate: PeerLinkDelegate? = nil,
                               options: PeerPipeline.Options = .init(),
                               group: EventLoopGroup, logger: Logger,
                               connectTimeout: TimeAmount = .seconds(10)) async throws -> (PeerLink, LinkWaiter) {
        let waiter = LinkWaiter(next: delegate, eventLoop: group.next())
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(connectTimeout)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        let link = try PeerPipeline.configure(channel: ch, identity: identity, serverPublicKey: remote,
                                                              gate: gate, delegate: waiter, options: options, logger: logger)
                        waiter.link = link
                    }
                }
                .connect(host: host, port: port).get()
        } catch {
            throw TandemError("cannot connect to \(host):\(port): \(describe(error))", exitCode: TandemError.unreachableExitCode)
        }
        do {
            try await waiter.established.futureResult.get()
        } catch {
            channel.close(promise: nil)
            throw TandemError("\(host):\(port): \(error)", exitCode: TandemError.authenticationExitCode)
        }
        return (waiter.link!, waiter)
    }
}

/// Watches a link for the client: completes when the handshake finishes, collects PONGs and
/// ERRORs for callers awaiting them, and passes other frames on.
public final class LinkWaiter: PeerLinkDelegate, @unchecked Sendable {
    // Mutated on the channel's event loop only; `link` is set once in the initializer.
    let established: EventLoopPromise<Void>
    private let eventLoop: EventLoop
    private let next: PeerLinkDelegate?
    var link: PeerLink?
    private var pongWaiters: [UInt64: EventLoopPromise<(Tandem_V1_Pong, UInt64)>] = [:]
    /// Called on the event loop for every ERROR frame the peer sends.
    public var onError: (@Sendable (Tandem_V1_Error) -> Void)?

    init(next: PeerLinkDelegate?, eventLoop: EventLoop) {
        self.next = next
        self.eventLoop = eventLoop
        self.established = eventLoop.makePromise()
    }

    deinit {
        // A connection that never opened leaves the promise pending; a completed one ignores this.
        established.fail(TandemError("the connection was not established"))
    }

    public func linkEstablished(_ link: PeerLink) {
        established.succeed(())
        next?.linkEstablished(link)
    }

    public func link(_ link: PeerLink, received envelope: Envelope) {
        if envelope.type == .pong, let pong = try? Tandem_V1_Pong(serializedBytes: envelope.payload) {
            link.channel.eventLoop.execute {
                self.pongWaiters.removeValue(forKey: pong.nonce)?.succeed((pong, wallClockMilliseconds()))
            }
            return
        }
        next?.link(link, received: envelope)
    }

    public func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {
        onError?(error)
        next?.link(link, receivedError: error, envelope: envelope)
    }

    public func linkClosed(_ link: PeerLink, error: Error?) {
        let e = error ?? TandemError("the peer closed the connection")
        established.fail(e)
        link.channel.eventLoop.execute {
            let waiters = self.pongWaiters
            self.pongWaiters = [:]
            for (_, p) in waiters { p.fail(e) }
        }
        next?.linkClosed(link, error: error)
    }

    /// Sends a signed PING and waits for the matching PONG. Returns the round-trip time.
    public func ping(timeout: TimeAmount = .seconds(10)) async throws -> (rtt: Duration, pong: Tandem_V1_Pong) {
        guard let link else { throw TandemError("not connected") }
        let nonce = Sodium.randomUInt64()
        let promise = link.channel.eventLoop.makePromise(of: (Tandem_V1_Pong, UInt64).self)
        let clock = ContinuousClock()
        let start = clock.now
        var ping = Tandem_V1_Ping()
        ping.nonce = nonce
        ping.sentAtMs = wallClockMilliseconds()
        let payload = try ping.serializedBytes() as [UInt8]
        try await link.channel.eventLoop.submit {
            self.pongWaiters[nonce] = promise
            let timer = link.channel.eventLoop.scheduleTask(in: timeout) {
                self.pongWaiters.removeValue(forKey: nonce)?.fail(TandemError("no answer within \(timeout.nanoseconds / 1_000_000_000) s", exitCode: TandemError.timeoutExitCode))
            }
            promise.futureResult.whenComplete { _ in timer.cancel() }
            link.send(type: .ping, payload: payload)
        }.get()
        let (pong, _) = try await promise.futureResult.get()
        return (clock.now - start, pong)
    }
}

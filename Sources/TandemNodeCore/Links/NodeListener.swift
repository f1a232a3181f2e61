import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol

/// The node's TCP listener: every accepted connection runs the Secret Handshake as server,
/// then carries signed frames. A `Service` of the node's service group.
public final class NodeListener: Service, Sendable {
    private let identity: SigningKeyPair
    private let host: String
    private let port: Int
    private let linkOptions: PeerPipeline.Options
    private let gate: FrameGate
    private let delegate: PeerLinkDelegate?
    private let group: EventLoopGroup
    private let logger: Logger
    private let bound: EventLoopPromise<SocketAddress>
    private let boundNow = NIOLockedValueBox<SocketAddress?>(nil)
    /// Inbound connections still in the handshake, by source address (5.12).
    private let pending: NIOLockedValueBox<HandshakeBook>
    /// Handshakes started per source address (5.12); nil: no rate.
    private let handshakeRate: NIOLockedValueBox<KeyedRateLimiter<String>>?

    /// - Parameters:
    ///   - host, port: where to listen (port 0: any free port, see `boundAddress`).
    ///   - link: how accepted links behave.
    public init(identity: SigningKeyPair, host: String, port: Int, link: PeerPipeline.Options, gate: FrameGate,
                delegate: PeerLinkDelegate?, group: EventLoopGroup, logger: Logger) {
        self.identity = identity
        (self.host, self.port, self.linkOptions) = (host, port, link)
        self.gate = gate
        self.delegate = delegate
        self.group = group
        self.logger = logger
        self.bound = group.next().makePromise()
        self.pending = NIOLockedValueBox(HandshakeBook(limits: gate.limits))
        self.handshakeRate = gate.limits.handshakesPerAddressPerSecond.map {
            NIOLockedValueBox(KeyedRateLimiter(capacity: gate.limits.handshakeBurstPerAddress, refillPerSecond: $0, maximumKeys: 4_096))
        }
    }

    /// Inbound connections that have not finished their handshake.
    public var pendingHandshakes: Int { pending.withLockedValue { $0.count } }

    deinit {
        // A listener that never ran must not leave its promise dangling (a completed promise ignores this).
        bound.fail(NodeError.failed("the listener was never started"))
    }

    /// The bound address if the listener is up already (nil before).
    public var boundAddressNow: SocketAddress? { boundNow.withLockedValue { $0 } }

    /// The address actually bound (useful with port 0).
    public var boundAddress: SocketAddress {
        get async throws { try await bound.futureResult.get() }
    }

    public func run() async throws {
        let identity = identity, gate = gate, delegate = delegate, options = linkOptions, logger = logger
        let pending = pending, handshakeRate = handshakeRate
        let server: QuiescingServer
        do {
            server = try await QuiescingServer.bind(.init(host: host, port: port, backlog: 256),
                                                    group: group) { ch in
                // At most so many handshakes at once, in total and per source address;
                // past that the connection is closed before any handshake work.
                let address = ch.remoteAddress?.ipAddress ?? "?"
                // An address over its handshake rate is refused first. A full table of addresses
                // lets the connection through: the pending caps still hold.
                if let handshakeRate, handshakeRate.withLockedValue({ $0.check(address, now: gate.clock()) }) == .limited {
                    gate.metrics.handshakeRefused()
                    throw ChannelError.inputClosed
                }
                guard pending.withLockedValue({ $0.admit(address: address) }) else {
                    gate.metrics.handshakeRefused()
                    throw ChannelError.inputClosed
                }
                do {
                    try PeerPipeline.configure(channel: ch, identity: identity, serverPublicKey: nil, gate: gate,
                                               delegate: delegate, options: options, logger: logger)
                    try ch.pipeline.syncOperations.addHandler(PendingHandshake(book: pending, address: address))
                } catch {
                    pending.withLockedValue { $0.leave(address: address) }
                    throw error
                }
            }
        } catch {
            let e = NodeError.failed("cannot listen on \(host):\(port): \(describe(error))")
            bound.fail(e)
            throw e
        }
        let address = server.localAddress
        boundNow.withLockedValue { $0 = address }
        bound.succeed(address)
        logger.info("listening", metadata: ["address": "\(address.hostPort)", "id": "\(NodeID(publicKey: identity.publicKey))"])

        // Cancellation shuts down like a signal does: stop accepting, tell every link to close.
        try await server.run {
            logger.info("shutting down listener")
        }
        logger.info("listener stopped")
    }
}

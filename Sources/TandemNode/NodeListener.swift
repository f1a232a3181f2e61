import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol

/// Where a node listens and how its links behave.
public struct NodeConfiguration: Sendable {
    public var host: String = "0.0.0.0"
    public var port: Int = TandemConstants.defaultPort
    public var link = PeerPipeline.Options()
    public var replayCapacity = 100_000
    /// What links may cost (Protocol 5.12).
    public var linkLimits = LinkLimits.node
    public var friends = FriendService.Configuration()
    /// LAN discovery; nil turns it off (throwaway nodes, tests that must not broadcast).
    public var discovery: DiscoveryConfiguration? = nil
    public init() {}

    /// Parses "host:port", ":port", "port" or "[v6]:port" (`HostPort.parse`).
    public static func parseHostPort(_ text: String, defaultHost: String = "0.0.0.0") throws -> (String, Int) {
        try HostPort.parse(text, defaultHost: defaultHost)
    }
}

/// The node's TCP listener: every accepted connection runs the Secret Handshake as server,
/// then carries signed frames. A `Service` of the node's service group.
public final class NodeListener: Service, Sendable {
    private let identity: SigningKeyPair
    private let configuration: NodeConfiguration
    private let gate: FrameGate
    private let delegate: PeerLinkDelegate?
    private let group: EventLoopGroup
    private let logger: Logger
    private let bound: EventLoopPromise<SocketAddress>
    private let boundNow = NIOLockedValueBox<SocketAddress?>(nil)
    /// Inbound connections still in the handshake, by source address (5.12).
    private let pending: NIOLockedValueBox<HandshakeBook>

    public init(identity: SigningKeyPair, configuration: NodeConfiguration, gate: FrameGate,
                delegate: PeerLinkDelegate?, group: EventLoopGroup, logger: Logger) {
        self.identity = identity
        self.configuration = configuration
        self.gate = gate
        self.delegate = delegate
        self.group = group
        self.logger = logger
        self.bound = group.next().makePromise()
        self.pending = NIOLockedValueBox(HandshakeBook(limits: gate.limits))
    }

    /// Inbound connections that have not finished their handshake.
    public var pendingHandshakes: Int { pending.withLockedValue { $0.count } }

    deinit {
        // A listener that never ran must not leave its promise dangling (a completed promise ignores this).
        bound.fail(TandemError("the listener was never started"))
    }

    /// The bound address if the listener is up already (nil before).
    public var boundAddressNow: SocketAddress? { boundNow.withLockedValue { $0 } }

    /// The address actually bound (useful with port 0).
    public var boundAddress: SocketAddress {
        get async throws { try await bound.futureResult.get() }
    }

    public func run() async throws {
        let identity = identity, gate = gate, delegate = delegate, options = configuration.link, logger = logger
        let pending = pending
        let server: QuiescingServer
        do {
            server = try await QuiescingServer.bind(.init(host: configuration.host, port: configuration.port, backlog: 256),
                                                    group: group) { ch in
                // At most so many handshakes at once, in total and per source address;
                // past that the connection is closed before any handshake work.
                let address = ch.remoteAddress?.ipAddress ?? "?"
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
            let e = TandemError("cannot listen on \(configuration.host):\(configuration.port): \(describe(error))")
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

/// Gives an inbound connection's handshake slot back once: when the handshake finishes or the
/// connection closes, whichever comes first.
final class PendingHandshake: ChannelInboundHandler {
    typealias InboundIn = NIOAny
    private let book: NIOLockedValueBox<HandshakeBook>
    private let address: String
    private var left = false

    init(book: NIOLockedValueBox<HandshakeBook>, address: String) {
        self.book = book
        self.address = address
    }

    private func leave() {
        guard !left else { return }
        left = true
        book.withLockedValue { $0.leave(address: address) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SecureChannelEstablished { leave() }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        leave()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        leave()
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

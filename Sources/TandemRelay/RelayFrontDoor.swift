import NIOCore
import TandemNet
import TandemProtocol

// The front door: each accepted connection is admitted against the book's connection and
// pending limits, then its first bytes tell a tunnel join from a client's Secret Handshake.

extension RelayServer {
    /// Admits (or closes) a fresh connection and puts the front handler on it.
    func accept(_ channel: Channel) throws {
        let ip = channel.remoteAddress?.ipAddress ?? "?"
        // Per-address limits count by address bucket (an IPv6 /64 as one address).
        let address = RelayBook.addressBucket(ip)
        let admission = book.withLockedValue { $0.admit(address: address) }
        metrics.update { $0.connectionsAccepted += 1 }
        switch admission {
        case .admitted:
            break
        case .tooManyConnections:
            metrics.refused("connections")
            logger.notice("refusing a connection: too many connections", metadata: ["from": "\(ip)"])
            channel.close(promise: nil)
            return
        case .tooManyPending:
            metrics.refused("pending")
            channel.close(promise: nil)
            return
        }
        let id = newID()
        channel.closeFuture.whenComplete { [self] _ in
            book.withLockedValue { $0.connectionClosed() }
        }
        try channel.pipeline.syncOperations.addHandler(FrontHandler(server: self, connection: id, address: address,
                                                                    timeout: .seconds(configuration.handshakeTimeoutSeconds)))
    }

    /// The first bytes said "Secret Handshake": this is a client link.
    func startClientLink(_ channel: Channel, connection: UInt64, address: String) throws {
        var options = PeerPipeline.Options()
        options.handshakeTimeout = .seconds(configuration.handshakeTimeoutSeconds)
        options.maximumEnvelopeLength = 64 * 1024
        // Every byte the client sends is charged to its rate before anything decodes it: the
        // handshake, frames the relay rejects, and valid frames alike.
        let rate = ByteRate(bytesPerSecond: configuration.clientBytesPerSecond)
        try channel.pipeline.syncOperations.addHandler(InboundRateHandler(rate: rate))
        // One read per readable event, so a held read takes effect at once, not after several
        // more reads of up to 64 KiB each.
        try channel.syncOptions?.setOption(ChannelOptions.maxMessagesPerRead, value: 1)
        let delegate = ClientDelegate(server: self, connection: connection, address: address, rate: rate)
        try PeerPipeline.configure(channel: channel, identity: identity, serverPublicKey: nil, gate: gate,
                                   delegate: delegate, options: options, logger: logger)
    }
}

/// The first handler of every accepted connection: reads just enough to tell a tunnel join from
/// a Secret Handshake, then hands the connection on and removes itself. Drops connections that
/// say nothing within the handshake timeout.
final class FrontHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private weak var server: RelayServer?
    private let connection: UInt64
    private let address: String
    private let timeout: TimeAmount
    private var buffer: ByteBuffer?
    private var timer: Scheduled<Void>?
    private var decided = false

    init(server: RelayServer, connection: UInt64, address: String, timeout: TimeAmount) {
        self.server = server
        self.connection = connection
        self.address = address
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = bound.value
            if !handler.decided { context.close(promise: nil) }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        if buffer == nil { buffer = incoming } else { buffer!.writeBuffer(&incoming) }
        guard !decided, let server else { return }
        switch TunnelJoin.classify(&buffer!) {
        case .needMoreData:
            return
        case .join(let token):
            decided = true
            timer?.cancel()
            if buffer!.readableBytes > 0 {
                // A client must wait for the relay's answer before sending: this one did not.
                server.book.withLockedValue { $0.leavePending(address: address) }
                server.metrics.refused("tunnel_early_data")
                context.close(promise: nil)
                return
            }
            let channel = context.channel
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            server.join(channel, connection: connection, address: address, token: token)
        case .handshake:
            decided = true
            timer?.cancel()
            do {
                try server.startClientLink(context.channel, connection: connection, address: address)
            } catch {
                context.close(promise: nil)
                return
            }
            let pending = buffer!
            buffer = nil
            context.fireChannelRead(wrapInboundOut(pending))
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        if !decided, let server {
            decided = true
            server.book.withLockedValue { $0.leavePending(address: address) }
            server.metrics.update { $0.handshakesFailed += 1 }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}

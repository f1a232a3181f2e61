import Logging
import NIOCore
import Sodium
import TandemProtocol

/// Fired through the pipeline once the Secret Handshake has finished.
public struct SecureChannelEstablished: Sendable {
    /// The peer's long-term key, proven by the handshake.
    public let remotePublicKey: [UInt8]
}

/// Fired through the pipeline when the peer says goodbye (end of its box-stream), just before the
/// handler answers with its own goodbye (unless already said) and closes the channel.
public struct SecureChannelGoodbye: Sendable {}

/// Why a secure channel was closed early.
public struct SecureChannelError: Error, CustomStringConvertible {
    public let description: String
}

/// Moves bytes between the socket and the handshake / box-stream machines. Below it: ciphertext;
/// above it: plaintext. It holds no protocol logic of its own.
public final class SecureChannelHandler: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer
    public typealias OutboundIn = ByteBuffer
    public typealias OutboundOut = ByteBuffer

    /// Bytes a peer may send before the handshake finishes (the client's two messages plus the
    /// box-stream that may follow in the same segment).
    static let maximumHandshakeBuffer = 64 * 1024

    private enum State {
        case handshaking(SecretHandshake)
        case established(BoxStreamEncoder, BoxStreamReader)
        case closed
    }

    private var state: State
    private let isClient: Bool
    private var inbound: ByteBuffer?
    private var pendingWrites: [(ByteBuffer, EventLoopPromise<Void>?)] = []
    private var timeout: Scheduled<Void>?
    private let handshakeTimeout: TimeAmount
    private let metrics: TransportMetrics
    private let logger: Logger
    private var started = false
    /// Pass each box's body on as its own read (empty boxes too) instead of the plaintext of a
    /// whole read at once. For the dev echo tools, whose peers count boxes; links leave it off.
    public var deliversEachBox = false

    public init(client identity: SigningKeyPair, serverPublicKey: [UInt8],
                networkKey: [UInt8] = TandemConstants.networkKey,
                handshakeTimeout: TimeAmount = .seconds(TandemConstants.handshakeTimeoutSeconds),
                metrics: TransportMetrics, logger: Logger) {
        self.state = .handshaking(SecretHandshake(clientIdentity: identity, serverPublicKey: serverPublicKey,
                                                  networkKey: networkKey))
        self.isClient = true
        self.handshakeTimeout = handshakeTimeout
        self.metrics = metrics
        self.logger = logger
    }

    public init(server identity: SigningKeyPair, networkKey: [UInt8] = TandemConstants.networkKey,
                handshakeTimeout: TimeAmount = .seconds(TandemConstants.handshakeTimeoutSeconds),
                metrics: TransportMetrics, logger: Logger) {
        self.state = .handshaking(SecretHandshake(serverIdentity: identity, networkKey: networkKey))
        self.isClient = false
        self.handshakeTimeout = handshakeTimeout
        self.metrics = metrics
        self.logger = logger
    }

    public func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context: context) }
    }

    public func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        metrics.handshakeStarted()
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeout = context.eventLoop.scheduleTask(in: handshakeTimeout) {
            let (handler, context) = loopBound.value
            if case .handshaking = handler.state {
                handler.fail(context: context, reason: "handshake did not finish within \(handler.handshakeTimeout.nanoseconds / 1_000_000_000) s", isHandshake: true)
            }
        }
        if isClient, case .handshaking(var hs) = state, let first = hs.start() {
            state = .handshaking(hs)
            context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: first)), promise: nil)
        }
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        if case .established = state {
            receiveBoxes(context: context, &incoming)
            return
        }
        if inbound == nil {
            inbound = incoming
        } else {
            inbound!.writeBuffer(&incoming)
        }
        process(context: context)
    }

    private func process(context: ChannelHandlerContext) {
        while true {
            switch state {
            case .closed:
                inbound = nil
                return
            case .handshaking(var hs):
                guard var buffer = inbound else { return }
                if buffer.readableBytes > Self.maximumHandshakeBuffer {
                    fail(context: context, reason: "peer sent too much data during the handshake", isHandshake: true)
                    return
                }
                let action: SecretHandshake.Action
                do {
                    action = try hs.receive(&buffer)
                } catch {
                    inbound = nil
                    fail(context: context, reason: "\(error)", isHandshake: true)
                    return
                }
                inbound = buffer
                switch action {
                case .needMoreData:
                    state = .handshaking(hs)
                    return
                case .send(let bytes):
                    state = .handshaking(hs)
                    context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: bytes)), promise: nil)
                case .complete(let send, let keys):
                    if let send {
                        context.write(wrapOutboundOut(context.channel.allocator.buffer(bytes: send)), promise: nil)
                    }
                    timeout?.cancel()
                    timeout = nil
                    state = .established(BoxStreamEncoder(key: keys.encryptionKey, nonce: keys.encryptNonce),
                                         BoxStreamReader(key: keys.decryptionKey, nonce: keys.decryptNonce))
                    metrics.handshakeSucceeded()
                    let queued = pendingWrites
                    pendingWrites = []
                    for (buf, promise) in queued { sealAndWrite(context: context, buf, promise: promise) }
                    context.flush()
                    context.fireUserInboundEventTriggered(SecureChannelEstablished(remotePublicKey: keys.remotePublicKey))
                }
            case .established:
                // Bytes that came with the end of the handshake.
                guard var buffer = inbound, buffer.readableBytes > 0 else { return }
                inbound = nil
                receiveBoxes(context: context, &buffer)
                return
            }
        }
    }

    /// Opens the boxes of one read (BoxStreamReader: no copy of the read, no allocation per box)
    /// and passes their plaintext on in one buffer.
    private func receiveBoxes(context: ChannelHandlerContext, _ incoming: inout ByteBuffer) {
        if deliversEachBox {
            receiveEachBox(context: context, &incoming)
            return
        }
        guard case .established(let enc, var reader) = state else { return }
        // Moved out while it reads, so its carry buffer is referenced once and grows in place
        // (a copy left in `state` would make every append copy it). Put back below on every path.
        state = .closed
        var plaintext = context.channel.allocator.buffer(capacity: incoming.readableBytes + reader.bufferedBytes)
        let status: BoxStreamDecoder.ReadStatus
        do {
            status = try reader.read(&incoming, into: &plaintext)
        } catch {
            // Boxes before the bad one were genuine: pass them on, then drop the connection.
            state = .established(enc, reader)
            if plaintext.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(plaintext)) }
            fail(context: context, reason: "\(error)", isHandshake: false)
            return
        }
        state = .established(enc, reader)
        if plaintext.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(plaintext)) }
        if status == .goodbye { answerGoodbye(context: context, enc) }
    }

    private func receiveEachBox(context: ChannelHandlerContext, _ incoming: inout ByteBuffer) {
        guard case .established(let enc, var reader) = state else { return }
        state = .closed
        let boxes: [BoxStreamDecoder.Message]
        do {
            boxes = try reader.readBoxes(&incoming)
        } catch {
            state = .established(enc, reader)
            fail(context: context, reason: "\(error)", isHandshake: false)
            return
        }
        state = .established(enc, reader)
        for box in boxes {
            switch box {
            case .data(let body): context.fireChannelRead(wrapInboundOut(body))
            case .goodbye: answerGoodbye(context: context, enc)
            }
        }
    }

    private func answerGoodbye(context: ChannelHandlerContext, _ enc: BoxStreamEncoder) {
        logger.debug("peer said goodbye")
        // Answer with our own goodbye (unless we said it already, e.g. after a half-close),
        // and close once it is written.
        var reply: ByteBuffer? = nil
        if !enc.saidGoodbye {
            var answering = enc
            var out = context.channel.allocator.buffer(capacity: BoxStream.headerLength)
            answering.goodbye(into: &out)
            reply = out
        }
        state = .closed
        context.fireUserInboundEventTriggered(SecureChannelGoodbye())
        if let reply {
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(wrapOutboundOut(reply)).whenComplete { _ in
                loopBound.value.close(promise: nil)
            }
        } else {
            context.close(promise: nil)
        }
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let buf = unwrapOutboundIn(data)
        switch state {
        case .handshaking:
            pendingWrites.append((buf, promise))
        case .established:
            sealAndWrite(context: context, buf, promise: promise)
        case .closed:
            promise?.fail(ChannelError.ioOnClosedChannel)
        }
    }

    private func sealAndWrite(context: ChannelHandlerContext, _ plaintext: ByteBuffer, promise: EventLoopPromise<Void>?) {
        guard case .established(var enc, let dec) = state else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        guard !enc.saidGoodbye else {
            // Half-closed: our goodbye is out, nothing may follow it.
            promise?.fail(ChannelError.outputClosed)
            return
        }
        var out = context.channel.allocator.buffer(capacity: plaintext.readableBytes + 34 * (plaintext.readableBytes / 4096 + 1))
        enc.seal(plaintext, into: &out)
        state = .established(enc, dec)
        context.write(wrapOutboundOut(out), promise: promise)
    }

    /// Closing a channel whose stream is established says goodbye first. Closing only the output
    /// (half-close) says goodbye and keeps reading, so the peer's remaining boxes and its own
    /// goodbye still arrive.
    public func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if case .established(var enc, let dec) = state, mode != .input, !enc.saidGoodbye {
            var out = context.channel.allocator.buffer(capacity: BoxStream.headerLength)
            enc.goodbye(into: &out)
            state = .established(enc, dec)
            context.writeAndFlush(wrapOutboundOut(out), promise: nil)
        }
        if mode == .all { state = .closed }
        context.close(mode: mode, promise: promise)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        timeout?.cancel()
        timeout = nil
        if case .handshaking = state {
            metrics.handshakeFailed()
            logger.info("connection closed during the handshake", metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "?")"])
            let error = SecureChannelError(description: "the peer closed the connection during the handshake (wrong ID, wrong network, or not a Tandem node)")
            state = .closed
            failPending(error)
            context.fireErrorCaught(error)
        }
        state = .closed
        failPending(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }

    private func failPending(_ error: Error) {
        let queued = pendingWrites
        pendingWrites = []
        for (_, p) in queued { p?.fail(error) }
    }

    /// Logs once, counts, closes. Never replies to a failed handshake.
    private func fail(context: ChannelHandlerContext, reason: String, isHandshake: Bool) {
        if case .closed = state { return }
        state = .closed
        timeout?.cancel()
        timeout = nil
        if isHandshake { metrics.handshakeFailed() } else { metrics.streamFailed() }
        logger.notice(isHandshake ? "handshake failed, connection dropped" : "box-stream failed, connection dropped",
                      metadata: ["reason": "\(reason)", "peer": "\(context.remoteAddress.map { "\($0)" } ?? "?")"])
        let error = SecureChannelError(description: (isHandshake ? "handshake failed: " : "secure stream failed: ") + reason)
        failPending(error)
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }
}

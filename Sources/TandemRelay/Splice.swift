import NIOConcurrencyHelpers
import NIOCore

/// A token bucket for one client's bytes through the relay, shared by its link and its tunnels.
/// Thread-safe: a client's connections may live on different event loops.
public final class ByteRate: Sendable {
    private let bytesPerSecond: Int
    private let state: NIOLockedValueBox<(tokens: Double, atNs: UInt64)>

    /// `bytesPerSecond` 0: unlimited. The burst is one second's worth.
    public init(bytesPerSecond: Int) {
        self.bytesPerSecond = bytesPerSecond
        self.state = NIOLockedValueBox((Double(bytesPerSecond), 0))
    }

    /// Takes `bytes` from the bucket (going into debt if need be) and says how long to wait
    /// before reading more.
    public func consume(_ bytes: Int, nowNs: UInt64 = NIODeadline.now().uptimeNanoseconds) -> TimeAmount {
        guard bytesPerSecond > 0 else { return .zero }
        let rate = Double(bytesPerSecond)
        return state.withLockedValue { s in
            if s.atNs == 0 { s.atNs = nowNs }
            let elapsed = Double(nowNs &- s.atNs) / 1e9
            s.tokens = min(rate, s.tokens + elapsed * rate) - Double(bytes)
            s.atNs = nowNs
            // A day at most: the conversion below cannot trap, whatever the debt.
            return s.tokens >= 0 ? .zero : .nanoseconds(Int64(min(-s.tokens / rate, 86_400) * 1e9))
        }
    }
}

/// Charges every byte a client link reads to the client's `ByteRate` as it arrives, before the
/// handshake or the frame decoder sees it, and holds the next read while the client is in debt.
/// It delays the outbound `read` rather than switching `autoRead`, so it composes with any other
/// handler's back-pressure. All state is touched on the channel's event loop.
final class InboundRateHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let rate: ByteRate
    private var resumeAt: NIODeadline?
    private var readHeld = false

    init(rate: ByteRate) {
        self.rate = rate
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let wait = rate.consume(unwrapInboundIn(data).readableBytes)
        if wait > .zero { resumeAt = .now() + wait }
        context.fireChannelRead(data)
    }

    func read(context: ChannelHandlerContext) {
        if let until = resumeAt, until > .now() {
            guard !readHeld else { return }
            readHeld = true
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(deadline: until) {
                let (handler, context) = bound.value
                handler.readHeld = false
                handler.read(context: context)
            }
            return
        }
        resumeAt = nil
        context.read()
    }
}

/// Starts a spliced end reading, once both ends are set up and answered.
struct SpliceStart: Sendable {}

/// One end of a spliced tunnel: whatever this connection reads is written to the partner, and
/// this connection reads again only while fewer than `queueLimit` bytes it wrote are still
/// waiting to leave the partner's socket, and the owner's rate allows. So a slow reader costs the
/// relay at most `queueLimit` plus one read per direction, however fast the other side writes.
/// It reads nothing until `SpliceStart`. All state is touched on this channel's event loop
/// (write completions hop back to it). A read's bytes cross to the partner's loop in one
/// write-and-flush.
final class SpliceHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let partner: Channel
    private let rate: ByteRate
    private let queueLimit: Int
    private let onBytes: @Sendable (Int) -> Void
    private let onClose: @Sendable () -> Void
    private var inFlight = 0
    private var started = false
    private var paused = false
    private var waitingForRate = false
    private var pending: ByteBuffer?

    init(partner: Channel, rate: ByteRate, queueLimit: Int, onBytes: @escaping @Sendable (Int) -> Void,
         onClose: @escaping @Sendable () -> Void) {
        self.partner = partner
        self.rate = rate
        self.queueLimit = queueLimit
        self.onBytes = onBytes
        self.onClose = onClose
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // Nothing is read until both ends are ready (the caller sends SpliceStart).
        try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SpliceStart {
            guard !started else { return }
            started = true
            context.read()
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        if pending == nil {
            pending = buffer
        } else {
            pending!.writeBuffer(&buffer)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        guard let out = pending else { return }
        pending = nil
        let n = out.readableBytes
        inFlight += n
        let promise = context.eventLoop.makePromise(of: Void.self)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        promise.futureResult.whenComplete { _ in
            let (handler, context) = bound.value
            handler.inFlight -= n
            if handler.paused, handler.inFlight < handler.queueLimit {
                handler.paused = false
                handler.readMore(context: context, consumed: 0)
            }
        }
        partner.writeAndFlush(out, promise: promise)
        onBytes(n)
        readMore(context: context, consumed: n)
    }

    private func readMore(context: ChannelHandlerContext, consumed: Int) {
        let wait = rate.consume(consumed)
        if wait > .zero {
            guard !waitingForRate else { return }
            waitingForRate = true
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: wait) {
                let (handler, context) = bound.value
                handler.waitingForRate = false
                handler.readMore(context: context, consumed: 0)
            }
            return
        }
        guard !waitingForRate else { return }
        if inFlight < queueLimit {
            context.read()
        } else {
            paused = true
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        partner.close(promise: nil)
        onClose()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}

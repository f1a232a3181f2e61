import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemProtocol

/// Sends the join preamble, reads the relay's answer, then installs the link's pipeline behind
/// itself and steps aside (passing on any bytes that came with the answer).
final class TunnelJoinHandler: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let token: [UInt8]
    private let timeout: TimeAmount
    private let joined: (Channel) throws -> Void
    private let failed: (Error) -> Void
    private var done = false
    private var timer: Scheduled<Void>?

    init(token: [UInt8], timeout: TimeAmount, joined: @escaping (Channel) throws -> Void, failed: @escaping (Error) -> Void) {
        self.token = token
        self.timeout = timeout
        self.joined = joined
        self.failed = failed
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    private var started = false
    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: TunnelJoin.preamble(token: token))), promise: nil)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = bound.value
            handler.fail(context, TandemError("the relay did not join the tunnel within \(handler.timeout.nanoseconds / 1_000_000_000) s"))
        }
    }

    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        guard !done, let byte = buffer.readInteger(as: UInt8.self) else { return }
        guard let answer = TunnelJoin.Answer(rawValue: byte), answer == .joined else {
            let why = TunnelJoin.Answer(rawValue: byte)?.explanation ?? "the relay answered the join with \(byte)"
            fail(context, TandemError(why))
            return
        }
        done = true
        timer?.cancel()
        do {
            try joined(context.channel)
        } catch {
            failed(error)
            context.close(promise: nil)
            return
        }
        if buffer.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(buffer)) }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    private func fail(_ context: ChannelHandlerContext, _ error: Error) {
        guard !done else { return }
        done = true
        timer?.cancel()
        failed(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(context, TandemError("the relay closed the tunnel before it was joined"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        fail(context, error)
    }
}

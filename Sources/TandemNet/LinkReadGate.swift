import Logging
import NIOCore

/// The bottom of a link's pipeline, deciding when the link is read: while more than the
/// high-water mark of outbound bytes waits for the peer to read, the link is not read either (so a
/// peer that never reads cannot make the node queue answers to it), and a link that stays so for
/// `unwritableTimeoutMs` is closed; while the link handler holds frames of earlier reads (its turn's
/// share is spent, or its address is over its frame budget), reading waits.
final class LinkReadGate: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    private let timeout: TimeAmount
    private let metrics: TransportMetrics
    private let logger: Logger
    private var readPending = false
    private var timer: Scheduled<Void>?

    init(timeoutMs: UInt64, metrics: TransportMetrics, logger: Logger) {
        self.timeout = .milliseconds(Int64(clamping: timeoutMs))
        self.metrics = metrics
        self.logger = logger
    }

    private var held = false

    func read(context: ChannelHandlerContext) {
        if context.channel.isWritable, !held {
            context.read()
        } else {
            readPending = true
        }
    }

    /// Holds reading while the link handler still has frames of earlier reads to check.
    func hold(_ on: Bool, context: ChannelHandlerContext) {
        guard held != on else { return }
        held = on
        if !on { readIfPending(context: context) }
    }

    private func readIfPending(context: ChannelHandlerContext) {
        if readPending, context.channel.isWritable, !held {
            readPending = false
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            timer?.cancel()
            timer = nil
            readIfPending(context: context)
        } else if timer == nil {
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            timer = context.eventLoop.scheduleTask(in: timeout) {
                let (handler, context) = loopBound.value
                handler.timer = nil
                guard !context.channel.isWritable else { return }
                handler.metrics.linkClosed("unwritable")
                handler.logger.notice("the peer does not read, closing the link",
                                      metadata: ["peer": "\(context.remoteAddress.map { "\($0)" } ?? "?")"])
                // Abort: a goodbye would only queue behind what the peer does not read.
                context.close(mode: .all, promise: nil)
            }
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }
}

import Logging
import NIOCore
import Sodium
import TandemProtocol

/// The top of a link's pipeline: applies the receiver rules, answers rejections with typed ERROR
/// frames (within the link's ERROR budget, and only while the peer reads), closes a link that sends
/// too many bad frames, answers PING with PONG, and hands everything else to the delegate.
final class PeerLinkHandler: ChannelInboundHandler {
    typealias InboundIn = [UInt8]
    typealias OutboundOut = Envelope

    let link: PeerLink
    let gate: FrameGate
    let delegate: PeerLinkDelegate?
    let logger: Logger
    private var closedError: Error?
    private var guardian: LinkGuard
    private var closing = false
    private let readGate: (LinkReadGate, ChannelHandlerContext)?
    /// The address was over its frame budget at the last frame tried.
    private var overBudget = false
    private var budgetKey: String?
    /// The link's own frame budget while it is a friend's (`LinkLimits.trustedFramesPerSecond`).
    private var trustedBudget: TokenBucket?
    /// Frames checked in the current turn, and decoded frames waiting for a later turn (at most one
    /// read's worth: the link is not read while any wait).
    private var turnFrames = 0
    private var backlog = CircularBuffer<[UInt8]>()
    private var drainScheduled = false

    init(link: PeerLink, gate: FrameGate, delegate: PeerLinkDelegate?, logger: Logger,
         readGate: (LinkReadGate, ChannelHandlerContext)? = nil) {
        self.link = link
        self.gate = gate
        self.delegate = delegate
        self.logger = logger
        self.guardian = LinkGuard(limits: gate.limits, now: gate.clock())
        self.readGate = readGate
        if let rate = gate.limits.trustedFramesPerSecond, rate > 0 {
            trustedBudget = TokenBucket(capacity: max(1, gate.limits.trustedFrameBurst), refillPerSecond: rate, now: gate.clock())
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let established = event as? SecureChannelEstablished {
            link.setRemote(established.remotePublicKey)
            delegate?.linkEstablished(link)
        } else if event is ConsumerResumed {
            drain(context: context)
            return
        } else if event is ChannelShouldQuiesceEvent {
            // Graceful shutdown: close, which says box-stream goodbye.
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Frames already decoded when the link was condemned are dropped unread.
        guard !closing else { return }
        let bytes = unwrapInboundIn(data)
        let cap = gate.limits.framesPerTurn ?? Int.max
        if turnFrames >= cap || !backlog.isEmpty || link.isReadingPaused {
            // This turn's share is spent: keep the frame for a later turn and read no more meanwhile.
            keep(bytes, context: context)
            return
        }
        turnFrames += 1
        if !process(bytes, context: context) { keep(bytes, context: context) }
    }

    /// Keeps a decoded frame for a later turn; the link is not read while any wait.
    private func keep(_ bytes: [UInt8], context: ChannelHandlerContext) {
        backlog.append(bytes)
        readGate?.0.hold(true, context: readGate!.1)
    }

    /// Checks the frames kept from earlier reads, `framesPerTurn` per turn of the loop, each turn
    /// at least `turnGapMicroseconds` after the previous one ended (a task queued for "now" would run
    /// in the same turn, before the loop looks at other links again), or, while the link's address
    /// is over its frame budget, once the budget has a frame again.
    private func scheduleDrain(context: ChannelHandlerContext) {
        guard !drainScheduled, !backlog.isEmpty else { return }
        drainScheduled = true
        var delay = TimeAmount.microseconds(gate.limits.turnGapMicroseconds)
        let trusted = link.isTrusted && trustedBudget != nil
        if overBudget, let rate = trusted ? gate.limits.trustedFramesPerSecond : gate.limits.framesPerAddressPerSecond, rate > 0 {
            delay = .microseconds(max(gate.limits.turnGapMicroseconds, Int64((1_000_000 / rate).rounded(.up))))
        }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: delay) {
            let (handler, context) = loopBound.value
            handler.drainScheduled = false
            handler.drain(context: context)
        }
    }

    private func drain(context: ChannelHandlerContext) {
        guard context.channel.isActive else { backlog.removeAll(); return }
        // Paused by the consumer: the frames wait until it resumes the link (ConsumerResumed).
        if link.isReadingPaused { return }
        turnFrames = 0
        let cap = gate.limits.framesPerTurn ?? Int.max
        while turnFrames < cap, !closing, !link.isReadingPaused, let next = backlog.first {
            turnFrames += 1
            guard process(next, context: context) else { break }
            backlog.removeFirst()
        }
        if closing { backlog.removeAll() }
        if link.isReadingPaused {
            readGate?.0.hold(true, context: readGate!.1)
        } else if backlog.isEmpty {
            turnFrames = 0
            readGate?.0.hold(false, context: readGate!.1)
        } else {
            scheduleDrain(context: context)
        }
    }

    /// Checks and hands on one frame. False, and nothing done, when the link's address is over its
    /// frame budget (all its links together, Protocol 5.12): the frame waits, unread links behind it.
    private func process(_ bytes: [UInt8], context: ChannelHandlerContext) -> Bool {
        guard !closing, let peer = link.remotePublicKey else { return true }
        // Every frame counts against its address's budget (tunnels: the relay and the peer key).
        if budgetKey == nil { budgetKey = link.directRemoteHost ?? "tunnel:\(hexString(link.relay ?? []))/\(hexString(peer))" }
        // A friend's link: its own budget, not its address's (which strangers share).
        let allowed: Bool
        if link.isTrusted, trustedBudget != nil {
            allowed = trustedBudget!.tryTake(now: gate.clock())
        } else {
            allowed = gate.takeFrame(from: budgetKey!)
        }
        guard allowed else {
            if !overBudget { gate.metrics.readPaused() }
            overBudget = true
            return false
        }
        overBudget = false
        switch gate.verify(bytes, linkPeer: peer) {
        case .failure(let rejection):
            logger.debug("frame rejected", metadata: ["code": "\(rejection.code.name)", "detail": "\(rejection.detail)"])
            answer(rejection, context: context)
        case .success(let envelope):
            handle(envelope, context: context)
            // The consumer's queue is full: read nothing more until it resumes the link.
            if link.isReadingPaused { readGate?.0.hold(true, context: readGate!.1) }
        }
        return true
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if backlog.isEmpty { turnFrames = 0 } else if !link.isReadingPaused { scheduleDrain(context: context) }
        context.fireChannelReadComplete()
    }

    /// Carries out the link guard's decision on a rejected frame.
    private func answer(_ rejection: FrameRejection, context: ChannelHandlerContext) {
        switch guardian.rejected(rejection.code, trusted: link.isTrusted, now: gate.clock()) {
        case .reply:
            guard let peer = link.remotePublicKey,
                  let reply = FrameVerifier.errorReply(to: rejection, from: link.identity, linkPeer: peer, now: gate.clock())
            else { return }
            writeOptional(reply, context: context)
        case .silent:
            gate.metrics.errorReplySuppressed()
        case .close:
            closing = true
            gate.metrics.linkClosed("rejections")
            logger.notice("too many rejected frames, closing the link",
                          metadata: ["peer": "\(link.remotePublicKey.map { NodeID(publicKey: $0).short } ?? "?")",
                                     "rejected": "\(guardian.rejectedCount)"])
            closedError = closedError ?? LinkLimitExceeded(reason: "rejections", description: "too many rejected frames")
            context.close(promise: nil)
        }
    }

    /// Writes a reply the peer did not strictly need (PONG, ERROR) only while the link drains:
    /// a peer that does not read gets nothing more queued for it.
    private func writeOptional(_ reply: Envelope, context: ChannelHandlerContext) {
        guard context.channel.isWritable else {
            gate.metrics.replyDroppedUnwritable()
            return
        }
        context.writeAndFlush(wrapOutboundOut(reply), promise: nil)
    }

    private func handle(_ envelope: Envelope, context: ChannelHandlerContext) {
        switch envelope.type {
        case .ping:
            guard let ping = try? Tandem_V1_Ping(serializedBytes: envelope.payload) else {
                reject(.malformed, "PING payload is not a tandem.v1.Ping", envelope, context)
                return
            }
            if context.channel.isWritable {
                var pong = Tandem_V1_Pong()
                pong.nonce = ping.nonce
                pong.pingSentAtMs = ping.sentAtMs
                pong.receivedAtMs = gate.clock()
                let reply = Envelope.sign(type: .pong, author: link.identity, recipient: envelope.author,
                                          createdAt: gate.clock(), payload: (try? pong.serializedBytes()) ?? [])
                context.writeAndFlush(wrapOutboundOut(reply), promise: nil)
            } else {
                gate.metrics.replyDroppedUnwritable()
            }
            delegate?.link(link, received: envelope)
        case .error:
            if let error = try? Tandem_V1_Error(serializedBytes: envelope.payload) {
                logger.info("peer reported an error", metadata: ["code": "\(error.code.name)", "detail": "\(error.detail)"])
                delegate?.link(link, receivedError: error, envelope: envelope)
            }
        default:
            delegate?.link(link, received: envelope)
        }
    }

    private func reject(_ code: Tandem_V1_ErrorCode, _ detail: String, _ envelope: Envelope, _ context: ChannelHandlerContext) {
        let rejection = FrameRejection(code, detail, messageID: envelope.messageID, author: envelope.author, type: envelope.type)
        gate.count(rejection)
        answer(rejection, context: context)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if let rejection = error as? FrameRejection {
            // Oversized frame: say why, then close before buffering the body.
            gate.count(rejection)
            logger.notice("frame rejected, closing connection", metadata: ["code": "\(rejection.code.name)", "detail": "\(rejection.detail)"])
            if let peer = link.remotePublicKey,
               let reply = FrameVerifier.errorReply(to: rejection, from: link.identity, linkPeer: peer, now: gate.clock()) {
                writeOptional(reply, context: context)
            }
        } else if let limit = error as? LinkLimitExceeded {
            gate.metrics.linkClosed(limit.reason)
            logger.notice("closing the link", metadata: ["reason": "\(limit.description)"])
        }
        closedError = closedError ?? error
        closing = true
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        delegate?.linkClosed(link, error: closedError)
        context.fireChannelInactive()
    }
}

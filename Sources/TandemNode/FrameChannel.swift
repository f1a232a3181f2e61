import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOExtras
import Sodium
import TandemProtocol

/// Counters a node keeps about its transport; read by logs, `tandem` status and tests.
public final class TransportMetrics: Sendable {
    public struct Snapshot: Sendable, Codable, Equatable {
        public var handshakesStarted = 0
        public var handshakesSucceeded = 0
        public var handshakesFailed = 0
        public var streamsFailed = 0
        public var framesAccepted = 0
        /// Rejected frames by error code name (e.g. "BAD_SIGNATURE").
        public var framesRejected: [String: Int] = [:]
        /// Rejections not answered because the link's ERROR budget was spent (5.12).
        public var errorRepliesSuppressed = 0
        /// Optional replies (PONG, ERROR) not written because the link was not reading (5.12).
        public var repliesDroppedUnwritable = 0
        /// Links closed by the node's limits (5.12), by reason: "rejections", "unwritable",
        /// "frame_budget".
        public var linksClosed: [String: Int] = [:]
        /// Inbound connections refused because too many handshakes were pending (5.12).
        public var handshakesRefused = 0
        /// Times a link's reading was held because its address was over its frame budget (5.12).
        public var readsPaused = 0
    }

    private let box = NIOLockedValueBox(Snapshot())

    public init() {}

    public var snapshot: Snapshot { box.withLockedValue { $0 } }

    func handshakeStarted() { box.withLockedValue { $0.handshakesStarted += 1 } }
    func handshakeSucceeded() { box.withLockedValue { $0.handshakesSucceeded += 1 } }
    func handshakeFailed() { box.withLockedValue { $0.handshakesFailed += 1 } }
    func streamFailed() { box.withLockedValue { $0.streamsFailed += 1 } }
    func frameAccepted() { box.withLockedValue { $0.framesAccepted += 1 } }
    func frameRejected(_ code: Tandem_V1_ErrorCode) {
        box.withLockedValue { $0.framesRejected[code.name, default: 0] += 1 }
    }
    func errorReplySuppressed() { box.withLockedValue { $0.errorRepliesSuppressed += 1 } }
    func replyDroppedUnwritable() { box.withLockedValue { $0.repliesDroppedUnwritable += 1 } }
    func linkClosed(_ reason: String) { box.withLockedValue { $0.linksClosed[reason, default: 0] += 1 } }
    func handshakeRefused() { box.withLockedValue { $0.handshakesRefused += 1 } }
    func readPaused() { box.withLockedValue { $0.readsPaused += 1 } }
}

extension Tandem_V1_ErrorCode {
    /// The name used in Protocol/README.md and in logs.
    public var name: String {
        switch self {
        case .unspecified: return "UNSPECIFIED"
        case .unsupportedVersion: return "UNSUPPORTED_VERSION"
        case .unknownType: return "UNKNOWN_TYPE"
        case .badSignature: return "BAD_SIGNATURE"
        case .wrongRecipient: return "WRONG_RECIPIENT"
        case .replayed: return "REPLAYED"
        case .fromTheFuture: return "FROM_THE_FUTURE"
        case .malformed: return "MALFORMED"
        case .frameTooLarge: return "FRAME_TOO_LARGE"
        case .stale: return "STALE"
        case .UNRECOGNIZED(let n): return "UNRECOGNIZED_\(n)"
        }
    }
}

/// A link closed by one of the node's limits (5.12); no ERROR reply is sent for it.
public struct LinkLimitExceeded: Error, CustomStringConvertible {
    /// The metric label: "rejections", "unwritable", "frame_budget".
    public let reason: String
    public let description: String
}

/// The node-wide budget of partly received frame bytes, shared by every link's decoder.
public final class FrameBudget: Sendable {
    private let budget: NIOLockedValueBox<ByteBudget>

    public init(capacity: Int) {
        budget = NIOLockedValueBox(ByteBudget(capacity: capacity))
    }

    public var used: Int { budget.withLockedValue { $0.used } }
    func reserve(_ bytes: Int) -> Bool { budget.withLockedValue { $0.reserve(bytes) } }
    func release(_ bytes: Int) { budget.withLockedValue { $0.release(bytes) } }
}

/// Splits the plaintext stream into envelope bytes; the size limit is applied to the length
/// field before any body byte is kept. A frame that does not arrive whole in one read is charged
/// to the node-wide `budget` (its announced length) until it is complete or the link closes; a
/// frame that does not fit closes the link.
public struct FrameByteDecoder: ByteToMessageDecoder {
    public typealias InboundOut = [UInt8]
    let decoder: FrameDecoder
    let budget: FrameBudget?
    private var reserved = 0

    public init(maximumEnvelopeLength: Int, budget: FrameBudget? = nil) {
        decoder = FrameDecoder(maximumEnvelopeLength: maximumEnvelopeLength)
        self.budget = budget
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let envelope = try decoder.read(&buffer) else {
            // A partial frame: its length (already checked against the limit) is charged once.
            if let budget, reserved == 0, let n = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) {
                let need = Int(n) + 4
                guard budget.reserve(need) else {
                    throw LinkLimitExceeded(reason: "frame_budget",
                                            description: "the node's budget for partly received frames is spent")
                }
                reserved = need
            }
            return .needMoreData
        }
        releaseReservation()
        context.fireChannelRead(wrapInboundOut(envelope))
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }

    public mutating func decoderRemoved(context: ChannelHandlerContext) {
        releaseReservation()
    }

    private mutating func releaseReservation() {
        if reserved > 0 {
            budget?.release(reserved)
            reserved = 0
        }
    }
}

/// Writes envelopes as frames (u32 length, envelope).
public struct FrameByteEncoder: MessageToByteEncoder {
    public typealias OutboundIn = Envelope
    public init() {}
    public func encode(data: Envelope, out: inout ByteBuffer) throws {
        data.writeFrame(to: &out)
    }
}

/// Wall-clock milliseconds since the Unix epoch.
public func wallClockMilliseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The verification rules shared by all of a node's connections (one replay cache per node), and
/// the node-wide limits on what links may cost (5.12).
public final class FrameGate: Sendable {
    public let localPublicKey: [UInt8]
    private let verifier: NIOLockedValueBox<FrameVerifier>
    public let metrics: TransportMetrics
    public let clock: @Sendable () -> UInt64
    public let limits: LinkLimits
    /// Bytes of partly received frames, all links together.
    public let frameBudget: FrameBudget
    /// Frames per second per remote address (nil: no budget).
    private let addressBudget: NIOLockedValueBox<KeyedRateLimiter<String>>?

    public init(localPublicKey: [UInt8], metrics: TransportMetrics, replayCapacity: Int = 100_000,
                limits: LinkLimits = LinkLimits(),
                clock: @escaping @Sendable () -> UInt64 = wallClockMilliseconds) {
        self.localPublicKey = localPublicKey
        self.verifier = NIOLockedValueBox(FrameVerifier(localPublicKey: localPublicKey,
                                                        replayCache: ReplayCache(capacity: replayCapacity)))
        self.metrics = metrics
        self.clock = clock
        self.limits = limits
        self.frameBudget = FrameBudget(capacity: limits.partialFrameBudget)
        self.addressBudget = limits.framesPerAddressPerSecond.map {
            NIOLockedValueBox(KeyedRateLimiter(capacity: limits.frameBurstPerAddress, refillPerSecond: $0, maximumKeys: 4_096))
        }
    }

    /// Takes one frame from `address`'s budget; false when the address is over it.
    func takeFrame(from address: String) -> Bool {
        guard let addressBudget else { return true }
        let now = clock()
        return addressBudget.withLockedValue { $0.check(address, now: now) } == .allowed
    }

    /// Checks an envelope. Parsing and the signature check run on the caller's thread with no lock
    /// held; only the replay-cache step (rules 9–11) takes the node-wide lock.
    public func verify(_ bytes: [UInt8]) -> Result<Envelope, FrameRejection> {
        let now = clock()
        let result: Result<Envelope, FrameRejection>
        switch FrameVerifier.inspect(bytes, localPublicKey: localPublicKey, now: now) {
        case .failure(let r): result = .failure(r)
        case .success(let envelope): result = verifier.withLockedValue { $0.admit(envelope, now: now) }
        }
        switch result {
        case .success: metrics.frameAccepted()
        case .failure(let r): metrics.frameRejected(r.code)
        }
        return result
    }

    public func count(_ rejection: FrameRejection) {
        metrics.frameRejected(rejection.code)
    }

    /// Entries in the replay cache (for status and tests).
    public var replayCacheCount: Int { verifier.withLockedValue { $0.replayCache.count } }
}

/// What the application above a peer link sees.
public protocol PeerLinkDelegate: AnyObject, Sendable {
    /// The link is authenticated; `send` may be used from now on.
    func linkEstablished(_ link: PeerLink)
    /// A frame that passed every rule and is not handled by the link itself (ping is).
    func link(_ link: PeerLink, received envelope: Envelope)
    /// The peer answered with an ERROR frame.
    func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope)
    func linkClosed(_ link: PeerLink, error: Error?)
}

extension PeerLinkDelegate {
    public func linkEstablished(_ link: PeerLink) {}
    public func link(_ link: PeerLink, received envelope: Envelope) {}
    public func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {}
    public func linkClosed(_ link: PeerLink, error: Error?) {}
}

/// An authenticated, encrypted connection to one peer, carrying signed frames.
public final class PeerLink: Sendable {
    public let channel: Channel
    public let identity: SigningKeyPair
    /// The relay whose tunnel carries this link (nil: a direct TCP connection).
    public let relay: [UInt8]?
    /// Unique among this process's links (the outbox writes each frame once per link).
    public let serial: UInt64
    private let remote = NIOLockedValueBox<[UInt8]?>(nil)
    private let remoteHost = NIOLockedValueBox<String?>(nil)
    private static let serials = NIOLockedValueBox<UInt64>(0)

    init(channel: Channel, identity: SigningKeyPair, relay: [UInt8]? = nil) {
        self.channel = channel
        self.identity = identity
        self.relay = relay
        self.serial = Self.serials.withLockedValue { $0 += 1; return $0 }
    }

    /// The peer's address as seen on the socket, or nil for a tunnel (the socket's far end is the relay).
    /// Kept from the handshake on, so frames still being handled after the link closed are charged
    /// to the same address (a closed channel no longer knows it).
    public var directRemoteHost: String? {
        guard relay == nil else { return nil }
        return remoteHost.withLockedValue { $0 } ?? channel.remoteAddress?.ipAddress
    }

    /// The peer's proven key (nil before the handshake finishes).
    public var remotePublicKey: [UInt8]? { remote.withLockedValue { $0 } }
    func setRemote(_ key: [UInt8]) {
        let host = channel.remoteAddress?.ipAddress
        remote.withLockedValue { $0 = key }
        remoteHost.withLockedValue { $0 = host }
    }

    /// Signs and sends a message to the link peer.
    @discardableResult
    public func send(type: MessageType, payload: [UInt8], messageID: MessageID = .random(),
                     createdAt: UInt64 = wallClockMilliseconds()) -> EventLoopFuture<Void> {
        guard let recipient = remotePublicKey else {
            return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        let env = Envelope.sign(type: type, messageID: messageID, author: identity, recipient: recipient,
                                createdAt: createdAt, payload: payload)
        return channel.writeAndFlush(env)
    }

    /// Sends an envelope as it is (already signed, perhaps by someone else).
    @discardableResult
    public func send(_ envelope: Envelope, flush: Bool = true) -> EventLoopFuture<Void> {
        flush ? channel.writeAndFlush(envelope) : channel.write(envelope)
    }

    public func close() {
        channel.close(promise: nil)
    }
}

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
    /// Frames of the current read that were over the address's budget.
    private var overBudget = 0
    private var budgetKey: String?
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
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let established = event as? SecureChannelEstablished {
            link.setRemote(established.remotePublicKey)
            delegate?.linkEstablished(link)
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
        if let cap = gate.limits.framesPerTurn, turnFrames >= cap || !backlog.isEmpty {
            // This turn's share is spent: keep the frame for a later turn and read no more meanwhile.
            backlog.append(bytes)
            readGate?.0.hold(true, context: readGate!.1)
            return
        }
        turnFrames += 1
        process(bytes, context: context)
    }

    /// Checks the frames kept from earlier reads, `framesPerTurn` per turn of the loop, each turn
    /// at least `turnGapMicroseconds` after the previous one ended (a task queued for "now" would run
    /// in the same turn, before the loop looks at other links again).
    private func scheduleDrain(context: ChannelHandlerContext) {
        guard !drainScheduled, !backlog.isEmpty else { return }
        drainScheduled = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: .microseconds(gate.limits.turnGapMicroseconds)) {
            let (handler, context) = loopBound.value
            handler.drainScheduled = false
            handler.drain(context: context)
        }
    }

    private func drain(context: ChannelHandlerContext) {
        guard context.channel.isActive else { backlog.removeAll(); return }
        turnFrames = 0
        let cap = gate.limits.framesPerTurn ?? Int.max
        while turnFrames < cap, !closing, let next = backlog.popFirst() {
            turnFrames += 1
            process(next, context: context)
        }
        if closing { backlog.removeAll() }
        finishTurn(context: context)
        if backlog.isEmpty {
            turnFrames = 0
            readGate?.0.hold(false, context: readGate!.1)
        } else {
            scheduleDrain(context: context)
        }
    }

    private func process(_ bytes: [UInt8], context: ChannelHandlerContext) {
        guard !closing, let peer = link.remotePublicKey else { return }
        // Every frame counts against its address's budget (tunnels: the relay and the peer key).
        if budgetKey == nil { budgetKey = link.directRemoteHost ?? "tunnel:\(hexString(link.relay ?? []))/\(hexString(peer))" }
        if !gate.takeFrame(from: budgetKey!) { overBudget += 1 }
        switch gate.verify(bytes) {
        case .failure(let rejection):
            logger.debug("frame rejected", metadata: ["code": "\(rejection.code.name)", "detail": "\(rejection.detail)"])
            answer(rejection, context: context)
        case .success(let envelope):
            handle(envelope, context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        finishTurn(context: context)
        if backlog.isEmpty { turnFrames = 0 } else { scheduleDrain(context: context) }
        context.fireChannelReadComplete()
    }

    /// Over budget: stop reading this link for as long as those frames would have taken.
    private func finishTurn(context: ChannelHandlerContext) {
        if overBudget > 0, let (readGate, gateContext) = readGate,
           let rate = gate.limits.framesPerAddressPerSecond, rate > 0 {
            let ms = Int64(min((Double(overBudget) * 1000 / rate).rounded(.up), 60_000))
            readGate.pause(context: gateContext, milliseconds: ms)
            gate.metrics.readPaused()
        }
        overBudget = 0
    }

    /// Carries out the link guard's decision on a rejected frame.
    private func answer(_ rejection: FrameRejection, context: ChannelHandlerContext) {
        switch guardian.rejected(now: gate.clock()) {
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

/// The bottom of a link's pipeline, deciding when the link is read: while more than the
/// high-water mark of outbound bytes waits for the peer to read, the link is not read either (so a
/// peer that never reads cannot make the node queue answers to it), and a link that stays so for
/// `unwritableTimeoutMs` is closed; while its address is over its frame budget, reading waits.
final class LinkReadGate: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    private let timeout: TimeAmount
    private let metrics: TransportMetrics
    private let logger: Logger
    private var readPending = false
    private var timer: Scheduled<Void>?
    private var pausedUntil: NIODeadline?
    private var resume: Scheduled<Void>?

    init(timeoutMs: UInt64, metrics: TransportMetrics, logger: Logger) {
        self.timeout = .milliseconds(Int64(clamping: timeoutMs))
        self.metrics = metrics
        self.logger = logger
    }

    private var held = false

    func read(context: ChannelHandlerContext) {
        if context.channel.isWritable, pausedUntil == nil, !held {
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

    /// Holds reading for `milliseconds` (the link's address is over its frame budget).
    func pause(context: ChannelHandlerContext, milliseconds: Int64) {
        guard milliseconds > 0 else { return }
        let until = NIODeadline.now() + .milliseconds(milliseconds)
        if let p = pausedUntil, p >= until { return }
        pausedUntil = until
        resume?.cancel()
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        resume = context.eventLoop.scheduleTask(deadline: until) {
            let (gate, context) = loopBound.value
            gate.pausedUntil = nil
            gate.resume = nil
            gate.readIfPending(context: context)
        }
    }

    private func readIfPending(context: ChannelHandlerContext) {
        if readPending, context.channel.isWritable, pausedUntil == nil, !held {
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
        resume?.cancel()
        resume = nil
        context.fireChannelInactive()
    }
}

/// Builds a link's pipeline: secure channel, frame decoder/encoder, link handler.
public enum PeerPipeline {
    public struct Options: Sendable {
        public var maximumEnvelopeLength = TandemConstants.maximumEnvelopeLength
        public var handshakeTimeout: TimeAmount = .seconds(TandemConstants.handshakeTimeoutSeconds)
        public var networkKey = TandemConstants.networkKey
        public init() {}
    }

    /// Adds the handlers; `serverPublicKey` nil makes the server side.
    @discardableResult
    public static func configure(channel: Channel, identity: SigningKeyPair, serverPublicKey: [UInt8]?,
                                 gate: FrameGate, delegate: PeerLinkDelegate?, options: Options,
                                 logger: Logger, relay: [UInt8]? = nil) throws -> PeerLink {
        let secure: SecureChannelHandler
        if let serverPublicKey {
            secure = SecureChannelHandler(client: identity, serverPublicKey: serverPublicKey, networkKey: options.networkKey,
                                          handshakeTimeout: options.handshakeTimeout, metrics: gate.metrics, logger: logger)
        } else {
            secure = SecureChannelHandler(server: identity, networkKey: options.networkKey,
                                          handshakeTimeout: options.handshakeTimeout, metrics: gate.metrics, logger: logger)
        }
        let link = PeerLink(channel: channel, identity: identity, relay: relay)
        let limits = gate.limits
        // Past the high-water mark the channel turns unwritable: WritabilityGuard stops reading it.
        try? channel.syncOptions?.setOption(.writeBufferWaterMark,
                                            value: .init(low: limits.outboundLowWater, high: limits.outboundHighWater))
        // One read of at most `maximumReadBytes` per turn of the event loop: a flooding link
        // yields the loop to the links sharing it after a few hundred frames at most.
        try? channel.syncOptions?.setOption(.maxMessagesPerRead, value: 1)
        try? channel.syncOptions?.setOption(.recvAllocator,
                                            value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048,
                                                                                   maximum: limits.maximumReadBytes))
        let sync = channel.pipeline.syncOperations
        let readGate = LinkReadGate(timeoutMs: limits.unwritableTimeoutMs, metrics: gate.metrics, logger: logger)
        try sync.addHandler(readGate)
        try sync.addHandler(secure)
        try sync.addHandler(ByteToMessageHandler(FrameByteDecoder(maximumEnvelopeLength: options.maximumEnvelopeLength,
                                                                  budget: gate.frameBudget)))
        try sync.addHandler(MessageToByteHandler(FrameByteEncoder()))
        try sync.addHandler(PeerLinkHandler(link: link, gate: gate, delegate: delegate, logger: logger,
                                            readGate: (readGate, try sync.context(handler: readGate))))
        return link
    }
}

/// What one peer link, and all of a node's links together, may cost the node (Protocol/README.md
/// 5.12). Plain values: the link handlers ask them and carry out the answers; the tests drive them
/// with explicit instants.
public struct LinkLimits: Sendable, Equatable {
    /// ERROR replies per link: a burst of `errorReplyBurst`, then `errorRepliesPerSecond`. Rejections
    /// past it are counted but not answered.
    public var errorReplyBurst: Double = 8
    public var errorRepliesPerSecond: Double = 1
    /// Rejected frames per link: a burst of `rejectionBurst`, regained at `rejectionsPerSecond`; the
    /// rejection that finds none left closes the link.
    public var rejectionBurst: Double = 32
    public var rejectionsPerSecond: Double = 4
    /// Outbound bytes queued on a link past which the node stops reading it (and sends it no
    /// optional reply) until they drain below `outboundLowWater`.
    public var outboundHighWater = 256 * 1024
    public var outboundLowWater = 64 * 1024
    /// Bytes read from a link per turn of its event loop (fairness between links on one loop).
    public var maximumReadBytes = 4 * 1024
    /// The same for a friend's link (`PeerLink.setTrusted`): a file's 256 KiB chunks in 4 turns
    /// rather than 64 (each turn costs the receiver's loop a wake-up, a read call and a box to open).
    /// Its frames per turn stay bounded by `framesPerTurn`.
    public var trustedMaximumReadBytes = 64 * 1024
    /// Frames checked from one link per turn of its event loop (a 4 KiB box can hold hundreds of
    /// small frames, each a signature check): the rest wait, the link unread, for a later turn at
    /// least `turnGapMicroseconds` on, so a ping on another link sharing the loop is answered
    /// within a few checks' time. nil: no limit (benchmarks of the bare pipeline).
    public var framesPerTurn: Int? = nil
    public var turnGapMicroseconds: Int64 = 100
    /// A link that stays above `outboundHighWater` this long is closed.
    public var unwritableTimeoutMs: UInt64 = 10_000
    /// Bytes of partly received frames all links together may hold; a link whose next frame does
    /// not fit is closed.
    public var partialFrameBudget = 32 * 1024 * 1024
    /// Frames read per second from one remote address (all its direct links together; a tunnel
    /// counts as its own address), after a burst of `frameBurstPerAddress`; past it the node reads
    /// that address's links more slowly (backpressure, nothing is dropped). nil: no budget (a relay,
    /// benchmarks of the bare pipeline).
    public var framesPerAddressPerSecond: Double? = nil
    public var frameBurstPerAddress: Double = 2_000
    /// Inbound connections still in the Secret Handshake: in total, and from one address.
    public var maximumPendingHandshakes = 128
    public var maximumPendingHandshakesPerAddress = 8
    /// Inbound handshakes started per second from one address, after a burst of
    /// `handshakeBurstPerAddress`; past it a connection is closed before any handshake work (a peer
    /// that reconnects as fast as the node closes it costs a few scalar multiplications each time).
    /// nil: no rate (benchmarks of the bare handshake).
    public var handshakesPerAddressPerSecond: Double? = nil
    public var handshakeBurstPerAddress: Double = 40
    /// A friend's link (its key a friend of the node's: `PeerLink.setTrusted`) is not charged to
    /// its address's frame budget, which is sized for strangers: it has a budget of its own, per
    /// link, of `trustedFramesPerSecond` after a burst of `trustedFrameBurst` (nil: none). Past it
    /// the link is read more slowly, like an address over its budget.
    public var trustedFramesPerSecond: Double? = nil
    public var trustedFrameBurst: Double = 20_000
    /// REPLAYED rejections on a friend's link are copies its outbox wrote again after a reconnect
    /// (their ACKs were lost with the old link): answered (the answer tells its outbox they
    /// arrived) within a budget of their own, `trustedReplayBurst` then `trustedReplaysPerSecond`,
    /// never counted towards closing the link. Any other rejection counts as for a stranger.
    public var trustedReplayBurst: Double = 4_096
    public var trustedReplaysPerSecond: Double = 1_000

    public init() {}

    /// A node's limits: the defaults above with a per-address frame budget of 1,000 frames/s.
    public static var node: LinkLimits {
        var l = LinkLimits()
        l.framesPerAddressPerSecond = 1_000
        l.framesPerTurn = 8
        l.handshakesPerAddressPerSecond = 10
        l.trustedFramesPerSecond = 20_000
        return l
    }
}

/// One link's account of its rejected frames: whether to answer a rejection with an ERROR, drop
/// it silently, or close the link.
public struct LinkGuard: Sendable, Equatable {
    public enum Decision: Sendable, Equatable {
        /// Answer with the ERROR frame.
        case reply
        /// Count it; no reply (the link's ERROR budget is spent).
        case silent
        /// Too many rejected frames: close the link.
        case close
    }

    private var replies: TokenBucket
    private var rejections: TokenBucket
    private var trustedReplays: TokenBucket
    public private(set) var rejectedCount = 0
    public private(set) var unanswered = 0

    public init(limits: LinkLimits, now: UInt64) {
        replies = TokenBucket(capacity: limits.errorReplyBurst, refillPerSecond: limits.errorRepliesPerSecond, now: now)
        rejections = TokenBucket(capacity: limits.rejectionBurst, refillPerSecond: limits.rejectionsPerSecond, now: now)
        trustedReplays = TokenBucket(capacity: max(1, limits.trustedReplayBurst), refillPerSecond: max(0.001, limits.trustedReplaysPerSecond),
                                     now: now)
    }

    /// A frame from the link was rejected at `now` for `reason`, the link being a friend's
    /// (`trusted`) or not. A friend's REPLAYED copies have their own reply budget and never close
    /// the link; everything else is `rejected(now:)`.
    public mutating func rejected(_ reason: Tandem_V1_ErrorCode, trusted: Bool, now: UInt64) -> Decision {
        guard trusted, reason == .replayed else { return rejected(now: now) }
        rejectedCount += 1
        if trustedReplays.tryTake(now: now) { return .reply }
        unanswered += 1
        return .silent
    }

    /// A frame from the link was rejected at `now`.
    public mutating func rejected(now: UInt64) -> Decision {
        rejectedCount += 1
        guard rejections.tryTake(now: now) else { return .close }
        if replies.tryTake(now: now) { return .reply }
        unanswered += 1
        return .silent
    }
}

/// Inbound connections that have not finished the handshake, by source address: admitted while
/// both the total and the address's count are below their caps.
public struct HandshakeBook: Sendable, Equatable {
    public let maximum: Int
    public let maximumPerAddress: Int
    public private(set) var count = 0
    private var byAddress: [String: Int] = [:]

    public init(maximum: Int, maximumPerAddress: Int) {
        self.maximum = maximum
        self.maximumPerAddress = maximumPerAddress
    }

    public init(limits: LinkLimits) {
        self.init(maximum: limits.maximumPendingHandshakes, maximumPerAddress: limits.maximumPendingHandshakesPerAddress)
    }

    public func pending(from address: String) -> Int { byAddress[address, default: 0] }

    /// A connection from `address` wants to start its handshake.
    public mutating func admit(address: String) -> Bool {
        guard count < maximum, byAddress[address, default: 0] < maximumPerAddress else { return false }
        count += 1
        byAddress[address, default: 0] += 1
        return true
    }

    /// An admitted connection finished its handshake or closed (call once per admission).
    public mutating func leave(address: String) {
        guard let n = byAddress[address] else { return }
        count -= 1
        byAddress[address] = n > 1 ? n - 1 : nil
    }
}

/// A node-wide budget of bytes (partly received frames): reservations succeed while the total
/// stays within the capacity.
public struct ByteBudget: Sendable, Equatable {
    public let capacity: Int
    public private(set) var used = 0

    public init(capacity: Int) {
        precondition(capacity >= 0)
        self.capacity = capacity
    }

    /// Takes `bytes` if they fit.
    public mutating func reserve(_ bytes: Int) -> Bool {
        guard bytes >= 0, bytes <= capacity - used else { return false }
        used += bytes
        return true
    }

    /// Gives back bytes taken by `reserve` (never more than were taken).
    public mutating func release(_ bytes: Int) {
        used -= min(max(bytes, 0), used)
    }
}

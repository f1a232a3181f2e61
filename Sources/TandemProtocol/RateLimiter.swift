/// A token bucket: holds at most `capacity` tokens, gains `refillPerSecond` tokens per second,
/// and each allowed event takes one. Pure: the caller passes the time (ms on any clock that does
/// not go backwards; if it does, no tokens are gained until it catches up).
public struct TokenBucket: Sendable, Equatable {
    public let capacity: Double
    public let refillPerSecond: Double
    public private(set) var tokens: Double
    private var updatedAt: UInt64

    /// A full bucket.
    public init(capacity: Double, refillPerSecond: Double, now: UInt64) {
        precondition(capacity >= 1 && refillPerSecond > 0)
        self.capacity = capacity
        self.refillPerSecond = refillPerSecond
        self.tokens = capacity
        self.updatedAt = now
    }

    private mutating func refill(now: UInt64) {
        guard now > updatedAt else { return }
        tokens = min(capacity, tokens + Double(now - updatedAt) * refillPerSecond / 1000)
        updatedAt = now
    }

    /// Takes one token if there is one.
    public mutating func tryTake(now: UInt64) -> Bool {
        refill(now: now)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }

    /// Whether the bucket would be full at `now`, i.e. indistinguishable from a new one.
    public func isFull(now: UInt64) -> Bool {
        var copy = self
        copy.refill(now: now)
        return copy.tokens >= capacity
    }
}

/// One token bucket per key (per source address, say), with a bound on the number of keys.
///
/// Buckets that have refilled completely are forgotten when room is needed (a new bucket would
/// be in the same state), at most once per `pruneIntervalMilliseconds`. When every tracked key is
/// still busy, a new key is refused (`.tooManyKeys`): memory stays bounded whatever keys arrive.
public struct KeyedRateLimiter<Key: Hashable & Sendable>: Sendable {
    public enum Verdict: Sendable, Equatable {
        case allowed
        /// The key's bucket is empty.
        case limited
        /// The key is new and the table is full.
        case tooManyKeys
    }

    public let capacity: Double
    public let refillPerSecond: Double
    public let maximumKeys: Int
    public let pruneIntervalMilliseconds: UInt64
    private var buckets: [Key: TokenBucket] = [:]
    private var prunedAt: UInt64?

    public init(capacity: Double, refillPerSecond: Double, maximumKeys: Int, pruneIntervalMilliseconds: UInt64 = 1000) {
        precondition(maximumKeys > 0)
        self.capacity = capacity
        self.refillPerSecond = refillPerSecond
        self.maximumKeys = maximumKeys
        self.pruneIntervalMilliseconds = pruneIntervalMilliseconds
    }

    /// How many keys are tracked now.
    public var trackedKeys: Int { buckets.count }

    public mutating func check(_ key: Key, now: UInt64) -> Verdict {
        if buckets[key] != nil {
            return buckets[key]!.tryTake(now: now) ? .allowed : .limited
        }
        if buckets.count >= maximumKeys {
            pruneIfDue(now: now)
            guard buckets.count < maximumKeys else { return .tooManyKeys }
        }
        var bucket = TokenBucket(capacity: capacity, refillPerSecond: refillPerSecond, now: now)
        let allowed = bucket.tryTake(now: now)
        buckets[key] = bucket
        return allowed ? .allowed : .limited
    }

    private mutating func pruneIfDue(now: UInt64) {
        if let prunedAt, now < prunedAt &+ pruneIntervalMilliseconds, now >= prunedAt { return }
        prunedAt = now
        buckets = buckets.filter { !$0.value.isFull(now: now) }
    }
}

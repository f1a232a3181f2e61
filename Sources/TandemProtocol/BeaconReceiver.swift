import Sodium

/// Why a received beacon was dropped; the names are the metric labels.
public enum BeaconDropReason: String, Sendable, CaseIterable, Codable {
    /// Longer than 512 bytes.
    case oversized
    /// Not a version-1 beacon of a known kind, or its layout does not add up.
    case malformed
    /// One of this node's own beacons (broadcasts come back to the sender).
    case own
    /// Its source address, or all sources together, sent faster than the limits allow.
    case rateLimited = "rate_limited"
    /// From a new source address while the table of sources is full.
    case tooManySources = "too_many_sources"
    /// Open: created more than 5 minutes ago. Private: epoch more than 1 behind.
    case stale
    /// Open: created more than 5 minutes ahead. Private: epoch more than 1 ahead.
    case future
    /// Open beacon whose signature does not verify.
    case badSignature = "bad_signature"
    /// Private beacon that none of this node's friends made for it.
    case unrecognised
    /// Already received (same key and nonce, or same private nonce).
    case replayed
    /// The replay memory is full; the beacon cannot be remembered, so it is not accepted.
    case replayMemoryFull = "replay_memory_full"
}

/// A beacon that passed every check.
public struct BeaconSighting: Sendable, Equatable {
    public var publicKey: [UInt8]
    public var tcpPort: UInt16
    /// From open beacons only.
    public var displayName: String?
    /// Whether it was a private beacon (so the sender is a friend who made it for this node).
    public var isFriendBeacon: Bool

    public init(publicKey: [UInt8], tcpPort: UInt16, displayName: String?, isFriendBeacon: Bool) {
        self.publicKey = publicKey
        self.tcpPort = tcpPort
        self.displayName = displayName
        self.isFriendBeacon = isFriendBeacon
    }
}

public enum BeaconVerdict: Sendable, Equatable {
    case accepted(BeaconSighting)
    case dropped(BeaconDropReason)
}

/// Limits of a `BeaconReceiver` (Protocol/README.md, "LAN discovery").
public struct BeaconReceiverConfiguration: Sendable {
    public var perSourceBurst: Double = 10
    public var perSourcePerSecond: Double = 5
    public var maximumSources = 1024
    public var globalBurst: Double = 100
    public var globalPerSecond: Double = 50
    /// Open beacons live at most 10 minutes in the replay memory; at 50 per second at most
    /// 30 100 arrive in that time, so this capacity is never reached while the limits hold.
    public var openReplayCapacity = 32_768
    public var privateReplayCapacity = 16_384

    public init() {}
}

/// Remembers beacon ids until they could no longer be accepted anyway. Bounded: when full it
/// refuses new ids rather than forgetting ones that could still be replayed.
public struct BeaconReplayMemory: Sendable {
    public enum Verdict: Sendable, Equatable {
        case fresh
        case replayed
        case full
    }

    public let capacity: Int
    private var expiries: [MessageID: UInt64] = [:]
    private var heap = MinHeap()

    public init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    public var count: Int { expiries.count }

    /// Checks `id` and, when fresh, remembers it until `expiresAt` (inclusive).
    public mutating func check(_ id: MessageID, expiresAt: UInt64, now: UInt64) -> Verdict {
        while let top = heap.min, top.createdAt < now {
            _ = heap.popMin()
            expiries.removeValue(forKey: top.id)
        }
        if expiries[id] != nil { return .replayed }
        guard expiries.count < capacity else { return .full }
        expiries[id] = expiresAt
        heap.push((expiresAt, id))
        return .fresh
    }
}

/// Everything a node does with a received datagram on the discovery port, without the socket:
/// size, layout, own-beacon, rate-limit, freshness, signature or locator, replay checks, in that
/// order (cheapest first; no cryptography before the rate limits).
public struct BeaconReceiver: Sendable {
    public let configuration: BeaconReceiverConfiguration
    public private(set) var keyring: BeaconKeyring
    private var sources: KeyedRateLimiter<String>
    private var global: TokenBucket
    private var openReplay: BeaconReplayMemory
    private var privateReplay: BeaconReplayMemory
    /// Nonces of the private beacons this node sent lately.
    private var ownNonces: Set<[UInt8]> = []
    private var ownNonceOrder: [[UInt8]] = []
    static let ownNonceCapacity = 256

    public init(keyring: BeaconKeyring, configuration: BeaconReceiverConfiguration = .init(), now: UInt64) {
        self.configuration = configuration
        self.keyring = keyring
        sources = KeyedRateLimiter(capacity: configuration.perSourceBurst, refillPerSecond: configuration.perSourcePerSecond,
                                   maximumKeys: configuration.maximumSources)
        global = TokenBucket(capacity: configuration.globalBurst, refillPerSecond: configuration.globalPerSecond, now: now)
        openReplay = BeaconReplayMemory(capacity: configuration.openReplayCapacity)
        privateReplay = BeaconReplayMemory(capacity: configuration.privateReplayCapacity)
    }

    /// Replaces the friends (the own key must stay the same).
    public mutating func setKeyring(_ keyring: BeaconKeyring) {
        precondition(keyring.ownPublicKey == self.keyring.ownPublicKey)
        self.keyring = keyring
    }

    /// Remembers a private beacon this node sends, so that its echo is recognised as its own.
    public mutating func noteSent(_ beacon: PrivateBeacon) {
        guard ownNonces.insert(beacon.nonce).inserted else { return }
        ownNonceOrder.append(beacon.nonce)
        if ownNonceOrder.count > Self.ownNonceCapacity {
            ownNonces.remove(ownNonceOrder.removeFirst())
        }
    }

    /// Tracked source addresses (bounded by `maximumSources`).
    public var trackedSources: Int { sources.trackedKeys }
    public var rememberedBeacons: Int { openReplay.count + privateReplay.count }

    /// Judges one datagram from `source` (its IP address) arriving at wall-clock `now` (ms).
    public mutating func receive(_ bytes: [UInt8], from source: String, now: UInt64) -> BeaconVerdict {
        guard bytes.count <= BeaconFormat.maximumLength else { return .dropped(.oversized) }
        let kind: BeaconKind
        do {
            kind = try beaconKind(of: bytes)
        } catch let error as BeaconError {
            return .dropped(error.dropReason)
        } catch {
            return .dropped(.malformed)
        }
        switch kind {
        case .open:
            guard let beacon = try? OpenBeacon.parse(bytes) else { return .dropped(.malformed) }
            if beacon.publicKey == keyring.ownPublicKey { return .dropped(.own) }
            if let limited = admit(source, now: now) { return .dropped(limited) }
            let f = BeaconFormat.openFreshnessMilliseconds
            if beacon.createdAt &+ f < now { return .dropped(.stale) }
            if beacon.createdAt > now &+ f { return .dropped(.future) }
            guard beacon.verifySignature() else { return .dropped(.badSignature) }
            let id = MessageID(bytes: Hash.blake2b(beacon.publicKey + beacon.nonce, outputLength: 16))
            switch openReplay.check(id, expiresAt: beacon.createdAt + f, now: now) {
            case .fresh: break
            case .replayed: return .dropped(.replayed)
            case .full: return .dropped(.replayMemoryFull)
            }
            return .accepted(BeaconSighting(publicKey: beacon.publicKey, tcpPort: beacon.tcpPort,
                                            displayName: beacon.displayName, isFriendBeacon: false))
        case .private:
            guard let beacon = try? PrivateBeacon.parse(bytes) else { return .dropped(.malformed) }
            if ownNonces.contains(beacon.nonce) { return .dropped(.own) }
            if let limited = admit(source, now: now) { return .dropped(limited) }
            let mine = BeaconFormat.epoch(atMilliseconds: now)
            let tolerance = BeaconFormat.epochTolerance
            if UInt64(beacon.epoch) + UInt64(tolerance) < UInt64(mine) { return .dropped(.stale) }
            if UInt64(beacon.epoch) > UInt64(mine) + UInt64(tolerance) { return .dropped(.future) }
            guard let match = keyring.recognise(beacon) else { return .dropped(.unrecognised) }
            guard match.tcpPort != 0 else { return .dropped(.malformed) }
            // Acceptable while now < (epoch + 2) * P: remember it that long.
            let expiresAt = (UInt64(beacon.epoch) + UInt64(tolerance) + 1) * BeaconFormat.epochMilliseconds
            switch privateReplay.check(MessageID(bytes: beacon.nonce), expiresAt: expiresAt, now: now) {
            case .fresh: break
            case .replayed: return .dropped(.replayed)
            case .full: return .dropped(.replayMemoryFull)
            }
            return .accepted(BeaconSighting(publicKey: match.publicKey, tcpPort: match.tcpPort, displayName: nil, isFriendBeacon: true))
        }
    }

    /// The per-source limit, then the global one; nil when the datagram may go on.
    private mutating func admit(_ source: String, now: UInt64) -> BeaconDropReason? {
        switch sources.check(source, now: now) {
        case .allowed: break
        case .limited: return .rateLimited
        case .tooManyKeys: return .tooManySources
        }
        return global.tryTake(now: now) ? nil : .rateLimited
    }
}

import NIOConcurrencyHelpers
import TandemProtocol

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

    /// Checks an envelope that came on a link from `linkPeer` (the key its handshake proved).
    /// Parsing and the signature check run on the caller's thread with no lock held; only the
    /// replay-cache step (rules 9–11) takes the node-wide lock.
    public func verify(_ bytes: [UInt8], linkPeer: [UInt8]) -> Result<Envelope, FrameRejection> {
        let now = clock()
        let result: Result<Envelope, FrameRejection>
        switch FrameVerifier.inspect(bytes, localPublicKey: localPublicKey, linkPeer: linkPeer, now: now) {
        case .failure(let r): result = .failure(r)
        case .success(let envelope): result = verifier.withLockedValue { $0.admit(envelope, now: now) }
        }
        switch result {
        case .success(let envelope): metrics.frameAccepted(linkMessage: envelope.type == .chatMessage && envelope.needsSignatureOffLink)
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

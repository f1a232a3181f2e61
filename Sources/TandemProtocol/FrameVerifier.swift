import Foundation
import Sodium

/// Remembers message ids for the replay window with bounded memory.
///
/// Entries are ordered by the frame's created-at. When the cache is full the entry with the
/// oldest created-at is evicted and its created-at becomes the *watermark*: from then on every
/// frame created at or before the watermark is refused as stale. So a full cache shortens the
/// window instead of forgetting ids that could be replayed.
public struct ReplayCache: Sendable {
    public let capacity: Int
    public let window: UInt64
    private var seen: [MessageID: UInt64] = [:]
    private var heap = MinHeap()
    /// Frames created at or before this instant are stale.
    public private(set) var watermark: UInt64 = 0

    public init(capacity: Int = 100_000, window: UInt64 = TandemConstants.replayWindowMilliseconds) {
        precondition(capacity > 0)
        self.capacity = capacity
        self.window = window
    }

    public var count: Int { seen.count }

    public enum Verdict: Equatable, Sendable {
        case fresh
        case replayed
        case stale
    }

    /// Checks an id and, when fresh, remembers it.
    public mutating func check(_ id: MessageID, createdAt: UInt64, now: UInt64) -> Verdict {
        expire(now: now)
        let cutoff = now >= window ? now - window : 0
        if createdAt < cutoff || createdAt <= watermark { return .stale }
        if seen[id] != nil { return .replayed }
        while seen.count >= capacity, let oldest = heap.popMin() {
            seen.removeValue(forKey: oldest.id)
            watermark = max(watermark, oldest.createdAt)
        }
        if createdAt <= watermark { return .stale }
        seen[id] = createdAt
        heap.push((createdAt, id))
        return .fresh
    }

    /// Forgets ids whose frames are older than the window.
    public mutating func expire(now: UInt64) {
        let cutoff = now >= window ? now - window : 0
        while let top = heap.min, top.createdAt < cutoff {
            _ = heap.popMin()
            seen.removeValue(forKey: top.id)
        }
    }
}

/// A binary min-heap of (createdAt, id).
struct MinHeap: Sendable {
    private var items: [(createdAt: UInt64, id: MessageID)] = []

    var min: (createdAt: UInt64, id: MessageID)? { items.first }

    mutating func push(_ item: (createdAt: UInt64, id: MessageID)) {
        items.append(item)
        var i = items.count - 1
        while i > 0 {
            let parent = (i - 1) / 2
            guard items[i].createdAt < items[parent].createdAt else { break }
            items.swapAt(i, parent)
            i = parent
        }
    }

    mutating func popMin() -> (createdAt: UInt64, id: MessageID)? {
        guard !items.isEmpty else { return nil }
        items.swapAt(0, items.count - 1)
        let top = items.removeLast()
        var i = 0
        while true {
            let l = 2 * i + 1, r = l + 1
            var smallest = i
            if l < items.count, items[l].createdAt < items[smallest].createdAt { smallest = l }
            if r < items.count, items[r].createdAt < items[smallest].createdAt { smallest = r }
            if smallest == i { break }
            items.swapAt(i, smallest)
            i = smallest
        }
        return top
    }
}

/// The receiver's rules for an incoming envelope, in the order of Protocol/README.md:
/// version, layout, signature, recipient, clock skew, staleness, replay, type.
public struct FrameVerifier: Sendable {
    public let localPublicKey: [UInt8]
    public var replayCache: ReplayCache
    public let maximumClockSkew: UInt64
    public let knownTypes: Set<MessageType>
    /// Rejections so far, by error code.
    public private(set) var rejected: [Tandem_V1_ErrorCode: Int] = [:]
    public private(set) var accepted = 0

    public init(localPublicKey: [UInt8], replayCache: ReplayCache = ReplayCache(),
                maximumClockSkew: UInt64 = TandemConstants.maximumClockSkewMilliseconds,
                knownTypes: Set<MessageType> = MessageType.known) {
        self.localPublicKey = localPublicKey
        self.replayCache = replayCache
        self.maximumClockSkew = maximumClockSkew
        self.knownTypes = knownTypes
    }

    /// Checks an envelope's bytes against every rule. On rejection the error says what to answer.
    public mutating func verify(_ bytes: [UInt8], now: UInt64) -> Result<Envelope, FrameRejection> {
        let result = check(bytes, now: now)
        switch result {
        case .success: accepted += 1
        case .failure(let r): rejected[r.code, default: 0] += 1
        }
        return result
    }

    /// Counts a rejection decided outside `verify` (for example an oversized frame).
    public mutating func count(_ rejection: FrameRejection) {
        rejected[rejection.code, default: 0] += 1
    }

    private mutating func check(_ bytes: [UInt8], now: UInt64) -> Result<Envelope, FrameRejection> {
        let envelope: Envelope
        do {
            envelope = try Envelope.parse(bytes)
        } catch let r as FrameRejection {
            return .failure(r)
        } catch {
            return .failure(FrameRejection(.malformed, "unreadable envelope"))
        }
        func reject(_ code: Tandem_V1_ErrorCode, _ detail: String) -> Result<Envelope, FrameRejection> {
            .failure(FrameRejection(code, detail, messageID: envelope.messageID, author: envelope.author,
                                    type: envelope.type))
        }
        guard envelope.hasValidSignature else {
            // The author is unproven: leave it out, so the reply goes to the link peer.
            return .failure(FrameRejection(.badSignature, "signature does not verify",
                                           messageID: envelope.messageID, type: envelope.type))
        }
        guard envelope.recipient == localPublicKey else {
            return reject(.wrongRecipient, "frame is addressed to another node")
        }
        if envelope.createdAt > now, envelope.createdAt - now > maximumClockSkew {
            return reject(.fromTheFuture, "frame created \((envelope.createdAt - now) / 1000) s in the future")
        }
        switch replayCache.check(envelope.messageID, createdAt: envelope.createdAt, now: now) {
        case .fresh: break
        case .stale: return reject(.stale, "frame is older than the replay window")
        case .replayed: return reject(.replayed, "message id \(envelope.messageID) was already received")
        }
        guard knownTypes.contains(envelope.type) else {
            return reject(.unknownType, "unknown message type \(envelope.type)")
        }
        return .success(envelope)
    }

    /// The typed ERROR frame that answers a rejection, or nil when none must be sent
    /// (an ERROR frame is never answered with an ERROR frame; without an author there is no one
    /// to address it to, so the link peer is used).
    public static func errorReply(to rejection: FrameRejection, from identity: SigningKeyPair,
                                  linkPeer: [UInt8], now: UInt64) -> Envelope? {
        if rejection.type == .error { return nil }
        var error = Tandem_V1_Error()
        error.code = rejection.code
        error.detail = String(rejection.detail.prefix(256))
        if let id = rejection.messageID { error.refMessageID = Data(id.bytes) }
        if rejection.code == .unsupportedVersion { error.supportedVersions = TandemConstants.supportedVersions }
        if rejection.code == .unknownType, let t = rejection.type { error.refType = UInt32(t.rawValue) }
        // The author of a frame with a bad signature is unproven: answer the authenticated link peer.
        let recipient = (rejection.code == .badSignature ? nil : rejection.author) ?? linkPeer
        let payload = (try? error.serializedBytes()) ?? []
        return Envelope.sign(type: .error, author: identity, recipient: recipient, createdAt: now, payload: payload)
    }
}

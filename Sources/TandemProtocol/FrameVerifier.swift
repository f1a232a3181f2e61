import Foundation
import Sodium

/// Remembers message ids for the replay window with bounded memory, so that no peer can make the
/// node refuse someone else's fresh frames (Protocol/README.md 5.6 and section 10).
///
/// - Ids are remembered per author, `(author, id) → created_at`. An author holds at most
///   `perAuthorCapacity` entries; past that its own oldest entry is forgotten and its created-at
///   becomes that author's *floor*: the author's frames at or below its floor are stale. Filling a
///   share, even with frames dated in the future, only ever refuses the same author's frames.
/// - All authors together hold at most `capacity` entries. When it is full, the entry forgotten is
///   the oldest of an author holding the most entries (so the largest shares shrink first and an
///   author with few frames keeps them), and it raises only that author's floor.
/// - When every author holds a single entry, a whole author is forgotten; its created-at is folded
///   into the shared *watermark*, but never above `now − watermarkLag`: the shared watermark never
///   moves past the local clock, so frames created within `watermarkLag` of now (and any frame
///   dated in the future) are never refused because of what others sent.
///
/// Everything is decided on the `now` the caller passes; nothing uses a clock of its own.
public struct ReplayCache: Sendable {
    /// Entries held at most, all authors together.
    public let capacity: Int
    /// Entries held at most for one author.
    public let perAuthorCapacity: Int
    public let window: UInt64
    /// The shared watermark stays at least this far behind `now`.
    public let watermarkLag: UInt64

    private struct Author: Sendable {
        var heap = MinHeap()
        /// This author's frames created at or before this instant are stale.
        var floor: UInt64 = 0
    }

    private struct Key: Hashable, Sendable {
        let author: [UInt8]
        let id: MessageID
    }

    private var authors: [[UInt8]: Author] = [:]
    private var seen: Set<Key> = []
    /// Authors by the number of entries they hold (for "an author holding the most").
    private var byCount: [Int: Set<[UInt8]>] = [:]
    private var largest = 0
    /// Frames created at or before this instant are stale, whoever wrote them. At most
    /// `now − watermarkLag` of the `now` at which it was raised; it never decreases.
    public private(set) var watermark: UInt64 = 0

    public init(capacity: Int = 100_000, perAuthorCapacity: Int = 4_096,
                window: UInt64 = TandemConstants.replayWindowMilliseconds,
                watermarkLag: UInt64 = TandemConstants.maximumClockSkewMilliseconds) {
        precondition(capacity > 0 && perAuthorCapacity > 0)
        self.capacity = capacity
        self.perAuthorCapacity = perAuthorCapacity
        self.window = window
        self.watermarkLag = watermarkLag
    }

    /// Entries held, all authors together.
    public var count: Int { seen.count }
    /// Authors with at least one entry.
    public var authorCount: Int { authors.count }
    /// Entries held for one author.
    public func count(of author: [UInt8]) -> Int { authors[author]?.heap.count ?? 0 }
    /// One author's floor (0 when it has none).
    public func floor(of author: [UInt8]) -> UInt64 { authors[author]?.floor ?? 0 }

    public enum Verdict: Equatable, Sendable {
        case fresh
        case replayed
        case stale
    }

    /// Checks an id and, when fresh, remembers it.
    public mutating func check(_ id: MessageID, author: [UInt8], createdAt: UInt64, now: UInt64) -> Verdict {
        let cutoff = now >= window ? now - window : 0
        if createdAt < cutoff || createdAt <= watermark { return .stale }
        expire(author, cutoff: cutoff)
        if createdAt <= floor(of: author) { return .stale }
        let key = Key(author: author, id: id)
        if seen.contains(key) { return .replayed }
        // Room in the author's own share: its own oldest goes.
        if count(of: author) >= perAuthorCapacity {
            evictOldest(of: author)
            if createdAt <= floor(of: author) { return .stale }
        }
        // Room in the whole cache: the largest share shrinks, or a single-entry author goes.
        while seen.count >= capacity {
            guard let victim = largestAuthor(avoiding: author) else { break }
            if count(of: victim) > 1 || victim == author {
                evictOldest(of: victim)
            } else {
                forget(victim, now: now)
            }
            if createdAt <= watermark || createdAt <= floor(of: author) { return .stale }
        }
        insert(key, createdAt: createdAt)
        return .fresh
    }

    /// Forgets every entry older than the window (and authors left with none). Entries are also
    /// forgotten one author at a time as its frames arrive; this sweeps them all.
    public mutating func expire(now: UInt64) {
        let cutoff = now >= window ? now - window : 0
        for author in Array(authors.keys) { expire(author, cutoff: cutoff) }
    }

    // MARK: bookkeeping

    private mutating func expire(_ author: [UInt8], cutoff: UInt64) {
        while let top = authors[author]?.heap.min, top.createdAt < cutoff {
            evictOldest(of: author)
        }
        // Every entry is newer than the floor, so an author whose entries all expired has a floor
        // outside the window too: forgetting it loses nothing.
        if let state = authors[author], state.heap.count == 0, state.floor < cutoff {
            authors[author] = nil
        }
    }

    /// An author holding the most entries, preferably not `author` (nil when the cache is empty).
    private func largestAuthor(avoiding author: [UInt8]) -> [UInt8]? {
        guard largest > 0, let set = byCount[largest] else { return nil }
        if let other = set.first(where: { $0 != author }) { return other }
        return set.first
    }

    private mutating func insert(_ key: Key, createdAt: UInt64) {
        let before = count(of: key.author)
        seen.insert(key)
        authors[key.author, default: Author()].heap.push((createdAt, key.id))
        moved(key.author, from: before, to: before + 1)
    }

    /// Forgets an author's oldest entry; its created-at becomes the author's floor (if higher).
    private mutating func evictOldest(of author: [UInt8]) {
        guard let oldest = authors[author]?.heap.popMin() else { return }
        let after = count(of: author)
        seen.remove(Key(author: author, id: oldest.id))
        authors[author]!.floor = max(authors[author]!.floor, oldest.createdAt)
        moved(author, from: after + 1, to: after)
    }

    /// Forgets a whole author (one entry left), folding its newest instant into the shared
    /// watermark, never above `now − watermarkLag`.
    private mutating func forget(_ author: [UInt8], now: UInt64) {
        guard let state = authors.removeValue(forKey: author) else { return }
        var newest = state.floor
        var heap = state.heap
        moved(author, from: heap.count, to: 0)
        while let e = heap.popMin() {
            seen.remove(Key(author: author, id: e.id))
            newest = max(newest, e.createdAt)
        }
        let ceiling = now >= watermarkLag ? now - watermarkLag : 0
        watermark = max(watermark, min(newest, ceiling))
    }

    private mutating func moved(_ author: [UInt8], from old: Int, to new: Int) {
        if old > 0 {
            byCount[old]?.remove(author)
            if byCount[old]?.isEmpty == true { byCount[old] = nil }
        }
        if new > 0 { byCount[new, default: []].insert(author) }
        if new > largest { largest = new }
        while largest > 0, byCount[largest] == nil { largest -= 1 }
    }
}

/// A binary min-heap of (createdAt, id).
struct MinHeap: Sendable {
    private var items: [(createdAt: UInt64, id: MessageID)] = []

    var count: Int { items.count }

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
///
/// Rules 1–8 need nothing but the bytes, the node's key and the clock (`inspect`, static: run it
/// on any thread, outside any lock); rules 9–11 consult and update the replay cache (`admit`).
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
    /// `linkPeer`: the key the link's handshake proved, nil for a frame that came another way
    /// (rule 6: a link-authenticated type is accepted only from its author's own link).
    public mutating func verify(_ bytes: [UInt8], linkPeer: [UInt8]? = nil, now: UInt64) -> Result<Envelope, FrameRejection> {
        let result: Result<Envelope, FrameRejection>
        switch Self.inspect(bytes, localPublicKey: localPublicKey, linkPeer: linkPeer, maximumClockSkew: maximumClockSkew, now: now) {
        case .failure(let r): result = .failure(r)
        case .success(let envelope): result = admit(envelope, now: now)
        }
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

    /// Rules 2–8: layout, signature, recipient, clock skew. Pure and stateless.
    public static func inspect(_ bytes: [UInt8], localPublicKey: [UInt8], linkPeer: [UInt8]? = nil,
                               maximumClockSkew: UInt64 = TandemConstants.maximumClockSkewMilliseconds,
                               now: UInt64) -> Result<Envelope, FrameRejection> {
        let envelope: Envelope
        do {
            envelope = try Envelope.parse(bytes)
        } catch let r as FrameRejection {
            return .failure(r)
        } catch {
            return .failure(FrameRejection(.malformed, "unreadable envelope"))
        }
        guard envelope.isAuthentic(onLinkFrom: linkPeer) else {
            // The author is unproven: leave it out, so the reply goes to the link peer.
            let detail = envelope.needsSignatureOffLink
                ? (linkPeer == nil ? "an unsigned \(envelope.type) that did not come on a link"
                   : "an unsigned \(envelope.type) whose author is not the link's peer")
                : !envelope.type.isLinkAuthenticated ? "signature does not verify"
                : linkPeer == nil ? "a link-authenticated frame that did not come on a link"
                : envelope.author != linkPeer ? "a link-authenticated frame whose author is not the link's peer"
                : "a link-authenticated frame with a non-zero signature field"
            return .failure(FrameRejection(.badSignature, detail, messageID: envelope.messageID, type: envelope.type))
        }
        guard envelope.recipient == localPublicKey else {
            return .failure(envelope.rejection(.wrongRecipient, "frame is addressed to another node"))
        }
        if envelope.createdAt > now, envelope.createdAt - now > maximumClockSkew {
            return .failure(envelope.rejection(.fromTheFuture, "frame created \((envelope.createdAt - now) / 1000) s in the future"))
        }
        return .success(envelope)
    }

    /// Rules 9–11 for an envelope that passed `inspect` at the same `now`: staleness and replay
    /// (one step on the replay cache), then the type. Does not count (see `verify`).
    public mutating func admit(_ envelope: Envelope, now: UInt64) -> Result<Envelope, FrameRejection> {
        switch replayCache.check(envelope.messageID, author: envelope.author, createdAt: envelope.createdAt, now: now) {
        case .fresh: break
        case .stale: return .failure(envelope.rejection(.stale, "frame is older than the replay window or its author's replay floor"))
        case .replayed: return .failure(envelope.rejection(.replayed, "message id \(envelope.messageID) was already received"))
        }
        guard knownTypes.contains(envelope.type) else {
            return .failure(envelope.rejection(.unknownType, "unknown message type \(envelope.type)"))
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

extension Envelope {
    /// A rejection of this (signature-checked) envelope: its id, author and type go into the reply.
    func rejection(_ code: Tandem_V1_ErrorCode, _ detail: String) -> FrameRejection {
        FrameRejection(code, detail, messageID: messageID, author: author, type: type)
    }
}

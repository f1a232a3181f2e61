/// The outbox's delivery decisions, as a plain value (Protocol/README.md 12.5 and 12.7): which waiting frames
/// to write on a link, when a peer that could not be reached is tried again, and when a PRESENCE
/// may follow the frames that make it meaningful. The node's delivery loop asks it and carries out
/// the answers; the tests drive it with explicit instants.
///
/// - Each frame is written once per link: a frame already written on a link is written on it again
///   only after `resendAfterMs` without an acknowledgement (a receiver that throttled it and asks
///   for a retry), never because a second delivery round raced the first (a dial's own write and
///   the "link up, deliver now" that the new link triggers).
/// - Dialling backs off per peer: 2 s, 4 s, … up to `maximumBackoffMs` after successive failures; a
///   success or a fresh address (a LAN sighting) clears it.
/// - A PRESENCE owed to a peer (on link up, or on becoming friends) waits while frames for that
///   peer wait, and goes out on the link right after them: the peer hears FRIEND_ACCEPT before the
///   PRESENCE it makes meaningful.
/// - At most `window` frames per recipient are written on a link and not yet acknowledged
///   (`toWrite(_:to:link:nowMs:)`): a burst of thousands waits in the outbox and goes out as ACKs
///   come back, instead of filling the link's buffers until the receiver stops reading and the
///   link is closed as unwritable (README 12.5). Frames written on another link, or longer ago
///   than `resendAfterMs`, no longer hold a place: they are written again anyway.
public struct DeliveryBook: Sendable, Equatable {
    public struct Written: Sendable, Equatable {
        public let link: UInt64
        public let atMs: Int64
        /// The frame's size, where it counts towards `windowBytes` (0 where the caller gave none).
        public let bytes: Int
        public init(link: UInt64, atMs: Int64, bytes: Int = 0) {
            self.link = link
            self.atMs = atMs
            self.bytes = bytes
        }
    }

    public let resendAfterMs: Int64
    public let maximumBackoffMs: Int64
    /// At most this many peers tracked per table (past it the oldest knowledge is dropped, which
    /// only makes the node write or dial sooner, never lose a frame).
    public let maximumTracked: Int
    /// Frames per recipient written on its link and not yet acknowledged, at most.
    public let window: Int
    /// Their bytes, at most (messages.md 11.1): a window of large frames is bounded by what it holds,
    /// so a slow link drains it well within its unwritable timeout. The first frame always goes.
    public let windowBytes: Int

    // Keyed by `ByteKey`: hashed in one go, not a byte at a time (messages.md 11.6, session 13).
    private var written: [ByteKey: Written] = [:]
    /// Per recipient: the frames (their book keys) in its window, and whether frames were held
    /// back for lack of room at the last write.
    private var inFlight: [ByteKey: [ByteKey: Written]] = [:]
    private var held: Set<ByteKey> = []
    private var backoff: [ByteKey: (failures: Int, nextMs: Int64)] = [:]
    private var owedPresence: Set<ByteKey> = []

    public init(resendAfterMs: Int64 = 30_000, maximumBackoffMs: Int64 = 60_000, maximumTracked: Int = 10_000, window: Int = 256,
                windowBytes: Int = Int.max) {
        self.resendAfterMs = resendAfterMs
        self.maximumBackoffMs = maximumBackoffMs
        self.maximumTracked = maximumTracked
        self.window = max(1, window)
        self.windowBytes = max(1, windowBytes)
    }

    public static func == (a: DeliveryBook, b: DeliveryBook) -> Bool {
        a.written == b.written && a.owedPresence == b.owedPresence && a.inFlight == b.inFlight && a.held == b.held
            && a.backoff.mapValues { [Int64($0.failures), $0.nextMs] } == b.backoff.mapValues { [Int64($0.failures), $0.nextMs] }
    }

    // MARK: frames

    /// Of `messageIDs` (waiting for one peer, in order), those to write on `link` now; they are
    /// recorded as written there at `nowMs`.
    public mutating func toWrite(_ messageIDs: [[UInt8]], link: UInt64, nowMs: Int64) -> [[UInt8]] {
        var out: [[UInt8]] = []
        for id in messageIDs {
            if let w = written[ByteKey(id)], w.link == link, nowMs.subtractingSaturated(w.atMs) < resendAfterMs { continue }
            out.append(id)
        }
        if written.count + out.count > maximumTracked { written.removeAll() }
        for id in out { written[ByteKey(id)] = Written(link: link, atMs: nowMs) }
        return out
    }

    /// Of `keys` (the frames waiting for `recipient`, oldest first), those to write on `link` now,
    /// within the recipient's window: frames already written on this link within `resendAfterMs`
    /// keep their place and are skipped; the others fill the free places in order — as long as the
    /// frames in flight stay within `windowBytes` (`sizes`, one per key; none: not counted) — and the
    /// rest wait (`isHolding`) until acknowledgements make room. Those returned are recorded as written.
    public mutating func toWrite(_ keys: [[UInt8]], sizes: [Int]? = nil, to recipient: [UInt8], link: UInt64, nowMs: Int64) -> [[UInt8]] {
        let recipient = ByteKey(recipient)
        // Taken out of the table while it changes, so that the table holds no second reference
        // and nothing is copied (messages.md 11.6, session 13).
        let known = inFlight.removeValue(forKey: recipient)
        var places = known ?? [:]
        // Written on another link, or so long ago that it is written again: no longer in flight.
        // (Rebuilt only when some place is to be freed; usually none is.)
        let resendAfterMs = resendAfterMs
        let holds = { (w: Written) in w.link == link && nowMs.subtractingSaturated(w.atMs) < resendAfterMs }
        if places.values.contains(where: { !holds($0) }) { places = places.filter { holds($0.value) } }
        var room = window - places.count
        var bytes = sizes == nil ? 0 : places.values.reduce(0) { $0.addingSaturated($1.bytes) }
        var out: [[UInt8]] = []
        var outBytes: [Int] = []
        var holding = false
        for (i, key) in keys.enumerated() {
            if let w = written[ByteKey(key)], w.link == link, nowMs.subtractingSaturated(w.atMs) < resendAfterMs { continue }
            let size = sizes.map { i < $0.count ? max(0, $0[i]) : 0 } ?? 0
            guard room > 0, bytes.addingSaturated(size) <= windowBytes || (places.isEmpty && out.isEmpty) else {
                holding = true
                break
            }
            out.append(key)
            outBytes.append(size)
            room -= 1
            bytes = bytes.addingSaturated(size)
        }
        if written.count + out.count > maximumTracked { written.removeAll() }
        for (key, size) in zip(out, outBytes) {
            let key = ByteKey(key)
            let w = Written(link: link, atMs: nowMs, bytes: size)
            written[key] = w
            places[key] = w
        }
        if known == nil, inFlight.count >= maximumTracked { inFlight.removeAll() }
        if !places.isEmpty { inFlight[recipient] = places }
        if holding {
            if held.count >= maximumTracked { held.removeAll() }
            held.insert(recipient)
        } else {
            held.remove(recipient)
        }
        return out
    }

    /// Frames for `recipient` waited at its last write for room in its window.
    public func isHolding(_ recipient: [UInt8]) -> Bool { held.contains(ByteKey(recipient)) }

    /// The places `toWrite(_:to:link:nowMs:)` would find free for `recipient` on `link` at `nowMs`
    /// (frames written on another link, or longer ago than `resendAfterMs`, hold none). With none
    /// free it writes nothing, so a caller need not read what waits (messages.md 11.6).
    /// With the frames in flight at `windowBytes` or more, none is free.
    public func freePlaces(_ recipient: [UInt8], link: UInt64, nowMs: Int64) -> Int {
        guard let places = inFlight[ByteKey(recipient)] else { return window }
        var used = 0
        var bytes = 0
        for w in places.values where w.link == link && nowMs.subtractingSaturated(w.atMs) < resendAfterMs {
            used += 1
            bytes = bytes.addingSaturated(w.bytes)
        }
        return bytes >= windowBytes ? 0 : max(0, window - used)
    }

    /// The frames for `recipient` in flight on `link` at `nowMs` (written there within `resendAfterMs`
    /// and not acknowledged), and their bytes: a refill's frames follow them (messages.md 11.6).
    public func inFlight(to recipient: [UInt8], link: UInt64, nowMs: Int64) -> (frames: Int, bytes: Int) {
        guard let places = inFlight[ByteKey(recipient)] else { return (0, 0) }
        var used = 0
        var bytes = 0
        for w in places.values where w.link == link && nowMs.subtractingSaturated(w.atMs) < resendAfterMs {
            used += 1
            bytes = bytes.addingSaturated(w.bytes)
        }
        return (used, bytes)
    }

    /// A write found no free place for `recipient`: what waits is held until acknowledgements make
    /// room (`isHolding`), as `toWrite(_:to:link:nowMs:)` would have recorded.
    public mutating func hold(_ recipient: [UInt8]) {
        let recipient = ByteKey(recipient)
        if held.count >= maximumTracked, !held.contains(recipient) { held.removeAll() }
        held.insert(recipient)
    }

    /// Free places in `recipient`'s window (frames written on any link count until acknowledged or
    /// written again).
    public func room(_ recipient: [UInt8]) -> Int { window - (inFlight[ByteKey(recipient)]?.count ?? 0) }

    /// The frame left the outbox (acknowledged, deposited, expired): forgotten.
    public mutating func done(_ messageID: [UInt8]) { written[ByteKey(messageID)] = nil }

    /// The frame `key` for `recipient` left the outbox: forgotten, and its place in the window freed.
    public mutating func done(_ key: [UInt8], recipient: [UInt8]) {
        let key = ByteKey(key), recipient = ByteKey(recipient)
        written[key] = nil
        // In place: a copy of the recipient's places taken out while the table still held them was
        // copied whole on removal (a window's worth of entries per acknowledgement).
        guard inFlight[recipient]?.removeValue(forKey: key) != nil, inFlight[recipient]?.isEmpty == true else { return }
        inFlight[recipient] = nil
    }

    public func wasWritten(_ messageID: [UInt8]) -> Written? { written[ByteKey(messageID)] }

    // MARK: dialling

    public func shouldDial(_ peer: [UInt8], nowMs: Int64) -> Bool {
        guard let b = backoff[ByteKey(peer)] else { return true }
        return nowMs >= b.nextMs
    }

    public mutating func dialFailed(_ peer: [UInt8], nowMs: Int64) {
        let peer = ByteKey(peer)
        var b = backoff[peer] ?? (0, 0)
        b.failures = min(b.failures + 1, 30)
        b.nextMs = nowMs.addingSaturated(min(maximumBackoffMs, Int64(1000) << Int64(min(b.failures, 20))))
        if backoff[peer] == nil, backoff.count >= maximumTracked { backoff.removeAll() }
        backoff[peer] = b
    }

    /// Reached, or a fresh address to try: no backoff.
    public mutating func dialSucceeded(_ peer: [UInt8]) { backoff[ByteKey(peer)] = nil }

    public func failures(_ peer: [UInt8]) -> Int { backoff[ByteKey(peer)]?.failures ?? 0 }

    // MARK: presence

    /// A PRESENCE is due to `peer`. With no frames waiting for it, send it now (true); otherwise it is
    /// owed, and `takeOwedPresence` hands it out after those frames are written.
    public mutating func presenceDue(_ peer: [UInt8], framesWaiting: Bool) -> Bool {
        let peer = ByteKey(peer)
        guard framesWaiting else {
            owedPresence.remove(peer)
            return true
        }
        if owedPresence.count < maximumTracked { owedPresence.insert(peer) }
        return false
    }

    /// After the waiting frames were written to `peer`: whether a PRESENCE is owed (it is cleared).
    public mutating func takeOwedPresence(_ peer: [UInt8]) -> Bool { owedPresence.remove(ByteKey(peer)) != nil }
}

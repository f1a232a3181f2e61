/// A conversation's inbound ordering, as a plain value (Protocol/messages.md 5): per author, sequence
/// numbers 1, 2, 3, … are released exactly once and in order; arrivals above a gap are held (bounded)
/// until it fills; a gap produces the ranges a GAP_REQUEST asks for; and every released message gets
/// a display key that orders both (or all) authors causally.
///
/// **Display order.** Messages are shown by (lamport, author key bytewise, seq). Each MESSAGE carries
/// `lamport` = 1 + the largest lamport its author had sent or seen in the conversation, so a message
/// written after seeing another (a reply above all) has a larger lamport and sorts below it, and
/// both sides compute the same order from the same messages. A lamport that does not grow with its
/// author's seq (a buggy or dishonest author) is raised to one above that author's previous one:
/// the key is local and display-only, and an author's own messages stay in seq order.
///
/// The node runs one per conversation, restores it from the store (`restore`), and stores what it
/// releases in the same step as the frame's handled mark. Instants are inputs, never read.
public struct ConversationOrder: Sendable, Equatable {
    /// A message released for display, in its author's seq order.
    public struct Released: Sendable, Equatable {
        public let author: [UInt8]
        public let seq: UInt64
        public let messageID: [UInt8]
        /// The lamport as the author sent it.
        public let lamport: UInt64
        public let displayKey: DisplayKey
    }

    /// The display order: lamport (as adjusted), then author key bytewise, then seq.
    public struct DisplayKey: Sendable, Hashable, Comparable {
        public let lamport: UInt64
        public let author: [UInt8]
        public let seq: UInt64
        public init(lamport: UInt64, author: [UInt8], seq: UInt64) {
            self.lamport = lamport
            self.author = author
            self.seq = seq
        }
        public static func < (a: DisplayKey, b: DisplayKey) -> Bool {
            if a.lamport != b.lamport { return a.lamport < b.lamport }
            if a.author != b.author { return a.author.lexicographicallyPrecedes(b.author) }
            return a.seq < b.seq
        }
    }

    public enum Refusal: Sendable, Equatable {
        /// seq 0 or above 2^53 - 1: never valid (the decoder refuses it first).
        case seqOutOfRange
        /// More than `heldAboveGap` above what is released: the sender resends in order later
        /// (no ACK, so its outbox keeps it).
        case beyondWindow
        /// The conversation already tracks `maximumAuthors` authors.
        case tooManyAuthors
    }

    public enum Verdict: Sendable, Equatable {
        /// Released, with any held messages the arrival unblocked, in seq order.
        case released([Released])
        /// Above a gap: kept (the caller stores it as held and acknowledges it); `missing` are the
        /// ranges still lacking below it.
        case held(missing: [SeqRange])
        /// Seen before (released or held): acknowledge again, change nothing.
        case duplicate
        case refused(Refusal)
    }

    struct Held: Sendable, Equatable {
        let messageID: [UInt8]
        let lamport: UInt64
    }

    struct Author: Sendable, Equatable {
        /// Every seq up to this one is released.
        var released: UInt64 = 0
        /// The adjusted lamport of the last released message.
        var lastLamport: UInt64 = 0
        var held: [UInt64: Held] = [:]
        /// When a GAP_REQUEST for this author was last made (ms), if one was.
        var gapRequestedAtMs: Int64?
    }

    public let heldAboveGap: UInt64
    public let maximumAuthors: Int
    /// A gap is asked about again after this long without being filled.
    public let gapRetryMs: Int64

    /// Keyed by `ByteKey`: hashed in one go, not a byte at a time (messages.md 11.6).
    private var authors: [ByteKey: Author] = [:]
    /// The largest lamport sent or seen (adjusted), for the next outbound message.
    public private(set) var maximumLamport: UInt64 = 0
    /// This node's last outbound seq in the conversation.
    public private(set) var ownSeq: UInt64 = 0

    public init(heldAboveGap: UInt64 = ChatLimits.heldAboveGap, maximumAuthors: Int = 16, gapRetryMs: Int64 = 30_000) {
        self.heldAboveGap = heldAboveGap
        self.maximumAuthors = maximumAuthors
        self.gapRetryMs = gapRetryMs
    }

    // MARK: outbound

    /// The seq and lamport of this node's next message (recorded as sent).
    public mutating func nextOutbound() -> (seq: UInt64, lamport: UInt64) {
        ownSeq = min(ownSeq.addingSaturated(1), ChatLimits.maximumCounter)
        maximumLamport = min(maximumLamport.addingSaturated(1), ChatLimits.maximumCounter)
        return (ownSeq, maximumLamport)
    }

    // MARK: inbound

    public mutating func receive(author: [UInt8], seq: UInt64, lamport: UInt64, messageID: [UInt8]) -> Verdict {
        guard seq >= 1, seq <= ChatLimits.maximumCounter else { return .refused(.seqOutOfRange) }
        let key = ByteKey(author)
        if authors[key] == nil, authors.count >= maximumAuthors { return .refused(.tooManyAuthors) }
        var a = authors[key] ?? Author()
        defer { authors[key] = a }
        if seq <= a.released || a.held[seq] != nil { return .duplicate }
        guard seq <= a.released.addingSaturated(heldAboveGap) else { return .refused(.beyondWindow) }
        guard seq == a.released + 1 else {
            a.held[seq] = Held(messageID: messageID, lamport: lamport)
            return .held(missing: Self.missing(a, limit: ChatLimits.gapRanges))
        }
        var out = [release(&a, author: author, seq: seq, lamport: lamport, messageID: messageID)]
        while let next = a.held.removeValue(forKey: a.released + 1) {
            out.append(release(&a, author: author, seq: a.released + 1, lamport: next.lamport, messageID: next.messageID))
        }
        a.gapRequestedAtMs = a.held.isEmpty ? nil : a.gapRequestedAtMs
        return .released(out)
    }

    private mutating func release(_ a: inout Author, author: [UInt8], seq: UInt64, lamport: UInt64, messageID: [UInt8]) -> Released {
        let adjusted = min(max(lamport, a.lastLamport.addingSaturated(1)), UInt64.max)
        a.released = seq
        a.lastLamport = adjusted
        maximumLamport = max(maximumLamport, min(adjusted, ChatLimits.maximumCounter))
        return Released(author: author, seq: seq, messageID: messageID, lamport: lamport,
                        displayKey: DisplayKey(lamport: adjusted, author: author, seq: seq))
    }

    /// The ranges missing below the highest held seq, ascending, at most `limit` ranges of at most
    /// `ChatLimits.seqsPerGapRange` seqs each (the first ones: they unblock the most).
    static func missing(_ a: Author, limit: Int) -> [SeqRange] {
        guard !a.held.isEmpty else { return [] }
        var out: [SeqRange] = []
        var start: UInt64? = nil
        var seq = a.released + 1
        let top = a.held.keys.max() ?? 0
        // At most heldAboveGap iterations: held seqs are within the window.
        while seq <= top, out.count < limit {
            if a.held[seq] == nil {
                if start == nil { start = seq }
                if let s = start, seq - s + 1 == ChatLimits.seqsPerGapRange {
                    out.append(SeqRange(first: s, last: seq))
                    start = nil
                }
            } else if let s = start {
                out.append(SeqRange(first: s, last: seq - 1))
                start = nil
            }
            seq += 1
        }
        return out
    }

    /// What to ask `author` (or the thread's forwarder) for now: the missing ranges, when there are
    /// any and none was asked within `gapRetryMs`. Recorded as asked at `nowMs`.
    public mutating func gapRequest(author: [UInt8], nowMs: Int64) -> [SeqRange]? {
        let author = ByteKey(author)
        guard var a = authors[author], !a.held.isEmpty else { return nil }
        if let at = a.gapRequestedAtMs, nowMs.subtractingSaturated(at) < gapRetryMs { return nil }
        let ranges = Self.missing(a, limit: ChatLimits.gapRanges)
        guard !ranges.isEmpty else { return nil }
        a.gapRequestedAtMs = nowMs
        authors[author] = a
        return ranges
    }

    public func released(author: [UInt8]) -> UInt64 { authors[ByteKey(author)]?.released ?? 0 }
    public func heldCount(author: [UInt8]) -> Int { authors[ByteKey(author)]?.held.count ?? 0 }

    // MARK: restore

    /// Rebuilds the value from the store: this node's last seq, and per author the contiguous
    /// released prefix (seq, with the adjusted lamport of its last message) and the held messages.
    /// Held entries at or below `released`, or beyond the window, are ignored.
    public mutating func restore(ownSeq: UInt64, maximumLamport: UInt64, author: [UInt8], released: UInt64, lastLamport: UInt64,
                                 held: [(seq: UInt64, messageID: [UInt8], lamport: UInt64)]) {
        self.ownSeq = max(self.ownSeq, ownSeq)
        self.maximumLamport = max(self.maximumLamport, maximumLamport, lastLamport)
        var a = Author(released: released, lastLamport: lastLamport)
        for h in held where h.seq > released && h.seq <= released.addingSaturated(heldAboveGap) {
            a.held[h.seq] = Held(messageID: h.messageID, lamport: h.lamport)
        }
        authors[ByteKey(author)] = a
    }
}

/// The receiving side of one file transfer, as a plain value (Protocol/messages.md 7.3): offered →
/// accepted (FILE_REQUEST for the first missing chunks) → chunks checked against the offer's hash
/// tree and recorded in a bitmap → the whole file hashed (by the caller, who holds the file) →
/// complete. It resumes from the bitmap after a restart or a broken link, keeps at most
/// `window` chunks requested at once, refuses chunks that were not asked for, lie outside the file,
/// have the wrong length or do not verify, and gives up on an offer that never ends. Instants are
/// inputs (`nowMs`); the machine never reads a clock and does no I/O.
public struct FileReceiver: Sendable, Equatable {
    public enum Phase: Sendable, Equatable {
        /// Offered, not yet accepted.
        case offered
        /// Accepted: chunks are being fetched.
        case receiving
        /// Every chunk verified; waiting for `wholeFileHashed`.
        case verifying
        case complete
        case failed(FileCancelMessage.Reason)
    }

    public enum Action: Sendable, Equatable {
        /// Send FILE_REQUEST with these ranges.
        case request([ChunkRange])
        /// Write `data` at `offset` of the partial file; persist the bitmap once it is written.
        case write(index: Int, offset: UInt64, data: [UInt8])
        /// A chunk received with `receiveUnchecked`: check it (`check.matches(data)`) off the node
        /// core; only if it matches, write it as `write` does, and report it with `chunksChecked`
        /// (the reference node: once it is synced); if not, report `chunkFailedCheck`.
        case checkAndWrite(index: Int, offset: UInt64, data: [UInt8], check: ChunkCheck)
        /// Every chunk is in: hash the whole partial file and call `wholeFileHashed`.
        case hashWholeFile
        /// The file is complete and checked: move it into place.
        case finish
        /// Send FILE_CANCEL with this reason (and delete the partial file).
        case cancel(FileCancelMessage.Reason)
    }

    public enum ChunkRefusal: Sendable, Equatable {
        case notReceiving
        case wrongFile
        case outOfRange
        case notRequested
        case wrongLength
        case badHash
        case duplicate
    }

    public let offer: FileOfferMessage
    /// Chunks requested at once.
    public let window: Int
    /// A FILE_REQUEST goes out once this many chunks of the window are free again (arrived, or
    /// timed out): the window is refilled in steps, so the sender always has at least
    /// `window - refill` chunks asked for and the link never waits for a request (messages.md 7.3).
    public let refill: Int
    /// A request unanswered this long is asked again.
    public let requestTimeoutMs: Int64
    /// Chunks that fail their hash before the transfer is given up.
    public let maximumBadChunks: Int

    public private(set) var phase: Phase
    /// One bit per chunk, chunk i in byte i / 8, bit i % 8 (least significant first): verified and written.
    public private(set) var bitmap: [UInt8]
    public private(set) var verifiedChunks: Int
    public private(set) var badChunks: Int = 0
    /// Chunk index → when it was requested.
    private var inFlight: [Int: Int64] = [:]
    /// Chunks received with `receiveUnchecked` and handed on to be checked and written, not yet
    /// reported (`chunksChecked`, `chunkFailedCheck`, `chunkLost`). Not asked for again meanwhile;
    /// a second copy is a duplicate.
    public private(set) var checking: Set<Int> = []
    /// When the offer is given up, whatever happens.
    public let deadlineMs: Int64
    private var lastProgressMs: Int64

    /// `deadlineMs`: the offer's end (messages.md 7.4: 8 days after it was offered, by default).
    /// `refill`: the step the window is refilled in (default: half the window, rounded up).
    public init(offer: FileOfferMessage, nowMs: Int64, deadlineMs: Int64? = nil, window: Int = 16, refill: Int? = nil,
                requestTimeoutMs: Int64 = 30_000, maximumBadChunks: Int = 16) {
        self.offer = offer
        self.window = max(1, window)
        self.refill = min(self.window, max(1, refill ?? self.window - self.window / 2))
        self.requestTimeoutMs = requestTimeoutMs
        self.maximumBadChunks = maximumBadChunks
        self.phase = .offered
        self.bitmap = [UInt8](repeating: 0, count: (offer.chunkCount + 7) / 8)
        self.verifiedChunks = 0
        self.deadlineMs = deadlineMs ?? nowMs.addingSaturated(8 * 86_400_000)
        self.lastProgressMs = nowMs
    }

    /// Resumes an accepted transfer from a stored bitmap (of the right length; stray bits past the
    /// last chunk are cleared). Whether the chunks it names are really on disk is the caller's
    /// promise: it persists a bit only after the chunk's bytes are written.
    public init(resuming offer: FileOfferMessage, bitmap stored: [UInt8], nowMs: Int64, deadlineMs: Int64,
                window: Int = 16, refill: Int? = nil, requestTimeoutMs: Int64 = 30_000, maximumBadChunks: Int = 16) {
        self.init(offer: offer, nowMs: nowMs, deadlineMs: deadlineMs, window: window, refill: refill,
                  requestTimeoutMs: requestTimeoutMs, maximumBadChunks: maximumBadChunks)
        if stored.count == bitmap.count {
            bitmap = stored
            let extra = bitmap.count * 8 - offer.chunkCount
            if extra > 0 { bitmap[bitmap.count - 1] &= UInt8(0xff) >> UInt8(extra) }
            verifiedChunks = bitmap.reduce(0) { $0 + $1.nonzeroBitCount }
        }
        phase = verifiedChunks == offer.chunkCount ? .verifying : .receiving
    }

    public func has(_ index: Int) -> Bool {
        guard index >= 0, index < offer.chunkCount else { return false }
        return bitmap[index / 8] & (1 << UInt8(index % 8)) != 0
    }

    /// Bytes verified so far (for progress).
    public var verifiedBytes: UInt64 {
        var total: UInt64 = 0
        for i in 0..<offer.chunkCount where has(i) {
            total += UInt64(ChunkTree.chunkLength(index: i, size: offer.size, chunkBytes: offer.chunkBytes))
        }
        return total
    }

    // MARK: inputs

    /// The user (or an auto-accept setting) accepts the offer.
    public mutating func accept(nowMs: Int64) -> [Action] {
        guard phase == .offered else { return [] }
        phase = .receiving
        lastProgressMs = nowMs
        return requestMore(nowMs: nowMs)
    }

    /// The user declines, or cancels a transfer under way.
    public mutating func cancel() -> [Action] {
        switch phase {
        case .offered, .receiving, .verifying:
            phase = .failed(.byUser)
            inFlight = [:]
            checking = []
            return [.cancel(.byUser)]
        case .complete, .failed:
            return []
        }
    }

    /// The sender sent FILE_CANCEL.
    public mutating func cancelledBySender(_ reason: FileCancelMessage.Reason) {
        switch phase {
        case .offered, .receiving, .verifying:
            phase = .failed(reason)
            inFlight = [:]
            checking = []
        case .complete, .failed:
            break
        }
    }

    /// A FILE_CHUNK arrived. Either `.success` with the actions (write it, ask for more, hash the
    /// file), or the refusal (the chunk is dropped; a bad hash counts towards giving up).
    public mutating func receive(_ chunk: FileChunkMessage, nowMs: Int64) -> Result<[Action], ChunkRefusalError> {
        if let refusal = refusal(chunk) { return .failure(ChunkRefusalError(refusal)) }
        let leaf = ChunkTree.leafHash(chunk.data)
        guard ChunkTree.verify(leaf: leaf, index: chunk.index, count: offer.chunkCount, proof: chunk.proof, root: offer.chunkRoot) else {
            inFlight[chunk.index] = nil
            return .failure(failedCheck())
        }
        inFlight[chunk.index] = nil
        lastProgressMs = nowMs
        let actions: [Action] = [.write(index: chunk.index, offset: UInt64(chunk.index) * UInt64(offer.chunkBytes), data: chunk.data)]
        return .success(actions + verified(chunk.index, nowMs: nowMs))
    }

    /// A FILE_CHUNK arrived, to be checked against the tree where it is written rather than here
    /// (messages.md 11.4): the same refusals as `receive` except the hash, which the
    /// `checkAndWrite` action carries out; until it is reported the chunk is `checking` — not asked
    /// for again, a second copy refused as a duplicate, not yet counted as held.
    public mutating func receiveUnchecked(_ chunk: FileChunkMessage, nowMs: Int64) -> Result<[Action], ChunkRefusalError> {
        if let refusal = refusal(chunk) { return .failure(ChunkRefusalError(refusal)) }
        inFlight[chunk.index] = nil
        checking.insert(chunk.index)
        lastProgressMs = nowMs
        let check = ChunkCheck(index: chunk.index, count: offer.chunkCount, proof: chunk.proof, root: offer.chunkRoot)
        var actions: [Action] = [.checkAndWrite(index: chunk.index, offset: UInt64(chunk.index) * UInt64(offer.chunkBytes),
                                                data: chunk.data, check: check)]
        if refillDue { actions.append(contentsOf: requestMore(nowMs: nowMs)) }
        return .success(actions)
    }

    /// These chunks, received with `receiveUnchecked`, matched the tree (and were written): they
    /// are held. Indices not being checked are ignored. When that completes the file: `hashWholeFile`.
    public mutating func chunksChecked(_ indices: [Int], nowMs: Int64) -> [Action] {
        var actions: [Action] = []
        for i in indices where checking.remove(i) != nil && phase == .receiving && !has(i) {
            actions.append(contentsOf: verified(i, nowMs: nowMs, requesting: false))
        }
        return actions
    }

    /// Chunk `index`, received with `receiveUnchecked`, did not match the tree (it was not written):
    /// refused as `receive` refuses a bad hash, and counted (the 16th ends the transfer). `.success([])`
    /// for an index not being checked.
    public mutating func chunkFailedCheck(_ index: Int) -> Result<[Action], ChunkRefusalError> {
        guard checking.remove(index) != nil, phase == .receiving else { return .success([]) }
        return .failure(failedCheck())
    }

    /// Chunk `index`, received with `receiveUnchecked`, was neither checked nor written (its job was
    /// not queued): it is missing again, and asked for at the next `tick`.
    public mutating func chunkLost(_ index: Int) {
        checking.remove(index)
    }

    /// Every chunk is held or being checked: nothing more will arrive (the caller syncs what it wrote).
    public var everyChunkReceived: Bool { verifiedChunks + checking.count >= offer.chunkCount }

    /// Why `chunk` is refused before its hash is looked at (nil: it may be taken).
    private func refusal(_ chunk: FileChunkMessage) -> ChunkRefusal? {
        guard phase == .receiving else { return .notReceiving }
        guard chunk.fileID == offer.fileID else { return .wrongFile }
        guard chunk.index >= 0, chunk.index < offer.chunkCount else { return .outOfRange }
        if has(chunk.index) || checking.contains(chunk.index) { return .duplicate }
        guard inFlight[chunk.index] != nil else { return .notRequested }
        guard chunk.data.count == ChunkTree.chunkLength(index: chunk.index, size: offer.size, chunkBytes: offer.chunkBytes) else {
            return .wrongLength
        }
        return nil
    }

    /// A chunk failed its path: counted; the `maximumBadChunks`th ends the transfer.
    private mutating func failedCheck() -> ChunkRefusalError {
        badChunks += 1
        if badChunks >= maximumBadChunks {
            phase = .failed(.badData)
            inFlight = [:]
            checking = []
            return ChunkRefusalError(.badHash, giveUp: true)
        }
        return ChunkRefusalError(.badHash)
    }

    /// Chunk `index` is held: its bit is set; the file is complete (`hashWholeFile`), or more is
    /// asked for when `refill` chunks of the window are free (`requesting`).
    private mutating func verified(_ index: Int, nowMs: Int64, requesting: Bool = true) -> [Action] {
        bitmap[index / 8] |= 1 << UInt8(index % 8)
        verifiedChunks += 1
        if verifiedChunks == offer.chunkCount {
            phase = .verifying
            return [.hashWholeFile]
        }
        return requesting && refillDue ? requestMore(nowMs: nowMs) : []
    }

    /// The caller hashed the whole partial file (BLAKE2b-256). Equal to the offer's: finish. Else the
    /// sender's offer is inconsistent (its tree and its file hash disagree) or the partial file was
    /// damaged on disk: the transfer fails (`badData`).
    public mutating func wholeFileHashed(_ hash: [UInt8]) -> [Action] {
        guard phase == .verifying else { return [] }
        if hash == offer.fileHash {
            phase = .complete
            return [.finish]
        }
        phase = .failed(.badData)
        return [.cancel(.badData)]
    }

    /// Time passes: past the deadline the offer is given up; requests unanswered for
    /// `requestTimeoutMs` are asked again (after a broken link, or a restart, this resumes).
    public mutating func tick(nowMs: Int64) -> [Action] {
        switch phase {
        case .offered, .receiving, .verifying:
            if nowMs >= deadlineMs {
                phase = .failed(.expired)
                inFlight = [:]
                checking = []
                return [.cancel(.expired)]
            }
        case .complete, .failed:
            return []
        }
        guard phase == .receiving else { return phase == .verifying ? [.hashWholeFile] : [] }
        inFlight = inFlight.filter { nowMs.subtractingSaturated($0.value) < requestTimeoutMs }
        return refillDue ? requestMore(nowMs: nowMs) : []
    }

    /// The link to the sender broke: nothing requested is coming on it.
    public mutating func linkLost() { inFlight = [:] }

    /// Whether `refill` chunks of the window are free: time for a request.
    private var refillDue: Bool { window - inFlight.count >= refill }

    /// Asks for missing chunks not in flight, in index order, up to the window.
    private mutating func requestMore(nowMs: Int64) -> [Action] {
        var ranges: [ChunkRange] = []
        var i = 0
        let n = offer.chunkCount
        var budget = window - inFlight.count
        while i < n, budget > 0, ranges.count < ChatLimits.fileRequestRanges {
            if has(i) || inFlight[i] != nil || checking.contains(i) {
                i += 1
                continue
            }
            let start = i
            while i < n, budget > 0, !has(i), inFlight[i] == nil, !checking.contains(i) {
                inFlight[i] = nowMs
                budget -= 1
                i += 1
            }
            ranges.append(ChunkRange(first: start, count: i - start))
        }
        return Self.requests(ranges)
    }

    /// The most chunks a sender serves of one FILE_REQUEST (messages.md 7.4): a window larger than
    /// this is asked for in several requests, so no part of one is cut short and left to the timeout.
    public static let chunksPerRequest = 32

    /// `ranges` as FILE_REQUESTs of at most `chunksPerRequest` chunks each, in order.
    static func requests(_ ranges: [ChunkRange]) -> [Action] {
        var actions: [Action] = []
        var piece: [ChunkRange] = []
        var room = chunksPerRequest
        for r in ranges {
            var first = r.first, left = r.count
            while left > 0 {
                let take = min(left, room)
                piece.append(ChunkRange(first: first, count: take))
                (first, left, room) = (first + take, left - take, room - take)
                if room == 0 {
                    actions.append(.request(piece))
                    (piece, room) = ([], chunksPerRequest)
                }
            }
        }
        if !piece.isEmpty { actions.append(.request(piece)) }
        return actions
    }
}

/// Why `FileReceiver.receive` dropped a chunk; `giveUp` when this one ended the transfer.
public struct ChunkRefusalError: Error, Sendable, Equatable {
    public let reason: FileReceiver.ChunkRefusal
    public let giveUp: Bool
    public init(_ reason: FileReceiver.ChunkRefusal, giveUp: Bool = false) {
        self.reason = reason
        self.giveUp = giveUp
    }
}

/// Read receipts (messages.md 6): off by default, per friend. A node sends READ to a friend only
/// when it has turned them on for that friend, and shows the friend's receipts only then as well,
/// so neither side learns more than it gives.
public enum ReadReceiptRule {
    /// Whether to send a READ to a friend.
    public static func shouldSend(enabledForFriend: Bool, conversationIsDirect: Bool) -> Bool {
        enabledForFriend && conversationIsDirect
    }

    /// Whether a READ from a friend is stored and shown (one that arrives while receipts are off
    /// for that friend is acknowledged and dropped: turning them on later does not reveal it).
    public static func shouldShow(enabledForFriend: Bool, conversationIsDirect: Bool) -> Bool {
        enabledForFriend && conversationIsDirect
    }

    /// The READ to send after the user was shown the friend's messages up to `shownSeq`, when the
    /// last READ sent said `lastSentSeq` (nil: none is due).
    public static func receiptDue(shownSeq: UInt64, lastSentSeq: UInt64, enabledForFriend: Bool) -> UInt64? {
        guard enabledForFriend, shownSeq > lastSentSeq, shownSeq <= ChatLimits.maximumCounter else { return nil }
        return shownSeq
    }
}

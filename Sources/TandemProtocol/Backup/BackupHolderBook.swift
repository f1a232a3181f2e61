/// What a holder keeps for the owners it offered space to (Protocol/backup.md sections 3–9): quota
/// accounting, partial and whole blobs, snapshots and retention, proof answers, fetch decisions and
/// kits. Pure: the node's backup service stores the book, carries out the writes and reads it asks
/// for, and sends the answers it returns. Time comes in as `nowMs`; the book never reads a clock.
///
/// Invariant (checked by `invariantsHold`): for every owner, `used` = the charges of whole blobs,
/// of partial blobs at their declared sizes, of the kit and of the snapshot records, where a file's
/// charge is its payload rounded up to 4 096 bytes plus 512 (`BackupLimits.chargedBytes`: what it
/// takes on disk, so tiny blobs cannot amplify the quota); a blob, kit or snapshot is admitted only
/// when its charge fits the quota, so `used ≤ quota` unless the holder itself lowered the quota.
public struct BackupHolderBook: Sendable, Equatable {
    public typealias OwnerKey = [UInt8]

    public enum BlobState: Sendable, Equatable {
        /// `held` bytes written of `size`; reserved at `size`.
        case partial(held: Int64)
        /// Every byte written; waiting for the service's hash check.
        case checking
        case whole
    }

    public struct Blob: Sendable, Equatable {
        public let size: Int64
        public internal(set) var state: BlobState
        public internal(set) var touchedMs: UInt64

        /// What it counts against the owner's quota.
        public var charge: Int64 { BackupLimits.chargedBytes(forFileOf: size) }

        public var held: Int64 {
            switch state {
            case .partial(let h): return h
            case .checking, .whole: return size
            }
        }
    }

    public struct Kit: Sendable, Equatable {
        public let locator: KitLocator
        public let version: UInt64
        public let size: Int64
        /// Order of first put under the locator (for `index`).
        public let firstPutSequence: UInt64

        public var charge: Int64 { BackupLimits.chargedBytes(forFileOf: size) }
    }

    public struct Shelf: Sendable, Equatable {
        public internal(set) var quotaBytes: Int64
        public internal(set) var offerVersion: UInt64
        public internal(set) var blobs: [BlobName: Blob] = [:]
        public internal(set) var snapshots: [BackupSnapshotRecord] = []
        public internal(set) var kit: Kit?
        public internal(set) var usedBytes: Int64 = 0
        var proofTokens: Int64 = BackupLimits.proofBudgetBytes
        var proofRefilledMs: UInt64 = 0

        public var partialCount: Int {
            blobs.values.reduce(0) { n, b in if case .whole = b.state { return n } else { return n + 1 } }
        }

        public func holding(_ name: BlobName) -> BackupHolding {
            guard let b = blobs[name] else { return BackupHolding(name: name, size: 0, held: 0) }
            switch b.state {
            case .partial(let h): return BackupHolding(name: name, size: b.size, held: h)
            // Written but not yet checked: reported as the bytes before the last one, so the owner
            // never skips a blob whose check is still to come.
            case .checking: return BackupHolding(name: name, size: b.size, held: b.size - 1)
            case .whole: return BackupHolding(name: name, size: b.size, held: b.size)
            }
        }
    }

    public private(set) var shelves: [OwnerKey: Shelf] = [:]
    private var kitSequence: UInt64 = 0

    public init() {}

    // MARK: offers

    public enum OfferOutcome: Sendable, Equatable {
        case recorded
        /// A version at or below the current one.
        case ignored
        /// Everything held for the owner is to be deleted: these blobs (whole or partial) and the kit.
        case withdrawn(blobs: [BlobName], kit: KitLocator?)
    }

    /// The holder's own offer (`backup offer FRIEND --quota Q`), or its withdrawal (quota 0; also
    /// when the friendship ends). Lowering keeps what is held.
    public mutating func setOffer(owner: OwnerKey, quotaBytes: Int64, version: UInt64) -> OfferOutcome {
        let quota = min(max(quotaBytes, 0), BackupLimits.maximumQuotaBytes)
        if let s = shelves[owner], version <= s.offerVersion { return .ignored }
        if quota == 0 {
            let s = shelves.removeValue(forKey: owner)
            return .withdrawn(blobs: s.map { Array($0.blobs.keys).sorted() } ?? [], kit: s?.kit?.locator)
        }
        if shelves[owner] == nil {
            shelves[owner] = Shelf(quotaBytes: quota, offerVersion: version)
        } else {
            shelves[owner]!.quotaBytes = quota
            shelves[owner]!.offerVersion = version
        }
        return .recorded
    }

    /// The friendship with `owner` ended (README 12.2): everything held for it is to be deleted,
    /// whatever version its offer had (an offer at the largest version cannot be withdrawn by
    /// `setOffer`). Returns what `setOffer` returns for a withdrawal.
    public mutating func endOffer(owner: OwnerKey) -> OfferOutcome {
        let s = shelves.removeValue(forKey: owner)
        return .withdrawn(blobs: s.map { Array($0.blobs.keys).sorted() } ?? [], kit: s?.kit?.locator)
    }

    // MARK: loading what a holder kept

    /// What the holder's files say about one owner, as read back after a restart.
    public struct StoredShelf: Sendable, Equatable {
        public var quotaBytes: Int64
        public var offerVersion: UInt64
        /// Whole blobs: checked before they were renamed into place; size from the file.
        public var whole: [BlobName: Int64]
        /// Unfinished blobs: declared size and the partial file's length.
        public var partial: [BlobName: (size: Int64, held: Int64)]
        public var snapshots: [BackupSnapshotRecord]
        public var kit: (locator: KitLocator, version: UInt64, size: Int64)?

        public init(quotaBytes: Int64, offerVersion: UInt64, whole: [BlobName: Int64] = [:],
                    partial: [BlobName: (size: Int64, held: Int64)] = [:], snapshots: [BackupSnapshotRecord] = [],
                    kit: (locator: KitLocator, version: UInt64, size: Int64)? = nil) {
            self.quotaBytes = quotaBytes
            self.offerVersion = offerVersion
            self.whole = whole
            self.partial = partial
            self.snapshots = snapshots
            self.kit = kit
        }

        public static func == (a: StoredShelf, b: StoredShelf) -> Bool {
            a.quotaBytes == b.quotaBytes && a.offerVersion == b.offerVersion && a.whole == b.whole
                && a.partial.mapValues { [$0.size, $0.held] } == b.partial.mapValues { [$0.size, $0.held] }
                && a.snapshots == b.snapshots && a.kit?.locator == b.kit?.locator && a.kit?.version == b.kit?.version
                && a.kit?.size == b.kit?.size
        }
    }

    /// What `load` set aside because it broke a rule (the service deletes these files).
    public struct LoadReport: Sendable, Equatable {
        public var discardedBlobs: [BlobName] = []
        public var discardedSnapshots = 0
        public var discardedKit = false
    }

    /// Puts an owner's shelf back from the holder's files, applying the same limits as when the
    /// data arrived: sizes in range, at most 8 partial and 65 536 blobs, snapshots only over
    /// whole blobs whose sizes add up, at most 64, kits at most 4 per locator. Whatever breaks a
    /// rule is left out and reported, never fatal. An owner already loaded is replaced.
    public mutating func load(owner: OwnerKey, _ stored: StoredShelf, nowMs: UInt64) -> LoadReport {
        var report = LoadReport()
        let quota = min(max(stored.quotaBytes, 0), BackupLimits.maximumQuotaBytes)
        guard quota > 0, (1...BackupLimits.maximumVersion).contains(stored.offerVersion) else {
            report.discardedBlobs = (Array(stored.whole.keys) + Array(stored.partial.keys)).sorted()
            report.discardedSnapshots = stored.snapshots.count
            report.discardedKit = stored.kit != nil
            shelves[owner] = nil
            return report
        }
        var s = Shelf(quotaBytes: quota, offerVersion: stored.offerVersion)
        s.proofRefilledMs = nowMs
        let sizes = 1...BackupLimits.maximumBlobBytes
        for (name, size) in stored.whole.sorted(by: { $0.key < $1.key }) {
            guard sizes.contains(size), s.blobs.count < BackupLimits.blobsPerOwner else {
                report.discardedBlobs.append(name)
                continue
            }
            s.blobs[name] = Blob(size: size, state: .whole, touchedMs: nowMs)
            s.usedBytes += s.blobs[name]!.charge
        }
        for (name, p) in stored.partial.sorted(by: { $0.key < $1.key }) {
            guard s.blobs[name] == nil, sizes.contains(p.size), s.partialCount < BackupLimits.partialBlobsPerOwner,
                  s.blobs.count < BackupLimits.blobsPerOwner else {
                report.discardedBlobs.append(name)
                continue
            }
            s.blobs[name] = Blob(size: p.size, state: .partial(held: min(max(p.held, 0), p.size - 1)), touchedMs: nowMs)
            s.usedBytes += s.blobs[name]!.charge
        }
        var seen = Set<[UInt8]>()
        for r in stored.snapshots {
            let whole = r.blobs.allSatisfy { s.blobs[$0]?.state == .whole }
            let total = r.blobs.reduce(Int64(0)) { $0 + (s.blobs[$1]?.size ?? 0) }
            guard whole, total == r.totalBytes, s.snapshots.count < BackupLimits.snapshotsPerOwner,
                  seen.insert(r.snapshotID).inserted else {
                report.discardedSnapshots += 1
                continue
            }
            s.snapshots.append(r)
            s.usedBytes += BackupLimits.chargedBytes(for: r)
        }
        if let k = stored.kit {
            let others = shelves.filter { $0.key != owner && $0.value.kit?.locator == k.locator }.count
            if (Int64(BackupLimits.minimumSealedKitBytes)...Int64(BackupLimits.maximumSealedKitBytes)).contains(k.size),
               (1...BackupLimits.maximumVersion).contains(k.version), others < BackupLimits.kitsPerLocator {
                kitSequence += 1
                s.kit = Kit(locator: k.locator, version: k.version, size: k.size, firstPutSequence: kitSequence)
                s.usedBytes += s.kit!.charge
            } else {
                report.discardedKit = true
            }
        }
        shelves[owner] = s
        report.discardedBlobs.sort()
        return report
    }

    // MARK: have

    public func have(owner: OwnerKey, _ q: BackupHaveQueryMessage) -> BackupHaveReplyMessage {
        guard let s = shelves[owner] else {
            return BackupHaveReplyMessage(requestID: q.requestID, status: .noOffer, holdings: [], quotaBytes: 0, usedBytes: 0)
        }
        return BackupHaveReplyMessage(requestID: q.requestID, status: .ok, holdings: q.names.map { s.holding($0) },
                                      quotaBytes: s.quotaBytes, usedBytes: s.usedBytes)
    }

    /// After a restart: the partial file of `name` is `held` bytes long on disk. The book keeps
    /// the smaller of that and what it had, below the blob's size (a finished file whose check did
    /// not complete is checked again by resending its last byte); returns the length the service
    /// truncates the file to, or nil when the book has no unfinished blob of that name.
    public mutating func partialOnDisk(owner: OwnerKey, name: BlobName, held: Int64) -> Int64? {
        guard let b = shelves[owner]?.blobs[name], b.state != .whole else { return nil }
        let h = min(max(held, 0), b.held, b.size - 1)
        shelves[owner]!.blobs[name]!.state = .partial(held: h)
        return h
    }

    // MARK: pieces

    public enum PieceDecision: Sendable, Equatable {
        /// Nothing to write: send this answer.
        case answer(BackupReplyMessage)
        /// Write the piece's bytes at its offset of the partial file, then send this answer.
        case write(BackupReplyMessage)
        /// Write the piece's bytes, then hash the whole partial file and call `finishBlob`.
        case writeThenCheck
    }

    public mutating func receivePiece(owner: OwnerKey, _ p: BackupPieceMessage, nowMs: UInt64) -> PieceDecision {
        guard var s = shelves[owner] else {
            return .answer(reply(p.requestID, .noOffer, name: p.name, held: 0, quota: 0, used: 0))
        }
        defer { shelves[owner] = s }
        func answer(_ status: BackupStatus, held: Int64) -> BackupReplyMessage {
            reply(p.requestID, status, name: p.name, held: held, quota: s.quotaBytes, used: s.usedBytes)
        }
        let held: Int64
        if let b = s.blobs[p.name] {
            switch b.state {
            case .whole:
                return .answer(answer(b.size == p.size ? .complete : .sizeMismatch, held: b.size))
            case .checking:
                // The last piece is being checked; a duplicate changes nothing.
                guard b.size == p.size else { return .answer(answer(.sizeMismatch, held: b.size - 1)) }
                return .answer(answer(.ok, held: b.size - 1))
            case .partial(let h):
                guard b.size == p.size else { return .answer(answer(.sizeMismatch, held: h)) }
                if p.end <= h { return .answer(answer(.ok, held: h)) }
                guard p.offset == h else { return .answer(answer(.outOfOrder, held: h)) }
                held = h
            }
        } else {
            guard p.offset == 0 else { return .answer(answer(.outOfOrder, held: 0)) }
            guard s.partialCount < BackupLimits.partialBlobsPerOwner else { return .answer(answer(.tooManyPartial, held: 0)) }
            guard s.blobs.count < BackupLimits.blobsPerOwner else { return .answer(answer(.overQuota, held: 0)) }
            // The whole charge is reserved from the first piece on. Both at most about 2^50: no overflow.
            let blob = Blob(size: p.size, state: .partial(held: 0), touchedMs: nowMs)
            guard s.usedBytes + blob.charge <= s.quotaBytes else { return .answer(answer(.overQuota, held: 0)) }
            s.usedBytes += blob.charge
            s.blobs[p.name] = blob
            held = 0
        }
        let now = held + Int64(p.data.count)
        s.blobs[p.name]!.touchedMs = nowMs
        if now == p.size {
            s.blobs[p.name]!.state = .checking
            return .writeThenCheck
        }
        s.blobs[p.name]!.state = .partial(held: now)
        return .write(answer(.ok, held: now))
    }

    /// The service hashed the finished partial file: `matches` when it hashes to `name` (and has
    /// then been made durable). Answers COMPLETE, or HASH_MISMATCH and forgets the blob (its
    /// reservation released; the service deletes the file).
    public mutating func finishBlob(owner: OwnerKey, name: BlobName, requestID: BackupRequestID, matches: Bool) -> BackupReplyMessage {
        guard var s = shelves[owner], let b = s.blobs[name], b.state == .checking else {
            let s = shelves[owner]
            return reply(requestID, .notFound, name: name, held: 0, quota: s?.quotaBytes ?? 0, used: s?.usedBytes ?? 0)
        }
        if matches {
            s.blobs[name]!.state = .whole
            shelves[owner] = s
            return reply(requestID, .complete, name: name, held: b.size, quota: s.quotaBytes, used: s.usedBytes)
        }
        s.blobs[name] = nil
        s.usedBytes -= b.charge
        shelves[owner] = s
        return reply(requestID, .hashMismatch, name: name, held: 0, quota: s.quotaBytes, used: s.usedBytes)
    }

    /// A write the book asked for failed (disk full, I/O error): the blob goes back to what is on
    /// disk, `heldOnDisk` bytes (0 discards it and releases the reservation).
    public mutating func writeFailed(owner: OwnerKey, name: BlobName, heldOnDisk: Int64) {
        guard var s = shelves[owner], let b = s.blobs[name], b.state != .whole else { return }
        let h = min(max(heldOnDisk, 0), b.size - 1)
        if h == 0 {
            s.blobs[name] = nil
            s.usedBytes -= b.charge
        } else {
            s.blobs[name]!.state = .partial(held: h)
        }
        shelves[owner] = s
    }

    /// Partial blobs no piece extended for 7 days: dropped; the service deletes their files.
    public mutating func expireIdlePartials(nowMs: UInt64) -> [(owner: OwnerKey, name: BlobName)] {
        var gone: [(OwnerKey, BlobName)] = []
        for (owner, var s) in shelves {
            for (name, b) in s.blobs {
                guard case .partial = b.state else { continue }
                guard nowMs > b.touchedMs, nowMs - b.touchedMs >= UInt64(BackupLimits.idlePartialMs) else { continue }
                s.blobs[name] = nil
                s.usedBytes -= b.charge
                gone.append((owner, name))
            }
            shelves[owner] = s
        }
        return gone.sorted { ($0.0.lexicographicallyPrecedes($1.0)) || ($0.0 == $1.0 && $0.1 < $1.1) }
    }

    // MARK: snapshots and retention

    public mutating func recordSnapshot(owner: OwnerKey, _ m: BackupSnapshotMessage) -> BackupReplyMessage {
        guard var s = shelves[owner] else { return reply(m.requestID, .noOffer, quota: 0, used: 0) }
        let r = m.record
        if let existing = s.snapshots.first(where: { $0.snapshotID == r.snapshotID }) {
            return reply(m.requestID, existing == r ? .complete : .conflict, quota: s.quotaBytes, used: s.usedBytes)
        }
        guard s.snapshots.count < BackupLimits.snapshotsPerOwner else {
            return reply(m.requestID, .snapshotLimit, quota: s.quotaBytes, used: s.usedBytes)
        }
        var total: Int64 = 0
        for name in r.blobs {
            guard let b = s.blobs[name], b.state == .whole else {
                return reply(m.requestID, .missingBlobs, name: name, quota: s.quotaBytes, used: s.usedBytes)
            }
            total += b.size // ≤ 16 384 × 2^26
        }
        guard total == r.totalBytes else { return reply(m.requestID, .missingBlobs, quota: s.quotaBytes, used: s.usedBytes) }
        // backup.md 5.1: a signed header must verify, and each index blob's size be the one held.
        // An unsigned record (an owner from before 5.1) is kept; no restorer uses it.
        guard r.ownerSignature.isEmpty || r.header.verify(r.ownerSignature, owner: owner),
              zip(r.indexBlobs, r.indexSizes).allSatisfy({ s.blobs[$0.0]?.size == $0.1 }) else {
            return reply(m.requestID, .badRequest, quota: s.quotaBytes, used: s.usedBytes)
        }
        let charge = BackupLimits.chargedBytes(for: r)
        guard s.usedBytes + charge <= s.quotaBytes else { return reply(m.requestID, .overQuota, quota: s.quotaBytes, used: s.usedBytes) }
        s.usedBytes += charge
        s.snapshots.append(r)
        shelves[owner] = s
        return reply(m.requestID, .complete, quota: s.quotaBytes, used: s.usedBytes)
    }

    /// Keeps the `keepLast` most recently recorded snapshots and frees every blob (whole or
    /// partial) no kept snapshot names. Returns the answer and the blobs whose files to delete.
    public mutating func forget(owner: OwnerKey, _ m: BackupForgetMessage) -> (reply: BackupReplyMessage, freed: [BlobName]) {
        guard var s = shelves[owner] else { return (reply(m.requestID, .noOffer, quota: 0, used: 0), []) }
        if s.snapshots.count > m.keepLast {
            let dropped = s.snapshots.count - m.keepLast
            s.usedBytes -= s.snapshots.prefix(dropped).reduce(Int64(0)) { $0 + BackupLimits.chargedBytes(for: $1) }
            s.snapshots.removeFirst(dropped)
        }
        var referenced = Set<BlobName>()
        for r in s.snapshots { referenced.formUnion(r.blobs) }
        var freed: [BlobName] = []
        for (name, b) in s.blobs where !referenced.contains(name) {
            // A blob being checked is the service's in-flight work: left alone, freed by the next forget.
            if b.state == .checking { continue }
            freed.append(name)
        }
        for name in freed {
            s.usedBytes -= s.blobs[name]!.charge
            s.blobs[name] = nil
        }
        shelves[owner] = s
        freed.sort()
        return (reply(m.requestID, .ok, quota: s.quotaBytes, used: s.usedBytes, freedBlobs: freed.count), freed)
    }

    public func list(owner: OwnerKey, _ q: BackupListQueryMessage) -> BackupListReplyMessage {
        guard let s = shelves[owner] else {
            return BackupListReplyMessage(requestID: q.requestID, status: .noOffer, snapshots: [], quotaBytes: 0, usedBytes: 0)
        }
        return BackupListReplyMessage(requestID: q.requestID, status: .ok, snapshots: s.snapshots.map(\.summary),
                                      quotaBytes: s.quotaBytes, usedBytes: s.usedBytes)
    }

    // MARK: proof of storage

    /// Reads a whole blob of an owner, handing its bytes to the sink piece by piece; throws when
    /// it cannot (the file is gone or unreadable).
    public typealias BlobReader = (_ owner: OwnerKey, _ name: BlobName, _ sink: (UnsafeRawBufferPointer) -> Void) throws -> Void

    /// Answers a PROVE: a MAC per challenge over blobs this owner holds whole, NOT_FOUND for the
    /// others. The unkeyed hash is computed in the same pass: a blob that no longer hashes to its
    /// name (or cannot be read) is answered NOT_FOUND and forgotten, and listed in `corrupted` for
    /// the service to delete. Over the hashing budget: BUSY with `retry_after_ms`.
    public mutating func prove(owner: OwnerKey, _ m: BackupProveMessage, nowMs: UInt64, read: BlobReader)
        -> (reply: BackupProofMessage, corrupted: [BlobName]) {
        guard var s = shelves[owner] else {
            return (BackupProofMessage(requestID: m.requestID, status: .noOffer, answers: []), [])
        }
        // Refill the budget (1 GiB per minute, capacity 1 GiB). nowMs going backwards refills nothing.
        if nowMs > s.proofRefilledMs {
            let elapsed = Int64(clamping: nowMs - s.proofRefilledMs)
            let add = elapsed >= BackupLimits.proofRefillMs
                ? BackupLimits.proofBudgetBytes : elapsed * (BackupLimits.proofBudgetBytes / BackupLimits.proofRefillMs)
            s.proofTokens = min(BackupLimits.proofBudgetBytes, s.proofTokens + add)
            s.proofRefilledMs = nowMs
        }
        var cost: Int64 = 0
        for c in m.challenges {
            if let b = s.blobs[c.name], b.state == .whole { cost += b.size }
        }
        guard cost <= s.proofTokens else {
            let missing = cost - s.proofTokens
            let perMs = BackupLimits.proofBudgetBytes / BackupLimits.proofRefillMs
            let wait = UInt64(min((missing + perMs - 1) / perMs, Int64(BackupLimits.maximumRetryAfterMs)))
            shelves[owner] = s
            return (BackupProofMessage(requestID: m.requestID, status: .busy, answers: [], retryAfterMs: max(wait, 1)), [])
        }
        s.proofTokens -= cost
        var answers: [BackupProofAnswer] = []
        var corrupted: [BlobName] = []
        for c in m.challenges {
            guard let b = s.blobs[c.name], b.state == .whole else {
                answers.append(BackupProofAnswer(name: c.name, status: .notFound, mac: []))
                continue
            }
            var hasher = BackupProofOfStorage.Hasher(nonce: c.nonce)
            let readOK = (try? read(owner, c.name) { hasher.update($0) }) != nil
            let digest = hasher.finalize()
            let result: (mac: [UInt8], name: BlobName)? = readOK ? digest : nil
            if let result, result.name == c.name {
                answers.append(BackupProofAnswer(name: c.name, status: .ok, mac: result.mac))
            } else {
                answers.append(BackupProofAnswer(name: c.name, status: .notFound, mac: []))
                s.blobs[c.name] = nil
                s.usedBytes -= b.charge
                corrupted.append(c.name)
            }
        }
        if !corrupted.isEmpty {
            // A kept snapshot never names a blob the holder no longer has (section 5): the snapshots
            // that named a lost blob cannot be restored from here and go with it. Their other blobs
            // stay until a forget frees them.
            let lost = Set(corrupted)
            for r in s.snapshots where r.blobs.contains(where: { lost.contains($0) }) {
                s.usedBytes -= BackupLimits.chargedBytes(for: r)
            }
            s.snapshots.removeAll { r in r.blobs.contains { lost.contains($0) } }
        }
        shelves[owner] = s
        return (BackupProofMessage(requestID: m.requestID, status: .ok, answers: answers), corrupted)
    }

    // MARK: fetch

    public enum FetchDecision: Sendable, Equatable {
        case answer(BackupFetchedMessage)
        /// Read `length` bytes of the owner's blob at `offset` and answer
        /// `BackupFetchedMessage(status: .ok, name:, size:, offset:, data:)`.
        case read(name: BlobName, size: Int64, offset: Int64, length: Int)
    }

    /// A peer can only read its own whole blobs: names are looked up in the asker's shelf only.
    public func fetch(owner: OwnerKey, _ f: BackupFetchMessage) -> FetchDecision {
        guard let s = shelves[owner] else { return .answer(BackupFetchedMessage(requestID: f.requestID, status: .noOffer, name: f.name)) }
        guard let b = s.blobs[f.name], b.state == .whole else {
            return .answer(BackupFetchedMessage(requestID: f.requestID, status: .notFound, name: f.name))
        }
        guard f.offset < b.size else {
            return .answer(BackupFetchedMessage(requestID: f.requestID, status: .badRequest, name: f.name, size: b.size))
        }
        return .read(name: f.name, size: b.size, offset: f.offset, length: Int(min(Int64(f.length), b.size - f.offset)))
    }

    // MARK: recovery kit

    /// KIT_PUT: one kit per owner, in its quota; at most 4 owners per locator. `store` says
    /// whether the service must write `sealedKit` (replacing the owner's previous kit, whose
    /// locator is `replaced` if it differs).
    public mutating func putKit(owner: OwnerKey, _ m: BackupKitPutMessage) -> (reply: BackupReplyMessage, store: Bool, replaced: KitLocator?) {
        guard var s = shelves[owner] else { return (reply(m.requestID, .noOffer, quota: 0, used: 0), false, nil) }
        if let k = s.kit, m.version <= k.version {
            return (reply(m.requestID, .ok, quota: s.quotaBytes, used: s.usedBytes), false, nil)
        }
        let sameLocatorOwners = shelves.filter { $0.key != owner && $0.value.kit?.locator == m.locator }.count
        if s.kit?.locator != m.locator, sameLocatorOwners >= BackupLimits.kitsPerLocator {
            return (reply(m.requestID, .conflict, quota: s.quotaBytes, used: s.usedBytes), false, nil)
        }
        let size = Int64(m.sealedKit.count)
        let old = s.kit?.charge ?? 0
        let charge = BackupLimits.chargedBytes(forFileOf: size)
        guard s.usedBytes - old + charge <= s.quotaBytes else {
            return (reply(m.requestID, .overQuota, quota: s.quotaBytes, used: s.usedBytes), false, nil)
        }
        let replaced = s.kit.flatMap { $0.locator == m.locator ? nil : $0.locator }
        let sequence: UInt64
        if let k = s.kit, k.locator == m.locator {
            sequence = k.firstPutSequence
        } else {
            kitSequence += 1
            sequence = kitSequence
        }
        s.kit = Kit(locator: m.locator, version: m.version, size: size, firstPutSequence: sequence)
        s.usedBytes += charge - old
        shelves[owner] = s
        return (reply(m.requestID, .ok, quota: s.quotaBytes, used: s.usedBytes), true, replaced)
    }

    /// KIT_GET from anyone (rate-limited by the service before it gets here): the `index`-th
    /// owner (by first put) holding a kit under `locator`, and how many there are.
    public func kit(locator: KitLocator, index: Int) -> (owner: OwnerKey, kit: Kit, count: Int)? {
        let holders = shelves.compactMap { (key, s) -> (OwnerKey, Kit)? in
            guard let k = s.kit, k.locator == locator else { return nil }
            return (key, k)
        }.sorted { $0.1.firstPutSequence < $1.1.firstPutSequence }
        guard index >= 0, index < holders.count else { return nil }
        return (holders[index].0, holders[index].1, holders.count)
    }

    // MARK: invariants

    /// `used` equals what is held, and nothing exceeds its limits (used by tests and the fuzzer).
    public func invariantsHold() -> Bool {
        var perLocator: [KitLocator: Int] = [:]
        for s in shelves.values {
            let sum = s.blobs.values.reduce(Int64(0)) { $0 + $1.charge } + (s.kit?.charge ?? 0)
                + s.snapshots.reduce(Int64(0)) { $0 + BackupLimits.chargedBytes(for: $1) }
            guard sum == s.usedBytes, s.usedBytes >= 0 else { return false }
            guard s.partialCount <= BackupLimits.partialBlobsPerOwner, s.blobs.count <= BackupLimits.blobsPerOwner,
                  s.snapshots.count <= BackupLimits.snapshotsPerOwner else { return false }
            for r in s.snapshots where !r.blobs.allSatisfy({ s.blobs[$0]?.state == .whole }) { return false }
            if let k = s.kit { perLocator[k.locator, default: 0] += 1 }
        }
        return perLocator.values.allSatisfy { $0 <= BackupLimits.kitsPerLocator }
    }

    private func reply(_ id: BackupRequestID, _ status: BackupStatus, name: BlobName? = nil, held: Int64 = 0,
                       quota: Int64, used: Int64, freedBlobs: Int = 0) -> BackupReplyMessage {
        BackupReplyMessage(requestID: id, status: status, name: name, held: held, quotaBytes: quota, usedBytes: used,
                           freedBlobs: freedBlobs)
    }
}

extension BackupHolderBook {
    /// Tests only: account a whole blob without sending its pieces.
    mutating func testingInsertWhole(owner: OwnerKey, name: BlobName, size: Int64) {
        shelves[owner]?.blobs[name] = Blob(size: size, state: .whole, touchedMs: 0)
        shelves[owner]?.usedBytes += BackupLimits.chargedBytes(forFileOf: size)
    }
}

import Sodium

/// The owner's side of a push (Protocol/backup.md section 4): given the blobs of the local vault
/// (packs and index blobs, with sizes) and the holder's HAVE answers, which blobs and pieces to
/// send, in what order, how far to trust the holder's replies, and when the snapshot can be
/// recorded. Pure: the backup service reads piece bytes from the pack files, sends them, and feeds
/// the replies back. A dropped link or a restart of either side is handled by asking HAVE again and
/// building a new plan: whole blobs are skipped and partial ones resume at the holder's `held`.
public struct BackupPushPlan: Sendable, Equatable {
    public struct LocalBlob: Sendable, Equatable {
        public let name: BlobName
        public let size: Int64
        public let isIndex: Bool
        public init(name: BlobName, size: Int64, isIndex: Bool) {
            self.name = name
            self.size = size
            self.isIndex = isIndex
        }
    }

    /// One piece to send: bytes [offset, offset + length) of blob `name` (`size` bytes).
    public struct Piece: Sendable, Equatable, Hashable {
        public let name: BlobName
        public let size: Int64
        public let offset: Int64
        public let length: Int
        public var end: Int64 { offset + Int64(length) }
    }

    public struct PlanError: Error, Equatable, Sendable, CustomStringConvertible {
        public enum Kind: Sendable, Equatable {
            case badLocalBlob, badHolding, overQuota, noOffer, holderRefused, hashMismatchTwice, tooManyPartial
        }
        public let kind: Kind
        public let name: BlobName?
        public let description: String
    }

    public enum Event: Sendable, Equatable {
        /// Nothing new: keep sending.
        case progress
        case blobComplete(BlobName)
        /// Every blob is whole at the holder: send the snapshot (`snapshotRecord`).
        case readyForSnapshot
        /// The push stops.
        case failed(PlanError)
        /// The holder is busy: send nothing before `retryAfterMs`.
        case wait(retryAfterMs: UInt64)
    }

    private struct Progress: Sendable, Equatable {
        let blob: LocalBlob
        /// Next offset to send.
        var cursor: Int64
        /// Bytes the holder confirmed.
        var acked: Int64
        var mismatches: Int
        var done: Bool
        var started: Bool
    }

    public let local: [LocalBlob]
    private var order: [Progress]
    private var inFlight: [Piece] = []
    private var failure: PlanError?
    /// At most this many blobs unfinished at the holder (lowered when the holder says it has
    /// stale partial blobs of ours: TOO_MANY_PARTIAL).
    private var openLimit = BackupLimits.partialBlobsPerOwner
    public private(set) var bytesPlanned: Int64 = 0
    public private(set) var bytesSent: Int64 = 0

    /// `local` in any order (distinct names, sizes 1 … 64 MiB); `holdings` the holder's HAVE
    /// answers for them (any order; a missing answer counts as "nothing held"). Fails when a
    /// holding cannot come from an honest holder, or when what must still be reserved does not fit.
    public init(local: [LocalBlob], holdings: [BackupHolding], quotaBytes: Int64, usedBytes: Int64) throws(PlanError) {
        var seen = Set<BlobName>()
        for b in local {
            guard b.size >= 1, b.size <= BackupLimits.maximumBlobBytes, seen.insert(b.name).inserted else {
                throw PlanError(kind: .badLocalBlob, name: b.name, description: "local blob \(b.name) is a duplicate or of a bad size")
            }
        }
        var held: [BlobName: BackupHolding] = [:]
        for h in holdings where seen.contains(h.name) { held[h.name] = h }
        // Packs by name, then index blobs by name; blobs the holder holds in part first in each group.
        let sorted = local.sorted { a, b in
            if a.isIndex != b.isIndex { return !a.isIndex }
            let pa = (held[a.name].map { !$0.isAbsent && !$0.isWhole } ?? false)
            let pb = (held[b.name].map { !$0.isAbsent && !$0.isWhole } ?? false)
            if pa != pb { return pa }
            return a.name < b.name
        }
        var reserve: Int64 = 0
        var order: [Progress] = []
        var planned: Int64 = 0
        for b in sorted {
            let h = held[b.name] ?? BackupHolding(name: b.name, size: 0, held: 0)
            if h.isAbsent {
                reserve += BackupLimits.chargedBytes(forFileOf: b.size)
                order.append(Progress(blob: b, cursor: 0, acked: 0, mismatches: 0, done: false, started: false))
                planned += b.size
                continue
            }
            guard h.size == b.size, h.held <= h.size else {
                throw PlanError(kind: .badHolding, name: b.name, description: "the holder reports blob \(b.name) with another size")
            }
            let whole = h.isWhole
            order.append(Progress(blob: b, cursor: h.held, acked: h.held, mismatches: 0, done: whole, started: !whole))
            planned += b.size - h.held
        }
        // The snapshot record that follows is charged too (at most its blobs and index blobs).
        reserve += BackupLimits.chargedBytes(forSnapshotNaming: local.count + BackupLimits.indexBlobsPerSnapshot)
        let free = max(0, quotaBytes - usedBytes)
        guard reserve <= free else {
            throw PlanError(kind: .overQuota, name: nil,
                            description: "the push needs \(reserve) more bytes; the holder has \(free) of its quota free")
        }
        self.local = local
        self.order = order
        self.bytesPlanned = planned
    }

    public var isFailed: Bool { failure != nil }
    public var isReadyForSnapshot: Bool { failure == nil && order.allSatisfy(\.done) }
    public var piecesInFlight: [Piece] { inFlight }
    public var blobsRemaining: Int { order.filter { !$0.done }.count }

    /// The next pieces to send, so that at most `BackupLimits.piecesInFlight` are unanswered and at
    /// most 8 blobs are open at the holder. Pieces of one blob come in offset order.
    public mutating func nextPieces(limit: Int = BackupLimits.piecesInFlight) -> [Piece] {
        guard failure == nil else { return [] }
        var out: [Piece] = []
        var slots = min(limit, BackupLimits.piecesInFlight) - inFlight.count
        var i = 0
        while slots > 0, i < order.count {
            if order[i].done || order[i].cursor >= order[i].blob.size {
                i += 1
                continue
            }
            if !order[i].started {
                let open = order.filter { $0.started && !$0.done }.count
                guard open < openLimit else { break }
                order[i].started = true
            }
            let b = order[i].blob
            let length = Int(min(Int64(BackupLimits.pieceBytes), b.size - order[i].cursor))
            let piece = Piece(name: b.name, size: b.size, offset: order[i].cursor, length: length)
            order[i].cursor += Int64(length)
            out.append(piece)
            inFlight.append(piece)
            bytesSent += Int64(length)
            slots -= 1
        }
        return out
    }

    /// The holder's BACKUP_REPLY to `piece` (matched by request id by the caller).
    public mutating func handle(_ r: BackupReplyMessage, for piece: Piece) -> Event {
        if let failure { return .failed(failure) }
        guard let k = inFlight.firstIndex(of: piece) else { return .progress }
        inFlight.remove(at: k)
        guard let i = order.firstIndex(where: { $0.blob.name == piece.name }) else { return .progress }
        guard r.name == nil || r.name == piece.name else { return fail(.holderRefused, piece.name, "a reply names another blob") }
        switch r.status {
        case .ok:
            guard r.held <= piece.size else { return fail(.holderRefused, piece.name, "a reply holds more than the blob") }
            order[i].acked = max(order[i].acked, min(r.held, piece.end))
            return .progress
        case .complete:
            guard !order[i].done else { return .progress }
            order[i].done = true
            order[i].acked = piece.size
            order[i].cursor = piece.size
            dropInFlight(piece.name)
            return isReadyForSnapshot ? .readyForSnapshot : .blobComplete(piece.name)
        case .outOfOrder:
            guard r.held < piece.size else { return fail(.holderRefused, piece.name, "out of order at the blob's end") }
            rewind(i, to: r.held)
            return .progress
        case .hashMismatch:
            order[i].mismatches += 1
            guard order[i].mismatches < 2 else {
                return fail(.hashMismatchTwice, piece.name, "blob \(piece.name) failed the holder's hash check twice: check the local pack")
            }
            rewind(i, to: 0)
            order[i].started = false
            return .progress
        case .tooManyPartial:
            // The holder has stale partial blobs of ours: keep fewer open (at least one already open).
            let open = order.filter { $0.started && !$0.done }.count - 1
            rewind(i, to: 0)
            order[i].started = false
            guard open >= 1 else {
                return fail(.tooManyPartial, piece.name, "the holder keeps 8 unfinished blobs of ours: run backup forget")
            }
            openLimit = open
            return .progress
        case .busy:
            rewind(i, to: order[i].acked)
            return .wait(retryAfterMs: r.retryAfterMs)
        case .overQuota:
            return fail(.overQuota, piece.name, "the holder refused blob \(piece.name): over quota")
        case .noOffer:
            return fail(.noOffer, nil, "the holder has no offer for us")
        case .sizeMismatch, .missingBlobs, .snapshotLimit, .conflict, .notFound, .badRequest, .unspecified:
            return fail(.holderRefused, piece.name, "the holder refused blob \(piece.name) (\(r.status))")
        }
    }

    /// A piece whose answer never came (timeout): it and every later piece of its blob are sent again.
    public mutating func timedOut(_ piece: Piece) {
        guard failure == nil, inFlight.contains(piece), let i = order.firstIndex(where: { $0.blob.name == piece.name }) else { return }
        inFlight.removeAll { $0 == piece }
        rewind(i, to: min(order[i].cursor, max(order[i].acked, piece.offset)))
    }

    /// The snapshot record for this push, once `isReadyForSnapshot`.
    /// Signed by `owner` with `generation` (backup.md 5.1) when an owner is given.
    public func snapshotRecord(snapshotID: [UInt8], createdAtMs: UInt64, generation: UInt64 = 0,
                               owner: SigningKeyPair? = nil) throws(BackupSnapshotRecord.Invalid) -> BackupSnapshotRecord {
        let names = local.map(\.name).sorted()
        let indexBlobs = local.filter(\.isIndex).sorted { $0.name < $1.name }
        let total = local.reduce(Int64(0)) { $0 + $1.size }
        let record = try BackupSnapshotRecord(snapshotID: snapshotID, createdAtMs: createdAtMs, blobs: names,
                                              indexBlobs: indexBlobs.map(\.name), totalBytes: total, nowMs: createdAtMs,
                                              generation: generation, indexSizes: owner == nil ? [] : indexBlobs.map(\.size))
        return owner.map { record.signed(by: $0) } ?? record
    }

    private mutating func rewind(_ i: Int, to offset: Int64) {
        let o = min(max(offset, 0), order[i].blob.size)
        order[i].cursor = o
        order[i].acked = min(order[i].acked, o)
        dropInFlight(order[i].blob.name)
    }

    private mutating func dropInFlight(_ name: BlobName) {
        inFlight.removeAll { $0.name == name }
    }

    private mutating func fail(_ kind: PlanError.Kind, _ name: BlobName?, _ text: String) -> Event {
        let e = PlanError(kind: kind, name: name, description: text)
        failure = e
        inFlight.removeAll()
        return .failed(e)
    }
}

extension BackupStatus: CustomStringConvertible {
    public var description: String {
        switch self {
        case .unspecified: return "BACKUP_STATUS_UNSPECIFIED"
        case .ok: return "BACKUP_OK"
        case .complete: return "BACKUP_COMPLETE"
        case .noOffer: return "BACKUP_NO_OFFER"
        case .overQuota: return "BACKUP_OVER_QUOTA"
        case .outOfOrder: return "BACKUP_OUT_OF_ORDER"
        case .hashMismatch: return "BACKUP_HASH_MISMATCH"
        case .tooManyPartial: return "BACKUP_TOO_MANY_PARTIAL"
        case .sizeMismatch: return "BACKUP_SIZE_MISMATCH"
        case .missingBlobs: return "BACKUP_MISSING_BLOBS"
        case .snapshotLimit: return "BACKUP_SNAPSHOT_LIMIT"
        case .conflict: return "BACKUP_CONFLICT"
        case .notFound: return "BACKUP_NOT_FOUND"
        case .busy: return "BACKUP_BUSY"
        case .badRequest: return "BACKUP_BAD_REQUEST"
        }
    }
}

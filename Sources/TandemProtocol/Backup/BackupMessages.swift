import Foundation
import SwiftProtobuf
import Sodium

// Validated backup messages (Protocol/backup.md section 2). Every payload becomes one of these
// values through one validating initialiser `init(payload:…)` that checks every integer, length,
// count and time against backup.md 2.2 and throws `PayloadError` (MALFORMED) otherwise. Byte
// counts are carried as Int64 and are at most 2^50, so sums of a few of them cannot overflow.
// The sending side builds values with the memberwise initialisers and encodes them with `payload`.

extension MessageType {
    public static let backupRange: ClosedRange<UInt16> = 0x0401...0x04ff
    public var isBackup: Bool { Self.backupRange.contains(rawValue) }

    public static let backupOffer = MessageType(rawValue: 0x0401)
    public static let backupHaveQuery = MessageType(rawValue: 0x0402)
    public static let backupHaveReply = MessageType(rawValue: 0x0403)
    public static let backupPiece = MessageType(rawValue: 0x0404)
    public static let backupReply = MessageType(rawValue: 0x0405)
    public static let backupSnapshot = MessageType(rawValue: 0x0406)
    public static let backupForget = MessageType(rawValue: 0x0407)
    public static let backupList = MessageType(rawValue: 0x0408)
    public static let backupListReply = MessageType(rawValue: 0x0409)
    public static let backupProve = MessageType(rawValue: 0x040A)
    public static let backupProof = MessageType(rawValue: 0x040B)
    public static let backupFetch = MessageType(rawValue: 0x040C)
    public static let backupFetched = MessageType(rawValue: 0x040D)
    public static let backupKitPut = MessageType(rawValue: 0x040E)
    public static let backupKitGet = MessageType(rawValue: 0x040F)
    public static let backupKit = MessageType(rawValue: 0x0410)

    /// The backup types (in `known`: the node's backup service handles them).
    public static let backupTypes: [MessageType] = [
        .backupOffer, .backupHaveQuery, .backupHaveReply, .backupPiece, .backupReply, .backupSnapshot,
        .backupForget, .backupList, .backupListReply, .backupProve, .backupProof, .backupFetch,
        .backupFetched, .backupKitPut, .backupKitGet, .backupKit,
    ]

    public static let backupNames: [UInt16: String] = [
        0x0401: "BACKUP_OFFER", 0x0402: "BACKUP_HAVE_QUERY", 0x0403: "BACKUP_HAVE_REPLY", 0x0404: "BACKUP_PIECE",
        0x0405: "BACKUP_REPLY", 0x0406: "BACKUP_SNAPSHOT", 0x0407: "BACKUP_FORGET", 0x0408: "BACKUP_LIST",
        0x0409: "BACKUP_LIST_REPLY", 0x040A: "BACKUP_PROVE", 0x040B: "BACKUP_PROOF", 0x040C: "BACKUP_FETCH",
        0x040D: "BACKUP_FETCHED", 0x040E: "BACKUP_KIT_PUT", 0x040F: "BACKUP_KIT_GET", 0x0410: "BACKUP_KIT",
    ]
}

/// backup.md 2.2 and 9.
public enum BackupLimits {
    /// What a holder charges an owner's quota for one file it stores for it (backup.md 9, "What
    /// the quota counts"): the payload rounded up to the filesystem block, plus an estimate of the
    /// file's directory entry and inode. So a 2-byte blob costs what it takes on disk, not 2 bytes.
    public static let chargeBlockBytes: Int64 = 4_096
    public static let perFileOverheadBytes: Int64 = 512
    /// Estimated bytes of a stored snapshot record: a header, and each name (blobs and index
    /// blobs) as 64 hex digits with its quotes and comma.
    public static let snapshotRecordHeaderBytes: Int64 = 256
    public static let snapshotRecordBytesPerName: Int64 = 67

    /// The charge for a file of `bytes` payload (clamped to 0 … 2^52: no overflow).
    public static func chargedBytes(forFileOf bytes: Int64) -> Int64 {
        let b = min(max(bytes, 0), Int64(1) << 52)
        return (b + chargeBlockBytes - 1) / chargeBlockBytes * chargeBlockBytes + perFileOverheadBytes
    }

    /// The charge for a snapshot record naming `names` blobs (its blobs plus its index blobs).
    public static func chargedBytes(forSnapshotNaming names: Int) -> Int64 {
        let n = Int64(min(max(names, 0), blobsPerSnapshot + indexBlobsPerSnapshot))
        return chargedBytes(forFileOf: snapshotRecordHeaderBytes + n * snapshotRecordBytesPerName)
    }

    public static func chargedBytes(for record: BackupSnapshotRecord) -> Int64 {
        chargedBytes(forSnapshotNaming: record.blobs.count + record.indexBlobs.count)
    }

    public static let maximumPayloadBytes = 65_536
    public static let maximumBulkPayloadBytes = 263_168
    public static let maximumSnapshotPayloadBytes = 589_824
    public static let maximumQuotaBytes: Int64 = 1 << 50
    public static let maximumVersion: UInt64 = (1 << 53) - 1
    public static let maximumBlobBytes: Int64 = 64 * 1024 * 1024
    public static let pieceBytes = 262_144
    public static let namesPerQuery = 1_024
    public static let blobsPerSnapshot = 16_384
    public static let indexBlobsPerSnapshot = 8
    public static let maximumSnapshotBytes: Int64 = Int64(blobsPerSnapshot) * maximumBlobBytes
    public static let snapshotsPerOwner = 64
    public static let blobsPerOwner = 65_536
    public static let partialBlobsPerOwner = 8
    public static let challengesPerProve = 32
    public static let maximumRetryAfterMs: UInt64 = 3_600_000
    public static let futureToleranceMs: UInt64 = 600_000
    public static let minimumSealedKitBytes = 41
    public static let maximumSealedKitBytes = RecoveryKitSeal.maximumSealedBytes
    public static let kitsPerLocator = 4
    public static let maximumKitIndex: UInt32 = 3
    /// Owner side: pieces unanswered at once.
    public static let piecesInFlight = 16
    /// Holder: a partial blob no piece extended for this long is discarded.
    public static let idlePartialMs: Int64 = 7 * 86_400_000
    /// Holder: proof hashing per owner: a bucket of 1 GiB refilled at 1 GiB per minute.
    public static let proofBudgetBytes: Int64 = 1 << 30
    public static let proofRefillMs: Int64 = 60_000
}

/// `BackupStatus` as a closed set; unknown values read as `.unspecified` (a failure).
public enum BackupStatus: Int, Sendable, Codable, CaseIterable {
    case unspecified = 0, ok, complete, noOffer, overQuota, outOfOrder, hashMismatch, tooManyPartial,
         sizeMismatch, missingBlobs, snapshotLimit, conflict, notFound, busy, badRequest

    init(_ p: Tandem_V1_BackupStatus) { self = BackupStatus(rawValue: p.rawValue) ?? .unspecified }
    var proto: Tandem_V1_BackupStatus { Tandem_V1_BackupStatus(rawValue: rawValue) ?? .unspecified }
}

/// A request id: 16 random bytes chosen by the asker.
public struct BackupRequestID: Hashable, Sendable, Codable {
    public let bytes: [UInt8]
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
    }
}

// MARK: - decoding helpers

private func decodeBackup<M: SwiftProtobuf.Message>(_ m: M.Type, _ type: MessageType, _ payload: [UInt8],
                                                    max: Int = BackupLimits.maximumPayloadBytes) throws -> M {
    guard payload.count <= max else { throw PayloadError(type, "payload of \(payload.count) bytes exceeds \(max)") }
    do {
        return try M(serializedBytes: payload)
    } catch {
        throw PayloadError(type, "payload is not a \(M.protoMessageName)")
    }
}

private func requestID(_ d: Data, _ type: MessageType) throws -> BackupRequestID {
    guard let id = BackupRequestID(bytes: Array(d)) else { throw PayloadError(type, "request id is \(d.count) bytes, not 16") }
    return id
}

private func blobName(_ d: Data, _ type: MessageType, _ what: String = "name") throws -> BlobName {
    guard let n = BlobName(bytes: Array(d)) else { throw PayloadError(type, "\(what) is \(d.count) bytes, not 32") }
    return n
}

private func optionalName(_ d: Data, _ type: MessageType) throws -> BlobName? {
    d.isEmpty ? nil : try blobName(d, type)
}

private func bytesCount(_ v: UInt64, max: Int64, _ type: MessageType, _ what: String) throws -> Int64 {
    guard v <= UInt64(max) else { throw PayloadError(type, "\(what) of \(v) exceeds \(max)") }
    return Int64(v)
}

private func quotaPair(_ quota: UInt64, _ used: UInt64, _ type: MessageType) throws -> (Int64, Int64) {
    (try bytesCount(quota, max: BackupLimits.maximumQuotaBytes, type, "quota"),
     try bytesCount(used, max: BackupLimits.maximumQuotaBytes, type, "used bytes"))
}

private func retryAfter(_ v: UInt64, _ type: MessageType) throws -> UInt64 {
    guard v <= BackupLimits.maximumRetryAfterMs else { throw PayloadError(type, "retry after \(v) ms exceeds an hour") }
    return v
}

private func strictlyIncreasing(_ names: [BlobName]) -> Bool {
    var i = 1
    while i < names.count {
        guard names[i - 1] < names[i] else { return false }
        i += 1
    }
    return true
}

private func serialize(_ m: some SwiftProtobuf.Message) -> [UInt8] {
    // Encoding a message built from validated values cannot fail (no required fields, valid UTF-8).
    (try? m.serializedBytes()) ?? []
}

// MARK: - offer

/// BACKUP_OFFER: quota 0 … 2^50 (0 withdraws), version 1 … 2^53-1.
public struct BackupOfferMessage: Equatable, Sendable {
    public let quotaBytes: Int64
    public let version: UInt64

    public init(quotaBytes: Int64, version: UInt64) {
        precondition((0...BackupLimits.maximumQuotaBytes).contains(quotaBytes) && (1...BackupLimits.maximumVersion).contains(version))
        self.quotaBytes = quotaBytes
        self.version = version
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupOffer
        let m = try decodeBackup(Tandem_V1_BackupOffer.self, t, payload)
        quotaBytes = try bytesCount(m.quotaBytes, max: BackupLimits.maximumQuotaBytes, t, "quota")
        guard (1...BackupLimits.maximumVersion).contains(m.version) else { throw PayloadError(t, "version \(m.version) out of range") }
        version = m.version
    }

    public var isWithdrawal: Bool { quotaBytes == 0 }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupOffer()
        m.quotaBytes = UInt64(quotaBytes)
        m.version = version
        return serialize(m)
    }
}

// MARK: - have

public struct BackupHaveQueryMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let names: [BlobName]

    public init(requestID: BackupRequestID, names: [BlobName]) {
        precondition((1...BackupLimits.namesPerQuery).contains(names.count))
        self.requestID = requestID
        self.names = names
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupHaveQuery
        let m = try decodeBackup(Tandem_V1_BackupHaveQuery.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        guard (1...BackupLimits.namesPerQuery).contains(m.names.count) else {
            throw PayloadError(t, "\(m.names.count) names (1…\(BackupLimits.namesPerQuery))")
        }
        let list = try m.names.map { try blobName($0, t) }
        guard Set(list).count == list.count else { throw PayloadError(t, "a name is asked twice") }
        names = list
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupHaveQuery()
        m.requestID = Data(requestID.bytes)
        m.names = names.map { Data($0.bytes) }
        return serialize(m)
    }
}

/// What a holder holds of one blob: nothing (0, 0), a partial blob (0 < held < size), or whole (held = size).
public struct BackupHolding: Equatable, Sendable, Codable {
    public let name: BlobName
    public let size: Int64
    public let held: Int64

    public init(name: BlobName, size: Int64, held: Int64) {
        precondition(size >= 0 && size <= BackupLimits.maximumBlobBytes && held >= 0 && held <= size)
        self.name = name
        self.size = size
        self.held = held
    }

    public var isWhole: Bool { size > 0 && held == size }
    public var isAbsent: Bool { size == 0 }
}

public struct BackupHaveReplyMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let status: BackupStatus
    public let holdings: [BackupHolding]
    public let quotaBytes: Int64
    public let usedBytes: Int64

    public init(requestID: BackupRequestID, status: BackupStatus, holdings: [BackupHolding], quotaBytes: Int64, usedBytes: Int64) {
        self.requestID = requestID
        self.status = status
        self.holdings = holdings
        self.quotaBytes = quotaBytes
        self.usedBytes = usedBytes
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupHaveReply
        let m = try decodeBackup(Tandem_V1_BackupHaveReply.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        status = BackupStatus(m.status)
        guard m.holdings.count <= BackupLimits.namesPerQuery else { throw PayloadError(t, "\(m.holdings.count) holdings") }
        holdings = try m.holdings.map { h in
            let name = try blobName(h.name, t)
            let size = try bytesCount(h.size, max: BackupLimits.maximumBlobBytes, t, "size")
            guard h.held <= h.size else { throw PayloadError(t, "held \(h.held) exceeds size \(h.size)") }
            return BackupHolding(name: name, size: size, held: Int64(h.held))
        }
        (quotaBytes, usedBytes) = try quotaPair(m.quotaBytes, m.usedBytes, t)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupHaveReply()
        m.requestID = Data(requestID.bytes)
        m.status = status.proto
        m.holdings = holdings.map { h in
            var p = Tandem_V1_BackupHolding()
            p.name = Data(h.name.bytes)
            p.size = UInt64(h.size)
            p.held = UInt64(h.held)
            return p
        }
        m.quotaBytes = UInt64(quotaBytes)
        m.usedBytes = UInt64(usedBytes)
        return serialize(m)
    }
}

// MARK: - pieces

/// BACKUP_PIECE: size 1 … 64 MiB, data 1 … 256 KiB, offset + |data| ≤ size.
public struct BackupPieceMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let name: BlobName
    public let size: Int64
    public let offset: Int64
    public let data: [UInt8]

    public init(requestID: BackupRequestID, name: BlobName, size: Int64, offset: Int64, data: [UInt8]) {
        precondition(size >= 1 && size <= BackupLimits.maximumBlobBytes && offset >= 0
                     && (1...BackupLimits.pieceBytes).contains(data.count) && offset + Int64(data.count) <= size)
        self.requestID = requestID
        self.name = name
        self.size = size
        self.offset = offset
        self.data = data
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupPiece
        let m = try decodeBackup(Tandem_V1_BackupPiece.self, t, payload, max: BackupLimits.maximumBulkPayloadBytes)
        requestID = try backupRequestID(m.requestID, t)
        name = try blobName(m.name, t)
        let s = try bytesCount(m.size, max: BackupLimits.maximumBlobBytes, t, "size")
        guard s >= 1 else { throw PayloadError(t, "size 0") }
        guard (1...BackupLimits.pieceBytes).contains(m.data.count) else {
            throw PayloadError(t, "piece of \(m.data.count) bytes (1…\(BackupLimits.pieceBytes))")
        }
        let o = try bytesCount(m.offset, max: BackupLimits.maximumBlobBytes, t, "offset")
        guard o + Int64(m.data.count) <= s else { throw PayloadError(t, "piece ends past the blob's size") }
        size = s
        offset = o
        data = Array(m.data)
    }

    public var end: Int64 { offset + Int64(data.count) }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupPiece()
        m.requestID = Data(requestID.bytes)
        m.name = Data(name.bytes)
        m.size = UInt64(size)
        m.offset = UInt64(offset)
        m.data = Data(data)
        return serialize(m)
    }
}

/// BACKUP_REPLY: the answer to PIECE, SNAPSHOT, FORGET and KIT_PUT.
public struct BackupReplyMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let status: BackupStatus
    public let name: BlobName?
    public let held: Int64
    public let quotaBytes: Int64
    public let usedBytes: Int64
    public let retryAfterMs: UInt64
    public let freedBlobs: Int

    public init(requestID: BackupRequestID, status: BackupStatus, name: BlobName? = nil, held: Int64 = 0,
                quotaBytes: Int64, usedBytes: Int64, retryAfterMs: UInt64 = 0, freedBlobs: Int = 0) {
        self.requestID = requestID
        self.status = status
        self.name = name
        self.held = held
        self.quotaBytes = quotaBytes
        self.usedBytes = usedBytes
        self.retryAfterMs = retryAfterMs
        self.freedBlobs = freedBlobs
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupReply
        let m = try decodeBackup(Tandem_V1_BackupReply.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        status = BackupStatus(m.status)
        name = try optionalName(m.name, t)
        held = try bytesCount(m.held, max: BackupLimits.maximumBlobBytes, t, "held")
        (quotaBytes, usedBytes) = try quotaPair(m.quotaBytes, m.usedBytes, t)
        retryAfterMs = try retryAfter(m.retryAfterMs, t)
        freedBlobs = Int(try bytesCount(m.freedBlobs, max: Int64(BackupLimits.blobsPerOwner), t, "freed blobs"))
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupReply()
        m.requestID = Data(requestID.bytes)
        m.status = status.proto
        if let name { m.name = Data(name.bytes) }
        m.held = UInt64(held)
        m.quotaBytes = UInt64(quotaBytes)
        m.usedBytes = UInt64(usedBytes)
        m.retryAfterMs = retryAfterMs
        m.freedBlobs = UInt64(freedBlobs)
        return serialize(m)
    }
}

// MARK: - snapshots

/// A snapshot record (backup.md 2.2, 5): 1…16 384 strictly increasing blob names, index blobs a
/// strictly increasing subset of at most 8, total 1 … 2^40, created 1 … now + 10 min. Since
/// backup.md 5.1 it also carries the owner's generation, each index blob's size and the owner's
/// signature over its header (`BackupSnapshotHeader`); records stored before have neither.
public struct BackupSnapshotRecord: Equatable, Sendable, Codable {
    public let snapshotID: [UInt8]
    public let createdAtMs: UInt64
    public let blobs: [BlobName]
    public let indexBlobs: [BlobName]
    public let totalBytes: Int64
    public let generation: UInt64
    /// The size of each index blob, in `indexBlobs`' order (empty in an unsigned record).
    public let indexSizes: [Int64]
    /// 64 bytes, or empty (an unsigned record from before 5.1).
    public let ownerSignature: [UInt8]

    public struct Invalid: Error, Equatable, Sendable { public let detail: String }

    /// The one validating initialiser; the message decoder maps `Invalid` to MALFORMED.
    public init(snapshotID: [UInt8], createdAtMs: UInt64, blobs: [BlobName], indexBlobs: [BlobName],
                totalBytes: Int64, nowMs: UInt64, generation: UInt64 = 0, indexSizes: [Int64] = [],
                ownerSignature: [UInt8] = []) throws(Invalid) {
        guard snapshotID.count == 16 else { throw Invalid(detail: "snapshot id is \(snapshotID.count) bytes, not 16") }
        let latest = nowMs > UInt64.max - BackupLimits.futureToleranceMs ? UInt64.max : nowMs + BackupLimits.futureToleranceMs
        guard createdAtMs >= 1, createdAtMs <= latest, createdAtMs <= BackupLimits.maximumVersion else {
            throw Invalid(detail: "created_at_ms \(createdAtMs) out of range")
        }
        guard (1...BackupLimits.blobsPerSnapshot).contains(blobs.count) else { throw Invalid(detail: "\(blobs.count) blobs") }
        guard strictlyIncreasing(blobs) else { throw Invalid(detail: "blobs are not sorted and distinct") }
        guard indexBlobs.count <= BackupLimits.indexBlobsPerSnapshot else { throw Invalid(detail: "\(indexBlobs.count) index blobs") }
        guard strictlyIncreasing(indexBlobs) else { throw Invalid(detail: "index blobs are not sorted and distinct") }
        let all = Set(blobs)
        guard indexBlobs.allSatisfy({ all.contains($0) }) else { throw Invalid(detail: "an index blob is not among the blobs") }
        guard totalBytes >= 1, totalBytes <= BackupLimits.maximumSnapshotBytes else { throw Invalid(detail: "total_bytes \(totalBytes)") }
        guard generation <= BackupLimits.maximumVersion else { throw Invalid(detail: "generation \(generation) out of range") }
        try BackupSnapshotHeader.check(indexBlobs: indexBlobs, indexSizes: indexSizes, totalBytes: totalBytes,
                                       ownerSignature: ownerSignature)
        self.snapshotID = snapshotID
        self.createdAtMs = createdAtMs
        self.blobs = blobs
        self.indexBlobs = indexBlobs
        self.totalBytes = totalBytes
        self.generation = generation
        self.indexSizes = indexSizes
        self.ownerSignature = ownerSignature
    }

    init(validating r: Tandem_V1_BackupSnapshotRecord, nowMs: UInt64, _ t: MessageType) throws {
        guard r.blobs.count <= BackupLimits.blobsPerSnapshot, r.indexBlobs.count <= BackupLimits.indexBlobsPerSnapshot,
              r.indexSizes.count <= BackupLimits.indexBlobsPerSnapshot else {
            throw PayloadError(t, "too many blobs")
        }
        let blobs = try r.blobs.map { try blobName($0, t) }
        let index = try r.indexBlobs.map { try blobName($0, t) }
        let total = try bytesCount(r.totalBytes, max: BackupLimits.maximumSnapshotBytes, t, "total bytes")
        let sizes = try r.indexSizes.map { try bytesCount($0, max: BackupLimits.maximumBlobBytes, t, "index size") }
        do {
            try self.init(snapshotID: Array(r.snapshotID), createdAtMs: r.createdAtMs, blobs: blobs, indexBlobs: index,
                          totalBytes: total, nowMs: nowMs, generation: r.generation, indexSizes: sizes,
                          ownerSignature: Array(r.ownerSignature))
        } catch {
            throw PayloadError(t, error.detail)
        }
    }

    /// Stored records from before backup.md 5.1 have no generation, sizes or signature.
    public init(from decoder: any Swift.Decoder) throws {
        enum K: String, CodingKey { case snapshotID, createdAtMs, blobs, indexBlobs, totalBytes, generation, indexSizes, ownerSignature }
        let c = try decoder.container(keyedBy: K.self)
        snapshotID = try c.decode([UInt8].self, forKey: .snapshotID)
        createdAtMs = try c.decode(UInt64.self, forKey: .createdAtMs)
        blobs = try c.decode([BlobName].self, forKey: .blobs)
        indexBlobs = try c.decode([BlobName].self, forKey: .indexBlobs)
        totalBytes = try c.decode(Int64.self, forKey: .totalBytes)
        generation = try c.decodeIfPresent(UInt64.self, forKey: .generation) ?? 0
        indexSizes = try c.decodeIfPresent([Int64].self, forKey: .indexSizes) ?? []
        ownerSignature = try c.decodeIfPresent([UInt8].self, forKey: .ownerSignature) ?? []
    }

    var proto: Tandem_V1_BackupSnapshotRecord {
        var r = Tandem_V1_BackupSnapshotRecord()
        r.snapshotID = Data(snapshotID)
        r.createdAtMs = createdAtMs
        r.blobs = blobs.map { Data($0.bytes) }
        r.indexBlobs = indexBlobs.map { Data($0.bytes) }
        r.totalBytes = UInt64(totalBytes)
        r.generation = generation
        r.indexSizes = indexSizes.map { UInt64($0) }
        r.ownerSignature = Data(ownerSignature)
        return r
    }

    public var header: BackupSnapshotHeader {
        BackupSnapshotHeader(snapshotID: snapshotID, generation: generation, createdAtMs: createdAtMs, totalBytes: totalBytes,
                             blobCount: blobs.count, indexBlobs: indexBlobs, indexSizes: indexSizes)
    }

    /// This record with the owner's signature over its header.
    public func signed(by owner: SigningKeyPair) -> BackupSnapshotRecord {
        var copy = self
        copy.setSignature(owner.sign(header.signable(owner: owner.publicKey)))
        return copy
    }

    private mutating func setSignature(_ s: [UInt8]) { self = BackupSnapshotRecord(copying: self, signature: s) }

    private init(copying r: BackupSnapshotRecord, signature: [UInt8]) {
        snapshotID = r.snapshotID
        createdAtMs = r.createdAtMs
        blobs = r.blobs
        indexBlobs = r.indexBlobs
        totalBytes = r.totalBytes
        generation = r.generation
        indexSizes = r.indexSizes
        ownerSignature = signature
    }

    public var summary: BackupSnapshotSummary {
        BackupSnapshotSummary(snapshotID: snapshotID, createdAtMs: createdAtMs, blobCount: blobs.count,
                              indexBlobs: indexBlobs, totalBytes: totalBytes, generation: generation, indexSizes: indexSizes,
                              ownerSignature: ownerSignature)
    }
}

/// What the owner signs of a snapshot (backup.md 5.1): everything a LIST summary carries, so a
/// restorer checks a summary without the record, and the index blobs' names and sizes, which fix
/// the index files and through them every pack (the index names each pack and its size).
///
///     "tandem/backup/snapshot/v2" ‖ 0x00 ‖ owner (32) ‖ snapshot id (16) ‖ generation (u64)
///       ‖ created_at_ms (u64) ‖ total_bytes (u64) ‖ blob_count (u32) ‖ index count (u8)
///       ‖ index count × ( name (32) ‖ size (u64) )
public struct BackupSnapshotHeader: Equatable, Sendable {
    public let snapshotID: [UInt8]
    public let generation: UInt64
    public let createdAtMs: UInt64
    public let totalBytes: Int64
    public let blobCount: Int
    public let indexBlobs: [BlobName]
    public let indexSizes: [Int64]

    public static let domain = Array("tandem/backup/snapshot/v2".utf8) + [0]

    public func signable(owner: [UInt8]) -> [UInt8] {
        var out = Self.domain
        out.reserveCapacity(out.count + 32 + 16 + 8 * 3 + 4 + 1 + indexBlobs.count * 40)
        func u64(_ v: UInt64) { for s in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: v >> UInt64(s))) } }
        out += owner
        out += snapshotID
        u64(generation)
        u64(createdAtMs)
        u64(UInt64(clamping: totalBytes))
        let n = UInt32(clamping: blobCount)
        for s in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: n >> UInt32(s))) }
        out.append(UInt8(clamping: indexBlobs.count))
        for (name, size) in zip(indexBlobs, indexSizes) {
            out += name.bytes
            u64(UInt64(clamping: size))
        }
        return out
    }

    /// True when `signature` is `owner`'s over this header.
    public func verify(_ signature: [UInt8], owner: [UInt8]) -> Bool {
        signature.count == 64 && indexSizes.count == indexBlobs.count && Ed25519.verify(signature: signature, message: signable(owner: owner), publicKey: owner)
    }

    /// Shape rules shared by records and summaries: a signature is 64 bytes or absent; a signed
    /// header names each index blob's size (1 … 64 MiB), and they fit in `totalBytes`.
    static func check(indexBlobs: [BlobName], indexSizes: [Int64], totalBytes: Int64, ownerSignature: [UInt8])
        throws(BackupSnapshotRecord.Invalid) {
        guard ownerSignature.isEmpty || ownerSignature.count == 64 else {
            throw .init(detail: "owner signature is \(ownerSignature.count) bytes")
        }
        guard indexSizes.isEmpty || indexSizes.count == indexBlobs.count else { throw .init(detail: "index sizes do not match index blobs") }
        guard ownerSignature.isEmpty || indexSizes.count == indexBlobs.count else { throw .init(detail: "a signed record without index sizes") }
        var sum: Int64 = 0
        for size in indexSizes {
            guard (1...BackupLimits.maximumBlobBytes).contains(size) else { throw .init(detail: "index size \(size)") }
            sum += size  // ≤ 8 × 2^26
        }
        guard sum <= totalBytes else { throw .init(detail: "index sizes exceed total_bytes") }
    }
}

public struct BackupSnapshotMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let record: BackupSnapshotRecord

    public init(requestID: BackupRequestID, record: BackupSnapshotRecord) {
        self.requestID = requestID
        self.record = record
    }

    public init(payload: [UInt8], nowMs: UInt64) throws {
        let t = MessageType.backupSnapshot
        let m = try decodeBackup(Tandem_V1_BackupSnapshot.self, t, payload, max: BackupLimits.maximumSnapshotPayloadBytes)
        requestID = try backupRequestID(m.requestID, t)
        guard m.hasRecord else { throw PayloadError(t, "no record") }
        record = try BackupSnapshotRecord(validating: m.record, nowMs: nowMs, t)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupSnapshot()
        m.requestID = Data(requestID.bytes)
        m.record = record.proto
        return serialize(m)
    }
}

/// BACKUP_FORGET: keep_last 1 … 64.
public struct BackupForgetMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let keepLast: Int

    public init(requestID: BackupRequestID, keepLast: Int) {
        precondition((1...BackupLimits.snapshotsPerOwner).contains(keepLast))
        self.requestID = requestID
        self.keepLast = keepLast
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupForget
        let m = try decodeBackup(Tandem_V1_BackupForget.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        guard m.keepLast >= 1, m.keepLast <= UInt32(BackupLimits.snapshotsPerOwner) else {
            throw PayloadError(t, "keep_last \(m.keepLast) (1…\(BackupLimits.snapshotsPerOwner))")
        }
        keepLast = Int(m.keepLast)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupForget()
        m.requestID = Data(requestID.bytes)
        m.keepLast = UInt32(keepLast)
        return serialize(m)
    }
}

public struct BackupListQueryMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public init(requestID: BackupRequestID) { self.requestID = requestID }
    public init(payload: [UInt8]) throws {
        let m = try decodeBackup(Tandem_V1_BackupListQuery.self, .backupList, payload)
        requestID = try backupRequestID(m.requestID, .backupList)
    }
    public var payload: [UInt8] {
        var m = Tandem_V1_BackupListQuery()
        m.requestID = Data(requestID.bytes)
        return serialize(m)
    }
}

public struct BackupSnapshotSummary: Equatable, Sendable {
    public let snapshotID: [UInt8]
    public let createdAtMs: UInt64
    public let blobCount: Int
    public let indexBlobs: [BlobName]
    public let totalBytes: Int64
    public var generation: UInt64 = 0
    public var indexSizes: [Int64] = []
    public var ownerSignature: [UInt8] = []

    public var header: BackupSnapshotHeader {
        BackupSnapshotHeader(snapshotID: snapshotID, generation: generation, createdAtMs: createdAtMs, totalBytes: totalBytes,
                             blobCount: blobCount, indexBlobs: indexBlobs, indexSizes: indexSizes)
    }

    /// True when the owner signed this summary's header (a restorer trusts nothing else of it).
    public func isSigned(by owner: [UInt8]) -> Bool { header.verify(ownerSignature, owner: owner) }
}

public struct BackupListReplyMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let status: BackupStatus
    public let snapshots: [BackupSnapshotSummary]
    public let quotaBytes: Int64
    public let usedBytes: Int64

    public init(requestID: BackupRequestID, status: BackupStatus, snapshots: [BackupSnapshotSummary], quotaBytes: Int64, usedBytes: Int64) {
        self.requestID = requestID
        self.status = status
        self.snapshots = snapshots
        self.quotaBytes = quotaBytes
        self.usedBytes = usedBytes
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupListReply
        let m = try decodeBackup(Tandem_V1_BackupListReply.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        status = BackupStatus(m.status)
        guard m.snapshots.count <= BackupLimits.snapshotsPerOwner else { throw PayloadError(t, "\(m.snapshots.count) snapshots") }
        snapshots = try m.snapshots.map { s in
            guard s.snapshotID.count == 16 else { throw PayloadError(t, "snapshot id is \(s.snapshotID.count) bytes") }
            guard s.createdAtMs <= BackupLimits.maximumVersion else { throw PayloadError(t, "created_at_ms out of range") }
            guard (1...UInt32(BackupLimits.blobsPerSnapshot)).contains(s.blobCount) else { throw PayloadError(t, "blob count \(s.blobCount)") }
            guard s.indexBlobs.count <= BackupLimits.indexBlobsPerSnapshot, s.indexSizes.count <= BackupLimits.indexBlobsPerSnapshot else {
                throw PayloadError(t, "too many index blobs")
            }
            guard s.generation <= BackupLimits.maximumVersion else { throw PayloadError(t, "generation out of range") }
            let index = try s.indexBlobs.map { try blobName($0, t) }
            let total = try bytesCount(s.totalBytes, max: BackupLimits.maximumSnapshotBytes, t, "total bytes")
            let sizes = try s.indexSizes.map { try bytesCount($0, max: BackupLimits.maximumBlobBytes, t, "index size") }
            do {
                try BackupSnapshotHeader.check(indexBlobs: index, indexSizes: sizes, totalBytes: total, ownerSignature: Array(s.ownerSignature))
            } catch let e as BackupSnapshotRecord.Invalid {
                throw PayloadError(t, e.detail)
            }
            return BackupSnapshotSummary(snapshotID: Array(s.snapshotID), createdAtMs: s.createdAtMs, blobCount: Int(s.blobCount),
                                         indexBlobs: index, totalBytes: total, generation: s.generation, indexSizes: sizes,
                                         ownerSignature: Array(s.ownerSignature))
        }
        (quotaBytes, usedBytes) = try quotaPair(m.quotaBytes, m.usedBytes, t)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupListReply()
        m.requestID = Data(requestID.bytes)
        m.status = status.proto
        m.snapshots = snapshots.map { s in
            var p = Tandem_V1_BackupSnapshotSummary()
            p.snapshotID = Data(s.snapshotID)
            p.createdAtMs = s.createdAtMs
            p.blobCount = UInt32(s.blobCount)
            p.indexBlobs = s.indexBlobs.map { Data($0.bytes) }
            p.totalBytes = UInt64(s.totalBytes)
            p.generation = s.generation
            p.indexSizes = s.indexSizes.map { UInt64($0) }
            p.ownerSignature = Data(s.ownerSignature)
            return p
        }
        m.quotaBytes = UInt64(quotaBytes)
        m.usedBytes = UInt64(usedBytes)
        return serialize(m)
    }
}

// MARK: - proof of storage

public struct BackupProofChallenge: Equatable, Sendable {
    public let name: BlobName
    public let nonce: [UInt8]
    public init(name: BlobName, nonce: [UInt8]) {
        precondition(nonce.count == BackupProofOfStorage.nonceBytes)
        self.name = name
        self.nonce = nonce
    }
}

/// BACKUP_PROVE: 1 … 32 challenges over distinct names, nonces of 32 bytes.
public struct BackupProveMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let challenges: [BackupProofChallenge]

    public init(requestID: BackupRequestID, challenges: [BackupProofChallenge]) {
        precondition((1...BackupLimits.challengesPerProve).contains(challenges.count))
        self.requestID = requestID
        self.challenges = challenges
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupProve
        let m = try decodeBackup(Tandem_V1_BackupProve.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        guard (1...BackupLimits.challengesPerProve).contains(m.challenges.count) else {
            throw PayloadError(t, "\(m.challenges.count) challenges (1…\(BackupLimits.challengesPerProve))")
        }
        challenges = try m.challenges.map { c in
            guard c.nonce.count == BackupProofOfStorage.nonceBytes else { throw PayloadError(t, "nonce is \(c.nonce.count) bytes, not 32") }
            return BackupProofChallenge(name: try blobName(c.name, t), nonce: Array(c.nonce))
        }
        guard Set(challenges.map(\.name)).count == challenges.count else { throw PayloadError(t, "a blob is challenged twice") }
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupProve()
        m.requestID = Data(requestID.bytes)
        m.challenges = challenges.map { c in
            var p = Tandem_V1_BackupProofChallenge()
            p.name = Data(c.name.bytes)
            p.nonce = Data(c.nonce)
            return p
        }
        return serialize(m)
    }
}

public struct BackupProofAnswer: Equatable, Sendable {
    public let name: BlobName
    public let status: BackupStatus
    /// 32 bytes with `.ok`, empty otherwise.
    public let mac: [UInt8]
}

public struct BackupProofMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let status: BackupStatus
    public let answers: [BackupProofAnswer]
    public let retryAfterMs: UInt64

    public init(requestID: BackupRequestID, status: BackupStatus, answers: [BackupProofAnswer], retryAfterMs: UInt64 = 0) {
        self.requestID = requestID
        self.status = status
        self.answers = answers
        self.retryAfterMs = retryAfterMs
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupProof
        let m = try decodeBackup(Tandem_V1_BackupProof.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        status = BackupStatus(m.status)
        guard m.answers.count <= BackupLimits.challengesPerProve else { throw PayloadError(t, "\(m.answers.count) answers") }
        answers = try m.answers.map { a in
            let s = BackupStatus(a.status)
            if s == .ok {
                guard a.mac.count == BackupProofOfStorage.macBytes else { throw PayloadError(t, "mac is \(a.mac.count) bytes, not 32") }
            } else {
                guard a.mac.isEmpty else { throw PayloadError(t, "a mac without BACKUP_OK") }
            }
            return BackupProofAnswer(name: try blobName(a.name, t), status: s, mac: Array(a.mac))
        }
        retryAfterMs = try retryAfter(m.retryAfterMs, t)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupProof()
        m.requestID = Data(requestID.bytes)
        m.status = status.proto
        m.answers = answers.map { a in
            var p = Tandem_V1_BackupProofAnswer()
            p.name = Data(a.name.bytes)
            p.status = a.status.proto
            p.mac = Data(a.mac)
            return p
        }
        m.retryAfterMs = retryAfterMs
        return serialize(m)
    }
}

// MARK: - fetch

/// BACKUP_FETCH: length 1 … 256 KiB, offset < 64 MiB.
public struct BackupFetchMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let name: BlobName
    public let offset: Int64
    public let length: Int

    public init(requestID: BackupRequestID, name: BlobName, offset: Int64, length: Int) {
        precondition(offset >= 0 && offset < BackupLimits.maximumBlobBytes && (1...BackupLimits.pieceBytes).contains(length))
        self.requestID = requestID
        self.name = name
        self.offset = offset
        self.length = length
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupFetch
        let m = try decodeBackup(Tandem_V1_BackupFetch.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        name = try blobName(m.name, t)
        guard m.offset < UInt64(BackupLimits.maximumBlobBytes) else { throw PayloadError(t, "offset \(m.offset) past the largest blob") }
        guard m.length >= 1, m.length <= UInt32(BackupLimits.pieceBytes) else { throw PayloadError(t, "length \(m.length)") }
        offset = Int64(m.offset)
        length = Int(m.length)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupFetch()
        m.requestID = Data(requestID.bytes)
        m.name = Data(name.bytes)
        m.offset = UInt64(offset)
        m.length = UInt32(length)
        return serialize(m)
    }
}

public struct BackupFetchedMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let status: BackupStatus
    public let name: BlobName
    public let size: Int64
    public let offset: Int64
    public let data: [UInt8]

    public init(requestID: BackupRequestID, status: BackupStatus, name: BlobName, size: Int64 = 0, offset: Int64 = 0, data: [UInt8] = []) {
        self.requestID = requestID
        self.status = status
        self.name = name
        self.size = size
        self.offset = offset
        self.data = data
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupFetched
        let m = try decodeBackup(Tandem_V1_BackupFetched.self, t, payload, max: BackupLimits.maximumBulkPayloadBytes)
        requestID = try backupRequestID(m.requestID, t)
        status = BackupStatus(m.status)
        name = try blobName(m.name, t)
        size = try bytesCount(m.size, max: BackupLimits.maximumBlobBytes, t, "size")
        offset = try bytesCount(m.offset, max: BackupLimits.maximumBlobBytes, t, "offset")
        guard m.data.count <= BackupLimits.pieceBytes else { throw PayloadError(t, "\(m.data.count) bytes of data") }
        if status == .ok {
            guard offset + Int64(m.data.count) <= size, !m.data.isEmpty else { throw PayloadError(t, "data past the blob's size") }
        }
        data = Array(m.data)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupFetched()
        m.requestID = Data(requestID.bytes)
        m.status = status.proto
        m.name = Data(name.bytes)
        m.size = UInt64(size)
        m.offset = UInt64(offset)
        m.data = Data(data)
        return serialize(m)
    }
}

// MARK: - recovery kit

/// BACKUP_KIT_PUT: locator 32 bytes, version 1 … 2^53-1, sealed kit 41 … 262 144 bytes.
public struct BackupKitPutMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let locator: KitLocator
    public let version: UInt64
    public let sealedKit: [UInt8]

    public init(requestID: BackupRequestID, locator: KitLocator, version: UInt64, sealedKit: [UInt8]) {
        precondition((1...BackupLimits.maximumVersion).contains(version)
                     && (BackupLimits.minimumSealedKitBytes...BackupLimits.maximumSealedKitBytes).contains(sealedKit.count))
        self.requestID = requestID
        self.locator = locator
        self.version = version
        self.sealedKit = sealedKit
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupKitPut
        let m = try decodeBackup(Tandem_V1_BackupKitPut.self, t, payload, max: BackupLimits.maximumBulkPayloadBytes)
        requestID = try backupRequestID(m.requestID, t)
        guard let l = KitLocator(bytes: Array(m.locator)) else { throw PayloadError(t, "locator is \(m.locator.count) bytes, not 32") }
        locator = l
        guard (1...BackupLimits.maximumVersion).contains(m.version) else { throw PayloadError(t, "version \(m.version) out of range") }
        version = m.version
        guard (BackupLimits.minimumSealedKitBytes...BackupLimits.maximumSealedKitBytes).contains(m.sealedKit.count) else {
            throw PayloadError(t, "sealed kit of \(m.sealedKit.count) bytes")
        }
        sealedKit = Array(m.sealedKit)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupKitPut()
        m.requestID = Data(requestID.bytes)
        m.locator = Data(locator.bytes)
        m.version = version
        m.sealedKit = Data(sealedKit)
        return serialize(m)
    }
}

/// BACKUP_KIT_GET: locator 32 bytes, index 0 … 3.
public struct BackupKitGetMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let locator: KitLocator
    public let index: Int

    public init(requestID: BackupRequestID, locator: KitLocator, index: Int) {
        precondition((0...Int(BackupLimits.maximumKitIndex)).contains(index))
        self.requestID = requestID
        self.locator = locator
        self.index = index
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupKitGet
        let m = try decodeBackup(Tandem_V1_BackupKitGet.self, t, payload)
        requestID = try backupRequestID(m.requestID, t)
        guard let l = KitLocator(bytes: Array(m.locator)) else { throw PayloadError(t, "locator is \(m.locator.count) bytes, not 32") }
        locator = l
        guard m.index <= BackupLimits.maximumKitIndex else { throw PayloadError(t, "index \(m.index) (0…3)") }
        index = Int(m.index)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupKitGet()
        m.requestID = Data(requestID.bytes)
        m.locator = Data(locator.bytes)
        m.index = UInt32(index)
        return serialize(m)
    }
}

public struct BackupKitMessage: Equatable, Sendable {
    public let requestID: BackupRequestID
    public let status: BackupStatus
    public let version: UInt64
    public let sealedKit: [UInt8]
    /// The owner that put the kit (32 bytes), or nil.
    public let owner: [UInt8]?
    public let count: Int

    public init(requestID: BackupRequestID, status: BackupStatus, version: UInt64 = 0, sealedKit: [UInt8] = [],
                owner: [UInt8]? = nil, count: Int = 0) {
        self.requestID = requestID
        self.status = status
        self.version = version
        self.sealedKit = sealedKit
        self.owner = owner
        self.count = count
    }

    public init(payload: [UInt8]) throws {
        let t = MessageType.backupKit
        let m = try decodeBackup(Tandem_V1_BackupKit.self, t, payload, max: BackupLimits.maximumBulkPayloadBytes)
        requestID = try backupRequestID(m.requestID, t)
        status = BackupStatus(m.status)
        guard m.version <= BackupLimits.maximumVersion else { throw PayloadError(t, "version \(m.version) out of range") }
        version = m.version
        guard m.sealedKit.isEmpty
            || (BackupLimits.minimumSealedKitBytes...BackupLimits.maximumSealedKitBytes).contains(m.sealedKit.count) else {
            throw PayloadError(t, "sealed kit of \(m.sealedKit.count) bytes")
        }
        sealedKit = Array(m.sealedKit)
        guard m.owner.isEmpty || m.owner.count == 32 else { throw PayloadError(t, "owner is \(m.owner.count) bytes") }
        owner = m.owner.isEmpty ? nil : Array(m.owner)
        guard m.count <= UInt32(BackupLimits.kitsPerLocator) else { throw PayloadError(t, "count \(m.count)") }
        count = Int(m.count)
    }

    public var payload: [UInt8] {
        var m = Tandem_V1_BackupKit()
        m.requestID = Data(requestID.bytes)
        m.status = status.proto
        m.version = version
        m.sealedKit = Data(sealedKit)
        m.owner = Data(owner ?? [])
        m.count = UInt32(count)
        return serialize(m)
    }
}

func backupRequestID(_ d: Data, _ type: MessageType) throws -> BackupRequestID { try requestID(d, type) }

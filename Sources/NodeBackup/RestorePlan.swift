import Foundation
import TandemProtocol
import TandemNodeCore

/// What a restore fetches from one holder, and in which order (Protocol/backup.md section 8),
/// kept apart from the I/O: the driver feeds it BACKUP_FETCHED answers, the clock and the hashes
/// of finished blobs, and carries out what it answers (send these FETCHes, write these bytes,
/// hash this blob, place it, fail naming the holder and the blob).
///
/// - Blobs are fetched in the order given (index blobs, then packs by name), in pieces of
///   256 KiB, with at most 16 FETCHes unanswered over all blobs and at most 4 blobs open.
/// - A blob already in place (hash-checked before its rename in an earlier run) is not fetched.
/// - A request unanswered for 30 s is sent again (new request id) after 1, 2, 4, 8, 16 s; the
///   sixth silence fails the restore (`holder unreachable`).
/// - A finished blob whose BLAKE2b differs from its name fails the restore naming the holder and
///   the blob; so do answers an honest holder cannot give (another size than HAVE said, data past
///   the end, a short piece before the end, `NOT_FOUND` for a blob HAVE called whole).
public struct RestorePlan: Sendable {
    public static let pieceBytes = BackupLimits.pieceBytes
    public static let window = BackupLimits.piecesInFlight
    public static let openBlobs = 4
    public static let answerTimeoutMs: Int64 = 30_000
    public static let resends = 5

    public struct Blob: Equatable, Sendable {
        public let name: BlobName
        public let size: Int64
        public init(name: BlobName, size: Int64) {
            self.name = name
            self.size = size
        }
    }

    /// One FETCH to send.
    public struct Request: Equatable, Sendable {
        public let requestID: BackupRequestID
        public let name: BlobName
        public let offset: Int64
        public let length: Int

        public var message: BackupFetchMessage {
            BackupFetchMessage(requestID: requestID, name: name, offset: offset, length: length)
        }
    }

    public struct Failure: Error, Equatable, Sendable, CustomStringConvertible {
        public let holder: String
        public let blob: BlobName?
        public let reason: String
        public var description: String {
            if let blob { return "holder \(holder), blob \(blob): \(reason)" }
            return "holder \(holder): \(reason)"
        }
    }

    /// What the driver does with an answer.
    public enum Receipt: Equatable, Sendable {
        /// Not an answer this plan waits for (late, or a duplicate after a resend): dropped.
        case ignored
        /// Write `data` at `offset` of the blob's temporary file; when `blobFinished`, every byte of
        /// it is written: hash the file and call `verified`.
        case write(name: BlobName, offset: Int64, data: [UInt8], blobFinished: Bool)
    }

    private struct Piece: Equatable, Sendable {
        var offset: Int64
        var length: Int
        var attempts: Int
        /// Not sent again before this instant (backoff after a timeout).
        var notBeforeMs: Int64
    }

    private struct Open: Sendable {
        var blob: Blob
        /// Pieces not yet asked for (or to ask again), in offset order.
        var queued: [Piece]
        var outstanding: Int
        var received: Int64
    }

    private struct InFlight: Sendable {
        var name: BlobName
        var piece: Piece
        var sentAtMs: Int64
    }

    public let holder: String
    private var waiting: [Blob]
    private var open: [BlobName: Open] = [:]
    private var openOrder: [BlobName] = []
    private var inFlight: [BackupRequestID: InFlight] = [:]
    private var finished: Set<BlobName> = []
    private var hashing: Set<BlobName> = []
    public private(set) var failure: Failure?
    public let totalBytes: Int64
    public private(set) var doneBytes: Int64
    /// Blobs skipped because they were already in place.
    public let skipped: Int

    /// `blobs` in fetch order; `inPlace`: names already placed by an earlier run.
    public init(holder: String, blobs: [Blob], inPlace: Set<BlobName>) {
        self.holder = holder
        var seen = Set<BlobName>()
        let unique = blobs.filter { seen.insert($0.name).inserted }
        waiting = unique.filter { !inPlace.contains($0.name) }
        totalBytes = unique.reduce(0) { $0 + $1.size }
        doneBytes = unique.filter { inPlace.contains($0.name) }.reduce(0) { $0 + $1.size }
        skipped = unique.count - waiting.count
        finished = Set(unique.filter { inPlace.contains($0.name) }.map(\.name))
    }

    public var isDone: Bool { failure == nil && waiting.isEmpty && open.isEmpty }
    public var inFlightCount: Int { inFlight.count }

    /// Blobs to open now (the driver creates their temporary files), then the FETCHes to send,
    /// at most `window` unanswered; `newID` makes request ids.
    public mutating func next(nowMs: Int64, newID: () -> BackupRequestID) -> (opened: [Blob], requests: [Request]) {
        guard failure == nil else { return ([], []) }
        var opened: [Blob] = []
        while open.count < Self.openBlobs, !waiting.isEmpty {
            let b = waiting.removeFirst()
            var pieces: [Piece] = []
            var o: Int64 = 0
            while o < b.size {
                let len = Int(min(Int64(Self.pieceBytes), b.size - o))
                pieces.append(Piece(offset: o, length: len, attempts: 0, notBeforeMs: 0))
                o += Int64(len)
            }
            open[b.name] = Open(blob: b, queued: pieces, outstanding: 0, received: 0)
            openOrder.append(b.name)
            opened.append(b)
        }
        var out: [Request] = []
        for name in openOrder where inFlight.count < Self.window {
            guard var o = open[name] else { continue }
            while inFlight.count < Self.window, let first = o.queued.first, first.notBeforeMs <= nowMs {
                o.queued.removeFirst()
                let id = newID()
                inFlight[id] = InFlight(name: name, piece: first, sentAtMs: nowMs)
                o.outstanding += 1
                out.append(Request(requestID: id, name: name, offset: first.offset, length: first.length))
            }
            open[name] = o
        }
        return (opened, out)
    }

    /// A BACKUP_FETCHED from the holder.
    public mutating func receive(_ m: BackupFetchedMessage) -> Receipt {
        guard failure == nil, let f = inFlight[m.requestID] else { return .ignored }
        inFlight[m.requestID] = nil
        guard var o = open[f.name] else { return .ignored }
        o.outstanding -= 1
        defer { if failure == nil { open[f.name] = o } }
        guard m.name == f.name else {
            fail(f.name, "answered a fetch of this blob with blob \(m.name)")
            return .ignored
        }
        switch m.status {
        case .ok:
            break
        case .busy:
            // Not a status FETCHED carries in version 1; treated as a transient refusal: asked again.
            var p = f.piece
            p.attempts += 1
            guard p.attempts <= Self.resends else {
                fail(f.name, "the holder stays busy")
                return .ignored
            }
            o.queued.insert(p, at: 0)
            return .ignored
        case .notFound:
            fail(f.name, "the holder does not hold it whole any more (NOT_FOUND)")
            return .ignored
        case .unspecified, .complete, .noOffer, .overQuota, .outOfOrder, .hashMismatch, .tooManyPartial, .sizeMismatch,
             .missingBlobs, .snapshotLimit, .conflict, .badRequest:
            fail(f.name, "the holder refused a fetch (\(m.status))")
            return .ignored
        }
        guard m.size == o.blob.size else {
            fail(f.name, "the holder says it has \(m.size) bytes, HAVE said \(o.blob.size)")
            return .ignored
        }
        guard m.offset == f.piece.offset, m.data.count == f.piece.length else {
            fail(f.name, "asked for \(f.piece.length) bytes at \(f.piece.offset), got \(m.data.count) at \(m.offset)")
            return .ignored
        }
        o.received += Int64(m.data.count)
        doneBytes += Int64(m.data.count)
        let whole = o.received == o.blob.size && o.queued.isEmpty && o.outstanding == 0
        if whole { hashing.insert(f.name) }
        return .write(name: f.name, offset: m.offset, data: m.data, blobFinished: whole)
    }

    /// The driver hashed a finished blob's file: true when it may be renamed into place.
    public mutating func verified(_ name: BlobName, actual: BlobName) -> Bool {
        guard hashing.remove(name) != nil, open[name] != nil else { return false }
        guard actual == name else {
            fail(name, "the fetched bytes hash to \(actual): the holder's copy is damaged or altered; refused")
            return false
        }
        open[name] = nil
        openOrder.removeAll { $0 == name }
        finished.insert(name)
        return true
    }

    /// Requests unanswered past the timeout go back to their blob's queue (sent again with a new
    /// id after the backoff); past the last resend the restore fails.
    public mutating func tick(nowMs: Int64) {
        guard failure == nil else { return }
        for (id, f) in inFlight where nowMs - f.sentAtMs >= Self.answerTimeoutMs {
            inFlight[id] = nil
            guard var o = open[f.name] else { continue }
            o.outstanding -= 1
            var p = f.piece
            p.attempts += 1
            guard p.attempts <= Self.resends else {
                open[f.name] = o
                fail(f.name, "no answer after \(Self.resends + 1) requests of \(Self.answerTimeoutMs / 1000) s: holder unreachable")
                return
            }
            p.notBeforeMs = nowMs + Int64(1_000 << (p.attempts - 1))
            let at = o.queued.firstIndex { $0.offset > p.offset } ?? o.queued.endIndex
            o.queued.insert(p, at: at)
            open[f.name] = o
        }
    }

    /// The earliest instant something is due (a timeout or a backoff's end), for the driver's wait.
    public func nextDeadline() -> Int64? {
        let timeouts = inFlight.values.map { $0.sentAtMs + Self.answerTimeoutMs }
        let backoffs = open.values.compactMap { $0.queued.first?.notBeforeMs }
        return (timeouts + backoffs).min()
    }

    /// The link went down: everything in flight is asked again once the driver reconnects.
    public mutating func linkLost() {
        for (_, f) in inFlight {
            guard var o = open[f.name] else { continue }
            o.outstanding -= 1
            let at = o.queued.firstIndex { $0.offset > f.piece.offset } ?? o.queued.endIndex
            var p = f.piece
            p.notBeforeMs = 0
            o.queued.insert(p, at: at)
            open[f.name] = o
        }
        inFlight = [:]
    }

    private mutating func fail(_ name: BlobName?, _ reason: String) {
        if failure == nil { failure = Failure(holder: holder, blob: name, reason: reason) }
    }
}

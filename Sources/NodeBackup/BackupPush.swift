import Foundation
import NIOConcurrencyHelpers
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemVault
import TandemNodeCore

/// One push to one holder: its progress, and whoever waits for its end.
final class PushTask: Sendable {
    let holder: [UInt8]
    let lanOnly: Bool
    /// Started by the schedule (backup.md 4.1), not by a command.
    let automatic: Bool
    /// When it started (ms, wall clock): a change after this is not in it.
    let startedAtMs = Int64(clamping: wallClockMilliseconds())
    private struct State {
        var done: Int64 = 0
        var total: Int64 = 0
        var outcome: Result<PushResult, Error>?
        var waiters: [CheckedContinuation<PushResult, Error>] = []
    }
    private let state = NIOLockedValueBox(State())

    init(holder: [UInt8], lanOnly: Bool, automatic: Bool = false) {
        self.holder = holder
        self.lanOnly = lanOnly
        self.automatic = automatic
    }

    func update(done: Int64, total: Int64) { state.withLockedValue { ($0.done, $0.total) = (done, total) } }
    var progress: (done: Int64, total: Int64) { state.withLockedValue { ($0.done, $0.total) } }

    /// Ends the task once (later calls do nothing) and wakes every waiter.
    func finish(_ result: Result<PushResult, Error>) {
        let woken = state.withLockedValue { s -> [CheckedContinuation<PushResult, Error>] in
            guard s.outcome == nil else { return [] }
            s.outcome = result
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in woken { w.resume(with: result) }
    }

    func wait() async throws -> PushResult {
        try await withCheckedThrowingContinuation { c in
            let ready = state.withLockedValue { s -> Result<PushResult, Error>? in
                if let outcome = s.outcome { return outcome }
                s.waiters.append(c)
                return nil
            }
            if let ready { c.resume(with: ready) }
        }
    }
}

struct PushResult: Sendable {
    let holder: [UInt8]
    let snapshotID: [UInt8]
    let bytesSent: Int64
    let blobs: Int
    let blobsSent: Int
    let totalBytes: Int64
    let kitSent: Bool
    let generation: Int64

    var json: JSONValue {
        ["to": .string(NodeID(publicKey: holder).canonical), "snapshot_id": .string(hexString(snapshotID)),
         "bytes_sent": .int(bytesSent), "blobs": .int(Int64(blobs)), "blobs_sent": .int(Int64(blobsSent)),
         "total_bytes": .int(totalBytes), "kit_sent": .bool(kitSent), "generation": .int(generation)]
    }
}

/// What the last complete push to a holder recorded (tables `backupPush`, `backupPushBlob`):
/// verify picks among its blobs.
struct PushedRecord: Sendable {
    var snapshotID: String
    var atMs: Int64
    var bytesSent: Int64
    var totalBytes: Int64
    var blobs: [BlobName]
    var kitDigest: String?

    init(snapshotID: String, atMs: Int64, bytesSent: Int64, totalBytes: Int64, blobs: [BlobName], kitDigest: String?) {
        self.snapshotID = snapshotID
        self.atMs = atMs
        self.bytesSent = bytesSent
        self.totalBytes = totalBytes
        self.blobs = blobs
        self.kitDigest = kitDigest
    }

    /// Validating: nil for rows that break a rule (they are then no record).
    init?(stored s: StoredBackupPush) {
        let names = s.blobs.compactMap(BlobName.init(bytes:))
        guard names.count == s.blobs.count, names.count <= BackupLimits.blobsPerSnapshot,
              (0...BackupLimits.maximumSnapshotBytes).contains(s.record.totalBytes), s.record.bytesSent >= 0 else { return nil }
        self.init(snapshotID: hexString(Array(s.record.snapshotId)), atMs: s.record.atMs, bytesSent: s.record.bytesSent,
                  totalBytes: s.record.totalBytes, blobs: names, kitDigest: s.record.kitDigest.map { hexString(Array($0)) })
    }

    /// The rows of this record for `holder` (nil when a field does not fit its column: not stored then).
    func stored(holder: [UInt8]) -> StoredBackupPush? {
        guard let snapshot = parseHex(snapshotID) else { return nil }
        let digest = kitDigest.flatMap(parseHex)
        return StoredBackupPush(record: BackupPushRecord(holder: holder, snapshotId: snapshot, atMs: atMs, bytesSent: bytesSent,
                                                         totalBytes: totalBytes, kitDigest: digest),
                                blobs: blobs.map(\.bytes))
    }
}

/// The blobs of the local vault a push sends: its index files (read into memory first, so the
/// snapshot is consistent: a pack is written before any index names it) and its pack files.
struct LocalBlobs {
    var blobs: [BackupPushPlan.LocalBlob] = []
    var indexBytes: [BlobName: [UInt8]] = [:]
    var packURLs: [BlobName: URL] = [:]
    private var open: (name: BlobName, file: ReadFile)?

    nonisolated static func collect(vault: URL) throws -> LocalBlobs {
        var out = LocalBlobs()
        let indexDir = vault.appendingPathComponent("index")
        for name in try contents(indexDir).sorted() where !name.hasPrefix(".") {
            let bytes = try FileIO.readAll(indexDir.appendingPathComponent(name), limit: Int(BackupLimits.maximumBlobBytes), what: "index file")
            guard !bytes.isEmpty else { continue }
            let blob = BlobName(of: bytes)
            guard out.indexBytes[blob] == nil else { continue }
            out.indexBytes[blob] = bytes
            out.blobs.append(.init(name: blob, size: Int64(bytes.count), isIndex: true))
        }
        let packsDir = vault.appendingPathComponent("packs")
        for sub in try contents(packsDir).sorted() where sub.count == 2 {
            let dir = packsDir.appendingPathComponent(sub)
            for file in try contents(dir).sorted() {
                guard file.count == 64, let bytes = parseHex(file), let name = BlobName(bytes: bytes), name.description == file,
                      out.packURLs[name] == nil else { continue }
                let url = dir.appendingPathComponent(file)
                let size = try ReadFile(url, what: "pack").size
                guard (1...BackupLimits.maximumBlobBytes).contains(size) else {
                    throw NodeError.failed("pack \(file) is \(size) bytes: run tandem vault check")
                }
                out.packURLs[name] = url
                out.blobs.append(.init(name: name, size: size, isIndex: false))
            }
        }
        guard out.blobs.count <= BackupLimits.blobsPerSnapshot else {
            throw NodeError.failed("the vault has \(out.blobs.count) packs; a snapshot names at most \(BackupLimits.blobsPerSnapshot)")
        }
        return out
    }

    /// The names in `dir`; none when it does not exist (a vault with nothing in it yet). A listing
    /// that fails otherwise throws: it is not "a vault with nothing to back up".
    private static func contents(_ dir: URL) throws -> [String] {
        do {
            return try FileManager.default.contentsOfDirectory(atPath: dir.path)
        } catch {
            if !FileManager.default.fileExists(atPath: dir.path) { return [] }
            throw error
        }
    }

    var totalBytes: Int64 { blobs.reduce(0) { $0 + $1.size } }

    mutating func read(_ name: BlobName, offset: Int64, length: Int) throws -> [UInt8] {
        if let bytes = indexBytes[name] {
            return Array(bytes[Int(offset)..<Int(offset) + length])
        }
        guard let url = packURLs[name] else { throw NodeError.failed("blob \(name) is not in the vault any more") }
        let file: ReadFile
        if let o = open, o.name == name {
            file = o.file
        } else {
            file = try ReadFile(url, what: "pack")
            open = (name, file)
        }
        var out = [UInt8](repeating: 0, count: length)
        try out.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
        return out
    }

    /// The proof-of-storage MAC of a local blob, or nil when the vault no longer has it as it was.
    /// A pack that is there but cannot be read throws (the holder is not to blame for it).
    func mac(_ name: BlobName, nonce: [UInt8]) throws -> [UInt8]? {
        if let bytes = indexBytes[name] { return BackupProofOfStorage.mac(nonce: nonce, blob: bytes) }
        guard let url = packURLs[name], FileManager.default.fileExists(atPath: url.path) else { return nil }
        let file = try ReadFile(url, what: "pack")
        var h = BackupProofOfStorage.Hasher(nonce: nonce)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = try file.readSome(into: buffer)
            if n == 0 { break }
            h.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
        let (mac, hashed) = h.finalize()
        return hashed == name ? mac : nil
    }
}

extension BackupService {
    // MARK: - Starting and running pushes

    /// Starts a push to `holder` (or joins the one running).
    /// An automatic push (`automatic`) is not marked pending: the schedule keeps its own state
    /// and backs off when the holder is offline.
    func startPush(to holder: [UInt8], lanOnly: Bool, automatic: Bool = false) async throws -> PushTask {
        if let t = running.withLockedValue({ $0[holder] }) { return t }
        // Remembered until it completes: a node stopped or killed mid-push resumes it at start.
        if !automatic {
            try await NodeCore.perform { try self.store.step { step in try step.markBackupPending(holder, lanOnly: lanOnly) } }
        }
        let (task, isNew) = running.withLockedValue { r -> (PushTask, Bool) in
            if let t = r[holder] { return (t, false) }
            let t = PushTask(holder: holder, lanOnly: lanOnly, automatic: automatic)
            r[holder] = t
            return (t, true)
        }
        if isNew {
            await events.emit("backup.push.started", ["to": .string(NodeID(publicKey: holder).canonical), "automatic": .bool(automatic)])
            pushRequestSink.yield(task)
        }
        return task
    }

    func runPushes() async {
        await withTaskGroup(of: Void.self) { group in
            for await t in pushRequests {
                group.addTask { await self.execute(t) }
            }
        }
    }

    func resumePendingPushes() async {
        let pending = await NodeCore.run { self.health.read("read pending pushes", or: []) { try self.store.pendingBackupPushes() } }
        for p in pending {
            let holder = Array(p.holder)
            guard holder.count == 32, running.withLockedValue({ $0[holder] == nil }) else { continue }
            logger.info("resuming a backup push", metadata: ["to": "\(NodeID(publicKey: holder).short)"])
            do {
                _ = try await startPush(to: holder, lanOnly: p.lanOnly)
            } catch {
                health.failed("resume a backup push", error)
            }
        }
    }

    private func execute(_ t: PushTask) async {
        let result: Result<PushResult, Error>
        do {
            result = .success(try await push(t))
        } catch {
            result = .failure(error)
        }
        running.withLockedValue { $0[t.holder] = nil }
        let to = NodeID(publicKey: t.holder).canonical
        switch result {
        case .success(let r):
            await events.emit("backup.pushed", ["to": .string(to), "bytes_sent": .int(r.bytesSent), "blobs_sent": .int(Int64(r.blobsSent)),
                                          "total_bytes": .int(r.totalBytes), "snapshot_id": .string(hexString(r.snapshotID)),
                                          "generation": .int(r.generation), "automatic": .bool(t.automatic),
                                          "started_at_ms": .int(t.startedAtMs)])
        case .failure(let e):
            if Task.isCancelled { break }
            await events.emit("backup.push.failed", ["to": .string(to), "error": .string("\(e)")])
            logger.warning("backup push failed", metadata: ["to": "\(NodeID(publicKey: t.holder).short)", "error": "\(e)"])
        }
        // A push the node's stop cut short, or whose holder was unreachable, stays pending (tried
        // again every minute); one that ended either way does not.
        var unreachable = false
        if case .failure(let e) = result, e is HolderUnreachable { unreachable = true }
        if !Task.isCancelled, !unreachable {
            await NodeCore.run { self.health.attempt("clear a pending push") { try self.store.step { step in try step.clearBackupPending(t.holder) } } }
        }
        if !Task.isCancelled { await pushEnded(t.holder, result, startedAtMs: t.startedAtMs, automatic: t.automatic) }
        t.finish(result)
    }

    // MARK: - A push

    struct PushFailed: Error, CustomStringConvertible {
        let description: String
    }

    /// Sends one snapshot to the holder: asks HAVE, sends what it lacks, records the snapshot,
    /// then the recovery kit if it changed. A dropped link or a silent holder is retried (up to 5
    /// times, backing off); each attempt plans anew from the holder's answers (nothing it holds is
    /// sent again).
    func push(_ t: PushTask) async throws -> PushResult {
        guard let vaultDirectory, VaultKeyFile.exists(in: vaultDirectory) else {
            throw NodeError.nothingToActOn("there is no vault to back up (tandem vault init)")
        }
        let offered = try await NodeCore.perform { try self.receivedOffers() }.contains { $0.0 == t.holder }
        guard offered else {
            throw NodeError.refused("\(NodeID(publicKey: t.holder).display) has not offered to hold your backups "
                + "(they run: tandem backup offer YOUR-ID --quota 10GiB)")
        }
        var bytesSent: Int64 = 0
        var attempt = 0
        while true {
            try Task.checkCancellation()
            var local = try LocalBlobs.collect(vault: vaultDirectory)
            let exchange: BackupExchange
            do {
                exchange = BackupExchange(peer: t.holder, link: try await link(to: t.holder, lanOnly: t.lanOnly), answers: answers)
            } catch {
                // Unreachable at the start: say so now. After a link was lost mid-push, a few tries.
                attempt += 1
                guard attempt > 1, attempt <= 4 else { throw error }
                try await Task.sleep(for: .seconds(1 << (attempt - 1)))
                continue
            }
            do {
                var result = try await pushOnce(exchange, &local, task: t)
                bytesSent += exchange.bytesSent
                let kitSent = try await putKitIfChanged(exchange)
                bytesSent += exchange.bytesSent - result.bytesSent
                result = PushResult(holder: t.holder, snapshotID: result.snapshotID, bytesSent: bytesSent, blobs: result.blobs,
                                    blobsSent: result.blobsSent, totalBytes: result.totalBytes, kitSent: kitSent,
                                    generation: result.generation)
                let record = PushedRecord(snapshotID: hexString(result.snapshotID), atMs: Int64(clamping: wallClockMilliseconds()),
                                          bytesSent: bytesSent, totalBytes: result.totalBytes, blobs: local.blobs.map(\.name).sorted(),
                                          kitDigest: nil)
                try await NodeCore.perform {
                    try self.store.step { step in
                        var r = record
                        r.kitDigest = try step.lastBackupPush(to: t.holder).flatMap(PushedRecord.init(stored:))?.kitDigest
                        if let digest = self.sentKitDigest.withLockedValue({ $0[t.holder] }) { r.kitDigest = digest }
                        if let rows = r.stored(holder: t.holder) { try step.recordBackupPush(rows) }
                    }
                }
                return result
            } catch let e as BackupExchange.LinkLost {
                bytesSent += exchange.bytesSent
                attempt += 1
                guard attempt <= 4 else { throw PushFailed(description: "\(e) four times; run tandem backup push again later") }
                try await Task.sleep(for: .seconds(1 << (attempt - 1)))
            } catch let e as BackupExchange.NoAnswer {
                bytesSent += exchange.bytesSent
                throw PushFailed(description: "\(e)")
            }
        }
    }

    private func pushOnce(_ ex: BackupExchange, _ local: inout LocalBlobs, task: PushTask) async throws -> PushResult {
        // 1. What the holder has.
        var holdings: [BackupHolding] = []
        var quota: Int64 = 0
        var used: Int64 = 0
        let names = local.blobs.map(\.name)
        var start = 0
        while start < max(names.count, 1) {
            let batch = Array(names[start..<min(start + BackupLimits.namesPerQuery, names.count)])
            start += BackupLimits.namesPerQuery
            guard !batch.isEmpty else { break }
            let answer = try await ex.request(.backupHaveQuery, what: "which blobs it holds") {
                BackupHaveQueryMessage(requestID: $0, names: batch).payload
            }
            guard case .have(let r) = answer else { throw PushFailed(description: "the holder answered HAVE with another message") }
            try Self.check(r.status, expected: [.ok])
            holdings += r.holdings
            quota = r.quotaBytes
            used = r.usedBytes
        }
        // 2. The plan.
        var plan: BackupPushPlan
        do {
            plan = try BackupPushPlan(local: local.blobs, holdings: holdings, quotaBytes: quota, usedBytes: used)
        } catch {
            throw PushFailed(description: error.description)
        }
        let planned = plan.bytesPlanned
        let blobsToSend = plan.blobsRemaining
        task.update(done: 0, total: planned)
        // Progress for pages and `events --follow` (the dashboard's push bar): at most once a second.
        let to = NodeID(publicKey: ex.peer).canonical
        var toldAt = ContinuousClock.now
        var told: Int64 = -1
        // 3. Pieces, at most 16 unanswered.
        var inFlight: [BackupRequestID: (piece: BackupPushPlan.Piece, sentAt: ContinuousClock.Instant)] = [:]
        var pausedUntil: ContinuousClock.Instant?
        var confirmed: Int64 = 0
        while !plan.isReadyForSnapshot {
            // Pieces are link-authenticated (Protocol/README.md 5.4): nothing to sign, each goes out
            // as soon as the plan hands it out.
            if pausedUntil.map({ ContinuousClock.now >= $0 }) ?? true {
                pausedUntil = nil
                var sentAny = false
                for p in plan.nextPieces() {
                    let data = try local.read(p.name, offset: p.offset, length: p.length)
                    let id = BackupExchange.newRequestID()
                    let payload = BackupPieceMessage(requestID: id, name: p.name, size: p.size, offset: p.offset, data: data).payload
                    try ex.send(.backupPiece, id: id, payload: payload, flush: false)
                    inFlight[id] = (p, .now)
                    sentAny = true
                }
                if sentAny { ex.flush() }
            }
            switch try await ex.next() {
            case .answer(.reply(let r)):
                guard let sent = inFlight.removeValue(forKey: r.requestID) else { continue }
                switch plan.handle(r, for: sent.piece) {
                case .failed(let e):
                    throw PushFailed(description: e.description)
                case .wait(let ms):
                    pausedUntil = .now + .milliseconds(Int64(ms))
                case .progress, .blobComplete, .readyForSnapshot:
                    if r.status == .ok || r.status == .complete { confirmed += Int64(sent.piece.length) }
                }
            case .tick:
                let now = ContinuousClock.now
                for (id, sent) in inFlight where now - sent.sentAt > .seconds(30) {
                    plan.timedOut(sent.piece)
                    inFlight[id] = nil
                    ex.abandon([id])
                }
            case .answer, .closed:
                break
            }
            // Pieces the plan rewound are sent again under new ids; answers to the old ones are ignored.
            let still = plan.piecesInFlight
            for (id, sent) in inFlight where !still.contains(sent.piece) {
                inFlight[id] = nil
                ex.abandon([id])
            }
            task.update(done: min(planned, confirmed), total: planned)
            if confirmed != told, ContinuousClock.now - toldAt >= .seconds(1) {
                (told, toldAt) = (confirmed, .now)
                await events.emit("backup.push.progress", ["to": .string(to), "done": .int(min(planned, confirmed)), "total": .int(planned)])
            }
        }
        // 4. The snapshot.
        let snapshotID = Sodium.randomBytes(16)
        let record: BackupSnapshotRecord
        // The generation: the node's counter, the same for the same blobs (backup.md 5.1).
        let digest = Self.snapshotDigest(local.blobs)
        let nowMs = min(wallClockMilliseconds(), BackupLimits.maximumVersion)
        let generation = try await NodeCore.perform {
            try self.store.step { step in try step.backupGeneration("snapshot", digest: digest, nowMs: Int64(nowMs)) }
        }.generation
        do {
            record = try plan.snapshotRecord(snapshotID: snapshotID, createdAtMs: nowMs, generation: UInt64(generation), owner: identity)
        } catch {
            throw PushFailed(description: "cannot make the snapshot record: \(error.detail)")
        }
        let answer = try await ex.request(.backupSnapshot, what: "the snapshot") { BackupSnapshotMessage(requestID: $0, record: record).payload }
        guard case .reply(let r) = answer else { throw PushFailed(description: "the holder answered the snapshot with another message") }
        try Self.check(r.status, expected: [.complete])
        task.update(done: planned, total: planned)
        return PushResult(holder: ex.peer, snapshotID: snapshotID, bytesSent: ex.bytesSent, blobs: local.blobs.count,
                          blobsSent: blobsToSend, totalBytes: record.totalBytes, kitSent: false, generation: generation)
    }

    /// BLAKE2b-256 over the snapshot's blobs, sorted: name ‖ size (u64) each. Equal digests: the
    /// same content, the same generation.
    nonisolated static func snapshotDigest(_ blobs: [BackupPushPlan.LocalBlob]) -> [UInt8] {
        var input: [UInt8] = []
        input.reserveCapacity(blobs.count * 40)
        for b in blobs.sorted(by: { $0.name < $1.name }) {
            input += b.name.bytes
            for s in stride(from: 56, through: 0, by: -8) { input.append(UInt8(truncatingIfNeeded: UInt64(b.size) >> UInt64(s))) }
        }
        return Hash.blake2b(input, outputLength: 32)
    }

    /// Fails with the holder's refusal in words.
    nonisolated static func check(_ status: BackupStatus, expected: Set<BackupStatus>) throws {
        guard !expected.contains(status) else { return }
        switch status {
        case .noOffer: throw PushFailed(description: "the holder has no offer for us (any more)")
        case .overQuota: throw PushFailed(description: "over the holder's quota")
        case .snapshotLimit: throw PushFailed(description: "the holder keeps 64 snapshots of ours: run tandem backup forget --keep-last N")
        case .busy: throw PushFailed(description: "the holder is busy; try again later")
        default: throw PushFailed(description: "the holder refused: \(status)")
        }
    }

    /// Sends BACKUP_KIT_PUT when the kit differs from the one this holder last acknowledged.
    private func putKitIfChanged(_ ex: BackupExchange) async throws -> Bool {
        guard let provider = kitProvider, let dataDirectory else { return false }
        let kit = try await NodeCore.perform { try provider(self.identity, self.store, dataDirectory) }
        guard let kit else { return false }
        let digest = hexString(kit.digest)
        let last = try await NodeCore.perform {
            try self.store.lastBackupPush(to: ex.peer).flatMap(PushedRecord.init(stored:))?.kitDigest
        }
        guard last != digest else { return false }
        let version = min(wallClockMilliseconds(), BackupLimits.maximumVersion)
        let answer = try await ex.request(.backupKitPut, what: "the recovery kit") {
            BackupKitPutMessage(requestID: $0, locator: kit.locator, version: version, sealedKit: kit.sealed).payload
        }
        guard case .reply(let r) = answer else { return false }
        try Self.check(r.status, expected: [.ok])
        sentKitDigest.withLockedValue { $0[ex.peer] = digest }
        return true
    }
}

import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import Synchronization
import TandemNet
import TandemProtocol
import TandemVault
import TandemNodeCore

/// The holder's side of backups (Protocol/backup.md sections 3–9): answers the requests of the
/// owners it offered space to, keeping their blobs in `HeldBlobs` and its accounting in a
/// `BackupHolderBook`.
///
/// Threads: requests, ended friendships and expiry are jobs, handled one at a time in the order
/// handed in by `run` (a child task of `BackupService.run`) on a thread of `lane`, never on the
/// node core or an event loop: file writes, fsyncs and hashing block that thread only. The
/// fsyncs of a finished blob run on the lane's second thread meanwhile; their outcome comes back
/// as a job. The holder's state (`Work`) is under one lock, held for a whole job; what waits
/// (`Pending`) is under another, so the core hands a request in without waiting on a disk write.
/// At most `queuedPerAuthor` requests of one key and `queuedTotal` in all wait; past that a
/// request is dropped (its asker times out and asks again; an honest owner keeps at most 16
/// pieces in flight).
final class BackupHolder: Sendable {
    static let queuedPerAuthor = 64
    static let queuedTotal = 1024
    /// KIT_GET answers per source address and per asker key (backup.md 7).
    static let kitGetsPerAddressPerMinute = 10.0
    static let kitGetsPerKeyPerMinute = 5.0
    /// Answers to non-friends (NO_OFFER) per source address.
    static let strangerAnswersPerMinute = 20.0

    let identity: SigningKeyPair
    let files: HeldBlobs?
    let events: EventBus
    let logger: Logger
    let now: @Sendable () -> UInt64
    /// Blocking disk work: the jobs' loop and the finishes' loop each take one of its two threads
    /// while they run (the order of jobs is kept by `state`, whichever thread runs them).
    private let lane: NIOThreadPool
    private let state: Mutex<Work>
    private let pending = Mutex(Pending())
    /// One signal stream per loop of `run` (the newest kept: a signal means "look again").
    private let jobSignals: AsyncStream<Void>
    private let jobSignal: AsyncStream<Void>.Continuation
    private let finishSignals: AsyncStream<Void>
    private let finishSignal: AsyncStream<Void>.Continuation

    /// Work handed to the holder's thread, in order.
    enum Job: Sendable {
        case request(Envelope, ReplyTo, isFriend: Bool)
        /// The friendship with every owner not in the set ended.
        case withdraw(Set<[UInt8]>)
        case expireIdlePartials
        /// A blob's finish (hash check, fsyncs) came back from the lane's second thread.
        case finished(Finish, Result<Bool, Error>)
    }

    /// A blob whose last piece was written: to hash-check and make durable.
    struct Finish: Sendable {
        let owner: [UInt8]
        let name: BlobName
        let size: Int64
        let requestID: BackupRequestID
        let knownHash: BlobName?
        let link: ReplyTo
    }

    private struct Pending {
        var jobs = CircularBuffer<Job>()
        var finishes = CircularBuffer<Finish>()
        /// Finishes handed out whose `finished` job has not run yet.
        var finishing = 0
        var total = 0
        var perAuthor: [[UInt8]: Int] = [:]
    }

    init(identity: SigningKeyPair, root: URL?, events: EventBus, logger: Logger, health: StoreHealth? = nil,
         now: @escaping @Sendable () -> UInt64 = { wallClockMilliseconds() }) {
        self.identity = identity
        let health = health ?? StoreHealth(logger: logger)
        let files = root.map { HeldBlobs(root: $0, health: health) }
        self.files = files
        self.events = events
        self.logger = logger
        self.now = now
        state = Mutex(Work(identity: identity, files: files, events: events, logger: logger, now: now))
        lane = NIOThreadPool(numberOfThreads: 2)
        lane.start()
        (jobSignals, jobSignal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        (finishSignals, finishSignal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    deinit {
        lane.shutdownGracefully { _ in }
    }

    /// Reads what was held before a restart (returns when done). Throws when the files cannot be
    /// listed (that is not "holding nothing").
    func load() throws {
        try state.withLock { work in try work.load() }
    }

    /// `load` on the holder's lane (from async code: the disk work blocks no task's thread).
    func loadOnLane() async throws {
        try await lane.runIfActive { try self.load() }
    }

    /// Handles the jobs handed in, until the task is cancelled: in order, on the lane's first
    /// thread; finishes of blobs on its second.
    func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                for await _ in self.jobSignals { await self.onLane("backup holder job") { while self.runNextJob() {} } }
            }
            group.addTask {
                for await _ in self.finishSignals { await self.onLane("backup blob finish") { while self.runNextFinish() {} } }
            }
        }
    }

    private func onLane(_ what: String, _ body: @escaping @Sendable () -> Void) async {
        do {
            try await lane.runIfActive(body)
        } catch {
            logger.error("the backup holder's thread did not run", metadata: ["what": "\(what)", "error": "\(error)"])
        }
    }

    private func hand(_ job: Job) {
        pending.withLock { $0.jobs.append(job) }
        jobSignal.yield()
    }

    /// Runs the next job, if one waits (false when none does). The state's lock is held for the
    /// whole job, and the job is taken under it: jobs run one at a time, in the order handed in.
    private func runNextJob() -> Bool {
        let ran = state.withLock { work -> (Job, [Finish])? in
            guard let job = pending.withLock({ $0.jobs.popFirst() }) else { return nil }
            work.run(job)
            defer { work.finishes = [] }
            return (job, work.finishes)
        }
        guard let (job, finishes) = ran else { return false }
        pending.withLock { p in
            switch job {
            case .request(let envelope, _, _):
                p.total -= 1
                p.perAuthor[envelope.author, default: 1] -= 1
                if p.perAuthor[envelope.author] == 0 { p.perAuthor[envelope.author] = nil }
            case .finished:
                p.finishing -= 1
            case .withdraw, .expireIdlePartials:
                break
            }
            p.finishes.append(contentsOf: finishes)
            p.finishing += finishes.count
        }
        if !finishes.isEmpty { finishSignal.yield() }
        return true
    }

    /// Finishes the next blob, if one waits (without the state's lock: pieces of the owner's next
    /// blobs are written meanwhile); the outcome goes back to the jobs.
    private func runNextFinish() -> Bool {
        guard let f = pending.withLock({ $0.finishes.popFirst() }) else { return false }
        let outcome: Result<Bool, Error>
        if let files {
            outcome = Result { try files.finish(f.owner, f.name, size: f.size, knownHash: f.knownHash) }
        } else {
            outcome = .failure(NodeError.failed("this node has no data directory to hold backups in"))
        }
        hand(.finished(f, outcome))
        return true
    }

    /// Records our offer to `owner` (quota 0 withdraws it and deletes what we hold), durably,
    /// before the node sends it. Returns false when a newer version is already recorded.
    func setOffer(owner: [UInt8], quotaBytes: Int64, version: UInt64) throws -> Bool {
        try state.withLock { work in try work.setOffer(owner: owner, quotaBytes: quotaBytes, version: version) }
    }

    /// `setOffer` on the holder's lane.
    func setOfferOnLane(owner: [UInt8], quotaBytes: Int64, version: UInt64) async throws -> Bool {
        try await lane.runIfActive { try self.setOffer(owner: owner, quotaBytes: quotaBytes, version: version) }
    }

    /// Our offers, with what each owner uses (on the holder's lane: it waits for the job running).
    func offersGiven() async throws -> [GivenOffer] {
        try await lane.runIfActive { self.state.withLock { $0.offersGiven() } }
    }

    /// The friendship with these owners ended: everything held for them goes (backup.md 3).
    func withdraw(ownersNotIn friends: Set<[UInt8]>) { hand(.withdraw(friends)) }

    /// Partial blobs idle for 7 days.
    func expireIdlePartials() { hand(.expireIdlePartials) }

    /// Where the answers to one request go: signed frames for its author, on the link it came by.
    typealias Reply = @Sendable (Envelope) -> Void

    /// A backup request from a link (called on the node core). `isFriend`: the author is a friend.
    func receive(_ envelope: Envelope, from link: PeerLink, isFriend: Bool) {
        receive(envelope, origin: Outbox.origin(of: link), isFriend: isFriend) { link.send($0) }
    }

    /// A backup request; `origin` is the source address budgets count by (the relay's for a
    /// tunnel). Handled as a job, in order; answers go to `reply`.
    func receive(_ envelope: Envelope, origin: String, isFriend: Bool, reply: @escaping Reply) {
        let author = envelope.author
        let job = Job.request(envelope, ReplyTo(author: author, origin: origin, reply: reply), isFriend: isFriend)
        let admitted = pending.withLock { p -> Bool in
            guard p.total < Self.queuedTotal, p.perAuthor[author, default: 0] < Self.queuedPerAuthor else { return false }
            p.total += 1
            p.perAuthor[author, default: 0] += 1
            p.jobs.append(job)
            return true
        }
        guard admitted else {
            logger.debug("backup request dropped: queue full", metadata: ["from": "\(NodeID(publicKey: author).short)"])
            return
        }
        jobSignal.yield()
    }

    /// Runs every job handed in so far, and the finishes they lead to, on the calling thread
    /// (tests, the fuzzer: a holder whose `run` is not running).
    func drain() {
        while true {
            while runNextJob() {}
            while runNextFinish() {}
            if pending.withLock({ $0.jobs.isEmpty && $0.finishes.isEmpty && $0.finishing == 0 }) { return }
        }
    }

    /// The book, for checks.
    var bookNow: BackupHolderBook { state.withLock { $0.book } }

    struct GivenOffer: Sendable {
        let owner: [UInt8]
        let quotaBytes: Int64
        let usedBytes: Int64
        let blobs: Int
        let snapshots: Int
        let hasKit: Bool
    }

    /// Who asked: the answers' recipient, the address budgets count by, where answers go.
    struct ReplyTo: Sendable {
        let author: [UInt8]
        let origin: String
        let reply: Reply

        /// What the address budgets count by (backup.md 7, 9): the source address of a direct
        /// link; for a relay tunnel the relay *and the initiator's key* (which the Secret Handshake
        /// through the tunnel proved), since every tunnel comes from the relay's one address and
        /// strangers there must not spend a restorer's budget. Fresh keys through a relay are
        /// bounded by the relay's own tunnel admission per source address (README 14).
        var budgetOrigin: String {
            origin.hasPrefix("relay:") ? origin + "/" + hexString(author) : origin
        }
    }
}

/// The holder's state and its handling of each job: only ever touched under `BackupHolder.state`.
private struct Work {
    typealias ReplyTo = BackupHolder.ReplyTo
    typealias GivenOffer = BackupHolder.GivenOffer

    let identity: SigningKeyPair
    let files: HeldBlobs?
    let events: EventBus
    let logger: Logger
    let now: @Sendable () -> UInt64
    /// Whether the request being handled was charged to the stranger budget.
    var strangerCharged = false
    /// Blobs whose last piece the job being handled wrote: for the lane's second thread.
    var finishes: [BackupHolder.Finish] = []

    var book = BackupHolderBook()
    var nextSnapshot: [[UInt8]: Int64] = [:]
    /// The running hash of each partial blob written in this process, while pieces come in order.
    var running: [String: RunningHash] = [:]
    var kitGetsByAddress = KeyedRateLimiter<String>(capacity: 10, refillPerSecond: BackupHolder.kitGetsPerAddressPerMinute / 60,
                                                    maximumKeys: 10_000)
    var kitGetsByKey = KeyedRateLimiter<[UInt8]>(capacity: 5, refillPerSecond: BackupHolder.kitGetsPerKeyPerMinute / 60,
                                                 maximumKeys: 10_000)
    var strangers = KeyedRateLimiter<String>(capacity: 20, refillPerSecond: BackupHolder.strangerAnswersPerMinute / 60,
                                             maximumKeys: 10_000)
    /// The same budget per asker key as well (README 12.4: per sender key).
    var strangersByKey = KeyedRateLimiter<[UInt8]>(capacity: 20, refillPerSecond: BackupHolder.strangerAnswersPerMinute / 60,
                                                   maximumKeys: 10_000)

    final class RunningHash {
        var hasher: Blake2b? = Blake2b(outputLength: 32)
        var length: Int64 = 0

        func update(_ bytes: UnsafeRawBufferPointer) {
            hasher?.update(bytes)
            length += Int64(bytes.count)
        }

        /// The hash, once (nil after).
        func finish() -> [UInt8]? { hasher.take()?.finalize() }
    }

    init(identity: SigningKeyPair, files: HeldBlobs?, events: EventBus, logger: Logger, now: @escaping @Sendable () -> UInt64) {
        self.identity = identity
        self.files = files
        self.events = events
        self.logger = logger
        self.now = now
    }

    mutating func run(_ job: BackupHolder.Job) {
        switch job {
        case .request(let envelope, let link, let isFriend):
            strangerCharged = false
            do {
                try handle(envelope, link: link, isFriend: isFriend)
            } catch let e as PayloadError {
                refuse(envelope, e, on: link, isFriend: isFriend)
            } catch {
                logger.error("backup request failed", metadata: ["type": "\(envelope.type)", "error": "\(error)"])
            }
        case .withdraw(let friends):
            withdraw(ownersNotIn: friends)
        case .expireIdlePartials:
            expireIdlePartials()
        case .finished(let f, let outcome):
            finished(f, outcome)
        }
    }

    mutating func load() throws {
        guard let files else { return }
        let logger = self.logger
        for l in try files.load(nowMs: now(), quarantined: { what in
            logger.warning("backup file quarantined", metadata: ["file": "\(what)"])
        }) {
            let report = book.load(owner: l.owner, l.shelf, nowMs: now())
            nextSnapshot[l.owner] = l.nextSnapshot
            for name in report.discardedBlobs { files.removeBlob(l.owner, name) }
            // Partial files longer than the book keeps are cut back by the next piece's write.
            if report.discardedSnapshots > 0 || report.discardedKit {
                logger.warning("backup shelf entries dropped on load", metadata: [
                    "owner": "\(NodeID(publicKey: l.owner).short)", "snapshots": "\(report.discardedSnapshots)",
                    "kit": "\(report.discardedKit)"])
            }
        }
    }

    // MARK: offers (the holder's own intent)

    mutating func setOffer(owner: [UInt8], quotaBytes: Int64, version: UInt64) throws -> Bool {
        guard let files else { throw NodeError.failed("this node has no data directory to hold backups in") }
        // A version at or below the recorded one changes nothing, on disk either (else a restart
        // would bring back the older offer). Quotas are the book's: at most 1 PiB.
        if let s = book.shelves[owner], version <= s.offerVersion { return false }
        let quotaBytes = min(quotaBytes, BackupLimits.maximumQuotaBytes)
        // An unreadable shelf file is rewritten from the book, kit included.
        var shelf = files.readShelf(owner) ?? shelfFile(owner, quotaBytes: quotaBytes, version: version)
        if quotaBytes > 0 {
            shelf.quotaBytes = quotaBytes
            shelf.offerVersion = version
            try FileIO.createDirectory(files.ownerDirectory(owner))
            try files.writeShelf(owner, shelf)
        }
        switch book.setOffer(owner: owner, quotaBytes: quotaBytes, version: version) {
        case .ignored: return false
        case .recorded: return true
        case .withdrawn:
            files.removeOwner(owner)
            nextSnapshot[owner] = nil
            pruneRunning()
            return true
        }
    }

    /// The shelf file the book describes, for an owner whose file is missing or unreadable.
    func shelfFile(_ owner: [UInt8], quotaBytes: Int64, version: UInt64) -> HeldBlobs.ShelfFile {
        var f = HeldBlobs.ShelfFile(quotaBytes: book.shelves[owner]?.quotaBytes ?? quotaBytes,
                                    offerVersion: book.shelves[owner]?.offerVersion ?? version)
        if let k = book.shelves[owner]?.kit {
            f.kitLocator = hexString(k.locator.bytes)
            f.kitVersion = k.version
        }
        return f
    }

    func offersGiven() -> [GivenOffer] {
        book.shelves.map { key, s in
            GivenOffer(owner: key, quotaBytes: s.quotaBytes, usedBytes: s.usedBytes, blobs: s.blobs.count,
                       snapshots: s.snapshots.count, hasKit: s.kit != nil)
        }.sorted { $0.owner.lexicographicallyPrecedes($1.owner) }
    }

    mutating func withdraw(ownersNotIn friends: Set<[UInt8]>) {
        for owner in book.shelves.keys where !friends.contains(owner) {
            // Not setOffer(quota: 0): an offer already at the largest version would stay.
            _ = book.endOffer(owner: owner)
            files?.removeOwner(owner)
            nextSnapshot[owner] = nil
            NodeCore.submit { [events] in _ = events.emit("backup.offer.ended", ["owner": .string(NodeID(publicKey: owner).canonical), "reason": .string("not a friend")]) }
        }
        pruneRunning()
    }

    mutating func expireIdlePartials() {
        for (owner, name) in book.expireIdlePartials(nowMs: now()) { files?.removeBlob(owner, name) }
        pruneRunning()
    }

    /// Forgets the running hashes of blobs the book no longer has unfinished (freed, expired, an
    /// owner gone): their number stays bounded by the partial blobs held.
    mutating func pruneRunning() {
        running = running.filter { key, _ in
            let parts = key.split(separator: "/")
            guard parts.count == 2, let owner = hexBytes(String(parts[0])), let bytes = hexBytes(String(parts[1])),
                  let name = BlobName(bytes: bytes), let blob = book.shelves[owner]?.blobs[name] else { return false }
            if case .partial = blob.state { return true }
            return false
        }
    }

    // MARK: requests

    mutating func handle(_ envelope: Envelope, link: ReplyTo, isFriend: Bool) throws {
        let owner = envelope.author
        let nowMs = now()
        let hasShelf = book.shelves[owner] != nil && files != nil
        // Without an offer the answers say NO_OFFER: to friends always, to others within a budget.
        if !hasShelf, envelope.type != .backupKitGet {
            guard isFriend || (strangers.check(link.budgetOrigin, now: nowMs) == .allowed
                               && strangersByKey.check(owner, now: nowMs) == .allowed) else { return }
            strangerCharged = !isFriend
        }
        switch envelope.type {
        case .backupHaveQuery:
            let q = try BackupHaveQueryMessage(payload: envelope.payload)
            send(.backupHaveReply, book.have(owner: owner, q).payload, on: link)
        case .backupPiece:
            let p = try BackupPieceMessage(payload: envelope.payload)
            piece(p, owner: owner, link: link, nowMs: nowMs)
        case .backupSnapshot:
            let m = try BackupSnapshotMessage(payload: envelope.payload, nowMs: nowMs)
            snapshot(m, owner: owner, link: link)
        case .backupForget:
            let m = try BackupForgetMessage(payload: envelope.payload)
            forget(m, owner: owner, link: link)
        case .backupList:
            let m = try BackupListQueryMessage(payload: envelope.payload)
            send(.backupListReply, book.list(owner: owner, m).payload, on: link)
        case .backupProve:
            let m = try BackupProveMessage(payload: envelope.payload)
            prove(m, owner: owner, link: link, nowMs: nowMs)
        case .backupFetch:
            let m = try BackupFetchMessage(payload: envelope.payload)
            fetch(m, owner: owner, link: link)
        case .backupKitPut:
            let m = try BackupKitPutMessage(payload: envelope.payload)
            kitPut(m, owner: owner, link: link)
        case .backupKitGet:
            let m = try BackupKitGetMessage(payload: envelope.payload)
            kitGet(m, asker: owner, link: link, nowMs: nowMs)
        default:
            break
        }
    }

    mutating func piece(_ p: BackupPieceMessage, owner: [UInt8], link: ReplyTo, nowMs: UInt64) {
        guard let files else { return }
        let key = "\(hexString(owner))/\(p.name)"
        let decision = book.receivePiece(owner: owner, p, nowMs: nowMs)
        // A write or the finish failed: the book goes back to what is on disk, and when that is
        // nothing, no file of the blob stays (a restart would count it again).
        func failed() {
            book.writeFailed(owner: owner, name: p.name, heldOnDisk: files.partialLength(owner, p.name, size: p.size))
            if book.shelves[owner]?.blobs[p.name] == nil { files.removeBlob(owner, p.name) }
            running[key] = nil
        }
        func write() -> Bool {
            do {
                try files.writePiece(owner, p.name, size: p.size, offset: p.offset, data: p.data)
            } catch {
                logger.error("cannot store a backup piece", metadata: ["error": "\(error)"])
                failed()
                return false
            }
            // Hash as the bytes come, while they come in order; otherwise the file is hashed at the end.
            let r: RunningHash
            if p.offset == 0 {
                r = RunningHash()
                running[key] = r
            } else if let existing = running[key], existing.length == p.offset {
                r = existing
            } else {
                running[key] = nil
                return true
            }
            p.data.withUnsafeBytes { r.update($0) }
            return true
        }
        switch decision {
        case .answer(let reply):
            send(.backupReply, reply.payload, on: link)
        case .write(let reply):
            guard write() else { return }
            send(.backupReply, reply.payload, on: link)
        case .writeThenCheck:
            guard write() else { return }
            var known: BlobName?
            if let r = running.removeValue(forKey: key), r.length == p.size {
                known = r.finish().flatMap { BlobName(bytes: $0) }
            }
            // The fsyncs of a finished blob run on the lane's second thread, so pieces of the owner's
            // next blobs are written meanwhile; the book and the answer come back as a job.
            finishes.append(BackupHolder.Finish(owner: owner, name: p.name, size: p.size, requestID: p.requestID, knownHash: known, link: link))
        }
    }

    /// A blob's finish came back: the book records it and the owner gets the answer.
    mutating func finished(_ f: BackupHolder.Finish, _ outcome: Result<Bool, Error>) {
        guard let files else { return }
        let owner = f.owner, p = f
        guard book.shelves[owner]?.blobs[p.name]?.state == .checking else {
            // The offer was withdrawn meanwhile: nothing of it stays.
            files.removeBlob(owner, p.name)
            return
        }
        switch outcome {
        case .success(let matches):
            let reply = book.finishBlob(owner: owner, name: p.name, requestID: p.requestID, matches: matches)
            send(.backupReply, reply.payload, on: f.link)
        case .failure(let error):
            logger.error("cannot finish a backup blob", metadata: ["error": "\(error)"])
            book.writeFailed(owner: owner, name: p.name, heldOnDisk: files.partialLength(owner, p.name, size: p.size))
            if book.shelves[owner]?.blobs[p.name] == nil { files.removeBlob(owner, p.name) }
        }
    }

    mutating func snapshot(_ m: BackupSnapshotMessage, owner: [UInt8], link: ReplyTo) {
        guard let files else { return }
        let saved = book
        let before = book.shelves[owner]?.snapshots.count ?? 0
        let reply = book.recordSnapshot(owner: owner, m)
        if reply.status == .complete, (book.shelves[owner]?.snapshots.count ?? 0) > before {
            // Durable before the answer: the owner's push is done once it reads COMPLETE.
            do {
                let seq = nextSnapshot[owner, default: 1]
                try files.writeSnapshot(owner, m.record, sequence: seq)
                nextSnapshot[owner] = seq + 1
            } catch {
                logger.error("cannot store a snapshot record", metadata: ["error": "\(error)"])
                // Not recorded: the book goes back to before it (no answer; the owner asks again).
                book = saved
                return
            }
            let fields: [String: JSONValue] = ["owner": .string(NodeID(publicKey: owner).canonical),
                                               "blobs": .int(Int64(m.record.blobs.count)), "bytes": .int(m.record.totalBytes)]
            NodeCore.submit { [events] in events.emit("backup.held", fields) }
        }
        send(.backupReply, reply.payload, on: link)
    }

    mutating func forget(_ m: BackupForgetMessage, owner: [UInt8], link: ReplyTo) {
        guard let files else { return }
        let (reply, freed) = book.forget(owner: owner, m)
        if let s = book.shelves[owner] {
            do {
                try files.pruneSnapshots(owner, kept: Set(s.snapshots.map(\.snapshotID)))
            } catch {
                logger.error("cannot remove snapshot records", metadata: ["error": "\(error)"])
            }
        }
        for name in freed { files.removeBlob(owner, name) }
        if !freed.isEmpty { pruneRunning() }
        send(.backupReply, reply.payload, on: link)
    }

    mutating func prove(_ m: BackupProveMessage, owner: [UInt8], link: ReplyTo, nowMs: UInt64) {
        guard let files else { return }
        let (reply, corrupted) = book.prove(owner: owner, m, nowMs: nowMs) { owner, name, sink in
            try files.stream(files.blobURL(owner, name), what: "blob", sink)
        }
        for name in corrupted {
            logger.warning("a held blob failed its hash check and was deleted", metadata: ["blob": "\(name)"])
            files.removeBlob(owner, name)
        }
        if !corrupted.isEmpty, let s = book.shelves[owner] {
            // The book dropped the snapshots that named them.
            do {
                try files.pruneSnapshots(owner, kept: Set(s.snapshots.map(\.snapshotID)))
            } catch {
                logger.error("cannot remove snapshot records", metadata: ["error": "\(error)"])
            }
        }
        send(.backupProof, reply.payload, on: link)
    }

    mutating func fetch(_ m: BackupFetchMessage, owner: [UInt8], link: ReplyTo) {
        guard let files else { return }
        switch book.fetch(owner: owner, m) {
        case .answer(let a):
            send(.backupFetched, a.payload, on: link)
        case .read(let name, let size, let offset, let length):
            do {
                let data = try files.readRange(owner, name, offset: offset, length: length)
                send(.backupFetched, BackupFetchedMessage(requestID: m.requestID, status: .ok, name: name, size: size, offset: offset,
                                                          data: data).payload, on: link)
            } catch {
                logger.warning("cannot read a held blob", metadata: ["blob": "\(name)", "error": "\(error)"])
                send(.backupFetched, BackupFetchedMessage(requestID: m.requestID, status: .notFound, name: name).payload, on: link)
            }
        }
    }

    mutating func kitPut(_ m: BackupKitPutMessage, owner: [UInt8], link: ReplyTo) {
        guard let files else { return }
        let saved = book
        let (reply, store, _) = book.putKit(owner: owner, m)
        if store {
            do {
                try files.writeKit(owner, m.sealedKit)
                var shelf = files.readShelf(owner) ?? HeldBlobs.ShelfFile(quotaBytes: book.shelves[owner]?.quotaBytes ?? 1,
                                                                           offerVersion: book.shelves[owner]?.offerVersion ?? 1)
                shelf.kitLocator = hexString(m.locator.bytes)
                shelf.kitVersion = m.version
                try files.writeShelf(owner, shelf)
            } catch {
                logger.error("cannot store a recovery kit", metadata: ["error": "\(error)"])
                // Not stored: the book goes back to before the put (no answer; the owner asks again).
                // Reloading from the files here would also run load's quarantine over every owner.
                book = saved
                return
            }
        }
        send(.backupReply, reply.payload, on: link)
    }

    mutating func kitGet(_ m: BackupKitGetMessage, asker: [UInt8], link: ReplyTo, nowMs: UInt64) {
        guard let files else { return }
        // Anyone may ask (a restorer is a fresh key), within both budgets; past either, no answer.
        guard kitGetsByAddress.check(link.budgetOrigin, now: nowMs) == .allowed,
              kitGetsByKey.check(asker, now: nowMs) == .allowed else { return }
        guard let (owner, kit, count) = book.kit(locator: m.locator, index: m.index) else {
            send(.backupKit, BackupKitMessage(requestID: m.requestID, status: .notFound).payload, on: link)
            return
        }
        let sealed: [UInt8]
        do {
            sealed = try files.readKit(owner)
        } catch {
            files.health.failed("read the recovery kit held for \(NodeID(publicKey: owner).short)", error)
            send(.backupKit, BackupKitMessage(requestID: m.requestID, status: .notFound).payload, on: link)
            return
        }
        guard Int64(sealed.count) == kit.size else {
            logger.warning("a held recovery kit is not the size recorded", metadata: ["owner": "\(NodeID(publicKey: owner).short)"])
            send(.backupKit, BackupKitMessage(requestID: m.requestID, status: .notFound).payload, on: link)
            return
        }
        send(.backupKit, BackupKitMessage(requestID: m.requestID, status: .ok, version: kit.version, sealedKit: sealed, owner: owner,
                                          count: count).payload, on: link)
    }

    func send(_ type: MessageType, _ payload: [UInt8], on link: ReplyTo) {
        link.reply(Envelope.sign(type: type, author: identity, recipient: link.author, createdAt: now(), payload: payload))
    }

    /// A request whose payload broke its rules: MALFORMED on the link, no answer message.
    mutating func refuse(_ envelope: Envelope, _ e: PayloadError, on link: ReplyTo, isFriend: Bool) {
        logger.info("malformed backup payload", metadata: ["type": "\(envelope.type)", "detail": "\(e.detail)"])
        // A stranger's request already charged to the budget (above) is not charged again.
        guard isFriend || strangerCharged || (strangers.check(link.budgetOrigin, now: now()) == .allowed
                                              && strangersByKey.check(envelope.author, now: now()) == .allowed) else { return }
        let rejection = FrameRejection(.malformed, e.detail, messageID: envelope.messageID, author: envelope.author, type: envelope.type)
        if let reply = FrameVerifier.errorReply(to: rejection, from: identity, linkPeer: envelope.author, now: now()) {
            link.reply(reply)
        }
    }
}

import Foundation
import Logging
import NIOPosix
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Files between friends (Protocol/messages.md 7): FILE_OFFER, FILE_REQUEST, FILE_CHUNK, FILE_CANCEL.
///
/// The sender offers a file it hashed once (leaf hashes kept in `fileLeaves`) and serves the
/// chunks a friend asks for, read from the file in bounded batches on `disk`'s reading lane. The
/// receiver keeps a `FileReceiver` per transfer; each verified chunk is written on the writing
/// lane (and recorded in the partial file's `WrittenChunks`), and its bit is stored only once the
/// chunk is synced (`syncEveryChunks`), so a kill -9 of either side resumes from the stored bitmap
/// and the chunks written in the same boot. Everything here runs on the node core; the disk work
/// never does.
@NodeCore
public final class MessageFiles: Sendable {
    /// The receiver's bounds and the sender's serving bounds (messages.md 7.5).
    package struct Limits: Sendable {
        /// Offers up to this size from a friend are fetched without asking (the node's default;
        /// `message.file_settings` sets it per node and per friend).
        package var autoAcceptBytes: Int64 = 100 << 20
        package var pendingPerFriend = ChatLimits.pendingFilesPerFriend
        package var pendingTotal = ChatLimits.pendingFilesTotal
        /// Bytes of all incoming files not finished (offered, receiving or verifying).
        package var pendingBytesTotal: Int64 = 16 << 30
        /// How long an offer lives (both sides): past it, an unfinished transfer fails `EXPIRED`.
        package var offerLifetimeMs: Int64 = 8 * 86_400_000
        /// Chunks requested at once by a receiver (8 MiB): a FILE_REQUEST for `refillChunks` more
        /// goes out whenever that many of them arrived, so the sender always has 24 to 32 chunks
        /// asked for and the link does not wait for the request loop (both nodes' cores; messages.md
        /// 11.4). It bounds what a kill -9 of the receiver makes the sender send again: the chunks
        /// in flight, and those received but not yet written (a written chunk is in
        /// `WrittenChunks`; messages.md 7.3) — so it is not larger: 64 re-sent 1.2 % of 1 GiB.
        package var window = 32
        /// The step the window is refilled in (2 MiB; at most `chunksPerRequest`, so one request).
        package var refillChunks = 8
        package var requestTimeoutMs: Int64 = 30_000
        /// A receiver asks for a sync of its partial file after this many written chunks (2 MiB;
        /// and at the end), and stores their bits once it is done. The sync runs on the syncing
        /// lane: it holds up neither a write nor a request, and what is written while one runs
        /// joins the next.
        package var syncEveryChunks = 8
        /// A sender serves at most this many chunks of one FILE_REQUEST, and keeps at most this
        /// many queued for reading per friend; the rest of a request waits (`waitingReads`) and is
        /// served as the friend's queue drains.
        package var chunksPerRequest = FileReceiver.chunksPerRequest
        package var queuedChunksPerFriend = 64
        /// Tests only: a pause before each chunk served (a transfer slow enough to interrupt).
        package var serveDelayMs = 0
        package init() {}
    }

    let identity: SigningKeyPair
    let store: NodeStore
    let peers: PeerManager
    let outbox: Outbox
    let events: EventBus
    let health: StoreHealth
    let logger: Logger
    let limits: Limits
    let clock: @Sendable () -> Int64
    let messages: MessageService
    let disk: FileDisk
    /// The vault, for files received `--to-vault` (nil: a node without one, or tests).
    let vault: (any ReceivedFileVault)?
    /// Received files bound for the vault, imported one at a time by `run()`'s child task.
    let vaultJobs: AsyncStream<VaultJob>
    let vaultInput: AsyncStream<VaultJob>.Continuation
    /// Files being imported into the vault now (a second request waits for the first).
    var vaulting: Set<FileID> = []
    /// Where received files go (0700); partial files in its `.partial` folder.
    package let directory: URL

    struct Incoming {
        var receiver: FileReceiver
        /// The node the chunks come from: the author, or a thread's inviter that forwarded the offer.
        let peer: [UInt8]
        /// Who offered the file (signed the offer).
        let author: [UInt8]
        /// The thread it was offered in (nil: a direct conversation).
        let thread: ThreadID?
        /// We are the thread's inviter and serve the file to the other participants once it is whole (7.7).
        let serves: Bool
        let partial: String
        let messageID: [UInt8]?
        /// Bits of chunks synced to disk (what the stored bitmap says).
        var durable: [UInt8]
        /// Chunks handed to the writer and not yet reported durable.
        var unsynced = 0
        var lastChunkMs: Int64 = 0
        var reportedPercent = -1
    }

    struct Outgoing {
        let offer: FileOfferMessage
        /// The friend offered to (in a thread: the inviter, or, when we are the inviter, the first participant).
        let peer: [UInt8]
        /// The thread it was offered in (nil: a direct conversation); who may fetch is `ThreadFileRoute.mayFetch`.
        let thread: ThreadID?
        let path: String
        var tree: ChunkTreeLevels?
        /// Chunks sent at least once.
        var sent: [UInt8]
        var sentCount: Int
        var state: StoredFileTransfer.State
        let deadlineMs: Int64
        var reportedPercent = -1
    }

    /// A thread's file we relay as its inviter (messages.md 7.7): whole, checked, served from `path`.
    struct Relay {
        let offer: FileOfferMessage
        let thread: ThreadID
        let path: String
        var tree: ChunkTreeLevels?
        let deadlineMs: Int64
    }

    /// A relayed file became whole: its leaf hashes are computed from it (off the core) before it is served.
    struct RelayJob: Sendable {
        let offer: FileOfferMessage
        let thread: ThreadID
        let path: String
        let deadlineMs: Int64
    }

    var incoming: [FileID: Incoming] = [:]
    var outgoing: [FileID: Outgoing] = [:]
    var relays: [FileID: Relay] = [:]
    /// Per friend, the rest of requests that found the serving bound full, oldest first (at most
    /// `pendingPerFriend` each, one per request): served as the friend's queue drains, so several
    /// files fetched from us at once never leave one waiting for the receiver's request timeout.
    var waitingReads: [[UInt8]: [FileDisk.ReadJob]] = [:]
    /// Requests for a relayed file that is not whole yet: the latest per participant, answered when it
    /// is (in memory: after a restart the requester asks again after its timeout).
    var deferred: [FileID: [[UInt8]: FileRequestMessage]] = [:]
    /// Relayed files whole and checked, being hashed for their tree (their requests wait in `deferred`).
    var relayPending: [FileID: ThreadID] = [:]
    let relayJobs: AsyncStream<RelayJob>
    let relayInput: AsyncStream<RelayJob>.Continuation
    private var loaded = false

    package nonisolated init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, outbox: Outbox, events: EventBus,
                             health: StoreHealth, messages: MessageService, directory: URL?, limits: Limits = Limits(),
                             vault: (any ReceivedFileVault)? = nil,
                             logger: Logger, clock: @escaping @Sendable () -> Int64 = { Int64(wallClockMilliseconds()) }) {
        self.identity = identity
        self.store = store
        self.peers = peers
        self.outbox = outbox
        self.events = events
        self.health = health
        self.messages = messages
        self.limits = limits
        self.logger = logger
        self.clock = clock
        self.vault = vault
        (vaultJobs, vaultInput) = AsyncStream.makeStream(of: VaultJob.self, bufferingPolicy: .bufferingOldest(64))
        (relayJobs, relayInput) = AsyncStream.makeStream(of: RelayJob.self, bufferingPolicy: .bufferingOldest(256))
        // A node without a data directory (tests) keeps its files in a private temporary folder.
        let dir = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("tandem-files-\(hexString(Sodium.randomBytes(8)))")
        self.directory = dir
        self.disk = FileDisk(directory: dir, logger: logger)
    }

    var me: [UInt8] { identity.publicKey }
    func now() -> Int64 { clock() }
    func idText(_ key: [UInt8]) -> JSONValue { .string(NodeID(publicKey: key).canonical) }

    // MARK: - Loading

    /// The open transfers from the store (once, before anything else touches them).
    /// `r`: the step the caller is in, or the store outside one.
    package func loadIfNeeded(_ r: StoreReading) {
        guard !loaded else { return }
        loaded = true
        let rows = health.read("read the open file transfers", or: []) { try r.openFileTransfers() }
        let nowMs = now()
        for row in rows {
            guard let offer = row.offer else { continue }
            let thread = threadOf(row, r)
            switch row.direction {
            case .incoming:
                var receiver: FileReceiver
                switch row.state {
                case .offered:
                    receiver = FileReceiver(offer: offer, nowMs: nowMs, deadlineMs: row.deadlineMs, window: limits.window, refill: limits.refillChunks,
                                            requestTimeoutMs: limits.requestTimeoutMs)
                case .receiving, .verifying:
                    // What the store holds is synced; what the sidecar adds was written by a process
                    // of this boot (a kill -9 loses none of it) and is synced by the next sync.
                    let durable = Array(row.bitmap)
                    var held = durable
                    let partial = partialPath(offer.fileID)
                    if durable.count == (offer.chunkCount + 7) / 8, let written = WrittenChunks.load(partial: partial, bytes: durable.count) {
                        var adopted: [Int] = [], bytes: Int64 = 0
                        for i in 0..<offer.chunkCount where written[i / 8] & (1 << UInt8(i % 8)) != 0 && durable[i / 8] & (1 << UInt8(i % 8)) == 0 {
                            held[i / 8] |= 1 << UInt8(i % 8)
                            adopted.append(i)
                            bytes += Int64(ChunkTree.chunkLength(index: i, size: offer.size, chunkBytes: offer.chunkBytes))
                        }
                        if !adopted.isEmpty { disk.write(.init(fileID: offer.fileID, path: partial, adopt: adopted, bytes: bytes)) }
                    }
                    receiver = FileReceiver(resuming: offer, bitmap: held, nowMs: nowMs, deadlineMs: row.deadlineMs,
                                            window: limits.window, refill: limits.refillChunks, requestTimeoutMs: limits.requestTimeoutMs)
                case .complete, .failed:
                    continue
                }
                _ = receiver.tick(nowMs: nowMs)  // nothing in flight yet: the first tick after a link asks
                // The author: the attached message's (a thread's file may come through the inviter).
                let author = offer.messageID.flatMap { id in health.read("read a file's message", or: nil) { try r.message(id) } }
                    .map { Array($0.author) } ?? Array(row.peer)
                let serves = thread.map { relaysThread($0, author: author, r) } ?? false
                incoming[offer.fileID] = Incoming(receiver: receiver, peer: Array(row.peer), author: author, thread: thread, serves: serves,
                                                  partial: partialPath(offer.fileID), messageID: offer.messageID, durable: Array(row.bitmap))
            case .outgoing:
                guard let path = row.path else { continue }
                let sent = Array(row.bitmap)
                outgoing[offer.fileID] = Outgoing(offer: offer, peer: Array(row.peer), thread: thread, path: path, tree: nil, sent: sent,
                                                  sentCount: sent.reduce(0) { $0 + $1.nonzeroBitCount }, state: row.state,
                                                  deadlineMs: row.deadlineMs)
            }
        }
        loadRelays(r, nowMs: nowMs)
    }

    /// Forgets every transfer held in memory (the fuzz harness, whose store is emptied between inputs).
    package func forgetAll() {
        incoming = [:]
        outgoing = [:]
        relays = [:]
        deferred = [:]
        relayPending = [:]
        loaded = false
    }

    /// The chunks each incoming transfer holds (verified), for checks.
    package func heldChunks() -> [FileID: [Int]] {
        incoming.mapValues { t in (0..<t.receiver.offer.chunkCount).filter { t.receiver.has($0) } }
    }

    func partialPath(_ id: FileID) -> String { directory.appendingPathComponent(".partial/\(id).part").path }

    /// The auto-accept limit for `peer`: its own, else the node's, else the default.
    func autoAcceptBytes(_ peer: [UInt8], _ r: StoreReading) -> Int64 {
        if let own = health.read("read a friend's file setting", or: nil, { try r.fileAutoAcceptBytes(peer: peer) }) { return own }
        if let text = health.read("read the file setting", or: nil, { try r.setting(Self.autoAcceptSetting) }), let v = Int64(text) { return v }
        return limits.autoAcceptBytes
    }

    nonisolated static let autoAcceptSetting = "file_auto_accept_bytes"

    // MARK: - Sending

    /// Where our offer goes: a friend, or a challenge's thread (messages.md 7.7).
    enum OfferTarget: Sendable {
        case friend([UInt8])
        case thread(ThreadID)
    }

    /// Offers the file at `path` (already hashed: `hashed`) to `target`, with a MESSAGE carrying
    /// `text` (or the file's name) that the offer is attached to; one step. In a thread the offer is
    /// signed once, to the inviter, or, when we are the inviter, to each participant under one id.
    func offer(_ target: OfferTarget, path: String, name: String, hashed: FileDisk.Hashed, text: String?, _ step: StoreStep) throws -> JSONValue {
        loadIfNeeded(step)
        var params: [String: JSONValue] = ["text": .string(text ?? name)]
        let recipients: [[UInt8]], thread: ThreadID?
        switch target {
        case .friend(let key):
            params["to"] = .string(NodeID(publicKey: key).canonical)
            (recipients, thread) = ([key], nil)
        case .thread(let id):
            guard let ch = try step.challenge(id), ch.participant(me) != nil else { throw NodeError.nothingToActOn("no such challenge") }
            params["challenge"] = .string(hexString(id))
            (recipients, thread) = (ThreadFileRoute.offerRecipients(me: me, inviter: ch.inviter, participants: ch.participants.map(\.key)), id)
        }
        guard let key = recipients.first else { throw NodeError.nothingToActOn("nobody else takes part in that challenge") }
        let sent = try messages.send(.object(params), step)
        guard let idText = sent["id"]?.stringValue, let messageID = parseHex(idText) else { throw NodeError.failed("the message was not sent") }
        let fileID = FileID.random()
        let offer = FileOfferMessage(fileID: fileID, name: name, size: hashed.size, fileHash: hashed.fileHash,
                                     chunkRoot: hashed.tree.root, messageID: messageID, challengeID: thread)
        let c = try thread.map { try step.threadConversation(challengeId: $0, nowMs: now()) } ?? step.directConversation(peer: key, nowMs: now())
        guard let cid = c.id else { throw MessageStoreError.noSuchConversation }
        let nowMs = now()
        let deadline = nowMs.addingSaturated(limits.offerLifetimeMs)
        let row = StoredFileTransfer(offer: offer, conversationId: cid, direction: .outgoing, peer: key, path: path, nowMs: nowMs,
                                     deadlineMs: deadline)
        let frames = messages.frames(.fileOffer, to: recipients, payload: offer.payload, step)
        try step.storeOutgoingFile(row, leaves: hashed.tree.packedLeaves, frame: frames[0])
        for f in frames.dropFirst() { try step.enqueue(f) }
        outbox.send(to: recipients, in: step)
        let record = Outgoing(offer: offer, peer: key, thread: thread, path: path, tree: hashed.tree, sent: Array(row.bitmap), sentCount: 0,
                              state: .offered, deadlineMs: deadline)
        step.afterCommit { [self] in outgoing[fileID] = record }
        var f: [String: JSONValue] = ["file_id": .string(fileID.description), "message_id": .string(idText), "direction": "out",
                                      "to": self.idText(key), "name": .string(name), "size": .int(Int64(hashed.size))]
        if let thread { f["conversation"] = .string("challenge:" + hexString(thread)) }
        events.emit("message.file_offered", f, in: step)
        return .object(["id": .string(idText), "file_id": .string(fileID.description), "name": .string(name),
                        "size": .int(Int64(hashed.size)), "seq": sent["seq"] ?? .null])
    }

    /// A FILE_REQUEST for one of our files: the chunks asked for (within the serving bounds) are
    /// read and sent on the link it came by.
    func serve(_ request: FileRequestMessage, from author: [UInt8], link: PeerLink, _ step: StoreStep) {
        guard outgoing[request.fileID] != nil else { return serveRelayed(request, from: author, link: link, step) }
        guard var out = outgoing[request.fileID], mayFetch(author, out, step) else { return }
        switch out.state {
        case .offered, .receiving, .verifying, .complete: break
        case .failed: return
        }
        guard now() < out.deadlineMs, request.fits(chunkCount: out.offer.chunkCount) else { return }
        if out.tree == nil {
            let packed = health.read("read a file's chunk hashes", or: nil) { try step.fileLeaves(request.fileID.bytes) }
            out.tree = packed.flatMap { ChunkTreeLevels(packedLeaves: $0) }
            guard let tree = out.tree, tree.count == out.offer.chunkCount, tree.root == out.offer.chunkRoot else {
                logger.error("an offered file's chunk hashes are missing or wrong", metadata: ["file": "\(request.fileID)"])
                return
            }
            outgoing[request.fileID] = out
        }
        guard let tree = out.tree else { return }
        queueRead(request, path: out.path, size: out.offer.size, tree: tree, for: author, link: link)
    }

    /// The chunks of `request` (within the serving bounds) go to the reading lane, for `link`.
    func queueRead(_ request: FileRequestMessage, path: String, size: UInt64, tree: ChunkTreeLevels, for author: [UInt8], link: PeerLink) {
        var indices: [Int] = []
        for r in request.ranges {
            for i in r.first..<r.end where indices.count < limits.chunksPerRequest { indices.append(i) }
        }
        guard !indices.isEmpty else { return }
        let job = FileDisk.ReadJob(fileID: request.fileID, path: path, size: size, indices: indices,
                                   proofs: indices.map { tree.proof(index: $0) }, link: link, friend: author,
                                   delayMs: limits.serveDelayMs)
        if waitingReads[author]?.isEmpty == false {
            keepWaiting(job)  // behind the friend's older requests
        } else if let rest = submitRead(job) {
            keepWaiting(rest)
        }
    }

    /// Hands the reading lane as much of `job` as the friend's serving bound has room for; the
    /// rest, if any, is returned.
    func submitRead(_ job: FileDisk.ReadJob) -> FileDisk.ReadJob? {
        let room = limits.queuedChunksPerFriend - disk.queuedChunks(for: job.friend)
        guard room > 0 else { return job }
        guard room < job.indices.count else {
            disk.read(job)
            return nil
        }
        var now = job, rest = job
        (now.indices, now.proofs) = (Array(job.indices[..<room]), Array(job.proofs[..<room]))
        (rest.indices, rest.proofs) = (Array(job.indices[room...]), Array(job.proofs[room...]))
        disk.read(now)
        return rest
    }

    /// Keeps the rest of a request until the friend's queue drains (past `pendingPerFriend`
    /// waiting requests it is dropped: the receiver asks again after its timeout).
    func keepWaiting(_ job: FileDisk.ReadJob) {
        guard waitingReads[job.friend, default: []].count < limits.pendingPerFriend else { return }
        waitingReads[job.friend, default: []].append(job)
    }

    /// After a batch for `friend` left: its waiting requests, oldest first, while there is room,
    /// for files still offered or relayed.
    func resumeWaitingReads(for friend: [UInt8]) {
        guard var waiting = waitingReads[friend] else { return }
        while let first = waiting.first {
            let live = outgoing[first.fileID].map { $0.state != .failed && now() < $0.deadlineMs } ?? (relays[first.fileID] != nil)
            guard live else {
                waiting.removeFirst()
                continue
            }
            guard let rest = submitRead(first) else {
                waiting.removeFirst()
                continue
            }
            waiting[0] = rest
            break
        }
        waitingReads[friend] = waiting.isEmpty ? nil : waiting
    }

    /// The reading lane sent these chunks (or lost the link on the way, or could not read the file).
    func served(_ job: FileDisk.ReadJob, _ outcome: FileDisk.Served) {
        defer { resumeWaitingReads(for: job.friend) }
        let sentBytes: Int64, failed: Bool, taken: [Int]
        switch outcome {
        case .sent(let n): (sentBytes, failed, taken) = (n, false, job.indices)
        case .linkGone(let n, let written): (sentBytes, failed, taken) = (n, false, written)
        case .failed: (sentBytes, failed, taken) = (0, true, [])
        }
        if outgoing[job.fileID] == nil, relays[job.fileID] != nil {
            if case .failed = outcome { relayGone(job.fileID) }
            return
        }
        guard var out = outgoing[job.fileID] else { return }
        defer { events.published() }
        if failed {
            // The file is gone or changed size: the offer ends.
            outgoing[job.fileID] = nil
            health.attempt("end an offered file") {
                try store.step { step in
                    try step.endOutgoingFile(job.fileID.bytes, state: .failed, failure: "gone", nowMs: now())
                    let cancel = FileCancelMessage(fileID: job.fileID, reason: .gone)
                    try step.enqueue(outbox.frame(.fileCancel, to: out.peer, payload: cancel.payload, in: step))
                    outbox.send(to: [out.peer], in: step)
                    events.emit("message.file_failed", ["file_id": .string(job.fileID.description), "direction": "out",
                                                        "reason": "gone", "to": idText(out.peer)], in: step)
                }
            }
            return
        }
        // Chunks count as sent once a link took them; bytes whenever they were handed to one.
        for i in taken where out.sent[i / 8] & (1 << UInt8(i % 8)) == 0 {
            out.sent[i / 8] |= 1 << UInt8(i % 8)
            out.sentCount += 1
        }
        let total = out.offer.chunkCount
        let percent = total == 0 ? 100 : out.sentCount * 100 / total
        let before = out.state
        if out.sentCount == total { out.state = .complete } else if out.state == .offered { out.state = .receiving }
        let report = percent != out.reportedPercent || before != out.state
        out.reportedPercent = percent
        outgoing[job.fileID] = out
        health.attempt("record a file's progress") {
            try store.step(syncing: false) { step in
                try step.addFileBytesMoved(job.fileID.bytes, sentBytes)
                try step.setFileProgress(job.fileID.bytes, state: out.state, bitmap: out.sent, durable: false, nowMs: now())
                guard report else { return }
                let moved = try step.fileBytesMoved(job.fileID.bytes)
                var fields: [String: JSONValue] = [
                    "file_id": .string(job.fileID.description), "direction": "out", "to": idText(out.peer),
                    "message_id": out.offer.messageID.map { .string(hexString($0)) } ?? .null,
                    "size": .int(Int64(out.offer.size)), "percent": .int(Int64(percent)), "bytes_sent": .int(moved),
                ]
                events.emit("message.file_progress", fields, in: step)
                if out.state == .complete, before != .complete {
                    fields["percent"] = nil
                    events.emit("message.file_sent", fields, in: step)
                }
            }
        }
    }
}

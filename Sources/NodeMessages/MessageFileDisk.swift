import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import Synchronization
import TandemNet
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The disk work of file transfers, off the node core and the event loops: three lanes of a NIO
/// thread pool of its own, one reading (hashing a file to offer, serving chunks), one writing
/// (received chunks, each hashed into the whole-file hash as it is written, the rest of that hash,
/// the written-chunks sidecar) and one syncing (syncs, durable reports, the move into place), so
/// a slow disk's syncs never hold up the writes. Jobs reach each lane through a stream and run one
/// at a time, in order; a file is never read or held whole in memory (256 KiB at a time; a served
/// batch at most `MessageFiles.Limits.chunksPerRequest` chunks).
final class FileDisk: Sendable {
    let directory: URL
    let logger: Logger
    private let pool: NIOThreadPool
    private let reads: AsyncStream<ReadJob>
    private let readInput: AsyncStream<ReadJob>.Continuation
    private let writes: AsyncStream<WriteJob>
    private let writeInput: AsyncStream<WriteJob>.Continuation
    private let syncs: AsyncStream<SyncJob>
    private let syncInput: AsyncStream<SyncJob>.Continuation
    /// Open partial files and the chunks written to each since its last sync (writing lane only).
    private let writer = Mutex(WriterState())

    struct WriterState {
        var open: [FileID: Int32] = [:]
        var unsynced: [FileID: (indices: [Int], bytes: Int64)] = [:]
        /// The whole-file hash of each partial file, carried along as its chunks are written.
        var hashes: [FileID: RunningFileHash] = [:]
        /// The chunks written to each partial file (its `WrittenChunks` sidecar).
        var written: [FileID: WrittenChunks] = [:]
        /// Files with a sync waiting in the syncing lane (what is written meanwhile joins it).
        var syncWaiting: Set<FileID> = []
    }

    init(directory: URL, logger: Logger) {
        self.directory = directory
        self.logger = logger
        ProcessMemory.keepLargeBuffers()
        pool = NIOThreadPool(numberOfThreads: 4)
        pool.start()
        // Bounded: a receiver has at most `window` chunks of each pending file in flight, a sender
        // `queuedChunksPerFriend` per friend; these bounds are far above both.
        (reads, readInput) = AsyncStream.makeStream(of: ReadJob.self, bufferingPolicy: .bufferingOldest(Self.queuedJobs))
        (writes, writeInput) = AsyncStream.makeStream(of: WriteJob.self, bufferingPolicy: .bufferingOldest(Self.queuedJobs))
        (syncs, syncInput) = AsyncStream.makeStream(of: SyncJob.self, bufferingPolicy: .bufferingOldest(Self.queuedJobs))
    }

    deinit {
        pool.shutdownGracefully { _ in }
    }

    // MARK: hashing a file to offer

    struct Hashed: Sendable {
        let size: UInt64
        let fileHash: [UInt8]
        let tree: ChunkTreeLevels
    }

    enum HashError: Error, CustomStringConvertible {
        case notAFile(String), tooLarge(UInt64), empty, io(String)
        var description: String {
            switch self {
            case .notAFile(let p): "\(p) is not a regular file"
            case .tooLarge(let n): "the file is \(n) bytes; at most 4 GiB (4294967296 bytes)"
            case .empty: "the file is empty"
            case .io(let s): s
            }
        }
    }

    /// Reads the file once, 256 KiB at a time: its size, BLAKE2b-256 and chunk tree.
    func hash(path: String) async throws -> Hashed {
        try await pool.runIfActive { try FileLaneCPU.measure(.offering) { try Self.hashFile(path) } }
    }

    static func hashFile(_ path: String) throws -> Hashed {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw HashError.io("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw HashError.io("cannot read \(path)") }
        guard (st.st_mode & S_IFMT) == S_IFREG else { throw HashError.notAFile(path) }
        let size = UInt64(max(0, st.st_size))
        guard size > 0 else { throw HashError.empty }
        guard size <= ChatLimits.maximumFileBytes else { throw HashError.tooLarge(size) }
        let n = ChunkTree.chunkCount(size: size)
        var whole = Blake2b(outputLength: 32)
        var leaves: [[UInt8]] = []
        leaves.reserveCapacity(n)
        var buffer = [UInt8](repeating: 0, count: ChatLimits.chunkBytes)
        for i in 0..<n {
            let length = ChunkTree.chunkLength(index: i, size: size)
            try readFully(fd, &buffer, length: length, offset: Int64(i) * Int64(ChatLimits.chunkBytes), path: path)
            buffer.withUnsafeBytes { all in
                let chunk = UnsafeRawBufferPointer(rebasing: all[0..<length])
                whole.update(chunk)
                leaves.append(ChunkTree.leafHash(chunk))
            }
        }
        return Hashed(size: size, fileHash: whole.finalize(), tree: ChunkTreeLevels(leaves: leaves))
    }

    static func readFully(_ fd: Int32, _ buffer: inout [UInt8], length: Int, offset: Int64, path: String) throws {
        var done = 0
        while done < length {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, length - done, off_t(offset + Int64(done))) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw HashError.io("\(path) changed while it was read") }
            done += n
        }
    }

    // MARK: the reading lane: serving chunks

    struct ReadJob: Sendable {
        let fileID: FileID
        let path: String
        let size: UInt64
        var indices: [Int]
        var proofs: [[[UInt8]]]
        let link: PeerLink
        /// The friend it is served to (its chunks count against that friend's serving bound).
        let friend: [UInt8]
        /// Tests only: a pause before each chunk.
        var delayMs = 0
    }

    static let queuedJobs = 4096

    /// Chunks queued for reading per friend (the sender's serving bound). The reading lane counts
    /// a batch down as soon as the link took it, not when the node core hears of it: a request that
    /// the receiver sends once half its window arrived must not find the batches it answered still
    /// counted (it would be cut short and its rest wait for the receiver's request timeout).
    private let queued = Mutex<[[UInt8]: Int]>([:])

    /// Chunks queued for `friend` and not yet sent.
    func queuedChunks(for friend: [UInt8]) -> Int {
        queued.withLock { $0[friend, default: 0] }
    }

    /// False when the lane's queue is full (the job is not done; the asker asks again).
    @discardableResult
    func read(_ job: ReadJob) -> Bool {
        queued.withLock { $0[job.friend, default: 0] += job.indices.count }
        if case .dropped = readInput.yield(job) {
            dequeued(job)
            return false
        }
        return true
    }

    private func dequeued(_ job: ReadJob) {
        queued.withLock { q in
            let left = q[job.friend, default: 0] - job.indices.count
            q[job.friend] = left > 0 ? left : nil
        }
    }

    /// What became of a read job.
    enum Served: Sendable {
        /// The link took every chunk.
        case sent(bytes: Int64)
        /// The link went away: `taken`, the chunks the link did write before it failed, count as sent
        /// (`bytes`: theirs); the others did not leave (the receiver asks again).
        case linkGone(bytes: Int64, taken: [Int])
        /// The file cannot be read as offered.
        case failed
    }

    /// Serves the read jobs until `finish`: `done(job, outcome)` after each.
    func runReads(_ done: @escaping @Sendable (ReadJob, Served) async -> Void) async {
        for await job in reads {
            let outcome: Served
            do {
                outcome = try await pool.runIfActive { try FileLaneCPU.measure(.reading) { try Self.serve(job) } }
            } catch {
                logger.warning("cannot serve an offered file", metadata: ["file": "\(job.fileID)", "error": "\(error)"])
                outcome = .failed
            }
            dequeued(job)
            await done(job, outcome)
        }
    }

    /// Reads the chunks and writes them on the link; returns once the link took the last one
    /// (so at most one batch waits in its buffers).
    static func serve(_ job: ReadJob) throws -> Served {
        let fd = open(job.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw HashError.io("cannot open \(job.path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, UInt64(max(0, st.st_size)) == job.size else { throw HashError.io("\(job.path) changed size") }
        var writes: [(index: Int, length: Int, done: EventLoopFuture<Void>)] = []
        for (i, index) in job.indices.enumerated() {
            if job.delayMs > 0 { usleep(useconds_t(min(job.delayMs, 10_000)) * 1000) }
            let length = ChunkTree.chunkLength(index: index, size: job.size)
            var data = [UInt8](repeating: 0, count: length)
            try readFully(fd, &data, length: length, offset: Int64(index) * Int64(ChatLimits.chunkBytes), path: job.path)
            let chunk = FileChunkMessage(fileID: job.fileID, index: index, data: data, proof: job.proofs[i])
            writes.append((index, length, job.link.send(type: .fileChunk, payload: chunk.payload)))
        }
        // In order: the chunks written before the link failed were sent (a receiver that stored
        // them, synced, will not ask for them again: they must count, or the file is never `sent`).
        // Only those count as bytes sent: a chunk the link did not take never left.
        var taken: [Int] = []
        var sent: Int64 = 0
        for w in writes {
            do {
                try w.done.wait()
                taken.append(w.index)
                sent += Int64(w.length)
            } catch {
                return .linkGone(bytes: sent, taken: taken)
            }
        }
        return .sent(bytes: sent)
    }

    // MARK: the writing lane and the syncing lane

    struct WriteJob: Sendable {
        enum Kind: Sendable {
            /// With `check`: written only if the chunk matches its file's tree (else `badChunk`).
            case write(index: Int, offset: UInt64, data: [UInt8], syncAfter: Bool, check: ChunkCheck?)
            /// Chunks a killed process wrote (its `WrittenChunks`, this boot) that are not yet known
            /// to be synced: the next sync covers them.
            case adopt(indices: [Int], bytes: Int64)
            case flush
            case verify(hash: [UInt8], name: String)
            case remove
        }
        let fileID: FileID
        let path: String
        let kind: Kind

        init(fileID: FileID, path: String, index: Int, offset: UInt64, data: [UInt8], syncAfter: Bool, check: ChunkCheck? = nil) {
            (self.fileID, self.path, kind) = (fileID, path, .write(index: index, offset: offset, data: data, syncAfter: syncAfter,
                                                                   check: check))
        }
        init(fileID: FileID, path: String, adopt indices: [Int], bytes: Int64) {
            (self.fileID, self.path, kind) = (fileID, path, .adopt(indices: indices, bytes: bytes))
        }
        init(fileID: FileID, path: String, flush: Bool) { (self.fileID, self.path, kind) = (fileID, path, .flush) }
        init(fileID: FileID, path: String, verify hash: [UInt8], name: String) {
            (self.fileID, self.path, kind) = (fileID, path, .verify(hash: hash, name: name))
        }
        init(fileID: FileID, path: String, remove: Bool) { (self.fileID, self.path, kind) = (fileID, path, .remove) }
    }

    /// A sync the writing lane asks of the syncing lane: `fd` (a duplicate, closed there) is synced,
    /// and the chunks written before the sync began are reported durable; with `finish`, the file
    /// is then moved into place (its hash matched) or reported bad. At most one sync without
    /// `finish` waits per file: what is written meanwhile joins it.
    struct SyncJob: Sendable {
        struct Finish: Sendable {
            let path: String, name: String, expected: [UInt8], hash: [UInt8]
        }
        let fileID: FileID
        let fd: Int32
        var finish: Finish?
    }

    enum WriteReport: Sendable {
        /// These chunks are written and synced.
        case durable(FileID, [Int], Int64)
        case failed(FileID, String)
        /// The whole file's hash, and where it was moved when it matched.
        case verified(FileID, [UInt8], String?)
        /// This chunk did not match its file's tree: it was not written.
        case badChunk(FileID, Int)
    }

    /// False when the lane's queue is full (cannot happen within the receiver's bounds; logged).
    @discardableResult
    func write(_ job: WriteJob) -> Bool {
        if case .dropped = writeInput.yield(job) {
            logger.error("the file writing lane is full: a job was dropped", metadata: ["file": "\(job.fileID)"])
            return false
        }
        return true
    }

    func finish() {
        readInput.finish()
        writeInput.finish()
    }

    /// The writing lane (writes, the running hash, `WrittenChunks`) and the syncing lane (syncs,
    /// durable reports, moving a verified file into place), until `finish`. A sync never holds up
    /// a write: the writing lane hands each to the syncing lane with a duplicate descriptor.
    func runWrites(_ report: @escaping @Sendable (WriteReport) async -> Void) async {
        await withDiscardingTaskGroup { group in
            group.addTask { [self] in
                for await job in syncs {
                    let out: [WriteReport]
                    do {
                        out = try await pool.runIfActive { try FileLaneCPU.measure(.syncing) { try self.sync(job) } }
                    } catch {
                        out = [.failed(job.fileID, "\(error)")]
                    }
                    for r in out { await report(r) }
                }
            }
            for await job in writes {
                do {
                    let matched = try await pool.runIfActive { () throws -> Bool in
                        try FileLaneCPU.measure(.writing) {
                            // The check (a hash of the chunk) runs outside the lock the syncing lane also takes.
                            if case .write(_, _, let data, _, let check?) = job.kind, !check.matches(data) { return false }
                            try self.writer.withLock { try self.handle(job, &$0) }
                            return true
                        }
                    }
                    if !matched, case .write(let index, _, _, _, _) = job.kind { await report(.badChunk(job.fileID, index)) }
                } catch {
                    writer.withLock { s in self.forget(job.fileID, &s) }
                    await report(.failed(job.fileID, "\(error)"))
                }
            }
            writer.withLock { s in
                for id in Array(s.open.keys) + Array(s.written.keys) { forget(id, &s) }
            }
            syncInput.finish()
        }
    }

    private func forget(_ id: FileID, _ s: inout WriterState) {
        if let fd = s.open.removeValue(forKey: id) { close(fd) }
        s.written.removeValue(forKey: id)?.close()
        s.unsynced[id] = nil
        s.hashes[id] = nil
        s.syncWaiting.remove(id)
    }

    private func fd(for job: WriteJob, _ s: inout WriterState) throws -> Int32 {
        if let fd = s.open[job.fileID] { return fd }
        let dir = (job.path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        _ = chmod(directory.path, 0o700)
        let fd = open(job.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw HashError.io("cannot open \(job.path): \(String(cString: strerror(errno)))") }
        s.open[job.fileID] = fd
        do {
            s.written[job.fileID] = try WrittenChunks(partial: job.path)
        } catch {
            s.open[job.fileID] = nil
            close(fd)
            throw error
        }
        return fd
    }

    /// Asks the syncing lane for a sync of what was written (unless one is waiting already).
    private func requestSync(_ id: FileID, _ fd: Int32, _ s: inout WriterState, finish: SyncJob.Finish? = nil) throws {
        if finish == nil {
            guard s.unsynced[id] != nil, !s.syncWaiting.contains(id) else { return }
            s.syncWaiting.insert(id)
        }
        let copy = fd >= 0 ? dup(fd) : -1
        guard fd < 0 || copy >= 0 else { throw HashError.io("cannot sync a received file: \(String(cString: strerror(errno)))") }
        if case .dropped = syncInput.yield(SyncJob(fileID: id, fd: copy, finish: finish)) {
            if copy >= 0 { close(copy) }
            throw HashError.io("the file syncing lane is full")
        }
    }

    private func handle(_ job: WriteJob, _ s: inout WriterState) throws {
        switch job.kind {
        case .write(let index, let offset, let data, let syncAfter, _):
            let fd = try fd(for: job, &s)
            var done = 0
            while done < data.count {
                let n = data.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, data.count - done, off_t(Int64(offset) + Int64(done))) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { throw HashError.io("cannot write a received file: \(String(cString: strerror(errno)))") }
                done += n
            }
            try s.written[job.fileID]?.written(index)
            s.unsynced[job.fileID, default: ([], 0)].indices.append(index)
            s.unsynced[job.fileID, default: ([], 0)].bytes += Int64(data.count)
            let running = s.hashes[job.fileID] ?? RunningFileHash()
            s.hashes[job.fileID] = running
            try running.written(index: index, data, fd: fd)
            if syncAfter { try requestSync(job.fileID, fd, &s) }
        case .adopt(let indices, let bytes):
            _ = try fd(for: job, &s)
            s.unsynced[job.fileID, default: ([], 0)].indices += indices
            s.unsynced[job.fileID, default: ([], 0)].bytes += bytes
        case .flush:
            guard let fd = s.open[job.fileID] else { return }
            try requestSync(job.fileID, fd, &s)
        case .verify(let expected, let name):
            // What the running hash holds (the chunks written in order in this process), then the
            // rest read back from the partial file (all of it after a restart). The syncing lane
            // reports the last chunks durable first (the core stores their bits before it hears
            // of the hash), then moves the file into place.
            let running = s.hashes.removeValue(forKey: job.fileID) ?? RunningFileHash()
            let fd = s.open.removeValue(forKey: job.fileID) ?? open(job.path, O_RDONLY | O_CLOEXEC)
            defer { if fd >= 0 { close(fd) } }
            s.written.removeValue(forKey: job.fileID)?.close()
            let hash = try running.finish(path: job.path)
            try requestSync(job.fileID, fd, &s, finish: .init(path: job.path, name: name, expected: expected, hash: hash))
        case .remove:
            forget(job.fileID, &s)
            unlink(job.path)
            WrittenChunks.remove(partial: job.path)
        }
    }

    /// The syncing lane: one sync, then what it made durable (the chunks written before it
    /// began), then (the last) the file in place.
    private func sync(_ job: SyncJob) throws -> [WriteReport] {
        let (pending, hashed) = writer.withLock { s in
            if job.finish == nil { s.syncWaiting.remove(job.fileID) }
            return (s.unsynced.removeValue(forKey: job.fileID) ?? ([], 0), s.hashes[job.fileID]?.next ?? 0)
        }
        if job.fd >= 0 {
            defer { close(job.fd) }
            guard fdatasync(job.fd) == 0 else { throw HashError.io("cannot sync a received file: \(String(cString: strerror(errno)))") }
            Self.dropFromCache(job.fd, pending.indices.filter { $0 < hashed })
        }
        var out: [WriteReport] = pending.indices.isEmpty ? [] : [.durable(job.fileID, pending.indices, pending.bytes)]
        if let f = job.finish {
            guard f.hash == f.expected else { return out + [.verified(job.fileID, f.hash, nil)] }
            let dest = try place(f.path, name: f.name)
            WrittenChunks.remove(partial: f.path)
            out.append(.verified(job.fileID, f.hash, dest))
        }
        return out
    }

    /// Chunks that are synced and already in the whole-file hash are not read again while the file
    /// is received: their pages leave the page cache (`POSIX_FADV_DONTNEED`; clean pages only, so
    /// only after the sync), so a large download does not push the machine's working set out of
    /// memory, and the pages it frees are the ones its next chunks are written into (messages.md
    /// 11.4: on a virtual machine, pages never touched before cost several times more to write).
    static func dropFromCache(_ fd: Int32, _ indices: [Int]) {
        var start = -1, end = -1
        func flush() {
            guard start >= 0 else { return }
            let chunk = Int64(ChatLimits.chunkBytes)
            _ = posix_fadvise(fd, off_t(Int64(start) * chunk), off_t(Int64(end - start) * chunk), POSIX_FADV_DONTNEED)
        }
        for i in indices.sorted() {
            if i == end {
                end += 1
            } else {
                flush()
                (start, end) = (i, i + 1)
            }
        }
        flush()
    }

    /// Moves the verified partial file into the downloads folder under its name, or "name (2)",
    /// "name (3)"… (never over an existing file: `link` fails on one), then syncs the folder.
    func place(_ partial: String, name: String) throws -> String {
        let ext = (name as NSString).pathExtension
        let stem = ext.isEmpty ? name : (name as NSString).deletingPathExtension
        for n in 1...1000 {
            let candidate = n == 1 ? name : (ext.isEmpty ? "\(stem) (\(n))" : "\(stem) (\(n)).\(ext)")
            let dest = directory.appendingPathComponent(candidate).path
            if link(partial, dest) == 0 {
                unlink(partial)
                let dfd = open(directory.path, O_RDONLY | O_CLOEXEC)
                if dfd >= 0 {
                    fsync(dfd)
                    close(dfd)
                }
                return dest
            }
            guard errno == EEXIST else { throw HashError.io("cannot move a received file into place: \(String(cString: strerror(errno)))") }
        }
        throw HashError.io("too many files named \(name)")
    }
}

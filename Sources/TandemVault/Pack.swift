import Foundation
import Sodium
import Synchronization
import TandemThreads

/// A pack file:
///
///     blob₀ ‖ blob₁ ‖ … ‖ header box ‖ trailer
///     header box = nonce (24) ‖ XChaCha20-Poly1305( header ) ‖ tag (16), additional data "tdmvault pack header v1"
///     header     = version (u8 = 1) ‖ count (u32) ‖ count × ( chunk id (32) ‖ offset (u32) ‖ length (u32) )
///     trailer    = header box length (u32 BE)
///
/// The header makes a pack self-describing (an index can be rebuilt from packs alone) and lets
/// `check` compare a pack with the index without reading its blobs. It is encrypted, so chunk ids do
/// not leak. The pack's name is the hex of the unkeyed BLAKE2b-256 of the whole file: anyone holding
/// it (a friend keeping a backup) can check its integrity without any key.
enum PackFormat {
    /// A pack is closed once its blobs reach 4 MiB (and when an import ends).
    static let targetSize = 4 * 1024 * 1024
    static let headerVersion: UInt8 = 1
    static let headerEntryBytes = ChunkID.byteCount + 4 + 4
    static let trailerBytes = 4
    static let headerAD = Array("tdmvault pack header v1".utf8)
    /// The largest pack a writer makes: a pack just short of the target, one maximum blob, and a
    /// header listing blobs of the smallest size (this bounds what a reader accepts).
    static let maximumSize: Int64 = {
        let blobs = targetSize + BlobCodec.maximumBlob
        let entries = blobs / BlobCodec.overhead + 1
        return Int64(blobs + 1 + 4 + entries * headerEntryBytes + BlobCodec.nonceBytes + BlobCodec.tagBytes + trailerBytes)
    }()
}

/// One blob's place in a pack.
struct PackEntry: Equatable, Sendable {
    var id: ChunkID
    var offset: Int
    var length: Int
}

/// Collects blobs for one pack in a fixed buffer (the pack target plus one maximum blob: about
/// 12 MiB) and writes the pack when it is full or the import ends.
///
/// Writing runs beside sealing: `finish` names the pack and hands its buffer to a writer thread,
/// then goes on in the next free buffer (three buffers: about 36 MiB whatever the import's size),
/// so the disk writes of up to two packs overlap each other and the chunking, hashing and sealing
/// of the next. Two at once because a pack's durable write (file write, fsync, rename, directory
/// fsync) mostly waits on the disk: on the reference machine one writer made 295 MB/s durable, two
/// 589 MB/s, three no more. `waitForWrites()` returns once every pack handed over is durable (or
/// throws the first failure); the repository calls it before any index that names those packs is
/// written.
///
/// Naming runs beside sealing too: each blob, once sealed into the buffer, is fed to the pack's
/// BLAKE2b on a hashing thread (the bytes below `length` never change until the pack is written),
/// so `finish` waits only for the last blob's hashing. An import makes two BLAKE2b passes over its
/// data (chunk ids, pack names); this takes one of them off the importing thread.
///
/// Threads: two `WorkerPool`s of the writer's own, `tandem.packs` (two threads: the writes) and
/// `tandem.packhash` (one thread, so the blobs are hashed in order), started with the writer and
/// joined when it is released. What crosses to them is `Sendable` (the jobs are `@Sendable`
/// closures, a write's result comes back through its `Pending`); the buffer's bytes are shared
/// under `PackBuffer`'s rule.
final class PackWriter {
    /// Pack buffers: one filling, up to `count - 1` being written.
    static let bufferCount = 3
    private let buffers: [PackBuffer]
    /// Per buffer: the write of the pack it holds, until the buffer is filled again.
    private var writes: [Pending<Void>?]
    private var current = 0
    /// The current buffer's filling (`PackBuffer.reopen`).
    private var generation: Int
    /// Writes run here, at most `bufferCount - 1` at once (a buffer is reused only once its write ended).
    private let writers = WorkerPool(name: "tandem.packs", threads: PackWriter.bufferCount - 1)
    /// Feeds the open pack's blobs to `hasher` in order (one thread).
    private let hashing = WorkerPool(name: "tandem.packhash", threads: 1)
    /// The open pack's name so far, fed on `hashing` only.
    private var hasher = PackHasher()
    /// Bytes of the open pack handed to `hashing` so far.
    private var hashed = 0
    /// The first pack write that failed since the last `waitForWrites()`.
    private var firstFailure: (any Error)?
    private var buffer: PackBuffer { buffers[current] }
    private(set) var length = 0
    private(set) var entries: [PackEntry] = []
    /// The most bytes the buffers held (reset by the owner per import): every buffer counts.
    var highWaterMark = 0

    init() {
        buffers = (0..<Self.bufferCount).map { _ in PackBuffer(capacity: PackFormat.targetSize + BlobCodec.maximumBlob) }
        writes = Array(repeating: nil, count: Self.bufferCount)
        generation = buffers[0].reopen()
    }

    deinit {
        // Both pools run what is queued, then join their threads.
        hashing.shutdown()
        writers.shutdown()
    }

    var isEmpty: Bool { entries.isEmpty }
    var isFull: Bool { length >= PackFormat.targetSize }

    private func noteHighWater() {
        highWaterMark = Swift.max(highWaterMark, length + (Self.bufferCount - 1) * buffers[0].capacity)
    }

    /// Marks `n` more bytes sealed and hands them to the hashing thread.
    private func sealed(_ n: Int) {
        length += n
        buffer.seal(upTo: length)
        noteHighWater()
        hashAppended()
    }

    /// Hands the bytes sealed since the last call to the hashing thread.
    private func hashAppended() {
        guard length > hashed else { return }
        let (buffer, hasher, range, generation) = (self.buffer, self.hasher, hashed..<length, self.generation)
        // No handle per blob (an allocation fewer on the importing thread per blob): the jobs run
        // in order on one thread, so the next `submit` (the digest, or `discard`'s) ends after them.
        hashing.execute { buffer.read(range, generation: generation) { hasher.update($0) } }
        hashed = length
    }

    /// Seals `plaintext` as blob `id` at the end of the pack. The pack must not be full.
    func append(_ plaintext: UnsafeRawBufferPointer, id: ChunkID, tryCompress: Bool, keys: VaultKeys, zstd: Zstd) -> (entry: PackEntry, compressed: Bool) {
        precondition(!isFull, "append to a full pack")
        let (n, compressed) = BlobCodec.seal(plaintext, id: id, tryCompress: tryCompress, key: keys.dataKey,
                                             zstd: zstd, into: buffer.unsealed(from: length, count: BlobCodec.maximumBlob))
        let entry = PackEntry(id: id, offset: length, length: n)
        entries.append(entry)
        sealed(n)
        return (entry, compressed)
    }

    /// Appends an already sealed blob (repacking copies blobs without opening them: the additional
    /// data is the id, not the position, so a blob is valid in any pack).
    func appendSealed(_ blob: [UInt8], id: ChunkID) -> PackEntry {
        precondition(!isFull && blob.count <= BlobCodec.maximumBlob)
        let to = buffer.unsealed(from: length, count: blob.count)
        blob.withUnsafeBytes { to.copyMemory(from: $0.baseAddress!, byteCount: blob.count) }
        let entry = PackEntry(id: id, offset: length, length: blob.count)
        entries.append(entry)
        sealed(blob.count)
        return entry
    }

    /// Drops the open pack's blobs without writing them (an import that failed).
    func discard() {
        // The hashing thread may still read the buffer: let it finish before the buffer is reused
        // (a job after the blobs' jobs; it fails only for a pool shut down, in deinit alone).
        if hashed > 0 { _ = try? hashing.submit {}.wait() }
        hasher = PackHasher()
        hashed = 0
        length = 0
        entries.removeAll(keepingCapacity: true)
        generation = buffer.reopen()
    }

    /// Adds the encrypted header and trailer, names the pack, and hands it to the writer thread;
    /// the writer is then empty (in its other buffer). Returns the pack's name and size; the pack
    /// is durable once `waitForWrites()` returns.
    func finish(store: PackStore, keys: VaultKeys) throws -> (name: ChunkID, size: Int64) {
        var header = BinaryWriter()
        header.u8(PackFormat.headerVersion)
        header.u32(UInt32(entries.count))
        for e in entries {
            header.raw(e.id.bytes)
            header.u32(UInt32(e.offset))
            header.u32(UInt32(e.length))
        }
        let nonce = Sodium.randomBytes(BlobCodec.nonceBytes)
        let sealed = try XChaCha20Poly1305.seal(header.bytes, additionalData: PackFormat.headerAD, nonce: nonce, key: keys.dataKey)
        let box = nonce + sealed
        var trailer = BinaryWriter()
        trailer.u32(UInt32(box.count))
        let tail = box + trailer.bytes
        hashAppended()
        let hasher = self.hasher
        let digest = try hashing.submit {
            tail.withUnsafeBytes { hasher.update($0) }
            return hasher.finalize()
        }.wait()
        self.hasher = PackHasher()
        hashed = 0
        guard let name = ChunkID(digest) else { fatalError("BLAKE2b-256 gave a digest that is not 32 bytes") }
        let size = Int64(length + tail.count)
        let (buffer, generation, blobBytes) = (self.buffer, self.generation, length)
        writes[current] = writers.submit {
            try buffer.read(0..<blobBytes, generation: generation) { blobs in
                try tail.withUnsafeBytes { t in try store.write(name: name, parts: [blobs, t]) }
            }
        }
        // Go on in the next buffer once its previous write (if any) has ended.
        current = (current + 1) % Self.bufferCount
        if let previous = writes[current] {
            note { try previous.wait() }
            writes[current] = nil
        }
        self.generation = self.buffer.reopen()
        length = 0
        entries.removeAll(keepingCapacity: true)
        return (name, size)
    }

    /// Returns once every pack handed to the writer is on disk and synced; throws the first
    /// write that failed (then no index may name the packs of this import).
    func waitForWrites() throws {
        for i in writes.indices {
            guard let write = writes[i] else { continue }
            note { try write.wait() }
            writes[i] = nil
        }
        if let error = firstFailure {
            firstFailure = nil
            throw error
        }
    }

    private func note(_ wait: () throws -> Void) {
        do { try wait() } catch { if firstFailure == nil { firstFailure = error } }
    }
}

/// One pack buffer: the importing thread seals blobs at its end while the hashing and writing
/// threads read what is already sealed.
///
/// `@unchecked Sendable` because its bytes are raw memory, which the compiler cannot follow
/// across threads; the invariant is kept under `bounds`' lock and checked at run time: bytes below
/// `sealed` are never written until `reopen()`; the owner (`PackWriter`, on the importing thread)
/// writes only from `sealed` on (`unsealed`), readers read only below it (`read`), `reopen()` traps
/// while a reader is inside `read`, and a reader handed an older filling (`generation`) traps
/// instead of reading the new one. The owner waits for every job that reads a filling (its hashes,
/// its write) before it reopens the buffer.
final class PackBuffer: @unchecked Sendable {
    private struct Bounds {
        var sealed = 0
        var generation = 0
        var readers = 0
    }

    private let bytes: UnsafeMutableRawBufferPointer
    private let bounds = Mutex(Bounds())
    var capacity: Int { bytes.count }

    init(capacity: Int) {
        bytes = .allocate(byteCount: capacity, alignment: 64)
    }

    deinit { bytes.deallocate() }

    /// Where the owner writes `count` bytes at `offset` (at or past everything sealed).
    func unsealed(from offset: Int, count: Int) -> UnsafeMutableRawPointer {
        bounds.withLock { b in
            precondition(offset >= b.sealed && offset + count <= bytes.count, "write to sealed bytes or past the buffer")
        }
        return bytes.baseAddress! + offset
    }

    /// The bytes below `offset` are sealed: read-only until `reopen()`.
    func seal(upTo offset: Int) {
        bounds.withLock { b in
            precondition(offset >= b.sealed && offset <= bytes.count)
            b.sealed = offset
        }
    }

    /// Reads sealed bytes of filling `generation`.
    func read<R>(_ range: Range<Int>, generation: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        bounds.withLock { b in
            precondition(b.generation == generation && range.upperBound <= b.sealed, "read of bytes not sealed in this filling")
            b.readers += 1
        }
        defer { bounds.withLock { $0.readers -= 1 } }
        return try body(UnsafeRawBufferPointer(rebasing: bytes[range]))
    }

    /// Makes the whole buffer writable again, for a new filling; returns its generation.
    func reopen() -> Int {
        bounds.withLock { b in
            precondition(b.readers == 0, "a pack buffer reopened while it is read")
            b.sealed = 0
            b.generation += 1
            return b.generation
        }
    }
}

/// One pack's unkeyed BLAKE2b-256, fed in order on the writer's hashing thread.
///
/// `@unchecked Sendable`; its invariant is `lock`: `state` is touched only while it is held. The
/// compiler cannot see that because the checked lock, `Synchronization.Mutex`, hands the value
/// to its body as `inout sending`, and feeding it bytes through a raw pointer (which is not
/// `Sendable`) is refused although BLAKE2b keeps no reference to them.
private final class PackHasher: @unchecked Sendable {
    private let lock = NSLock()
    private var state: Blake2b? = Blake2b()

    func update(_ bytes: UnsafeRawBufferPointer) { lock.withLock { state?.update(bytes) } }

    /// The digest; the hasher is spent after it (empty if it was already).
    func finalize() -> [UInt8] { lock.withLock { state.take()?.finalize() ?? [] } }
}

/// The packs directory: `<vault dir>/packs/<first 2 hex>/<64 hex>`.
struct PackStore {
    let root: URL

    init(directory: URL) {
        root = directory.appendingPathComponent("packs", isDirectory: true)
    }

    func url(for name: ChunkID) -> URL {
        let hex = name.hex
        return root.appendingPathComponent(String(hex.prefix(2)), isDirectory: true).appendingPathComponent(hex)
    }

    func write(name: ChunkID, parts: [UnsafeRawBufferPointer]) throws {
        try FileIO.writeAtomically(parts, to: url(for: name), mode: 0o600)
    }

    func remove(_ name: ChunkID) throws {
        try FileIO.remove(url(for: name))
    }

    /// The sealed bytes of one blob, after checking it lies inside a pack of the size the index
    /// recorded (`packSize`).
    func readBlob(pack: ChunkID, offset: Int, length: Int, packSize: Int64, file: ReadFile? = nil) throws -> [UInt8] {
        let f = try file ?? ReadFile(url(for: pack), what: "pack \(pack.hex)")
        guard f.size == packSize else {
            throw VaultError.corrupt("pack \(pack.hex) is \(f.size) bytes, the index says \(packSize)")
        }
        var out = [UInt8](repeating: 0, count: length)
        try out.withUnsafeMutableBytes { try f.read(into: $0, at: Int64(offset)) }
        return out
    }

    /// Reads and decrypts a pack's header; every entry is checked to lie in the blob area.
    func readHeader(pack: ChunkID, keys: VaultKeys, file: ReadFile? = nil) throws -> [PackEntry] {
        let what = "pack \(pack.hex)"
        let f = try file ?? ReadFile(url(for: pack), what: what)
        let size = f.size
        guard size >= Int64(PackFormat.trailerBytes), size <= PackFormat.maximumSize else {
            throw VaultError.corrupt("\(what): size \(size) out of range")
        }
        var trailer = [UInt8](repeating: 0, count: PackFormat.trailerBytes)
        try trailer.withUnsafeMutableBytes { try f.read(into: $0, at: size - Int64(PackFormat.trailerBytes)) }
        var tr = BinaryReader(trailer, what: what)
        let boxLength = Int64(try tr.u32())
        let blobArea = size - Int64(PackFormat.trailerBytes) - boxLength
        guard boxLength >= Int64(BlobCodec.nonceBytes + BlobCodec.tagBytes), blobArea >= 0 else {
            throw VaultError.corrupt("\(what): header length \(boxLength) does not fit a \(size)-byte pack")
        }
        var box = [UInt8](repeating: 0, count: Int(boxLength))
        try box.withUnsafeMutableBytes { try f.read(into: $0, at: blobArea) }
        let nonce = Array(box[0..<BlobCodec.nonceBytes])
        guard let header = XChaCha20Poly1305.open(Array(box[BlobCodec.nonceBytes...]), additionalData: PackFormat.headerAD,
                                                  nonce: nonce, key: keys.dataKey) else {
            throw VaultError.corrupt("\(what): header does not authenticate (damaged, tampered with, or another vault's pack)")
        }
        var r = BinaryReader(header, what: "\(what) header")
        let version = try r.u8()
        guard version == PackFormat.headerVersion else { throw r.fail("unknown version \(version)") }
        let count = try r.count(minimumEntryBytes: PackFormat.headerEntryBytes, what: "entries")
        var entries: [PackEntry] = []
        entries.reserveCapacity(count)
        for _ in 0..<count {
            guard let id = ChunkID(try r.raw(ChunkID.byteCount)) else { throw r.fail("bad id") }
            let offset = Int64(try r.u32())
            let length = Int64(try r.u32())
            guard length >= Int64(BlobCodec.overhead), length <= Int64(BlobCodec.maximumBlob), offset + length <= blobArea else {
                throw r.fail("blob \(id.hex) at \(offset)+\(length) lies outside the blob area (\(blobArea) bytes)")
            }
            entries.append(PackEntry(id: id, offset: Int(offset), length: Int(length)))
        }
        try r.expectEnd()
        return entries
    }

    /// The unkeyed BLAKE2b-256 of a whole pack file (what its name must be).
    func hashFile(_ pack: ChunkID, file: ReadFile? = nil) throws -> ChunkID {
        let f = try file ?? ReadFile(url(for: pack), what: "pack \(pack.hex)")
        var hasher = Blake2b()
        var buf = [UInt8](repeating: 0, count: 1 << 20)
        var at: Int64 = 0
        while at < f.size {
            let n = Int(Swift.min(Int64(buf.count), f.size - at))
            try buf.withUnsafeMutableBytes { try f.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), at: at) }
            buf.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            at += Int64(n)
        }
        return ChunkID(hasher.finalize())!
    }
}

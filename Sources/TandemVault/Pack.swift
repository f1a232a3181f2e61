import Foundation
import Sodium

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
/// BLAKE2b on a hashing thread (the bytes before `length` never change until the pack is written),
/// so `finish` waits only for the last blob's hashing. An import makes two BLAKE2b passes over its
/// data (chunk ids, pack names); this takes one of them off the importing thread.
final class PackWriter {
    private let buffers: [UnsafeMutableRawBufferPointer]
    /// Per buffer: signalled once its last write ended (the buffer may be filled again).
    private let free: [DispatchSemaphore]
    private var current = 0
    /// Pack buffers: one filling, up to `count - 1` being written.
    static let bufferCount = 3
    /// Writes run here, at most `bufferCount - 1` at once (a buffer is reused only once its write ended).
    private let writer = DispatchQueue(label: "tandem.vault.packs", attributes: .concurrent)
    private let writes = DispatchGroup()
    /// Feeds the open pack's blobs to `hasher` in order (serial).
    private let hashing = DispatchQueue(label: "tandem.vault.packs.hash")
    /// The open pack's name so far. Its state is touched on `hashing` only; the importing thread
    /// replaces the reference once a pack's digest is taken (or the pack is discarded).
    private var hasher = PackHasher()
    /// Bytes of the open pack handed to `hashing` so far.
    private var hashed = 0
    private let failures = WriteFailures()
    private var buffer: UnsafeMutableRawBufferPointer { buffers[current] }
    private(set) var length = 0
    private(set) var entries: [PackEntry] = []
    /// The most bytes the buffers held (reset by the owner per import): every buffer counts.
    var highWaterMark = 0

    init() {
        buffers = (0..<Self.bufferCount).map { _ in .allocate(byteCount: PackFormat.targetSize + BlobCodec.maximumBlob, alignment: 64) }
        // All start at 0 (libdispatch refuses to free a semaphore below its starting value); every
        // buffer but the first, the one being filled, is free from the start.
        free = (0..<Self.bufferCount).map { _ in DispatchSemaphore(value: 0) }
        for f in free.dropFirst() { f.signal() }
    }

    deinit {
        hashing.sync {}
        writes.wait()
        for b in buffers { b.deallocate() }
    }

    var isEmpty: Bool { entries.isEmpty }
    var isFull: Bool { length >= PackFormat.targetSize }

    private func noteHighWater() {
        highWaterMark = Swift.max(highWaterMark, length + (Self.bufferCount - 1) * buffers[0].count)
    }

    /// Hands the bytes sealed since the last call to the hashing thread.
    private func hashAppended() {
        guard length > hashed else { return }
        let bytes = SendableBytes(UnsafeRawBufferPointer(start: buffer.baseAddress! + hashed, count: length - hashed))
        let hasher = self.hasher
        hashing.async { hasher.update(bytes.pointer) }
        hashed = length
    }

    /// Seals `plaintext` as blob `id` at the end of the pack. The pack must not be full.
    func append(_ plaintext: UnsafeRawBufferPointer, id: ChunkID, tryCompress: Bool, keys: VaultKeys, zstd: Zstd) -> (entry: PackEntry, compressed: Bool) {
        precondition(!isFull, "append to a full pack")
        let (n, compressed) = BlobCodec.seal(plaintext, id: id, tryCompress: tryCompress, key: keys.dataKey,
                                             zstd: zstd, into: buffer.baseAddress! + length)
        let entry = PackEntry(id: id, offset: length, length: n)
        entries.append(entry)
        length += n
        noteHighWater()
        hashAppended()
        return (entry, compressed)
    }

    /// Appends an already sealed blob (repacking copies blobs without opening them: the additional
    /// data is the id, not the position, so a blob is valid in any pack).
    func appendSealed(_ blob: [UInt8], id: ChunkID) -> PackEntry {
        precondition(!isFull && blob.count <= BlobCodec.maximumBlob)
        blob.withUnsafeBytes { (buffer.baseAddress! + length).copyMemory(from: $0.baseAddress!, byteCount: blob.count) }
        let entry = PackEntry(id: id, offset: length, length: blob.count)
        entries.append(entry)
        length += blob.count
        noteHighWater()
        hashAppended()
        return entry
    }

    /// Drops the open pack's blobs without writing them (an import that failed).
    func discard() {
        // The hashing thread may still read the buffer: let it finish before the buffer is reused.
        hashing.sync {}
        hasher = PackHasher()
        hashed = 0
        length = 0
        entries.removeAll(keepingCapacity: true)
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
        let blobs = UnsafeRawBufferPointer(start: buffer.baseAddress, count: length)
        hashAppended()
        let digest: [UInt8] = hashing.sync { [hasher] in
            tail.withUnsafeBytes { hasher.update($0) }
            return hasher.finalize()
        }
        hasher = PackHasher()
        hashed = 0
        guard let name = ChunkID(digest) else { fatalError("BLAKE2b-256 gave a digest that is not 32 bytes") }
        let size = Int64(length + tail.count)
        let job = PackWrite(blobs: blobs, tail: tail, name: name, store: store, done: free[current], failures: failures)
        writer.async(group: writes) { job.run() }
        // Go on in the next buffer once its previous write (if any) has ended.
        current = (current + 1) % Self.bufferCount
        free[current].wait()
        length = 0
        entries.removeAll(keepingCapacity: true)
        return (name, size)
    }

    /// Returns once every pack handed to the writer is on disk and synced; throws the first
    /// write that failed (then no index may name the packs of this import).
    func waitForWrites() throws {
        writes.wait()
        if let error = failures.take() { throw error }
    }
}

/// One pack handed to the writer thread: its buffer stays untouched by the import until `done`
/// is signalled.
private struct PackWrite: @unchecked Sendable {
    let blobs: UnsafeRawBufferPointer
    let tail: [UInt8]
    let name: ChunkID
    let store: PackStore
    let done: DispatchSemaphore
    let failures: WriteFailures

    func run() {
        defer { done.signal() }
        do {
            try tail.withUnsafeBytes { t in try store.write(name: name, parts: [blobs, t]) }
        } catch {
            failures.note(error)
        }
    }
}

/// One pack's unkeyed BLAKE2b-256, fed on the writer's hashing thread only.
private final class PackHasher: @unchecked Sendable {
    private var state: Blake2b? = Blake2b()

    func update(_ bytes: UnsafeRawBufferPointer) { state?.update(bytes) }

    /// The digest; the hasher is spent after it (empty if it was already).
    func finalize() -> [UInt8] { state.take()?.finalize() ?? [] }
}

/// A view of the pack buffer handed to the hashing thread (the bytes stay put until the pack is
/// written, see `PackWriter`).
private struct SendableBytes: @unchecked Sendable {
    let pointer: UnsafeRawBufferPointer
    init(_ pointer: UnsafeRawBufferPointer) { self.pointer = pointer }
}

/// The first pack write that failed since the last `take()`.
private final class WriteFailures: @unchecked Sendable {
    private let lock = NSLock()
    private var first: Error?

    func note(_ error: Error) {
        lock.lock()
        if first == nil { first = error }
        lock.unlock()
    }

    func take() -> Error? {
        lock.lock()
        defer {
            first = nil
            lock.unlock()
        }
        return first
    }
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

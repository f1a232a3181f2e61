import Foundation
import Sodium

/// Chunks stored during one import, kept apart from the index until the import commits.
struct ImportStaging {
    var chunks: [ChunkID: ChunkRecord] = [:]
    var packs: [ChunkID: Int64] = [:]
    /// Chunks sealed into the open pack (whose name is known only when it is written).
    var open: [ChunkID: (entry: PackEntry, rawLength: Int, compressed: Bool)] = [:]
}

extension VaultRepository {
    /// The size of each read from an imported file.
    static let readBufferSize = 1 << 20

    /// Imports a file: streams it through the chunker (memory stays bounded whatever its size),
    /// stores the chunks the vault does not hold yet, and commits the index once at the end.
    /// `progress` gets the bytes read so far. An album that does not exist yet is created.
    /// `thumbnail` (a JPEG of at most 8 MiB), if given, is stored in the same pack.
    public func importFile(at url: URL, name: String, type: VaultItemType, album: String?, createdAtMs: Int64?,
                           nowMs: Int64, thumbnail: [UInt8]? = nil, progress: (Int64) -> Void) throws -> VaultItem {
        try validateImport(name: name, album: album, thumbnail: thumbnail)
        let file = try ReadFile(url, what: "file")
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.readBufferSize, alignment: 64)
        defer { buffer.deallocate() }
        return try importStream(name: name, type: type, album: album, createdAtMs: createdAtMs, nowMs: nowMs,
                                thumbnail: thumbnail, readBuffer: buffer.count) { feed in
            var total: Int64 = 0
            while true {
                let n = try file.readSome(into: buffer)
                if n == 0 { break }
                total += Int64(n)
                try feed(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                progress(total)
            }
        }
    }

    /// Imports bytes held in memory (small payloads, tests).
    public func importData(_ data: [UInt8], name: String, type: VaultItemType, album: String?, createdAtMs: Int64?,
                           nowMs: Int64, thumbnail: [UInt8]? = nil) throws -> VaultItem {
        try validateImport(name: name, album: album, thumbnail: thumbnail)
        return try importStream(name: name, type: type, album: album, createdAtMs: createdAtMs, nowMs: nowMs,
                                thumbnail: thumbnail, readBuffer: 0) { feed in
            try data.withUnsafeBytes { try feed($0) }
        }
    }

    /// Stores a thumbnail (JPEG, at most 8 MiB) for an item, replacing any earlier one, and commits.
    public func setThumbnail(_ id: String, jpeg: [UInt8]) throws {
        let position = try itemPosition(id)
        try validateThumbnail(jpeg)
        var staging = ImportStaging()
        defer { packWriter.discard() }
        let tid = try jpeg.withUnsafeBytes { try storeChunk($0, tryCompress: false, staging: &staging) }
        try flushPack(&staging)
        var next = merged(staging)
        next.items[position].thumbnail = tid.bytes
        try commit(next)
    }

    private func validateImport(name: String, album: String?, thumbnail: [UInt8]?) throws {
        try VaultNames.validateItemName(name)
        if let album { try VaultNames.validateAlbumName(album) }
        if let thumbnail { try validateThumbnail(thumbnail) }
    }

    private func validateThumbnail(_ jpeg: [UInt8]) throws {
        guard jpeg.count <= BlobCodec.maximumPlaintext else {
            throw VaultError(.invalidArgument, "thumbnail is \(jpeg.count) bytes (at most \(BlobCodec.maximumPlaintext))")
        }
    }

    /// The shared body of the single-file imports: stage, write the pack, commit.
    private func importStream(name: String, type: VaultItemType, album: String?, createdAtMs: Int64?, nowMs: Int64,
                              thumbnail: [UInt8]?, readBuffer: Int,
                              produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void) throws -> VaultItem {
        var staging = ImportStaging()
        packWriter.highWaterMark = 0
        // A failed import leaves the index untouched; packs already written stay unreferenced.
        defer { packWriter.discard() }
        var chunker = Chunker(key: keys.chunkerKey)
        let item = try stage(name: name, type: type, album: album, createdAtMs: createdAtMs, nowMs: nowMs,
                             thumbnail: thumbnail, readBuffer: readBuffer, chunker: &chunker, staging: &staging, reserved: [],
                             produce: produce)
        try flushPack(&staging)
        try commit(items: [item], staging: staging, nowMs: nowMs)
        return item
    }

    /// Streams one item's bytes into `staging` (and the open pack): the item to add, not yet in
    /// the index. `reserved`: ids of items staged before it in the same batch.
    private func stage(name: String, type: VaultItemType, album: String?, createdAtMs: Int64?, nowMs: Int64,
                       thumbnail: [UInt8]?, readBuffer: Int, chunker: inout Chunker, staging: inout ImportStaging,
                       reserved: Set<String>,
                       produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void) throws -> VaultItem {
        chunker.reset()
        var chunkIDs: [[UInt8]] = []
        var size: Int64 = 0
        var sniffed: Bool?
        try withoutActuallyEscaping({ (chunk: UnsafeRawBufferPointer, staging: inout ImportStaging) throws in
            let id = try self.storeChunk(chunk, tryCompress: sniffed != true, staging: &staging)
            chunkIDs.append(id.bytes)
            size += Int64(chunk.count)
        }) { store in
            try produce { slice in
                if sniffed == nil { sniffed = MediaSniffer.isAlreadyCompressed(prefix: slice) }
                try chunker.feed(slice) { try store($0, &staging) }
            }
            try chunker.finish { try store($0, &staging) }
        }
        var thumbnailID: ChunkID?
        if let thumbnail {
            thumbnailID = try thumbnail.withUnsafeBytes { try storeChunk($0, tryCompress: false, staging: &staging) }
        }
        lastImportMemory = VaultImportMemory(chunkerBuffer: chunker.bufferHighWaterMark,
                                             packBuffer: packWriter.highWaterMark, readBuffer: readBuffer)
        var id = newItemID()
        while reserved.contains(id) { id = newItemID() }
        return VaultItem(id: id, name: name, album: album, type: type, size: size, createdAtMs: createdAtMs,
                         importedAtMs: nowMs, favorite: false, chunks: chunkIDs, thumbnail: thumbnailID?.bytes)
    }

    /// Commits staged chunks (their packs written) with the items that use them; albums they name
    /// that do not exist yet are created.
    private func commit(items: [VaultItem], staging: ImportStaging, nowMs: Int64) throws {
        var next = merged(staging)
        for album in Set(items.compactMap(\.album)).sorted() where !next.albums.contains(where: { $0.name == album }) {
            next.albums.append(VaultAlbum(name: album, cover: nil, createdAtMs: nowMs))
        }
        next.items.append(contentsOf: items)
        try commit(next)
    }

    /// One file of a batch import.
    public struct ImportSource: Sendable {
        public var url: URL
        public var name: String
        public var type: VaultItemType
        public var album: String?
        public var createdAtMs: Int64?
        public var thumbnail: [UInt8]?

        public init(url: URL, name: String, type: VaultItemType, album: String?, createdAtMs: Int64?, thumbnail: [UInt8]? = nil) {
            (self.url, self.name, self.type, self.album, self.createdAtMs, self.thumbnail) = (url, name, type, album, createdAtMs, thumbnail)
        }
    }

    /// Bytes or files after which a batch import commits what it has (so a crash or a bad file
    /// late in a large import loses little), whatever the packs.
    public static let batchCommitBytes: Int64 = 256 << 20
    public static let batchCommitFiles = 1_000

    /// Imports many files sharing packs (many small photos make few packs, not one each), with
    /// one index commit per `batchCommitBytes` / `batchCommitFiles` and at the end. `committed`
    /// gets the items of each commit once it is durable (originals may be removed then);
    /// `progress(file, bytesOfThatFile)` as bytes are read; `shouldStop` is asked between files
    /// (what was staged since the last commit is then dropped, and `CancellationError` thrown).
    /// A file that fails ends the import with an error naming it; earlier commits stay.
    public func importFiles(_ sources: [ImportSource], nowMs: Int64,
                            progress: (_ file: Int, _ bytes: Int64) -> Void,
                            shouldStop: () -> Bool = { false },
                            committed: ([VaultItem]) -> Void) throws -> [VaultItem] {
        for s in sources { try validateImport(name: s.name, album: s.album, thumbnail: s.thumbnail) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.readBufferSize, alignment: 64)
        defer { buffer.deallocate() }
        defer { packWriter.discard() }
        packWriter.highWaterMark = 0
        // One chunker (one 8 MiB buffer) for the whole batch: one per file made the allocator keep
        // freed 8 MiB blocks around, and the peak RSS of a 1 GiB import depended on where they fell.
        var chunker = Chunker(key: keys.chunkerKey)
        var all: [VaultItem] = []
        var pending: [VaultItem] = []
        var staging = ImportStaging()
        var pendingBytes: Int64 = 0
        func commitPending() throws {
            try flushPack(&staging)
            guard !pending.isEmpty || !staging.chunks.isEmpty else { return }
            try commit(items: pending, staging: staging, nowMs: nowMs)
            committed(pending)
            all += pending
            pending = []
            staging = ImportStaging()
            pendingBytes = 0
        }
        for (n, source) in sources.enumerated() {
            if shouldStop() { throw CancellationError() }
            let file: ReadFile
            do {
                file = try ReadFile(source.url, what: "file")
            } catch {
                throw VaultError(.io, "cannot read \(source.url.path): \(error)")
            }
            let reserved = Set(pending.map(\.id))
            let item = try stage(name: source.name, type: source.type, album: source.album, createdAtMs: source.createdAtMs,
                                 nowMs: nowMs, thumbnail: source.thumbnail, readBuffer: buffer.count, chunker: &chunker,
                                 staging: &staging, reserved: reserved) { feed in
                var total: Int64 = 0
                while true {
                    let count = try file.readSome(into: buffer)
                    if count == 0 { break }
                    total += Int64(count)
                    try feed(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                    progress(n, total)
                }
            }
            pending.append(item)
            pendingBytes += item.size
            if pendingBytes >= Self.batchCommitBytes || pending.count >= Self.batchCommitFiles { try commitPending() }
        }
        try commitPending()
        return all
    }

    /// Names a chunk and stores it unless the vault (or this import) already holds it.
    func storeChunk(_ plaintext: UnsafeRawBufferPointer, tryCompress: Bool, staging: inout ImportStaging) throws -> ChunkID {
        let id = keys.chunkID(plaintext)
        if index.chunks[id] != nil || staging.chunks[id] != nil || staging.open[id] != nil { return id }
        let (entry, compressed) = packWriter.append(plaintext, id: id, tryCompress: tryCompress, keys: keys, zstd: zstd)
        staging.open[id] = (entry, plaintext.count, compressed)
        if packWriter.isFull { try flushPack(&staging) }
        return id
    }

    /// Writes the open pack (if any) and moves its chunks to the staged records.
    func flushPack(_ staging: inout ImportStaging) throws {
        guard !packWriter.isEmpty else { return }
        let (name, size) = try packWriter.finish(store: packStore, keys: keys)
        staging.packs[name] = size
        for (id, open) in staging.open {
            staging.chunks[id] = ChunkRecord(pack: name, offset: open.entry.offset, length: open.entry.length,
                                             rawLength: open.rawLength, compressed: open.compressed)
        }
        staging.open.removeAll()
    }

    /// The index with the staged packs and chunks added.
    func merged(_ staging: ImportStaging) -> VaultIndex {
        var next = index
        next.packs.merge(staging.packs) { old, _ in old }
        next.chunks.merge(staging.chunks) { old, _ in old }
        return next
    }
}

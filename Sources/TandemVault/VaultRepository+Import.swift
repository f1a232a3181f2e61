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

    /// The shared body of the imports: `produce` feeds the file's bytes, in slices of any size.
    private func importStream(name: String, type: VaultItemType, album: String?, createdAtMs: Int64?, nowMs: Int64,
                              thumbnail: [UInt8]?, readBuffer: Int,
                              produce: ((UnsafeRawBufferPointer) throws -> Void) throws -> Void) throws -> VaultItem {
        var staging = ImportStaging()
        var chunker = Chunker(key: keys.chunkerKey)
        packWriter.highWaterMark = 0
        var chunkIDs: [[UInt8]] = []
        var size: Int64 = 0
        var sniffed: Bool?
        // A failed import leaves the index untouched; packs already written stay unreferenced.
        defer { packWriter.discard() }
        let onChunk: (UnsafeRawBufferPointer) throws -> Void = { chunk in
            let id = try self.storeChunk(chunk, tryCompress: sniffed != true, staging: &staging)
            chunkIDs.append(id.bytes)
            size += Int64(chunk.count)
        }
        try produce { slice in
            if sniffed == nil { sniffed = MediaSniffer.isAlreadyCompressed(prefix: slice) }
            try chunker.feed(slice, onChunk: onChunk)
        }
        try chunker.finish(onChunk: onChunk)
        var thumbnailID: ChunkID?
        if let thumbnail {
            thumbnailID = try thumbnail.withUnsafeBytes { try storeChunk($0, tryCompress: false, staging: &staging) }
        }
        try flushPack(&staging)
        lastImportMemory = VaultImportMemory(chunkerBuffer: chunker.bufferHighWaterMark,
                                             packBuffer: packWriter.highWaterMark, readBuffer: readBuffer)
        var next = merged(staging)
        if let album, !next.albums.contains(where: { $0.name == album }) {
            next.albums.append(VaultAlbum(name: album, cover: nil, createdAtMs: nowMs))
        }
        let item = VaultItem(id: newItemID(), name: name, album: album, type: type, size: size, createdAtMs: createdAtMs,
                             importedAtMs: nowMs, favorite: false, chunks: chunkIDs, thumbnail: thumbnailID?.bytes)
        next.items.append(item)
        try commit(next)
        return item
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

import Foundation
import Sodium

/// Where one chunk's blob lives, and what it holds.
struct ChunkRecord: Equatable, Sendable {
    var pack: ChunkID
    var offset: Int
    var length: Int
    /// Plaintext bytes of the chunk.
    var rawLength: Int
    var compressed: Bool
}

/// A vault's whole state: packs, chunk locations, albums, items. Held in memory by the repository,
/// stored as one encrypted file (see `IndexFile`).
///
/// Binary layout of the plaintext (big-endian; names as u16 length + UTF-8):
///
///     "TVIX" ‖ version (u8 = 1) ‖ generation (u64)
///     packs:  count (u32) ‖ count × ( name (32) ‖ size (u64) )
///     chunks: count (u32) ‖ count × ( id (32) ‖ pack number (u32) ‖ offset (u32) ‖ length (u32) ‖ plaintext length (u32) ‖ flags (u8) )
///     albums: count (u32) ‖ count × ( name ‖ cover (opt item id) ‖ created ms (i64) )
///     items:  count (u32) ‖ count × ( id (6 bytes) ‖ name ‖ album (opt) ‖ type (u8) ‖ size (i64) ‖ created ms (opt i64)
///                                      ‖ imported ms (i64) ‖ favourite (u8) ‖ chunk count (u32) ‖ chunk numbers (u32 each)
///                                      ‖ thumbnail (opt chunk number) )
///
/// Items refer to chunks by their number in the chunk table (4 bytes instead of 32).
struct VaultIndex: Equatable, Sendable {
    static let magic = Array("TVIX".utf8)
    static let version: UInt8 = 1

    var generation: UInt64 = 0
    var packs: [ChunkID: Int64] = [:]
    var chunks: [ChunkID: ChunkRecord] = [:]
    var albums: [VaultAlbum] = []
    var items: [VaultItem] = []

    static let typeCodes: [VaultItemType: UInt8] = [.photo: 0, .video: 1, .document: 2]

    func serialize() -> [UInt8] {
        var w = BinaryWriter()
        w.raw(Self.magic)
        w.u8(Self.version)
        w.u64(generation)
        let packNames = packs.keys.sorted()
        var packNumber: [ChunkID: Int] = [:]
        for (i, name) in packNames.enumerated() { packNumber[name] = i }
        w.u32(UInt32(packNames.count))
        for name in packNames {
            w.raw(name.bytes)
            w.u64(UInt64(packs[name] ?? 0))
        }
        let chunkIDs = chunks.keys.sorted { a, b in
            let ra = chunks[a]!, rb = chunks[b]!
            let pa = packNumber[ra.pack] ?? 0, pb = packNumber[rb.pack] ?? 0
            return pa != pb ? pa < pb : ra.offset < rb.offset
        }
        var chunkNumber: [ChunkID: Int] = [:]
        for (i, id) in chunkIDs.enumerated() { chunkNumber[id] = i }
        w.u32(UInt32(chunkIDs.count))
        for id in chunkIDs {
            let r = chunks[id]!
            w.raw(id.bytes)
            w.u32(UInt32(packNumber[r.pack] ?? 0))
            w.u32(UInt32(r.offset))
            w.u32(UInt32(r.length))
            w.u32(UInt32(r.rawLength))
            w.u8(r.compressed ? BlobCodec.flagCompressed : 0)
        }
        w.u32(UInt32(albums.count))
        for a in albums {
            w.string(a.name)
            w.optionalString(a.cover)
            w.i64(a.createdAtMs)
        }
        w.u32(UInt32(items.count))
        for item in items {
            w.raw(Hex.decode(item.id) ?? [UInt8](repeating: 0, count: 6))
            w.string(item.name)
            w.optionalString(item.album)
            w.u8(Self.typeCodes[item.type] ?? 2)
            w.i64(item.size)
            w.optionalI64(item.createdAtMs)
            w.i64(item.importedAtMs)
            w.u8(item.favorite ? 1 : 0)
            w.u32(UInt32(item.chunks.count))
            for c in item.chunks { w.u32(UInt32(ChunkID(c).flatMap { chunkNumber[$0] } ?? 0)) }
            if let t = item.thumbnail, let id = ChunkID(t), let n = chunkNumber[id] {
                w.u8(1); w.u32(UInt32(n))
            } else {
                w.u8(0)
            }
        }
        return w.bytes
    }

    /// Parses and validates an index: every id 32 bytes, every number in range, every blob inside
    /// its pack, every name valid, every reference resolvable, sizes consistent. Anything else is a
    /// `.corrupt` error; nothing here can trap on a damaged file.
    static func deserialize(_ bytes: [UInt8], what: String) throws -> VaultIndex {
        var r = BinaryReader(bytes, what: what)
        guard try r.raw(4) == magic else { throw r.fail("not a vault index (bad magic)") }
        let version = try r.u8()
        guard version == Self.version else { throw r.fail("unsupported index version \(version)") }
        var index = VaultIndex()
        index.generation = try r.u64()

        let packCount = try r.count(minimumEntryBytes: 40, what: "packs")
        var packNames: [ChunkID] = []
        packNames.reserveCapacity(packCount)
        for _ in 0..<packCount {
            guard let name = ChunkID(try r.raw(32)) else { throw r.fail("bad pack name") }
            let size = try r.u64()
            guard size >= UInt64(PackFormat.trailerBytes), size <= UInt64(PackFormat.maximumSize) else {
                throw r.fail("pack \(name.hex) has impossible size \(size)")
            }
            guard index.packs.updateValue(Int64(size), forKey: name) == nil else { throw r.fail("pack \(name.hex) listed twice") }
            packNames.append(name)
        }

        let chunkCount = try r.count(minimumEntryBytes: 49, what: "chunks")
        var chunkIDs: [ChunkID] = []
        chunkIDs.reserveCapacity(chunkCount)
        for _ in 0..<chunkCount {
            guard let id = ChunkID(try r.raw(32)) else { throw r.fail("bad chunk id") }
            let packNumber = Int(try r.u32())
            let offset = Int(try r.u32())
            let length = Int(try r.u32())
            let rawLength = Int(try r.u32())
            let flags = try r.u8()
            guard packNumber < packNames.count else { throw r.fail("chunk \(id.hex) refers to pack #\(packNumber) of \(packNames.count)") }
            let pack = packNames[packNumber]
            let packSize = index.packs[pack] ?? 0
            guard length >= BlobCodec.overhead, length <= BlobCodec.maximumBlob,
                  Int64(offset) + Int64(length) <= packSize - Int64(PackFormat.trailerBytes) else {
                throw r.fail("chunk \(id.hex) at \(offset)+\(length) lies outside pack \(pack.hex) (\(packSize) bytes)")
            }
            guard rawLength <= BlobCodec.maximumPlaintext, flags & ~BlobCodec.flagCompressed == 0 else {
                throw r.fail("chunk \(id.hex) has impossible length \(rawLength) or flags \(flags)")
            }
            let compressed = flags == BlobCodec.flagCompressed
            guard compressed ? length <= rawLength + BlobCodec.overhead : length == rawLength + BlobCodec.overhead else {
                throw r.fail("chunk \(id.hex): blob length \(length) does not match plaintext length \(rawLength)")
            }
            let record = ChunkRecord(pack: pack, offset: offset, length: length, rawLength: rawLength, compressed: compressed)
            guard index.chunks.updateValue(record, forKey: id) == nil else { throw r.fail("chunk \(id.hex) listed twice") }
            chunkIDs.append(id)
        }

        let albumCount = try r.count(minimumEntryBytes: 11, what: "albums")
        var albumNames = Set<String>()
        for _ in 0..<albumCount {
            let name = try r.string()
            let cover = try r.optionalString()
            let created = try r.i64()
            do { try VaultNames.validateAlbumName(name, stored: true) } catch { throw r.fail("album: \(error)") }
            guard albumNames.insert(name).inserted else { throw r.fail("album listed twice") }
            index.albums.append(VaultAlbum(name: name, cover: cover, createdAtMs: created))
        }

        let itemCount = try r.count(minimumEntryBytes: 33, what: "items")
        var itemIDs = Set<String>()
        index.items.reserveCapacity(itemCount)
        for _ in 0..<itemCount {
            let id = Hex.encode(try r.raw(6))
            let name = try r.string()
            let album = try r.optionalString()
            let typeCode = try r.u8()
            let size = try r.i64()
            let created = try r.optionalI64()
            let imported = try r.i64()
            let favorite = try r.bool()
            let n = try r.count(minimumEntryBytes: 4, what: "chunk references")
            var chunks: [[UInt8]] = []
            chunks.reserveCapacity(n)
            var total: Int64 = 0
            for _ in 0..<n {
                let number = Int(try r.u32())
                guard number < chunkIDs.count else { throw r.fail("item \(id) refers to chunk #\(number) of \(chunkIDs.count)") }
                let cid = chunkIDs[number]
                // At most 2^32 chunks of at most 8 MiB each: the sum stays far below Int64.max.
                total += Int64(index.chunks[cid]?.rawLength ?? 0)
                chunks.append(cid.bytes)
            }
            var thumbnail: [UInt8]?
            if try r.bool() {
                let number = Int(try r.u32())
                guard number < chunkIDs.count else { throw r.fail("item \(id) thumbnail refers to chunk #\(number)") }
                thumbnail = chunkIDs[number].bytes
            }
            guard let type = typeCodes.first(where: { $0.value == typeCode })?.key else { throw r.fail("item \(id) has unknown type \(typeCode)") }
            do { try VaultNames.validateItemName(name, stored: true) } catch { throw r.fail("item \(id): \(error)") }
            if let album, !albumNames.contains(album) { throw r.fail("item \(id) is in an album that does not exist") }
            guard size == total else { throw r.fail("item \(id) size \(size) differs from its chunks' \(total)") }
            guard itemIDs.insert(id).inserted else { throw r.fail("item \(id) listed twice") }
            index.items.append(VaultItem(id: id, name: name, album: album, type: type, size: size, createdAtMs: created,
                                         importedAtMs: imported, favorite: favorite, chunks: chunks, thumbnail: thumbnail))
        }
        for album in index.albums {
            if let cover = album.cover, !itemIDs.contains(cover) { throw r.fail("an album's cover is not an item") }
        }
        try r.expectEnd()
        return index
    }
}

/// The encrypted index file: `<dir>/index/<locator>`.
///
///     nonce (24) ‖ XChaCha20-Poly1305( plaintext length (u64 BE) ‖ zstd frame of the index ) ‖ tag (16)
///
/// under the index key, additional data "tdmvault index v1". The locator is the hex of the keyed
/// BLAKE2b-256 (index key) of a fixed label: stable for one master key, unrelated between keys, so
/// vaults sharing a directory have unrelated-looking names and none reveals which key it belongs to.
enum IndexFile {
    static let additionalData = Array("tdmvault index v1".utf8)
    static let locatorLabel = Array("tandem vault index locator v1".utf8)
    /// An index larger than 1 GiB (tens of millions of chunks) is refused rather than allocated.
    static let maximumPlaintext = 1 << 30

    static func locator(keys: VaultKeys) -> String {
        Hex.encode(Blake2b.keyedHash(locatorLabel, key: keys.indexKey))
    }

    static func url(directory: URL, keys: VaultKeys) -> URL {
        directory.appendingPathComponent("index", isDirectory: true).appendingPathComponent(locator(keys: keys))
    }

    static func write(_ index: VaultIndex, to url: URL, keys: VaultKeys, zstd: Zstd) throws {
        let plain = index.serialize()
        var frame = [UInt8](repeating: 0, count: Zstd.compressBound(plain.count))
        let n = plain.withUnsafeBytes { p in frame.withUnsafeMutableBytes { zstd.compress(p, into: $0) } }
        guard let n else { throw VaultError.io("cannot compress the index") }
        var inner = BinaryWriter()
        inner.u64(UInt64(plain.count))
        inner.raw(Array(frame[0..<n]))
        let nonce = Sodium.randomBytes(BlobCodec.nonceBytes)
        let sealed = try XChaCha20Poly1305.seal(inner.bytes, additionalData: additionalData, nonce: nonce, key: keys.indexKey)
        try FileIO.writeAtomically(nonce + sealed, to: url)
    }

    static func read(from url: URL, keys: VaultKeys, zstd: Zstd) throws -> VaultIndex {
        let what = "vault index \(url.lastPathComponent)"
        let file = try FileIO.readAll(url, limit: maximumPlaintext, what: what)
        guard file.count >= BlobCodec.nonceBytes + BlobCodec.tagBytes + 8 else { throw VaultError.corrupt("\(what) is truncated") }
        guard let inner = XChaCha20Poly1305.open(Array(file[BlobCodec.nonceBytes...]), additionalData: additionalData,
                                                 nonce: Array(file[0..<BlobCodec.nonceBytes]), key: keys.indexKey) else {
            throw VaultError.corrupt("\(what) does not authenticate (damaged or tampered with)")
        }
        var r = BinaryReader(inner, what: what)
        let length = try r.u64()
        guard length <= UInt64(maximumPlaintext) else { throw r.fail("plaintext length \(length) too large") }
        let frame = try r.raw(r.remaining)
        var plain = [UInt8](repeating: 0, count: Int(length))
        let ok = frame.withUnsafeBytes { f in plain.withUnsafeMutableBytes { zstd.decompress(f, into: $0) } }
        guard ok else { throw r.fail("does not decompress to \(length) bytes") }
        return try VaultIndex.deserialize(plain, what: what)
    }
}

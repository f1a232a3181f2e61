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
/// Version 2 (written since the decoy work of issue 34):
///
///     nonce (24) ‖ XChaCha20-Poly1305(body length (u64 BE), ad "tdmvault index v2 length") (8 + 16)
///     ‖ nonce₂ (24) ‖ body = XChaCha20-Poly1305(plaintext length (u64 BE) ‖ zstd frame, ad "tdmvault index v2")
///     ‖ random padding up to the directory's size class
///
/// both under the index key. Every index file in the directory has the same size: a commit writes
/// its own file at `max(size class of its own bytes, the size of every other index file)` and
/// rewrites every other index file at that size (their bytes kept, random padding appended: no key
/// is needed for that), so the spare vault's index looks like the real one's and the sizes move
/// together. Size classes are powers of two from 4 KiB. Sizes never shrink.
///
/// Version 1 (`nonce ‖ AEAD(inner)`, ad "tdmvault index v1", no padding) is still read; the next
/// commit writes version 2.
///
/// The locator is the hex of the keyed BLAKE2b-256 (index key) of a fixed label: stable for one
/// master key, unrelated between keys, so vaults sharing a directory have unrelated-looking names
/// and none reveals which key it belongs to.
enum IndexFile {
    static let legacyAdditionalData = Array("tdmvault index v1".utf8)
    static let additionalData = Array("tdmvault index v2".utf8)
    static let lengthAdditionalData = Array("tdmvault index v2 length".utf8)
    static let locatorLabel = Array("tandem vault index locator v1".utf8)
    /// An index larger than 1 GiB (tens of millions of chunks) is refused rather than allocated.
    static let maximumPlaintext = 1 << 30
    /// The smallest size class.
    static let minimumFileSize = 4096
    /// nonce ‖ length box ‖ nonce₂
    static let prefixBytes = BlobCodec.nonceBytes + 8 + BlobCodec.tagBytes + BlobCodec.nonceBytes

    static func locator(keys: VaultKeys) -> String {
        Hex.encode(Blake2b.keyedHash(locatorLabel, key: keys.indexKey))
    }

    static func url(directory: URL, keys: VaultKeys) -> URL {
        directory.appendingPathComponent("index", isDirectory: true).appendingPathComponent(locator(keys: keys))
    }

    /// The size class of `n` bytes: the smallest power of two ≥ n, at least 4 KiB.
    static func sizeClass(_ n: Int) -> Int {
        var size = minimumFileSize
        while size < n, size < maximumPlaintext { size <<= 1 }
        return max(size, n)
    }

    /// Writes `index` at `url`, and every other index file in the same directory at the same size.
    static func write(_ index: VaultIndex, to url: URL, keys: VaultKeys, zstd: Zstd) throws {
        let plain = index.serialize()
        var frame = [UInt8](repeating: 0, count: Zstd.compressBound(plain.count))
        let n = plain.withUnsafeBytes { p in frame.withUnsafeMutableBytes { zstd.compress(p, into: $0) } }
        guard let n else { throw VaultError.io("cannot compress the index") }
        var inner = BinaryWriter()
        inner.u64(UInt64(plain.count))
        inner.raw(Array(frame[0..<n]))
        let nonce2 = Sodium.randomBytes(BlobCodec.nonceBytes)
        let body = try XChaCha20Poly1305.seal(inner.bytes, additionalData: additionalData, nonce: nonce2, key: keys.indexKey)
        var length = BinaryWriter()
        length.u64(UInt64(body.count))
        let nonce = Sodium.randomBytes(BlobCodec.nonceBytes)
        let lengthBox = try XChaCha20Poly1305.seal(length.bytes, additionalData: lengthAdditionalData, nonce: nonce, key: keys.indexKey)
        let own = nonce + lengthBox + nonce2 + body

        // The others first (the commit point is this vault's own file, last).
        let directory = url.deletingLastPathComponent()
        var others: [(URL, [UInt8])] = []
        for name in try otherIndexNames(in: directory, except: url.lastPathComponent) {
            let other = directory.appendingPathComponent(name)
            let file = try ReadFile(other, what: "vault index \(name)")
            guard file.size <= Int64(maximumPlaintext) else { continue }  // no index of ours: left alone, and not matched
            var bytes = [UInt8](repeating: 0, count: Int(file.size))
            try bytes.withUnsafeMutableBytes { try file.read(into: $0, at: 0) }
            others.append((other, bytes))
        }
        let size = others.reduce(sizeClass(own.count)) { max($0, $1.1.count) }
        for (other, bytes) in others {
            try FileIO.writeAtomically(bytes + Sodium.randomBytes(size - bytes.count), to: other)
        }
        try FileIO.writeAtomically(own + Sodium.randomBytes(size - own.count), to: url)
    }

    /// The names of the index files in `directory` other than `name` (temporary files skipped).
    static func otherIndexNames(in directory: URL, except name: String) throws -> [String] {
        let names: [String]
        guard FileIO.exists(directory) else { return [] }
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw VaultError.io("cannot list \(directory.path): \(error)")
        }
        return names.filter { $0 != name && $0.count == 64 && Hex.decode($0) != nil }.sorted()
    }

    static func read(from url: URL, keys: VaultKeys, zstd: Zstd) throws -> VaultIndex {
        let what = "vault index \(url.lastPathComponent)"
        let file = try FileIO.readAll(url, limit: maximumPlaintext, what: what)
        let nonceBytes = BlobCodec.nonceBytes
        guard file.count >= nonceBytes + BlobCodec.tagBytes + 8 else { throw VaultError.corrupt("\(what) is truncated") }
        let inner: [UInt8]
        if file.count >= prefixBytes,
           let length = XChaCha20Poly1305.open(Array(file[nonceBytes..<(nonceBytes + 8 + BlobCodec.tagBytes)]),
                                               additionalData: lengthAdditionalData, nonce: Array(file[0..<nonceBytes]), key: keys.indexKey) {
            var lr = BinaryReader(length, what: what)
            let bodyLength = try lr.u64()
            guard bodyLength <= UInt64(file.count - prefixBytes) else { throw VaultError.corrupt("\(what) is truncated") }
            let body = Array(file[prefixBytes..<(prefixBytes + Int(bodyLength))])
            guard let opened = XChaCha20Poly1305.open(body, additionalData: additionalData,
                                                      nonce: Array(file[(prefixBytes - nonceBytes)..<prefixBytes]), key: keys.indexKey) else {
                throw VaultError.corrupt("\(what) does not authenticate (damaged or tampered with)")
            }
            inner = opened
        } else if let opened = XChaCha20Poly1305.open(Array(file[nonceBytes...]), additionalData: legacyAdditionalData,
                                                      nonce: Array(file[0..<nonceBytes]), key: keys.indexKey) {
            inner = opened
        } else {
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

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

extension VaultRepository {
    /// Writes an item's content to `url` (through a temporary file renamed into place, so a failed
    /// export leaves no partial file), one chunk at a time, checking every chunk's authenticity and
    /// id. `progress` gets the bytes written so far. A damaged chunk is a `.corrupt` error naming the
    /// item, the blob and its pack.
    public func export(_ id: String, to url: URL, progress: (Int64) -> Void) throws {
        let item = index.items[try itemPosition(id)]
        let tmp = url.deletingLastPathComponent()
            .appendingPathComponent(".tmp-export-\(Hex.encode(FileIO.randomTag()))")
        let fd = try FileIO.createExclusive(tmp)
        var done = false
        defer { if !done { try? FileIO.remove(tmp) } }
        do {
            defer { close(fd) }
            var written: Int64 = 0
            try forEachChunk(of: item) { plaintext in
                try plaintext.withUnsafeBytes { try FileIO.writeAll(fd, $0, path: tmp.path) }
                written += Int64(plaintext.count)
                progress(written)
            }
        }
        try FileIO.rename(tmp, to: url)
        done = true
    }

    /// An item's whole content in memory (small items, tests), verified like `export`.
    public func read(_ id: String) throws -> [UInt8] {
        let item = index.items[try itemPosition(id)]
        var out: [UInt8] = []
        out.reserveCapacity(Int(clamping: item.size))
        try forEachChunk(of: item) { out.append(contentsOf: $0) }
        return out
    }

    /// An item's thumbnail JPEG, or nil if it has none.
    public func thumbnail(_ id: String) throws -> [UInt8]? {
        let item = index.items[try itemPosition(id)]
        guard let t = item.thumbnail else { return nil }
        guard let tid = ChunkID(t) else { throw VaultError.corrupt("item \(id): thumbnail id is not 32 bytes") }
        return try readChunk(tid, item: id, file: nil)
    }

    /// Calls `body` with each chunk's verified plaintext in order (one pack file open at a time).
    func forEachChunk(of item: VaultItem, _ body: ([UInt8]) throws -> Void) throws {
        var file: (pack: ChunkID, file: ReadFile)?
        for raw in item.chunks {
            guard let cid = ChunkID(raw) else { throw VaultError.corrupt("item \(item.id): a chunk id is not 32 bytes") }
            guard let record = index.chunks[cid] else {
                throw VaultError.corrupt("item \(item.id): blob \(cid.hex) is missing from the index")
            }
            if file?.pack != record.pack {
                file = (record.pack, try openPack(record.pack, item: item.id, blob: cid))
            }
            try body(try readChunk(cid, item: item.id, file: file?.file))
        }
    }

    /// A pack file for reading; a missing pack is damage to the vault (`.corrupt`), naming the blob.
    func openPack(_ pack: ChunkID, item: String, blob: ChunkID) throws -> ReadFile {
        do {
            return try ReadFile(packStore.url(for: pack), what: "pack \(pack.hex)")
        } catch let e as VaultError where e.kind == .notFound {
            throw VaultError.corrupt("item \(item): blob \(blob.hex): pack \(pack.hex) is missing")
        }
    }

    /// One chunk's verified plaintext.
    func readChunk(_ cid: ChunkID, item: String, file: ReadFile?) throws -> [UInt8] {
        guard let record = index.chunks[cid], let packSize = index.packs[record.pack] else {
            throw VaultError.corrupt("item \(item): blob \(cid.hex) is missing from the index")
        }
        let what = "item \(item): blob \(cid.hex) in pack \(record.pack.hex)"
        var sealed: [UInt8]
        do {
            sealed = try packStore.readBlob(pack: record.pack, offset: record.offset, length: record.length,
                                            packSize: packSize, file: file)
        } catch let e as VaultError {
            throw VaultError(e.kind == .notFound ? .corrupt : e.kind, "\(what): \(e.detail)")
        }
        return try sealed.withUnsafeMutableBytes { try BlobCodec.open($0, id: cid, keys: keys, zstd: zstd, what: what) }
    }
}

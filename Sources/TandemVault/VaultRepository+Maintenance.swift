extension VaultRepository {
    /// Frees the space of chunks no item refers to (after `remove`). Packs holding only such chunks
    /// are deleted; packs holding some are repacked (their live blobs copied, still sealed, into new
    /// packs) and deleted. Order keeps every state safe: new packs are written, then the index that
    /// uses them committed, then old packs deleted. Only packs this vault's index lists are touched,
    /// so another vault in the same directory keeps all its data.
    public func prune() throws -> (packsRemoved: Int, bytesFreed: Int64) {
        let referenced = referencedChunks()
        let dead = index.chunks.filter { !referenced.contains($0.key) }
        guard !dead.isEmpty else { return (0, 0) }
        let affected = Set(dead.values.map(\.pack))
        var next = index
        for id in dead.keys { next.chunks[id] = nil }
        // Survivors in affected packs, in pack then offset order (a stable, sequential read).
        let survivors = next.chunks.filter { affected.contains($0.value.pack) }
            .sorted { ($0.value.pack, $0.value.offset) < ($1.value.pack, $1.value.offset) }
        var newPacks: [ChunkID: Int64] = [:]
        var openEntries: [(id: ChunkID, record: ChunkRecord)] = []
        packWriter.discard()
        defer { packWriter.discard() }
        func flush() throws {
            guard !packWriter.isEmpty else { return }
            let offsets = Dictionary(uniqueKeysWithValues: packWriter.entries.map { ($0.id, $0) })
            let (name, size) = try packWriter.finish(store: packStore, keys: keys)
            newPacks[name] = size
            for (id, old) in openEntries {
                guard let e = offsets[id] else { continue }
                next.chunks[id] = ChunkRecord(pack: name, offset: e.offset, length: e.length,
                                              rawLength: old.rawLength, compressed: old.compressed)
            }
            openEntries.removeAll()
        }
        var file: (pack: ChunkID, file: ReadFile)?
        for (id, record) in survivors {
            if file?.pack != record.pack {
                file = (record.pack, try ReadFile(packStore.url(for: record.pack), what: "pack \(record.pack.hex)"))
            }
            let sealed = try packStore.readBlob(pack: record.pack, offset: record.offset, length: record.length,
                                                packSize: index.packs[record.pack] ?? -1, file: file?.file)
            // Verify before copying: repacking must not carry damage into a fresh pack unnoticed.
            var probe = sealed
            _ = try probe.withUnsafeMutableBytes {
                try BlobCodec.open($0, id: id, keys: keys, zstd: zstd, what: "blob \(id.hex) in pack \(record.pack.hex)")
            }
            _ = packWriter.appendSealed(sealed, id: id)
            openEntries.append((id, record))
            if packWriter.isFull { try flush() }
        }
        try flush()
        var freed: Int64 = 0
        for pack in affected {
            freed += next.packs[pack] ?? 0
            next.packs[pack] = nil
        }
        for (name, size) in newPacks {
            next.packs[name] = size
            freed -= size
        }
        try commit(next)
        var failures: [String] = []
        for pack in affected {
            do { try packStore.remove(pack) } catch { failures.append("\(error)") }
        }
        if !failures.isEmpty {
            throw VaultError.io("pruned the index but could not delete \(failures.count) pack(s): \(failures.joined(separator: "; "))")
        }
        return (affected.count, freed)
    }

    /// Chunk ids some item (content or thumbnail) refers to.
    func referencedChunks() -> Set<ChunkID> {
        var set = Set<ChunkID>()
        for item in index.items {
            for c in item.chunks { if let id = ChunkID(c) { set.insert(id) } }
            if let t = item.thumbnail, let id = ChunkID(t) { set.insert(id) }
        }
        return set
    }

    public func stats() throws -> VaultStats {
        var stats = VaultStats(items: index.items.count, albums: index.albums.count, plaintextBytes: 0, storedBytes: 0,
                               packs: index.packs.count, chunks: index.chunks.count, uniqueChunkBytes: 0, compressedChunks: 0)
        for item in index.items { stats.plaintextBytes += item.size }
        for size in index.packs.values { stats.storedBytes += size }
        for record in index.chunks.values {
            stats.uniqueChunkBytes += Int64(record.rawLength)
            if record.compressed { stats.compressedChunks += 1 }
        }
        return stats
    }

    /// Verifies the vault's packs against its index. Without `readData`: every pack is present, of
    /// the recorded size, its header decrypts and lists every blob the index places in it at the
    /// same offset and length. With `readData` also: every pack's content hashes to its name and
    /// every blob decrypts and matches its id. Problems are reported (naming pack and blob), not
    /// thrown; only a failure to run the check at all throws.
    public func check(readData: Bool) throws -> VaultCheckReport {
        var report = VaultCheckReport(packsChecked: 0, blobsChecked: 0, problems: [])
        for item in index.items {
            for c in item.chunks + (item.thumbnail.map { [$0] } ?? []) {
                guard let id = ChunkID(c), index.chunks[id] != nil else {
                    report.problems.append("item \(item.id): blob \(ChunkID(c)?.hex ?? "?") is missing from the index")
                    continue
                }
            }
        }
        var byPack: [ChunkID: [(ChunkID, ChunkRecord)]] = [:]
        for (id, record) in index.chunks { byPack[record.pack, default: []].append((id, record)) }
        for pack in index.packs.keys.sorted() {
            report.packsChecked += 1
            let name = "pack \(pack.hex)"
            let file: ReadFile
            do {
                file = try ReadFile(packStore.url(for: pack), what: name)
            } catch {
                report.problems.append("\(name): missing or unreadable (\(error))")
                continue
            }
            let expected = index.packs[pack] ?? 0
            guard file.size == expected else {
                report.problems.append("\(name): \(file.size) bytes, the index says \(expected)")
                continue
            }
            let header: [PackEntry]
            do {
                header = try packStore.readHeader(pack: pack, keys: keys, file: file)
            } catch {
                report.problems.append("\(name): bad header (\(error))")
                continue
            }
            let listed = Dictionary(header.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            if readData {
                do {
                    let hash = try packStore.hashFile(pack, file: file)
                    if hash != pack { report.problems.append("\(name): content does not hash to its name (damaged)") }
                } catch {
                    report.problems.append("\(name): cannot be read (\(error))")
                }
            }
            for (id, record) in (byPack[pack] ?? []).sorted(by: { $0.1.offset < $1.1.offset }) {
                report.blobsChecked += 1
                guard let e = listed[id], e.offset == record.offset, e.length == record.length else {
                    report.problems.append("\(name): blob \(id.hex) is not in the pack header where the index says")
                    continue
                }
                guard readData else { continue }
                do {
                    var sealed = try packStore.readBlob(pack: pack, offset: record.offset, length: record.length,
                                                        packSize: expected, file: file)
                    _ = try sealed.withUnsafeMutableBytes {
                        try BlobCodec.open($0, id: id, keys: keys, zstd: zstd, what: "\(name): blob \(id.hex)")
                    }
                } catch let e as VaultError {
                    report.problems.append(e.detail)
                } catch {
                    report.problems.append("\(name): blob \(id.hex): \(error)")
                }
            }
        }
        return report
    }
}

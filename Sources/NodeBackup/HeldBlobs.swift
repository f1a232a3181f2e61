import Foundation
import Sodium
import TandemProtocol
import TandemVault
import TandemNodeCore
#if canImport(Glibc)
import Glibc
#endif

/// What a holder keeps for its friends, on disk (Protocol/backup.md, "Holder storage"):
///
/// ```
/// <data-dir>/backup-held/<owner hex>/shelf.json          the offer (quota, version) and the kit's locator/version
/// <data-dir>/backup-held/<owner hex>/kit                 the sealed recovery kit
/// <data-dir>/backup-held/<owner hex>/blobs/<name>        whole blobs, hash-checked before the rename
/// <data-dir>/backup-held/<owner hex>/partial/<name>.<size>  unfinished blobs: their length is what is held
/// <data-dir>/backup-held/<owner hex>/snapshots/<seq>.json   snapshot records, in the order received
/// <data-dir>/backup-held/quarantine/                    files that failed validation on load
/// ```
///
/// Opaque to the holder: names are hashes, blobs ciphertext. Everything read back is validated
/// like a peer's message (`load`); what fails is moved to quarantine, never fatal. It keeps no
/// state of its own: the holder calls it from its lane's first thread, and finishes blobs on the
/// second (each call touches the files of one blob).
final class HeldBlobs: Sendable {
    let root: URL
    /// Where a file operation that failed outside a request's answer is logged and counted.
    let health: StoreHealth

    init(root: URL, health: StoreHealth) {
        self.root = root
        self.health = health
    }

    /// The names in `dir`; none when it does not exist (nothing held there yet). A listing that
    /// fails otherwise throws: it is not "holding nothing".
    func contents(_ dir: URL) throws -> [String] {
        do {
            return try FileManager.default.contentsOfDirectory(atPath: dir.path)
        } catch {
            if !FileManager.default.fileExists(atPath: dir.path) { return [] }
            throw error
        }
    }

    func ownerDirectory(_ owner: [UInt8]) -> URL { root.appendingPathComponent(hexString(owner)) }
    func blobURL(_ owner: [UInt8], _ name: BlobName) -> URL {
        ownerDirectory(owner).appendingPathComponent("blobs").appendingPathComponent(name.description)
    }
    func partialURL(_ owner: [UInt8], _ name: BlobName, size: Int64) -> URL {
        ownerDirectory(owner).appendingPathComponent("partial").appendingPathComponent("\(name.description).\(size)")
    }
    func kitURL(_ owner: [UInt8]) -> URL { ownerDirectory(owner).appendingPathComponent("kit") }
    func shelfURL(_ owner: [UInt8]) -> URL { ownerDirectory(owner).appendingPathComponent("shelf.json") }
    func snapshotsDirectory(_ owner: [UInt8]) -> URL { ownerDirectory(owner).appendingPathComponent("snapshots") }

    // MARK: the shelf file

    struct ShelfFile: Codable {
        var quotaBytes: Int64
        var offerVersion: UInt64
        var kitLocator: String?
        var kitVersion: UInt64?
        /// Next snapshot file's sequence number.
        var nextSnapshot: Int64 = 1
    }

    func writeShelf(_ owner: [UInt8], _ shelf: ShelfFile) throws {
        try FileIO.writeAtomically(Array(try JSONEncoder().encode(shelf)), to: shelfURL(owner))
    }

    /// The shelf file; nil when there is none, or it cannot be read (logged and counted: the
    /// caller rewrites it from the book).
    func readShelf(_ owner: [UInt8]) -> ShelfFile? {
        let url = shelfURL(owner)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return health.read("read the shelf file of \(hexString(owner).prefix(16))", or: nil) {
            try JSONDecoder().decode(ShelfFile.self, from: Data(try FileIO.readAll(url, limit: 4096, what: "shelf")))
        }
    }

    // MARK: snapshots

    private struct SnapshotFile: Codable {
        var id: String
        var createdAtMs: UInt64
        var blobs: [BlobName]
        var indexBlobs: [BlobName]
        var totalBytes: Int64
        // backup.md 5.1; absent in records stored before it.
        var generation: UInt64?
        var indexSizes: [Int64]?
        var ownerSignature: String?
    }

    func writeSnapshot(_ owner: [UInt8], _ r: BackupSnapshotRecord, sequence: Int64) throws {
        let f = SnapshotFile(id: hexString(r.snapshotID), createdAtMs: r.createdAtMs, blobs: r.blobs, indexBlobs: r.indexBlobs,
                             totalBytes: r.totalBytes, generation: r.generation, indexSizes: r.indexSizes,
                             ownerSignature: hexString(r.ownerSignature))
        let url = snapshotsDirectory(owner).appendingPathComponent(String(format: "%012lld-%@.json", sequence, hexString(r.snapshotID)))
        try FileIO.writeAtomically(Array(try JSONEncoder().encode(f)), to: url)
    }

    /// Removes the snapshot files whose ids are not in `kept`: every one it can, then throws the
    /// first failure (a stray directory there must not keep the next files from going).
    func pruneSnapshots(_ owner: [UInt8], kept: Set<[UInt8]>) throws {
        let dir = snapshotsDirectory(owner)
        var failure: (any Error)?
        for file in try contents(dir) {
            let id = file.split(separator: "-").last.map { String($0.dropLast(5)) } ?? ""
            if let bytes = parseHex(id), kept.contains(bytes) { continue }
            do {
                try FileIO.remove(dir.appendingPathComponent(file))
            } catch {
                failure = failure ?? error
            }
        }
        do {
            try FileIO.syncDirectory(dir)
        } catch {
            failure = failure ?? error
        }
        if let failure { throw failure }
    }

    // MARK: blobs

    /// Appends a piece to a partial blob at `offset` (the book said it starts at what is held).
    func writePiece(_ owner: [UInt8], _ name: BlobName, size: Int64, offset: Int64, data: [UInt8]) throws {
        let url = partialURL(owner, name, size: size)
        try FileIO.createDirectory(url.deletingLastPathComponent())
        let fd = open(url.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw NodeError.failed("cannot open \(url.path): \(FileIO.errorText())") }
        defer { close(fd) }
        // A file shorter than what the book holds lost bytes (a torn write, damage): never fill the
        // gap with zeros; the holder goes back to the length on disk.
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw NodeError.failed("cannot stat \(url.path): \(FileIO.errorText())") }
        guard Int64(st.st_size) >= offset else {
            throw NodeError.failed("\(url.path) is \(st.st_size) bytes, a piece at \(offset) would leave a gap")
        }
        // A torn earlier write leaves the file longer than what the book holds: cut it back first.
        guard ftruncate(fd, off_t(offset)) == 0, lseek(fd, off_t(offset), SEEK_SET) >= 0 else {
            throw NodeError.failed("cannot position \(url.path): \(FileIO.errorText())")
        }
        try data.withUnsafeBytes { try FileIO.writeAll(fd, $0, path: url.path) }
    }

    /// The length of a partial file on disk (0 when missing, or not a regular file).
    func partialLength(_ owner: [UInt8], _ name: BlobName, size: Int64) -> Int64 {
        fileSize(partialURL(owner, name, size: size)) ?? 0
    }

    /// Hashes the finished partial file; when it matches `name`: fsync, rename into `blobs/`,
    /// fsync the directory (durable before the holder says COMPLETE). Otherwise the file is deleted.
    func finish(_ owner: [UInt8], _ name: BlobName, size: Int64, knownHash: BlobName?) throws -> Bool {
        let url = partialURL(owner, name, size: size)
        let hash: BlobName
        if let knownHash {
            hash = knownHash
        } else {
            var h = Blake2b(outputLength: 32)
            try stream(url, what: "partial blob") { h.update($0) }
            hash = BlobName(bytes: h.finalize())!
        }
        guard hash == name, partialLength(owner, name, size: size) == size else {
            try FileIO.remove(url)
            return false
        }
        let fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw NodeError.failed("cannot open \(url.path): \(FileIO.errorText())") }
        let synced = fsync(fd) == 0
        close(fd)
        guard synced else { throw NodeError.failed("fsync \(url.path): \(FileIO.errorText())") }
        let target = blobURL(owner, name)
        try FileIO.createDirectory(target.deletingLastPathComponent())
        try FileIO.rename(url, to: target)
        try FileIO.syncDirectory(target.deletingLastPathComponent())
        return true
    }

    /// Removes a blob, whole or partial (whatever size its partial file was declared with).
    func removeBlob(_ owner: [UInt8], _ name: BlobName) {
        // Each file on its own: one that cannot be removed does not keep the others.
        health.attempt("remove held blob \(name)") { try FileIO.remove(blobURL(owner, name)) }  // a missing file is not an error (ENOENT)
        let dir = ownerDirectory(owner).appendingPathComponent("partial")
        let partials = health.read("list the partial blobs of \(hexString(owner).prefix(16))", or: []) { try contents(dir) }
        for f in partials where f.hasPrefix(name.description + ".") {
            health.attempt("remove partial blob \(f)") { try FileIO.remove(dir.appendingPathComponent(f)) }
        }
    }

    /// Feeds a whole file to `sink` in 1 MiB reads.
    func stream(_ url: URL, what: String, _ sink: (UnsafeRawBufferPointer) -> Void) throws {
        let file = try ReadFile(url, what: what)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = try file.readSome(into: buffer)
            if n == 0 { break }
            sink(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    func readRange(_ owner: [UInt8], _ name: BlobName, offset: Int64, length: Int) throws -> [UInt8] {
        let file = try ReadFile(blobURL(owner, name), what: "blob")
        guard offset >= 0, length >= 0, offset + Int64(length) <= file.size else {
            throw NodeError.failed("blob \(name) is \(file.size) bytes")
        }
        var out = [UInt8](repeating: 0, count: length)
        try out.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
        return out
    }

    func writeKit(_ owner: [UInt8], _ sealed: [UInt8]) throws {
        try FileIO.writeAtomically(sealed, to: kitURL(owner))
    }

    func readKit(_ owner: [UInt8]) throws -> [UInt8] {
        try FileIO.readAll(kitURL(owner), limit: BackupLimits.maximumSealedKitBytes, what: "kit")
    }

    /// Everything held for an owner (offer withdrawn, friendship ended).
    func removeOwner(_ owner: [UInt8]) {
        let dir = ownerDirectory(owner)
        guard FileManager.default.fileExists(atPath: dir.path) else { return }  // nothing was written for it
        health.attempt("remove the files held for \(hexString(owner).prefix(16))") {
            try FileManager.default.removeItem(at: dir)
            try FileIO.syncDirectory(root)
        }
    }

    // MARK: loading

    struct Loaded {
        var owner: [UInt8]
        var shelf: BackupHolderBook.StoredShelf
        var nextSnapshot: Int64
    }

    /// The names in one of an owner's directories while loading: a file where the directory
    /// belongs is quarantined (it holds nothing); a directory that cannot be listed throws.
    private func loadContents(_ dir: URL, _ quarantined: (String) -> Void) throws -> [String] {
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: dir.path, isDirectory: &isDirectory), !isDirectory.boolValue {
            quarantine(dir, because: "not a directory", quarantined)
            return []
        }
        return try contents(dir)
    }

    /// Reads every owner's shelf back. Files that break a rule go to quarantine; an owner
    /// directory without a valid shelf file is quarantined whole.
    func load(nowMs: UInt64, quarantined: (String) -> Void) throws -> [Loaded] {
        var out: [Loaded] = []
        for entry in try contents(root).sorted() where entry != "quarantine" {
            guard let owner = parseHex(entry), owner.count == 32 else {
                quarantine(root.appendingPathComponent(entry), because: "not an owner directory", quarantined)
                continue
            }
            guard let file = readShelf(owner), file.quotaBytes > 0, file.quotaBytes <= BackupLimits.maximumQuotaBytes,
                  (1...BackupLimits.maximumVersion).contains(file.offerVersion) else {
                quarantine(ownerDirectory(owner), because: "no valid shelf.json", quarantined)
                continue
            }
            var shelf = BackupHolderBook.StoredShelf(quotaBytes: file.quotaBytes, offerVersion: file.offerVersion)
            let blobsDir = ownerDirectory(owner).appendingPathComponent("blobs")
            for name in try loadContents(blobsDir, quarantined) {
                let url = blobsDir.appendingPathComponent(name)
                guard let b = parseHex(name), let n = BlobName(bytes: b), n.description == name, let size = fileSize(url),
                      (1...BackupLimits.maximumBlobBytes).contains(size) else {
                    quarantine(url, because: "not a blob", quarantined)
                    continue
                }
                shelf.whole[n] = size
            }
            let partialDir = ownerDirectory(owner).appendingPathComponent("partial")
            for name in try loadContents(partialDir, quarantined) {
                let url = partialDir.appendingPathComponent(name)
                let parts = name.split(separator: ".")
                guard parts.count == 2, let b = parseHex(String(parts[0])), let n = BlobName(bytes: b), n.description == parts[0],
                      let size = Int64(parts[1]),
                      (1...BackupLimits.maximumBlobBytes).contains(size), let held = fileSize(url), shelf.whole[n] == nil else {
                    quarantine(url, because: "not a partial blob", quarantined)
                    continue
                }
                shelf.partial[n] = (size, min(held, size - 1))
            }
            var next = file.nextSnapshot
            let snapDir = snapshotsDirectory(owner)
            for name in try loadContents(snapDir, quarantined).sorted() where name.hasSuffix(".json") {
                let url = snapDir.appendingPathComponent(name)
                // A record that cannot be read or breaks a rule is quarantined (reported below).
                guard let bytes = try? FileIO.readAll(url, limit: 4 << 20, what: "snapshot"),  // quarantined when nil
                      let f = try? JSONDecoder().decode(SnapshotFile.self, from: Data(bytes)), let id = parseHex(f.id),  // quarantined when nil
                      let r = try? BackupSnapshotRecord(snapshotID: id, createdAtMs: f.createdAtMs, blobs: f.blobs, indexBlobs: f.indexBlobs,  // breaks a rule: quarantined
                                                        totalBytes: f.totalBytes, nowMs: max(nowMs, f.createdAtMs),
                                                        generation: f.generation ?? 0, indexSizes: f.indexSizes ?? [],
                                                        ownerSignature: f.ownerSignature.flatMap(parseHex) ?? []) else {
                    quarantine(url, because: "not a snapshot record", quarantined)
                    continue
                }
                if let seq = Int64(name.prefix(12)) { next = max(next, seq + 1) }
                shelf.snapshots.append(r)
            }
            if let locatorText = file.kitLocator, let version = file.kitVersion {
                if let l = parseHex(locatorText), let locator = KitLocator(bytes: l), let size = fileSize(kitURL(owner)) {
                    shelf.kit = (locator, version, size)
                } else {
                    quarantine(kitURL(owner), because: "kit without a valid locator", quarantined)
                }
            }
            out.append(Loaded(owner: owner, shelf: shelf, nextSnapshot: next))
        }
        return out
    }

    func quarantine(_ url: URL, because reason: String, _ report: (String) -> Void) {
        let dir = root.appendingPathComponent("quarantine")
        let target = dir.appendingPathComponent("\(Int64(Date().timeIntervalSince1970 * 1000))-\(url.lastPathComponent)")
        do {
            try FileIO.createDirectory(dir)
            try FileIO.rename(url, to: target)
        } catch {
            health.failed("move \(url.path) to quarantine", error)
            // Not moved: it goes, so that the next load does not count it again.
            health.attempt("remove \(url.path)") { try FileManager.default.removeItem(at: url) }
        }
        report("\(url.path): \(reason)")
    }

    private func fileSize(_ url: URL) -> Int64? {
        var st = stat()
        guard stat(url.path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        return Int64(st.st_size)
    }
}

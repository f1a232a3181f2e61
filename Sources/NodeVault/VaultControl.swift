import Foundation
import NIOConcurrencyHelpers
import TandemNet
import TandemProtocol
import TandemMedia
import TandemVault
import TandemNodeCore

/// The vault's control-socket methods (Protocol/control.md, "Vault"). Every method that needs the
/// vault open takes an optional `pin`: with it a locked vault is opened first; without it a locked
/// vault answers `vault_locked` (the CLI then asks for the PIN and calls again).
extension VaultService {
    nonisolated public func registerControlMethods(on router: ControlRouter) {
        router.register("vault.init") { [self] params in
            let code = try await initialize(pin: try Self.string(params, "pin"))
            var result = await status()
            if case .object(var o) = result {
                o["recovery_code"] = .string(code.display)
                result = .object(o)
            }
            return result
        }
        router.register("recovery.show") { [self] params in
            let code = try await recoveryCode(pin: params["pin"]?.stringValue)
            return ["code": .string(code.display)]
        }
        router.register("vault.unlock") { [self] params in
            try await unlock(pin: try Self.string(params, "pin"))
            return await status()
        }
        router.register("vault.lock") { [self] _ in
            try requireVault()
            lockNow(reason: "asked")
            return ["locked": true]
        }
        router.register("vault.status") { [self] _ in await status() }
        router.register("vault.settings") { [self] params in
            if let ms = params["auto_lock_ms"]?.intValue {
                _ = try await withVault(pin: params["pin"]?.stringValue) { _ in true }
                try await setAutoLock(ms: ms)
            }
            return ["auto_lock_ms": .int(await autoLockMs())]
        }
        router.register("vault.change_pin") { [self] params in
            try await changePIN(old: try Self.string(params, "pin"), new: try Self.string(params, "new_pin"))
            return ["changed": true]
        }
        router.register("vault.decoy") { [self] params in
            try await setDecoy(pin: try Self.string(params, "pin"), decoy: try Self.string(params, "decoy_pin"))
            return ["decoy": true]
        }
        router.register("vault.break_ins") { [self] params in
            let log = try await breakIns(pin: params["pin"]?.stringValue)
            return ["break_ins": .array(log.reversed().map {
                ["at": JSONValue.iso($0.atMs), "attempt": .int(Int64($0.attempt))]
            })]
        }
        router.register("vault.list") { [self] params in
            let filter = try ListFilter(params)
            let items = try await withVault(pin: params["pin"]?.stringValue) { vault in filter.apply(vault.repository.items) }
            return ["items": .array(items.map(Self.describe))]
        }
        router.register("vault.rm") { [self] params in
            let refs = try Self.refs(params)
            let removed = try await withVault(pin: params["pin"]?.stringValue) { vault -> [String] in
                let ids = try Self.resolve(refs, in: vault.repository.items).map(\.id)
                try vault.repository.remove(ids)
                return ids
            }
            await events.emit("vault.removed", ["count": .int(Int64(removed.count))])
            return ["removed": .array(removed.map(JSONValue.string))]
        }
        router.register("vault.favorite") { [self] params in
            let refs = try Self.refs(params)
            let on = !(params["off"]?.boolValue ?? false)
            let changed = try await withVault(pin: params["pin"]?.stringValue) { vault -> [VaultItem] in
                let ids = try Self.resolve(refs, in: vault.repository.items).map(\.id)
                for id in ids { try vault.repository.update(id) { $0.favorite = on } }
                return ids.compactMap { vault.repository.item($0) }
            }
            return ["items": .array(changed.map(Self.describe))]
        }
        router.register("vault.move") { [self] params in
            let refs = try Self.refs(params)
            let album = params["album"]?.stringValue
            if let album { try Self.checkName(album, what: "album name") }
            let moved = try await withVault(pin: params["pin"]?.stringValue) { vault -> [VaultItem] in
                let ids = try Self.resolve(refs, in: vault.repository.items).map(\.id)
                if let album, !vault.repository.albums.contains(where: { $0.name == album }) {
                    try vault.repository.createAlbum(album, nowMs: self.now())
                }
                for id in ids { try vault.repository.update(id) { $0.album = album } }
                return ids.compactMap { vault.repository.item($0) }
            }
            return ["items": .array(moved.map(Self.describe))]
        }
        router.register("vault.album") { [self] params in try await album(params) }
        router.register("vault.stats") { [self] params in
            let stats = try await withVault(pin: params["pin"]?.stringValue) { vault in try vault.repository.stats() }
            return [
                "items": .int(Int64(stats.items)), "albums": .int(Int64(stats.albums)),
                "bytes": .int(stats.plaintextBytes), "stored_bytes": .int(stats.storedBytes),
                "packs": .int(Int64(stats.packs)), "chunks": .int(Int64(stats.chunks)),
                "unique_chunk_bytes": .int(stats.uniqueChunkBytes), "compressed_chunks": .int(Int64(stats.compressedChunks)),
            ]
        }
        router.register("vault.check") { [self] params in
            let readData = params["read_data"]?.boolValue ?? false
            let report = try await withVault(pin: params["pin"]?.stringValue) { vault in try vault.repository.check(readData: readData) }
            return [
                "ok": .bool(report.isHealthy), "packs_checked": .int(Int64(report.packsChecked)),
                "blobs_checked": .int(Int64(report.blobsChecked)), "problems": .array(report.problems.map(JSONValue.string)),
            ]
        }
        router.register("vault.thumbnail") { [self] params in
            let ref = try Self.string(params, "item")
            let file = try Self.absolutePath(params, "file")
            let id = try await withVault(pin: params["pin"]?.stringValue) { vault -> String in
                let item = try Self.resolve([ref], in: vault.repository.items)[0]
                guard let jpeg = try vault.repository.thumbnail(item.id) else {
                    throw ControlError(code: "not_found", message: "item \(item.id) has no thumbnail", exitCode: ControlError.nothingToActOnExitCode)
                }
                try Self.writeNew(jpeg, to: file)
                return item.id
            }
            return ["id": .string(id), "file": .string(file.path)]
        }
        router.registerStream("vault.import") { [self] params, writer in
            let result = try await importFiles(params, writer: writer)
            try await writer.send(["result": result])
        }
        router.registerStream("vault.export") { [self] params, writer in
            let result = try await exportItems(params, writer: writer)
            try await writer.send(["result": result])
        }
    }

    // MARK: parameters

    nonisolated static func string(_ params: JSONValue, _ name: String) throws -> String {
        guard let v = params[name]?.stringValue else { throw NodeError.invalidArgument("missing parameter '\(name)'") }
        return v
    }

    nonisolated static func refs(_ params: JSONValue) throws -> [String] {
        guard let list = params["items"]?.arrayValue, !list.isEmpty, list.count <= 100_000 else {
            throw NodeError.invalidArgument("name at least one item (by id or name)")
        }
        return try list.map {
            guard let s = $0.stringValue, !s.isEmpty else { throw NodeError.invalidArgument("items are named by strings") }
            return s
        }
    }

    nonisolated static func absolutePath(_ params: JSONValue, _ name: String) throws -> URL {
        let text = try string(params, name)
        guard text.hasPrefix("/"), !text.utf8.contains(0) else {
            throw NodeError.invalidArgument("'\(name)' must be an absolute path")
        }
        return URL(fileURLWithPath: text)
    }

    nonisolated static func checkName(_ name: String, what: String) throws {
        do {
            try VaultNames.validate(name, what: what)
        } catch {
            throw NodeError.invalidArgument("\(error)")
        }
    }

    /// Items by id (12 hex digits) or by a name only one item has, in the order asked, each once.
    nonisolated static func resolve(_ refs: [String], in items: [VaultItem]) throws -> [VaultItem] {
        var out: [VaultItem] = []
        var seen = Set<String>()
        for ref in refs {
            let found: VaultItem
            if let byID = items.first(where: { $0.id == ref.lowercased() }) {
                found = byID
            } else {
                let named = items.filter { $0.name == ref }
                guard let first = named.first else {
                    throw ControlError(code: "not_found", message: "no item '\(ref)' in the vault (see `tandem vault list`)",
                                       exitCode: ControlError.nothingToActOnExitCode)
                }
                guard named.count == 1 else {
                    throw NodeError.invalidArgument("\(named.count) items are called '\(ref)': name one by its id")
                }
                found = first
            }
            if seen.insert(found.id).inserted { out.append(found) }
        }
        return out
    }

    nonisolated static func describe(_ item: VaultItem) -> JSONValue {
        [
            "id": .string(item.id), "name": .string(item.name), "album": item.album.map(JSONValue.string) ?? .null,
            "type": .string(item.type.rawValue), "size": .int(item.size), "favorite": .bool(item.favorite),
            "created": JSONValue.iso(item.createdAtMs), "imported": JSONValue.iso(item.importedAtMs),
            "thumbnail": .bool(item.thumbnail != nil),
        ]
    }

    struct ListFilter: Sendable {
        var album: String?
        var type: VaultItemType?
        var favorites = false
        var sort = "imported"

        init(_ params: JSONValue) throws {
            album = params["album"]?.stringValue
            if let t = params["type"]?.stringValue {
                guard let type = VaultItemType(rawValue: t) else {
                    throw NodeError.invalidArgument("--type is one of photo, video, document")
                }
                self.type = type
            }
            favorites = params["favorites"]?.boolValue ?? false
            sort = params["sort"]?.stringValue ?? "imported"
            guard ["imported", "created", "size", "name"].contains(sort) else {
                throw NodeError.invalidArgument("--sort is one of imported, created, size, name")
            }
        }

        /// Newest (or largest) first; names A to Z.
        func apply(_ items: [VaultItem]) -> [VaultItem] {
            let kept = items.filter {
                (album == nil || $0.album == album) && (type == nil || $0.type == type) && (!favorites || $0.favorite)
            }
            switch sort {
            case "created": return kept.sorted { ($0.createdAtMs ?? $0.importedAtMs, $0.id) > ($1.createdAtMs ?? $1.importedAtMs, $1.id) }
            case "size": return kept.sorted { ($0.size, $0.id) > ($1.size, $1.id) }
            case "name": return kept.sorted { ($0.name.lowercased(), $0.id) < ($1.name.lowercased(), $1.id) }
            default: return kept.sorted { ($0.importedAtMs, $0.id) > ($1.importedAtMs, $1.id) }
            }
        }
    }

    // MARK: albums

    func album(_ params: JSONValue) async throws -> JSONValue {
        let action = try Self.string(params, "action")
        let pin = params["pin"]?.stringValue
        let name = params["name"]?.stringValue
        func needName() throws -> String {
            guard let name else { throw NodeError.invalidArgument("name the album") }
            try Self.checkName(name, what: "album name")
            return name
        }
        do {
            switch action {
            case "list":
                let albums = try await withVault(pin: pin) { vault -> [(VaultAlbum, Int)] in
                    vault.repository.albums.map { album in (album, vault.repository.items.filter { $0.album == album.name }.count) }
                }
                return ["albums": .array(albums.map { album, count in
                    ["name": .string(album.name), "cover": album.cover.map(JSONValue.string) ?? .null, "items": .int(Int64(count)),
                     "created": JSONValue.iso(album.createdAtMs)]
                })]
            case "create":
                let name = try needName()
                try await withVault(pin: pin) { vault in try vault.repository.createAlbum(name, nowMs: self.now()) }
            case "rename":
                let name = try needName()
                let newName = try Self.string(params, "new_name")
                try Self.checkName(newName, what: "album name")
                try await withVault(pin: pin) { vault in try vault.repository.renameAlbum(name, to: newName) }
            case "delete":
                let name = try needName()
                try await withVault(pin: pin) { vault in try vault.repository.deleteAlbum(name) }
            case "cover":
                let name = try needName()
                let ref = try Self.string(params, "item")
                try await withVault(pin: pin) { vault in
                    let item = try Self.resolve([ref], in: vault.repository.items)[0]
                    try vault.repository.setCover(album: name, item: item.id)
                }
            default:
                throw NodeError.invalidArgument("album actions: list, create, rename, delete, cover")
            }
        } catch let error as VaultError {
            throw Self.controlError(error)
        }
        return ["ok": true]
    }

    nonisolated static func controlError(_ error: VaultError) -> Error {
        switch error.kind {
        case .notFound: return ControlError(code: "not_found", message: error.detail, exitCode: ControlError.nothingToActOnExitCode)
        case .alreadyExists: return ControlError(code: "conflict", message: error.detail, exitCode: 1)
        case .invalidName, .invalidArgument: return NodeError.invalidArgument(error.detail)
        default: return NodeError.failed(error.detail)
        }
    }

    // MARK: files

    /// Writes `bytes` to a new file (never over an existing one), 0600.
    nonisolated static func writeNew(_ bytes: [UInt8], to url: URL) throws {
        guard !FileManager.default.fileExists(atPath: url.path) else {
            throw NodeError.refused("\(url.path) exists; not overwriting it")
        }
        guard FileManager.default.createFile(atPath: url.path, contents: Data(bytes), attributes: [.posixPermissions: 0o600]) else {
            throw NodeError.failed("cannot write \(url.path)")
        }
    }

    /// What a file is, from its name and first bytes.
    nonisolated static func itemType(name: String, prefix: [UInt8]) -> VaultItemType {
        let ext = (name as NSString).pathExtension.lowercased()
        if ["jpg", "jpeg", "png", "heic", "heif", "gif", "webp", "tif", "tiff", "bmp", "dng", "avif"].contains(ext) { return .photo }
        if ["mp4", "mov", "m4v", "mkv", "webm", "avi", "3gp", "mts"].contains(ext) { return .video }
        if prefix.starts(with: [0xFF, 0xD8, 0xFF]) || prefix.starts(with: [0x89, 0x50, 0x4E, 0x47]) { return .photo }
        return .document
    }

    /// The files an import names: regular files as given, directories walked (hidden entries
    /// skipped), each once, with their sizes.
    nonisolated static func collect(_ paths: [String]) throws -> [(url: URL, size: Int64, modifiedMs: Int64?)] {
        var out: [(URL, Int64, Int64?)] = []
        var seen = Set<String>()
        let fm = FileManager.default
        func add(_ url: URL) throws {
            let path = url.standardizedFileURL.path
            guard seen.insert(path).inserted else { return }
            let attrs: [FileAttributeKey: Any]
            do {
                attrs = try fm.attributesOfItem(atPath: path)
            } catch {
                throw ControlError(code: "not_found", message: "cannot read \(path)", exitCode: 1)
            }
            let type = attrs[.type] as? FileAttributeType
            if type == .typeDirectory {
                let children: [String]
                do {
                    children = try fm.contentsOfDirectory(atPath: path)
                } catch {
                    throw ControlError(code: "not_found", message: "cannot read \(path)", exitCode: 1)
                }
                for child in children.sorted() where !child.hasPrefix(".") {
                    try add(URL(fileURLWithPath: path).appendingPathComponent(child))
                }
                return
            }
            guard type == .typeRegular else { return }
            guard fm.isReadableFile(atPath: path) else { throw NodeError.refused("cannot read \(path)") }
            let size = (attrs[.size] as? NSNumber)?.int64Value ?? 0
            let modified = (attrs[.modificationDate] as? Date).map { Int64($0.timeIntervalSince1970 * 1000) }
            out.append((URL(fileURLWithPath: path), size, modified))
            guard out.count <= 1_000_000 else { throw NodeError.invalidArgument("more than a million files in one import") }
        }
        for p in paths {
            guard p.hasPrefix("/"), !p.utf8.contains(0) else { throw NodeError.invalidArgument("paths must be absolute: '\(p)'") }
            try add(URL(fileURLWithPath: p))
        }
        return out.map { (url: $0.0, size: $0.1, modifiedMs: $0.2) }
    }

    /// Streams files into the vault; progress items as it goes (at most ten a second).
    func importFiles(_ params: JSONValue, writer: ControlStreamWriter) async throws -> JSONValue {
        guard let paths = params["paths"]?.arrayValue?.compactMap(\.stringValue), !paths.isEmpty else {
            throw NodeError.invalidArgument("name at least one file to import")
        }
        let album = params["album"]?.stringValue
        if let album { try Self.checkName(album, what: "album name") }
        let removeOriginals = params["remove_originals"]?.boolValue ?? false
        let collected = try Self.collect(paths)
        guard !collected.isEmpty else { throw ControlError(code: "not_found", message: "no files to import there", exitCode: ControlError.nothingToActOnExitCode) }
        let files = collected.map { ImportFile(url: $0.url, name: $0.url.lastPathComponent, size: $0.size, modifiedMs: $0.modifiedMs) }
        return try await importCollected(files, album: album, removeOriginals: removeOriginals,
                                         keepMetadata: params["keep_metadata"]?.boolValue ?? false, pin: params["pin"]?.stringValue, writer: writer)
    }

    /// A file an import reads: where, under which name it is stored, its size and time.
    struct ImportFile: Sendable {
        var url: URL
        var name: String
        var size: Int64
        var modifiedMs: Int64?
    }

    /// The import itself (the control method's, and the dashboard's upload): progress to `writer`
    /// when there is one.
    func importCollected(_ files: [ImportFile], album: String?, removeOriginals: Bool, keepMetadata: Bool = false, pin: String?,
                         writer: ControlStreamWriter?) async throws -> JSONValue {
        for f in files { try Self.checkName(f.name, what: "file name") }
        let total = files.reduce(Int64(0)) { $0 + $1.size }
        let progress = ProgressRelay(total: total, files: files.count)
        let imported = try await withOpenVault(pin: pin) { vault -> [VaultItem] in
            try await progress.relay(to: writer) {
                try await self.onLane { () -> [VaultItem] in
                    let starts = files.reduce(into: [Int64]()) { acc, f in acc.append((acc.last ?? 0) + f.size) }
                    var imported: [VaultItem] = []
                    // Groups of files: photos are prepared (thumbnail, capture date, a copy without
                    // GPS or device data) just before their group, so the scratch copies never add
                    // up to more than a group.
                    var first = 0
                    while first < files.count {
                        var last = first
                        var groupBytes: Int64 = 0
                        while last < files.count, last - first < 64, groupBytes < VaultRepository.batchCommitBytes {
                            groupBytes += files[last].size
                            last += 1
                        }
                        let group = Array(files[first..<last])
                        let prepared = group.map { PhotoPreparation.prepare($0.url, name: $0.name, modifiedMs: $0.modifiedMs, keepMetadata: keepMetadata,
                                                                         scratch: vault.repository.directory, logger: self.logger) }
                        defer { for p in prepared { p.cleanUp() } }
                        let sources = zip(group, prepared).map { f, p in
                            VaultRepository.ImportSource(url: p.readFrom, name: f.name, type: p.type,
                                                         album: album, createdAtMs: p.createdAtMs, thumbnail: p.thumbnail)
                        }
                        let base = first
                        var next = 0 // commits come in source order: the first item not yet removed
                        do {
                            imported += try vault.repository.importFiles(sources, nowMs: self.now(), progress: { n, done in
                                let before = base + n == 0 ? 0 : starts[base + n - 1]
                                progress.update(done: before + min(done, group[n].size), filesDone: base + n)
                            }, shouldStop: { progress.stopped || self.isStopping }, committed: { items in
                                // Originals go only once the index that holds their items is durable.
                                defer { next += items.count }
                                guard removeOriginals else { return }
                                for (k, item) in items.enumerated() where next + k < group.count {
                                    do {
                                        try FileManager.default.removeItem(at: group[next + k].url)
                                    } catch {
                                        self.logger.warning("imported, but the original could not be removed", metadata: ["item": "\(item.id)"])
                                    }
                                }
                            })
                        } catch let error as VaultError {
                            throw NodeError.failed("import stopped: \(error)")
                        }
                        first = last
                        progress.update(done: starts[last - 1], filesDone: last)
                    }
                    return imported
                }
            }
        }
        let bytes = imported.reduce(Int64(0)) { $0 + $1.size }
        await events.emit("vault.imported", ["count": .int(Int64(imported.count)), "bytes": .int(bytes)])
        return ["items": .array(imported.map(Self.describe)), "bytes": .int(bytes)]
    }

    nonisolated static func prefix(of url: URL) -> [UInt8] {
        guard let h = try? FileHandle(forReadingFrom: url) else { return [] }  // unreadable: sniffed as unknown; the import reports the read
        defer { try? h.close() }  // read-only handle
        return [UInt8]((try? h.read(upToCount: 16)) ?? Data())  // unreadable: sniffed as unknown
    }

    /// Writes items into a directory under their names ("name (2).ext" when taken).
    func exportItems(_ params: JSONValue, writer: ControlStreamWriter) async throws -> JSONValue {
        let refs = try Self.refs(params)
        let dir = try Self.absolutePath(params, "dir")
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir.path, isDirectory: &isDir), isDir.boolValue else {
            throw NodeError.invalidArgument("\(dir.path) is not a directory")
        }
        let written = try await withOpenVault(pin: params["pin"]?.stringValue) { vault -> [(String, String)] in
            let items = try await self.onLane { try Self.resolve(refs, in: vault.repository.items) }
            let progress = ProgressRelay(total: items.reduce(Int64(0)) { $0 + $1.size }, files: items.count)
            return try await progress.relay(to: writer) {
                try await self.onLane { () -> [(String, String)] in
                    var out: [(String, String)] = []
                    var before: Int64 = 0
                    for (n, item) in items.enumerated() {
                        if progress.stopped || self.isStopping { throw CancellationError() }
                        let target = Self.freeName(item.name, in: dir)
                        do {
                            try vault.repository.export(item.id, to: target) { done in progress.update(done: before + done, filesDone: n) }
                        } catch let error as VaultError {
                            try? FileManager.default.removeItem(at: target)  // a partial export, if any; the error is thrown
                            throw NodeError.failed("exporting \(item.id): \(error)")
                        }
                        before += item.size
                        progress.update(done: before, filesDone: n + 1)
                        out.append((item.id, target.path))
                    }
                    return out
                }
            }
        }
        return ["files": .array(written.map { ["id": .string($0.0), "file": .string($0.1)] })]
    }

    /// `name` in `dir`, or "stem (2).ext", "stem (3).ext"… if taken. The name is a plain file name
    /// (validated at import), never a path.
    nonisolated static func freeName(_ name: String, in dir: URL) -> URL {
        let safe = name.replacingOccurrences(of: "/", with: "_")
        let base = (safe == "." || safe == "..") ? "item" : safe
        var candidate = dir.appendingPathComponent(base)
        let ext = (base as NSString).pathExtension
        let stem = (base as NSString).deletingPathExtension
        var n = 2
        while FileManager.default.fileExists(atPath: candidate.path) {
            candidate = dir.appendingPathComponent(ext.isEmpty ? "\(stem) (\(n))" : "\(stem) (\(n)).\(ext)")
            n += 1
        }
        return candidate
    }
}

/// Carries progress from the vault thread to a control stream: the latest figures, sent at most
/// ten times a second; a client that went away stops the work at the next file.
final class ProgressRelay: Sendable {
    let total: Int64
    let files: Int
    private struct State {
        var done: Int64 = 0
        var filesDone = 0
        var changed = false
        var finished = false
        var stopped = false
    }
    private let state = NIOLockedValueBox(State())

    init(total: Int64, files: Int) {
        self.total = total
        self.files = files
    }

    var stopped: Bool { state.withLockedValue { $0.stopped } }

    func update(done: Int64, filesDone: Int) {
        state.withLockedValue {
            $0.done = done
            $0.filesDone = filesDone
            $0.changed = true
        }
    }

    /// Runs `work`, sending progress items while it runs and one last one when it ends.
    func relay<T: Sendable>(to writer: ControlStreamWriter?, _ work: @escaping @Sendable () async throws -> T) async throws -> T {
        guard let writer else { return try await work() }
        let started = ContinuousClock.now
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                defer { self.state.withLockedValue { $0.finished = true } }
                return try await work()
            }
            group.addTask {
                while true {
                    try? await Task.sleep(for: .milliseconds(100))  // cancelled: the loop ends at `finished`
                    let (snapshot, end) = self.state.withLockedValue { s -> ((Int64, Int)?, Bool) in
                        defer { s.changed = false }
                        return (s.changed ? (s.done, s.filesDone) : nil, s.finished)
                    }
                    if let (done, filesDone) = snapshot {
                        let seconds = max(0.001, Double((ContinuousClock.now - started).components.attoseconds) / 1e18
                            + Double((ContinuousClock.now - started).components.seconds))
                        do {
                            try await writer.send(["progress": [
                                "done": .int(done), "total": .int(self.total), "files_done": .int(Int64(filesDone)),
                                "files": .int(Int64(self.files)), "bytes_per_second": .int(Int64(Double(done) / seconds)),
                            ]])
                        } catch {
                            self.state.withLockedValue { $0.stopped = true }
                            return nil
                        }
                    }
                    if end { return nil }
                }
            }
            var result: T?
            for try await r in group { if let r { result = r } }
            guard let result else { throw CancellationError() }
            return result
        }
    }
}

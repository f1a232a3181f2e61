import Foundation
import Logging
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemVault
import TandemNodeCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `tandem restore`: a fresh data directory becomes the node a recovery code belongs to
/// (Protocol/backup.md section 8). The decisions are in `RecoveryKit` (what a kit holds and
/// whether it is valid) and `RestorePlan` (what to fetch next, hash checks); this drives them over
/// links to one holder and writes the files.
///
/// Order on disk, so that an interrupted restore resumes: identity and store first (a second run
/// finds the identity equal to the kit's and goes on), then packs (each hash-checked, then renamed
/// into place: a pack in place is never fetched again), then the index files, the keys file, the
/// sealed recovery code and `backup-kit` last (a vault with its keys file is a whole vault).
public struct RestoreClient: Sendable {
    public struct Options: Sendable {
        public var holder: NodeID
        public var host: String
        public var port: Int
        public var code: RecoveryCode
        public var dataDirectory: DataDirectory
        /// The holder's relay (a share code): reached through a tunnel of it instead of host:port.
        public var relay: RelayAddress?
        public init(holder: NodeID, host: String, port: Int, code: RecoveryCode, dataDirectory: DataDirectory, relay: RelayAddress? = nil) {
            self.holder = holder
            self.host = host
            self.port = port
            self.code = code
            self.dataDirectory = dataDirectory
            self.relay = relay
        }

        /// How the holder is named in messages.
        var holderText: String {
            relay.map { "\(holder.short)… through relay \($0.host):\($0.port)" } ?? "\(holder.short)… at \(host):\(port)"
        }
    }

    func connect(_ o: Options, as identity: SigningKeyPair) async throws -> RestoreLink {
        if let relay = o.relay {
            return try await RestoreLink.connect(through: relay, holder: o.holder, identity: identity, group: group, logger: logger)
        }
        return try await RestoreLink.connect(host: o.host, port: o.port, holder: o.holder, identity: identity, group: group, logger: logger)
    }

    /// What a restore reports as it goes.
    public enum Event: Sendable {
        case step(String)
        case progress(phase: String, done: Int64, total: Int64, bytesPerSecond: Int64)
        case skipped(String)
    }

    public struct Report: Sendable {
        public var id: NodeID
        public var friends = 0
        public var homeRelays = 0
        public var ledgerEntries = 0
        public var skipped: [String] = []
        public var vault = false
        public var snapshotCreatedAtMs: UInt64?
        public var items = 0
        public var blobs = 0
        public var blobsAlreadyHere = 0
        public var bytes: Int64 = 0
        public var bytesFetched: Int64 = 0
        /// The friend whose snapshot the vault came back from.
        public var vaultFrom: NodeID?
        /// What every holder reached has (backup.md 8.1), in the survey's order.
        public var copies: [HolderCopy] = []
        /// "newest copy: generation N from DATE at FRIEND; …".
        public var freshness = ""
        /// The generation of the snapshot restored, and of the kit.
        public var generation: UInt64?
        public var kitGeneration: UInt64 = 0
    }

    /// The kit's other friends that can be reached without an address from the user, in the kit's
    /// order: at the addresses where the old node last reached them (the first two the kit lists),
    /// then through a tunnel of their home relay. Any of them may hold a snapshot.
    static func otherHolders(_ o: Options, friends: [RestoredFriend]) -> [Options] {
        friends.flatMap { f -> [Options] in
            guard f.publicKey != o.holder.publicKey else { return [] }
            let id = NodeID(publicKey: f.publicKey)
            // Where the old node last reached it, then through its home relay.
            var ways = f.addresses.prefix(Self.directTriesPerFriend).map {
                Options(holder: id, host: $0.host, port: $0.port, code: o.code, dataDirectory: o.dataDirectory, relay: nil)
            }
            if let r = f.homeRelay {
                ways.append(Options(holder: id, host: r.host, port: r.port, code: o.code, dataDirectory: o.dataDirectory,
                                    relay: RelayAddress(id: NodeID(publicKey: r.publicKey), host: r.host, port: r.port)))
            }
            return ways
        }
    }

    /// Addresses from the kit tried per friend (each costs a connect attempt when stale).
    static let directTriesPerFriend = 2

    let group: EventLoopGroup
    let logger: Logger
    let now: @Sendable () -> Int64

    public init(group: EventLoopGroup, logger: Logger, now: @escaping @Sendable () -> Int64 = { Int64(clamping: wallClockMilliseconds()) }) {
        self.group = group
        self.logger = logger
        self.now = now
    }

    public func run(_ o: Options, events: @escaping @Sendable (Event) -> Void) async throws -> Report {
        try await run([o], events: events)
    }

    /// A restore given several ways to friends (every `--from`, every line of a recovery sheet):
    /// the kit comes from the first that gives one, in the order given; the others join the
    /// freshness survey and the vault's candidates with the friends the kit names.
    public func run(_ ways: [Options], events: @escaping @Sendable (Event) -> Void) async throws -> Report {
        guard let given = ways.first else { throw NodeError.invalidArgument("name a friend that holds your backups") }
        let dir = given.dataDirectory
        try dir.create()
        let lock = try NodeLock.acquire(dir)
        defer { lock.release() }
        let existing: [UInt8]? = IdentityFile.exists(in: dir) ? try IdentityFile.publicKey(in: dir) : nil
        if existing == nil, FileManager.default.fileExists(atPath: dir.storeFile.path),
           try NodeStore(path: dir.storeFile.path).holdsNodeState() {
            throw NodeError.failed("\(dir.path) already holds a node's store (friends, relays or a ledger): restore into an empty data directory")
        }
        let vaultKeys = dir.url.appendingPathComponent("vault").appendingPathComponent(VaultKeyFile.fileName)
        let staging = dir.url.appendingPathComponent("vault").appendingPathComponent(".restore")
        if let existing, FileManager.default.fileExists(atPath: vaultKeys.path), !FileManager.default.fileExists(atPath: staging.path) {
            // A node with a whole vault (a restore in progress keeps vault/.restore until it ends):
            // its index would be replaced by an older snapshot's.
            throw NodeError.failed("\(dir.path) already holds node \(NodeID(publicKey: existing).short)… and its vault: restore into an empty data directory")
        }

        // 1. The kit, asked for as a throwaway key, of each way given in turn until one has it.
        var opened: (way: Options, kit: RecoveryKit.Opened)?
        var kitFailures: [(holder: String, error: Error)] = []
        for way in ways where opened == nil {
            events(.step("asking \(way.holderText) for the recovery kit"))
            do {
                opened = (way, try await fetchKit(way))
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                kitFailures.append((way.holderText, error))
                if ways.count > 1 { events(.skipped("recovery kit from \(way.holderText): \(error)")) }
            }
        }
        guard let (o, first) = opened else {
            if kitFailures.count == 1 { throw kitFailures[0].error }
            throw NodeError(kind: NodeError.kind(of: kitFailures[0].error),
                            message: "no friend gave the recovery kit: " + kitFailures.map { "\($0.holder): \($0.error)" }.joined(separator: "; "))
        }
        if let existing, existing != first.identity.publicKey {
            throw NodeError.failed("\(dir.path) already holds another identity (\(NodeID(publicKey: existing).short)…): restore into an empty data directory")
        }
        // Freshness (backup.md 8.1): every holder reachable is asked, as the old identity, for its
        // newest kit and its snapshots; the highest generation the owner signed wins, whoever holds it.
        events(.step("asking every friend in the kit for their newest copy"))
        // The ways given first (the sheet's, in its order), then those the kit knows.
        let givenWays = ways.filter { $0.holder != o.holder || $0.host != o.host || $0.port != o.port || $0.relay != o.relay }
        let allWays = [o] + givenWays + Self.otherHolders(o, friends: first.friends)
        let copies = await survey(allWays, identity: first.identity, friends: first.friends, events: events)
        let kit = RestoreFreshness.newestKit(first: first, copies: copies)
        var report = Report(id: NodeID(publicKey: kit.identity.publicKey))
        report.copies = copies
        report.freshness = RestoreFreshness.sentence(copies)
        report.kitGeneration = kit.generation
        events(.step(report.freshness))
        report.skipped = kit.skipped
        // Ways to friends that did not connect are passed over, as before the survey.
        for c in copies where c.holder != o.holder || c.way == nil {
            for w in c.waysFailed {
                report.skipped.append("vault from \(w)")
                events(.skipped("vault from \(w)"))
            }
        }
        for s in kit.skipped { events(.skipped(s)) }

        // 2. Become the old identity; friends, relays and the ledger in one transaction.
        if existing == nil { try IdentityFile.create(in: dir, seed: kit.identity.seed()) }
        let store = try NodeStore(path: dir.storeFile.path)
        let restored = RestoredState(friends: kit.friends,
                                     homeRelays: kit.homeRelays.map { StoredRelay(publicKey: $0.id.publicKey, host: $0.host, port: $0.port, atMs: 0) },
                                     ledger: kit.ledger,
                                     addresses: o.relay == nil ? [(o.holder.publicKey, o.host, o.port)] : [],
                                     displayName: kit.displayName)
        let nowMs = now()
        let newestSeen = Int64(clamping: copies.compactMap { $0.newest?.generation }.max() ?? 0)
        let kitGeneration = Int64(clamping: kit.generation)
        try await NodeCore.perform {
            try store.step { step in
                try step.applyRestore(restored, nowMs: nowMs)
                // The restored node's next push and kit are newer than any copy found.
                try step.raiseBackupGeneration("snapshot", atLeast: newestSeen, nowMs: nowMs)
                try step.raiseBackupGeneration("kit", atLeast: kitGeneration, nowMs: nowMs)
            }
        }
        report.friends = kit.friends.count
        report.homeRelays = kit.homeRelays.count
        report.ledgerEntries = kit.ledger.count
        events(.step("identity \(report.id.canonical) restored with \(kit.friends.count) friend(s), \(kit.ledger.count) ledger entr\(kit.ledger.count == 1 ? "y" : "ies")"))

        // 3. The vault, as the old identity: from the holder named, else from any other friend in
        // the kit that holds a complete snapshot, reached where the old node last reached it or
        // through its home relay.
        let vaultDir = dir.url.appendingPathComponent("vault")
        if let keysFile = kit.keysFile {
            // Newest signed generation first; friends the survey did not reach are tried last.
            let ordered = RestoreFreshness.order(copies).compactMap(\.way)
            let reached = Set(ordered.map(\.holder))
            let candidates = ordered + allWays.filter { !reached.contains($0.holder) }
            // A holder first offers only snapshots at least as new as what a later holder has (so a
            // broken newest copy at one friend does not make the restore settle for its older one
            // while another friend has something newer); a second round takes anything.
            let best = RestoreFreshness.order(copies).map { $0.newest?.generation ?? 0 }
            let first = candidates.enumerated().map { i, c in (c, i + 1 < best.count ? best[(i + 1)...].max() ?? 0 : 0) }
            let rounds: [[(Options, UInt64)]] = [first, first.filter { $0.1 > 0 }.map { ($0.0, 0) }]
            var failures: [(holder: String, error: Error)] = []
            for (candidate, atLeast) in rounds.joined() where report.vaultFrom == nil {
                var attempt = report
                do {
                    if !failures.isEmpty { events(.step("trying friend \(candidate.holderText)")) }
                    try await restoreVault(candidate, identity: kit.identity, keysFile: keysFile, vaultDir: vaultDir, atLeast: atLeast,
                                           report: &attempt, events: events)
                    report = attempt
                    report.vaultFrom = candidate.holder
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    failures.append((candidate.holderText, error))
                    report.skipped.append("vault from \(candidate.holderText): \(error)")
                    if candidates.count > 1 { events(.skipped("vault from \(candidate.holderText): \(error)")) }
                }
            }
            if report.vaultFrom == nil {
                // Nothing half-fetched stays behind: the staging folder and unfinished packs go
                // (packs in place were hash-checked and stay for the next run).
                Self.cleanUp(vaultDir)
                // One holder: its own error, as it was. Several: each named with what went wrong.
                if failures.count == 1 { throw failures[0].error }
                throw NodeError(kind: NodeError.kind(of: failures[0].error),
                                message: "no friend gave back a complete vault: "
                                    + failures.map { "\($0.holder): \($0.error)" }.joined(separator: "; "))
            }
        } else {
            // No vault: the code lived in clear beside the identity; it is back there.
            let clear = dir.url.appendingPathComponent(RecoveryCodes.clearFileName)
            if !FileManager.default.fileExists(atPath: clear.path) {
                try RecoveryCodes.writePrivate(Array((o.code.canonical + "\n").utf8), to: clear)
            }
        }
        try RecoveryKit.KeyFile(code: o.code).save(dir.url)
        return report
    }

    // MARK: - The kit

    func fetchKit(_ o: Options) async throws -> RecoveryKit.Opened {
        let throwaway = SigningKeyPair.generate()
        let link = try await connect(o, as: throwaway)
        defer { link.close() }
        let locator = RecoveryKitSeal.locator(o.code)
        var refusals: [String] = []
        var index = 0
        var count = 1
        while index < min(count, BackupLimits.kitsPerLocator) {
            let i = index
            let answer = try await link.kit(locator: locator, index: i)
            switch answer.status {
            case .ok:
                count = answer.count
                do {
                    return try RecoveryKit.open(answer.sealedKit, code: o.code, owner: answer.owner)
                } catch let r as RecoveryKit.Refusal {
                    refusals.append("kit \(i + 1): \(r)")
                }
            case .notFound:
                count = 0
            case .busy, .unspecified, .complete, .noOffer, .overQuota, .outOfOrder, .hashMismatch, .tooManyPartial, .sizeMismatch,
                 .missingBlobs, .snapshotLimit, .conflict, .badRequest:
                throw NodeError.failed("holder \(link.address) refused the kit request (\(answer.status))")
            }
            index += 1
        }
        if refusals.isEmpty {
            throw NodeError.nothingToActOn("holder \(link.address) holds no recovery kit for this recovery code (a typo in the code, or no backup there)")
        }
        throw NodeError.failed("holder \(link.address): no kit under this code opens as the owner's: \(refusals.joined(separator: "; "))")
    }

    // MARK: - The vault

    struct VaultKeys {
        let masterA: SecretBytes
        let masterB: SecretBytes?
        let locatorA: String
        let locatorB: String?
    }

    /// Slot A's key from the keys file's recovery slot (the code), B's through the link.
    func vaultKeys(keysFile: [UInt8], code: RecoveryCode, staging: URL) throws -> VaultKeys {
        let keysDir = staging.appendingPathComponent("keys-check")
        try FileIO.createDirectory(keysDir)
        defer { try? FileManager.default.removeItem(at: keysDir) }  // best effort: inside staging, removed with it
        try DurableFile.write(keysFile, to: VaultKeyFile.url(in: keysDir))
        let file = try VaultKeyFile.load(from: keysDir)
        guard let a = try file.unlock(recoveryCode: code.bytes) else {
            throw NodeError.failed("the kit's vault keys file does not open with this recovery code")
        }
        let b = try file.spareKey(masterKey: a)
        return VaultKeys(masterA: a, masterB: b, locatorA: try VaultRepository.indexLocator(masterKey: a),
                         locatorB: try b.map { try VaultRepository.indexLocator(masterKey: $0) })
    }

    func restoreVault(_ o: Options, identity: SigningKeyPair, keysFile: [UInt8], vaultDir: URL, atLeast: UInt64 = 0, report: inout Report,
                      events: @escaping @Sendable (Event) -> Void) async throws {
        let staging = vaultDir.appendingPathComponent(".restore")
        try FileIO.createDirectory(vaultDir)
        try FileIO.createDirectory(staging)
        events(.step("opening the vault's keys with the recovery code"))
        let keys = try vaultKeys(keysFile: keysFile, code: o.code, staging: staging)
        report.vault = true

        let holder = try await HolderConnection { try await self.connect(o, as: identity) }
        defer { holder.close() }
        let link = holder.link
        let list = try await link.request("BACKUP_LIST", make: { id in
            (.backupList, BackupListQueryMessage(requestID: id).payload)
        }, match: { a, id -> BackupListReplyMessage? in
            if case .list(let m) = a, m.requestID == id { return m }
            return nil
        })
        switch list.status {
        case .ok: break
        case .noOffer:
            throw NodeError.nothingToActOn("holder \(link.address) holds no backup of this node (it has no offer for it)")
        case .unspecified, .complete, .overQuota, .outOfOrder, .hashMismatch, .tooManyPartial, .sizeMismatch, .missingBlobs,
             .snapshotLimit, .conflict, .notFound, .busy, .badRequest:
            throw NodeError.failed("holder \(link.address) refused BACKUP_LIST (\(list.status))")
        }

        var chosen: (snapshot: BackupSnapshotSummary, indexes: [(locator: String, bytes: [UInt8])], packs: [RestorePlan.Blob])?
        var reasons: [String] = []
        // Only what the owner signed, newest generation first (backup.md 8.1).
        let (allSigned, unsigned) = RestoreFreshness.signed(list.snapshots, owner: identity.publicKey)
        if unsigned > 0 { reasons.append("\(unsigned) snapshot(s) not signed by this node") }
        let signedSnapshots = allSigned.filter { $0.generation >= atLeast }
        if signedSnapshots.count < allSigned.count { reasons.append("older than generation \(atLeast) another friend holds") }
        for snapshot in signedSnapshots {
            do {
                chosen = try await examine(snapshot, holder: holder, keys: keys, staging: staging, events: events)
                break
            } catch let e as SnapshotUnusable {
                reasons.append(e.reason)
                events(.skipped("snapshot generation \(snapshot.generation) of \(RestoreFreshness.utc(snapshot.createdAtMs)): \(e.reason)"))
            }
        }
        guard let chosen else {
            if allSigned.isEmpty, unsigned == 0 {
                throw NodeError.nothingToActOn("holder \(link.address) holds no snapshot of this node's vault yet")
            }
            throw NodeError.failed("holder \(link.address) holds no complete snapshot: \(reasons.joined(separator: "; "))")
        }
        report.snapshotCreatedAtMs = chosen.snapshot.createdAtMs
        report.generation = chosen.snapshot.generation

        // Packs: those in place were hash-checked before their rename.
        let inPlace = Set(try chosen.packs.filter { FileIO.exists(try packURL(vaultDir, $0.name)) }.map(\.name))
        var plan = RestorePlan(holder: link.address, blobs: chosen.packs, inPlace: inPlace)
        report.blobs = chosen.packs.count
        report.blobsAlreadyHere = plan.skipped
        report.bytes = plan.totalBytes
        let startDone = plan.doneBytes
        events(.step("fetching \(chosen.packs.count - plan.skipped) pack(s) (\(plan.skipped) already here)"))
        try await fetch(&plan, holder: holder, phase: "packs", events: events) { name in try packURL(vaultDir, name) }
        report.bytesFetched = plan.doneBytes - startDone

        // The index files, the keys file, the code sealed in the vault, in that order.
        try FileIO.createDirectory(vaultDir.appendingPathComponent("index"))
        for index in chosen.indexes {
            try DurableFile.write(index.bytes, to: vaultDir.appendingPathComponent("index").appendingPathComponent(index.locator))
        }
        // A spare (decoy) vault whose index the snapshot lacks is made empty, so both exist as after `vault init`.
        if let b = keys.masterB, let lb = keys.locatorB, !chosen.indexes.contains(where: { $0.locator == lb }),
           !FileManager.default.fileExists(atPath: vaultDir.appendingPathComponent("index").appendingPathComponent(lb).path) {
            _ = try VaultRepository.create(at: vaultDir, masterKey: b)
        }
        try DurableFile.write(keysFile, to: VaultKeyFile.url(in: vaultDir))
        // The decoy's code was random and wraps nothing: a new random one is as good (vault.md).
        var codes: [(code: RecoveryCode, master: SecretBytes)] = [(o.code, keys.masterA)]
        if let b = keys.masterB { codes.append((RecoveryCode(bytes: Sodium.randomBytes(RecoveryCode.byteCount)), b)) }
        try RecoveryCodes.seal(codes, vault: vaultDir)
        let repo = try VaultRepository.open(at: vaultDir, masterKey: keys.masterA)
        report.items = repo.items.count
        try? FileManager.default.removeItem(at: staging)  // best effort: the vault is in place; a leftover is removed by the next restore
        events(.step("vault restored: \(report.items) item(s)"))
    }

    /// After a restore that got no vault: `vault/.restore` and unfinished `*.tmp-restore` packs
    /// are removed (best effort; each failure is left for the next run to redo).
    static func cleanUp(_ vaultDir: URL) {
        let fm = FileManager.default
        try? fm.removeItem(at: vaultDir.appendingPathComponent(".restore"))  // best effort: the next run recreates and clears it
        let packs = vaultDir.appendingPathComponent("packs")
        for sub in (try? fm.contentsOfDirectory(atPath: packs.path)) ?? [] {  // none yet: nothing to clean
            let dir = packs.appendingPathComponent(sub)
            for f in (try? fm.contentsOfDirectory(atPath: dir.path)) ?? [] where f.hasSuffix(".tmp-restore") {  // not a directory: skipped
                try? fm.removeItem(at: dir.appendingPathComponent(f))  // best effort, as above
            }
        }
    }

    struct SnapshotUnusable: Error {
        let reason: String
    }

    /// A snapshot is usable when its index blobs are whole at the holder, fetch and hash right,
    /// open with the vault's keys, and every pack they list is whole at the holder.
    func examine(_ snapshot: BackupSnapshotSummary, holder: HolderConnection, keys: VaultKeys, staging: URL,
                 events: @escaping @Sendable (Event) -> Void) async throws
        -> (snapshot: BackupSnapshotSummary, indexes: [(locator: String, bytes: [UInt8])], packs: [RestorePlan.Blob]) {
        guard !snapshot.indexBlobs.isEmpty else { throw SnapshotUnusable(reason: "it names no index blob") }
        let indexHoldings = try await have(snapshot.indexBlobs, holder: holder)
        guard indexHoldings.allSatisfy(\.isWhole) else { throw SnapshotUnusable(reason: "the holder lacks an index blob") }
        // Sizes the owner signed bound what is fetched (backup.md 8.2): each index blob's exactly.
        if let excess = RestoreFreshness.exceedsSignedSizes(snapshot, indexSizes: indexHoldings.map(\.size), packSizes: []) {
            throw SnapshotUnusable(reason: excess)
        }
        let stagedIndex = staging.appendingPathComponent("index-blobs")
        try FileIO.createDirectory(stagedIndex)
        let inPlace = Set(indexHoldings.filter { FileManager.default.fileExists(atPath: stagedIndex.appendingPathComponent($0.name.description).path) }.map(\.name))
        var plan = RestorePlan(holder: holder.link.address, blobs: indexHoldings.map { RestorePlan.Blob(name: $0.name, size: $0.size) }, inPlace: inPlace)
        events(.step("fetching \(indexHoldings.count) index blob(s)"))
        try await fetch(&plan, holder: holder, phase: "index", events: events) { stagedIndex.appendingPathComponent($0.description) }

        // Which index is which: each is decrypted (and validated whole) with each vault's key.
        var indexes: [(locator: String, bytes: [UInt8])] = []
        var packNames = Set<String>()
        for holding in indexHoldings {
            let bytes = try FileIO.readAll(stagedIndex.appendingPathComponent(holding.name.description), limit: 1 << 30,
                                           what: "index blob")
            var placed = false
            for (master, locator) in [(keys.masterA, keys.locatorA)] + (keys.masterB.map { [($0, keys.locatorB!)] } ?? []) {
                let scratch = staging.appendingPathComponent("scratch-\(hexString(Sodium.randomBytes(6)))")
                defer { try? FileManager.default.removeItem(at: scratch) }  // best effort: inside staging
                try FileIO.createDirectory(scratch.appendingPathComponent("index"))
                try DurableFile.write(bytes, to: scratch.appendingPathComponent("index").appendingPathComponent(locator))
                guard let repo = try? VaultRepository.open(at: scratch, masterKey: master) else { continue }  // expected: sealed under the other key
                indexes.append((locator, bytes))
                packNames.formUnion(repo.packNames)
                placed = true
                break
            }
            if !placed { events(.skipped("index blob \(holding.name) opens with neither vault's key: left out")) }
        }
        guard indexes.contains(where: { $0.locator == keys.locatorA }) else {
            throw SnapshotUnusable(reason: "no index blob opens with the vault's key")
        }
        let names = packNames.sorted().compactMap { hexBytes($0).flatMap { BlobName(bytes: $0) } }
        var packs: [RestorePlan.Blob] = []
        var i = 0
        while i < names.count {
            let batch = Array(names[i..<min(i + BackupLimits.namesPerQuery, names.count)])
            for h in try await have(batch, holder: holder) {
                guard h.isWhole else { throw SnapshotUnusable(reason: "the holder lacks pack \(h.name)") }
                packs.append(RestorePlan.Blob(name: h.name, size: h.size))
            }
            i += batch.count
        }
        // Everything together within the signed total and count: a holder cannot make a restorer
        // fetch more than the owner's record says (backup.md 8.2).
        if let excess = RestoreFreshness.exceedsSignedSizes(snapshot, indexSizes: indexHoldings.map(\.size), packSizes: packs.map(\.size)) {
            throw SnapshotUnusable(reason: excess)
        }
        return (snapshot, indexes, packs)
    }

    func have(_ names: [BlobName], holder: HolderConnection) async throws -> [BackupHolding] {
        while true {
            do {
                return try await have(names, link: holder.link)
            } catch is NodeError where holder.link.isClosed {
                try await holder.reconnect()
            }
        }
    }

    func have(_ names: [BlobName], link: RestoreLink) async throws -> [BackupHolding] {
        let reply = try await link.request("BACKUP_HAVE_QUERY", make: { id in
            (.backupHaveQuery, BackupHaveQueryMessage(requestID: id, names: names).payload)
        }, match: { a, id -> BackupHaveReplyMessage? in
            if case .have(let m) = a, m.requestID == id { return m }
            return nil
        })
        guard reply.status == .ok else { throw NodeError.failed("holder \(link.address) refused BACKUP_HAVE_QUERY (\(reply.status))") }
        guard reply.holdings.map(\.name) == names else {
            throw NodeError.failed("holder \(link.address) answered HAVE for other names than asked")
        }
        return reply.holdings
    }

    // MARK: - Fetching

    /// Runs `plan` to its end over `link`: FETCHes out, pieces written at their offsets into
    /// `<final>.tmp-restore`, each finished blob hashed, then renamed into place.
    func fetch(_ plan: inout RestorePlan, holder: HolderConnection, phase: String, events: @escaping @Sendable (Event) -> Void,
               destination: (BlobName) throws -> URL) async throws {
        var files: [BlobName: Int32] = [:]
        defer { for (_, fd) in files { close(fd) } }
        let started = ContinuousClock.now
        let startBytes = plan.doneBytes
        var lastReport = ContinuousClock.now - .seconds(1)
        func report(force: Bool = false) {
            let t = ContinuousClock.now
            guard force || t - lastReport >= .milliseconds(200) else { return }
            lastReport = t
            let elapsed = t - started
            let secs = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let rate = secs > 0.05 ? Int64(Double(plan.doneBytes - startBytes) / secs) : 0
            events(.progress(phase: phase, done: plan.doneBytes, total: plan.totalBytes, bytesPerSecond: rate))
        }
        report(force: true)
        while !plan.isDone {
            if let f = plan.failure { throw NodeError.failed("restore refused: \(f)") }
            let (opened, requests) = plan.next(nowMs: now(), newID: { BackupRequestID(bytes: Sodium.randomBytes(16))! })
            for b in opened {
                let final = try destination(b.name)
                try FileIO.createDirectory(final.deletingLastPathComponent())
                let tmp = final.path + ".tmp-restore"
                let fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
                guard fd >= 0 else { throw NodeError.failed("cannot create \(tmp): \(String(cString: strerror(errno)))") }
                files[b.name] = fd
            }
            let link = holder.link
            for r in requests { link.send(.backupFetch, r.message.payload) }
            if let f = plan.failure { throw NodeError.failed("restore refused: \(f)") }
            let wait = max(1, min(1_000, (plan.nextDeadline() ?? now() + 1_000) - now()))
            guard let answer = await link.next(withinMs: wait) else {
                plan.tick(nowMs: now())
                continue
            }
            if case .closed = answer {
                // Everything in flight is asked again on the new link; pieces already written stay.
                plan.linkLost()
                try await holder.reconnect()
                continue
            }
            try link.check(answer)
            guard case .fetched(let m) = answer else { continue }
            switch plan.receive(m) {
            case .ignored:
                continue
            case .write(let name, let offset, let data, let finished):
                guard let fd = files[name] else { continue }
                try data.withUnsafeBytes { buf in
                    var done = 0
                    while done < buf.count {
                        let n = pwrite(fd, buf.baseAddress! + done, buf.count - done, off_t(offset) + off_t(done))
                        if n < 0, errno == EINTR { continue }
                        guard n > 0 else { throw NodeError.failed("cannot write a fetched blob: \(String(cString: strerror(errno)))") }
                        done += n
                    }
                }
                if finished {
                    let final = try destination(name)
                    let tmp = final.path + ".tmp-restore"
                    guard fsync(fd) == 0 else { throw NodeError.failed("cannot fsync \(tmp): \(String(cString: strerror(errno)))") }
                    let actual = try hashFile(fd)
                    close(fd)
                    files[name] = nil
                    guard plan.verified(name, actual: actual) else {
                        unlink(tmp)
                        if let f = plan.failure { throw NodeError.failed("restore refused: \(f)") }
                        continue
                    }
                    try FileIO.rename(URL(fileURLWithPath: tmp), to: final)
                    try FileIO.syncDirectory(final.deletingLastPathComponent())
                }
                report()
            }
        }
        report(force: true)
    }

    func hashFile(_ fd: Int32) throws -> BlobName {
        var h = Blake2b(outputLength: 32)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: off_t = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, $0.count, offset) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw NodeError.failed("cannot read a fetched blob: \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            buffer.withUnsafeBytes { h.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            offset += off_t(n)
        }
        return BlobName(bytes: h.finalize())!
    }

    /// Where the vault keeps the pack `name` (its layout is the vault's).
    func packURL(_ vault: URL, _ name: BlobName) throws -> URL {
        guard let url = VaultRepository.packFileURL(in: vault, name: name.description) else {
            throw NodeError.failed("pack name \(name) is not 64 hex digits")
        }
        return url
    }
}

/// The link to the holder during the vault's part, opened again when it drops (the holder
/// restarted, a relay tunnel ended): at most 5 times, after 1, 2, 4, 8, 16 s.
extension NodeError {
    /// The kind an error from a restore step stands for, so one made of several keeps the first's
    /// exit code (a connect failure from `TandemNet` carries its code as a number).
    static func kind(of error: Error) -> NodeError.Kind {
        if let e = error as? NodeError { return e.kind }
        switch (error as? TandemError)?.exitCode {
        case TandemError.usageExitCode: return .invalidArgument
        case TandemError.unreachableExitCode: return .unavailable
        case TandemError.timeoutExitCode: return .timedOut
        case TandemError.nothingToActOnExitCode: return .nothingToActOn
        default: return .failed
        }
    }
}

/// The link to one holder during a restore, opened again when it closes: used by the restore's one
/// task only (not Sendable: the compiler keeps it there).
final class HolderConnection {
    private(set) var link: RestoreLink
    private let open: () async throws -> RestoreLink
    private var reconnects = 0

    init(open: @escaping () async throws -> RestoreLink) async throws {
        self.open = open
        link = try await open()
    }

    func reconnect() async throws {
        link.close()
        while true {
            reconnects += 1
            guard reconnects <= RestorePlan.resends else {
                throw NodeError.unavailable("holder \(link.address) closed the link and cannot be reached again: run restore again to resume")
            }
            try await Task.sleep(for: .seconds(1 << (reconnects - 1)))
            do {
                link = try await open()
                return
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                continue
            }
        }
    }

    func close() { link.close() }
}

import Foundation
import NIOConcurrencyHelpers
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemVault
import TandemNodeCore

/// Automatic pushes (Protocol/backup.md 4.1): after a change that matters (a vault commit, a
/// ledger entry, a friend), every holder whose copy is behind gets a push `delay` later, and every
/// holder at least once a day; a push that fails waits a backoff (1 min doubling to 1 h). The
/// decisions are `BackupSchedulePolicy`'s; this feeds it and carries out what it says.
///
/// What wakes it, as soon as a change happens (no polling): `NodeSignals` — `vaultChanged`, which
/// the vault posts after each operation on the open vault (an import, a removal, an album created
/// or renamed, a favourite, a move; the vault knows nothing of backups), and `friendsChanged` —; the
/// event bus's ledger, friend, challenge and vault events (a new ledger entry, a vault created or
/// its PIN changed); a push's end; a change of the schedule; and a timer for the next push due.
/// Each wake-up looks at the cheap signs of a change (the index files' sizes and times, the keys
/// file, the ledger's last entry, the friends and relays); when they moved, it computes exactly
/// which holders are behind: the blobs a push would name against those the holder's last push
/// named, and the kit's digest against the one it acknowledged. A look once an hour is the backstop
/// for a change that no signal names (a home relay added); the daily push is the one after that.
struct ScheduleState: Sendable {
    var policy = BackupSchedulePolicy(config: .default, holders: [])
    /// Automatic pushes started and not ended, with when they started.
    var started: [[UInt8]: Int64] = [:]
    var loaded = false
    /// The last signs of change seen (nil: not looked yet).
    var signs: [UInt8]?
}

extension BackupService {
    /// The scheduler's child tasks (run by `run()`): wake-ups from signals, events and a timer
    /// into one stream, and the loop that reads it.
    func runSchedule() async {
        let changes = signals.subscribe(keepingNewest: 1) { Self.signalMatters($0) }
        let eventStream = events.subscribe(since: nil)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in changes { self.scheduleWakeSink.yield(.changed) }
            }
            group.addTask {
                for await e in eventStream where Self.eventMatters(e.type) { self.scheduleWakeSink.yield(.changed) }
            }
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: Self.backstopLook)  // cancelled: the loop ends
                    self.scheduleWakeSink.yield(.look)
                }
            }
            group.addTask { await self.scheduleLoop() }
            await group.next()
            group.cancelAll()
        }
    }

    enum ScheduleWake: Sendable {
        /// Something that matters may have changed: look at once.
        case changed
        /// Time to look at the signs of change, and at what is due.
        case look
        /// A push ended or the schedule changed: what is due may differ.
        case due
    }

    /// How often the scheduler looks at the signs of change with no signal: a backstop only.
    nonisolated static let backstopLook: Duration = .seconds(3_600)

    /// The signals after which a holder's copy may be behind.
    nonisolated static func signalMatters(_ signal: NodeSignal) -> Bool {
        signal == .vaultChanged || signal == .friendsChanged
    }

    nonisolated static func eventMatters(_ type: String) -> Bool {
        type.hasPrefix("vault.") && type != "vault.locked" && type != "vault.unlocked" && type != "vault.pin_failed"
            || type == "friend.accepted" || type == "friend.removed" || type == "challenge.ended" || type.hasPrefix("ledger.")
            || type == "backup.offer.received"
    }

    private func scheduleLoop() async {
        await loadSchedule()
        var iterator = scheduleWakes.makeAsyncIterator()
        var force = true
        while !Task.isCancelled {
            await lookForChanges(force: force)
            await startDuePushes()
            // Sleep until the next due time or a wake-up.
            let wake = await nextWake(&iterator)
            guard let wake else { return }
            force = wake == .changed
        }
    }

    private func nextWake(_ iterator: inout AsyncStream<ScheduleWake>.Iterator) async -> ScheduleWake? {
        let now = Int64(clamping: wallClockMilliseconds())
        let next = schedule.withLockedValue { $0.policy.nextWakeMs() }
        if let next, next <= now { return .due }
        if let next {
            // A timer of our own for the next push due joins the wake-ups (re-armed each round,
            // at most an hour ahead, so a wall clock that jumps is noticed within the hour).
            let ms = min(next - now, 3_600_000)
            let sink = scheduleWakeSink
            return await withTaskGroup(of: ScheduleWake?.self) { group -> ScheduleWake? in
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(ms))  // cancelled when a wake-up came first
                    if !Task.isCancelled { sink.yield(.due) }
                    return nil
                }
                let w = await iterator.next()
                group.cancelAll()
                return w
            }
        }
        return await iterator.next()
    }

    // MARK: - State

    private func loadSchedule() async {
        let loaded = await NodeCore.run { () -> (BackupScheduleConfigRecord?, [BackupHolderScheduleRecord])? in
            self.health.read("read the backup schedule", or: nil) { (try self.store.backupScheduleConfig(), try self.store.backupHolderSchedules()) }
        }
        schedule.withLockedValue { s in
            let config = loaded?.0.map { BackupSchedulePolicy.Config(delayMs: $0.delayMs, daily: $0.daily) } ?? .default
            let rows = (loaded?.1 ?? []).filter { $0.holder.count == 32 }
            s.policy = BackupSchedulePolicy(config: config, holders: rows.map { r in
                BackupSchedulePolicy.Holder(key: Array(r.holder), dirtySinceMs: r.dirtySinceMs, failures: Int(clamping: max(r.failures, 0)),
                                            notBeforeMs: r.nextAttemptAtMs, lastPushAtMs: nil)
            })
            s.loaded = true
        }
    }

    /// Writes the holders' schedule rows (after each change).
    private func saveSchedule() async {
        let holders = schedule.withLockedValue { $0.policy.holders }
        await NodeCore.run {
            self.health.attempt("store the backup schedule") {
                try self.store.step { step in
                    let keep = Set(holders.map(\.key))
                    for r in try step.backupHolderSchedules() where !keep.contains(Array(r.holder)) {
                        try step.forgetBackupHolderSchedule(Array(r.holder))
                    }
                    for h in holders {
                        let old = try step.backupHolderSchedules().first { Array($0.holder) == h.key }
                        try step.saveBackupHolderSchedule(BackupHolderScheduleRecord(
                            holder: h.key, dirtySinceMs: h.dirtySinceMs, failures: Int64(h.failures), nextAttemptAtMs: h.notBeforeMs,
                            lastAttemptAtMs: old?.lastAttemptAtMs, lastError: old?.lastError, pushedGeneration: old?.pushedGeneration))
                    }
                }
            }
        }
    }

    // MARK: - Looking for changes

    /// Cheap signs that something a push carries changed.
    private func signsOfChange() async -> [UInt8] {
        var input: [UInt8] = []
        if let vaultDirectory {
            let fm = FileManager.default
            let indexDir = vaultDirectory.appendingPathComponent("index")
            let files = ((try? fm.contentsOfDirectory(atPath: indexDir.path)) ?? []).sorted().map { indexDir.appendingPathComponent($0) }  // none: no vault yet
                + [vaultDirectory.appendingPathComponent(VaultKeyFile.fileName)]
            for url in files {
                guard let a = try? fm.attributesOfItem(atPath: url.path) else { continue }  // gone meanwhile: not a sign
                input += Array(url.lastPathComponent.utf8)
                let size = (a[.size] as? NSNumber)?.int64Value ?? -1
                let mtime = (a[.modificationDate] as? Date).map { Int64($0.timeIntervalSince1970 * 1e9) } ?? -1
                withUnsafeBytes(of: (size, mtime)) { input += $0 }
            }
        }
        let storeSigns = await NodeCore.run { () -> [UInt8] in
            self.health.read("read the signs of a backup change", or: []) {
                var out: [UInt8] = []
                if let last = try self.store.lastLedgerHash() { out += last }
                for k in try self.store.friendKeys().sorted(by: { $0.lexicographicallyPrecedes($1) }) { out += k }
                for r in try self.store.relays() { out += r.publicKey }
                for h in try self.store.backupHolders() { out += Array(h.publicKey) }
                return out
            }
        }
        return Hash.blake2b(input + storeSigns, outputLength: 32)
    }

    /// Marks the holders whose copy is behind (when the signs changed, or `force`).
    private func lookForChanges(force: Bool) async {
        // A change is dated when the schedule woke for it, not after the reads below: a push is due
        // `delay` after that (backup.md 5.1).
        let nowMs = Int64(clamping: wallClockMilliseconds())
        let signs = await signsOfChange()
        let changed = schedule.withLockedValue { s -> Bool in
            defer { s.signs = signs }
            return s.signs != signs
        }
        // The holders are those that offered space now.
        let offers = await NodeCore.run { self.health.read("read backup offers", or: nil) { try self.receivedOffers() } }
        let pushes = await NodeCore.run {
            self.health.read("read backup pushes", or: []) { try self.store.lastBackupPushes() }
        }
        guard let offers else { return }
        let lastPush = Dictionary(pushes.map { (Array($0.record.holder), $0.record.atMs) }, uniquingKeysWith: { a, _ in a })
        var offeredAt: [[UInt8]: Int64] = [:]
        for (k, o) in offers { offeredAt[k] = o.receivedAtMs }
        schedule.withLockedValue { s in
            s.policy.setHolders(offers.map(\.0), lastPushAtMs: lastPush)
            // The daily push counts from the last push, or from the offer when there was none.
            var p = s.policy
            p = BackupSchedulePolicy(config: p.config, holders: p.holders.map { h in
                var h = h
                h.lastPushAtMs = lastPush[h.key] ?? offeredAt[h.key]
                return h
            })
            s.policy = p
        }
        guard changed || force else { return }
        guard let vaultDirectory, VaultKeyFile.exists(in: vaultDirectory) else { return }  // nothing to back up yet
        let behind: Set<[UInt8]>
        do {
            behind = try await holdersBehind(pushes)
        } catch {
            health.failed("see what the backups lack", error)
            return
        }
        guard !behind.isEmpty else { return }
        let marked = schedule.withLockedValue { s -> Bool in
            let before = s.policy
            s.policy.behind(behind, nowMs: nowMs)
            return before != s.policy
        }
        if marked { await saveSchedule() }
    }

    /// The holders whose last push named other blobs than a push would now, or whose kit differs.
    private func holdersBehind(_ pushes: [StoredBackupPush]) async throws -> Set<[UInt8]> {
        guard let vaultDirectory else { return [] }
        let local = try LocalBlobs.collect(vault: vaultDirectory)
        let names = local.blobs.map(\.name).sorted()
        var kitDigest: String?
        if kitProvider != nil, let dataDirectory {
            kitDigest = try await NodeCore.perform {
                try RecoveryKit.sealedKit(identity: self.identity, store: self.store, dataDirectory: dataDirectory, nowMs: 1)
                    .map { hexString($0.digest) }
            }
        }
        let holders = schedule.withLockedValue { $0.policy.holders.map(\.key) }
        var out = Set<[UInt8]>()
        for h in holders {
            guard let stored = pushes.first(where: { Array($0.record.holder) == h }), let record = PushedRecord(stored: stored) else {
                out.insert(h)  // never pushed: its copy is behind
                continue
            }
            if record.blobs.sorted() != names { out.insert(h); continue }
            if let kitDigest, record.kitDigest != kitDigest { out.insert(h) }
        }
        return out
    }

    // MARK: - Pushing

    private func startDuePushes() async {
        let nowMs = Int64(clamping: wallClockMilliseconds())
        let due = schedule.withLockedValue { s in s.policy.due(nowMs: nowMs).filter { s.started[$0] == nil } }
        guard !due.isEmpty, let vaultDirectory, VaultKeyFile.exists(in: vaultDirectory) else { return }
        for h in due where running.withLockedValue({ $0[h] == nil }) {
            schedule.withLockedValue { $0.started[h] = nowMs }
            await NodeCore.run {
                self.health.attempt("note an automatic push") {
                    try self.store.step { step in
                        var r = try step.backupHolderSchedules().first { Array($0.holder) == h } ?? BackupHolderScheduleRecord(holder: h)
                        r.lastAttemptAtMs = nowMs
                        try step.saveBackupHolderSchedule(r)
                    }
                }
            }
            do {
                _ = try await startPush(to: h, lanOnly: false, automatic: true)
            } catch {
                await pushEnded(h, .failure(error), startedAtMs: nowMs, automatic: true)
            }
        }
    }

    /// A push to `holder` that started at `startedAtMs` ended (automatic or not): the schedule learns it.
    func pushEnded(_ holder: [UInt8], _ result: Result<PushResult, Error>, startedAtMs: Int64, automatic: Bool) async {
        let nowMs = Int64(clamping: wallClockMilliseconds())
        let inPolicy = schedule.withLockedValue { s -> Bool in
            guard s.loaded else { return false }
            s.started[holder] = nil
            switch result {
            case .success:
                s.policy.pushed(holder, startedAtMs: startedAtMs, nowMs: nowMs)
            case .failure:
                // A push someone asked for that failed does not move the backoff; an automatic one does.
                if automatic { s.policy.failed(holder, nowMs: nowMs) }
            }
            return true
        }
        guard inPolicy else { return }
        let generation: Int64?
        let error: String?
        switch result {
        case .success(let r): (generation, error) = (r.generation, nil)
        case .failure(let e): (generation, error) = (nil, String("\(e)".prefix(500)))
        }
        await saveSchedule()
        await NodeCore.run {
            self.health.attempt("note a push's end") {
                try self.store.step { step in
                    var r = try step.backupHolderSchedules().first { Array($0.holder) == holder } ?? BackupHolderScheduleRecord(holder: holder)
                    if let generation { r.pushedGeneration = generation }
                    r.lastError = error
                    try step.saveBackupHolderSchedule(r)
                }
            }
        }
        scheduleWakeSink.yield(.due)
    }

    // MARK: - Control

    /// `backup schedule [--delay D] [--daily on|off]`: changes what is given, answers the schedule.
    func scheduleCommand(_ params: JSONValue) async throws -> JSONValue {
        let delay = params["delay_ms"]?.intValue
        let daily = params["daily"]?.boolValue
        if let delay, !(0...BackupSchedulePolicy.Config.maximumDelayMs).contains(delay) {
            throw NodeError.invalidArgument("--delay is 0 to 7 days")
        }
        if delay != nil || daily != nil {
            let config = schedule.withLockedValue { s -> BackupSchedulePolicy.Config in
                if let delay { s.policy.config.delayMs = delay }
                if let daily { s.policy.config.daily = daily }
                return s.policy.config
            }
            try await NodeCore.perform {
                try self.store.step { step in
                    try step.setBackupScheduleConfig(BackupScheduleConfigRecord(delayMs: config.delayMs, daily: config.daily))
                }
            }
            scheduleWakeSink.yield(.due)
        }
        let config = await NodeCore.run { self.health.read("read the backup schedule", or: nil) { try self.store.backupScheduleConfig() } }
        let c = config.map { BackupSchedulePolicy.Config(delayMs: $0.delayMs, daily: $0.daily) } ?? .default
        return ["delay_ms": .int(c.delayMs), "daily": .bool(c.daily)]
    }

    /// Per holder: how old its copy is, whether it is behind, the backoff (for `backup status`).
    func scheduleStatus() async -> [[UInt8]: [String: JSONValue]] {
        let rows = await NodeCore.run { self.health.read("read the backup schedule", or: []) { try self.store.backupHolderSchedules() } }
        let policy = schedule.withLockedValue { $0.policy }
        var out: [[UInt8]: [String: JSONValue]] = [:]
        for h in policy.holders {
            var o: [String: JSONValue] = ["failures": .int(Int64(h.failures))]
            o["behind_since"] = h.dirtySinceMs.map { JSONValue.iso($0) } ?? .null
            o["next_push"] = policy.dueAt(h).map { JSONValue.iso($0) } ?? .null
            if let r = rows.first(where: { Array($0.holder) == h.key }) {
                o["generation"] = r.pushedGeneration.map { .int($0) } ?? .null
                o["last_error"] = r.lastError.map { .string($0) } ?? .null
            }
            out[h.key] = o
        }
        return out
    }
}

import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import NodeBackup
import TandemProtocol

/// `tandem-bench backup`: a vault pushed to a friend's node over loopback, against the box-stream
/// bulk rate of `tandem-bench bulk` and against restic, all in the same run on the same data.
///
/// Two nodes run in this process (data dirs in the work directory, 127.0.0.1, no discovery): the
/// owner imports the data into its vault through its control socket, the holder offers space, and
/// the owner pushes. Figures: the push's MB/s (vault bytes over the push's wall time) as a share of
/// the bulk figure (goal ≥ 50 %); a whole-node restore from the holder against `restic restore`;
/// the bytes a second push with nothing changed sends, against the
/// bytes restic adds to its repository for an unchanged second backup of the same data.
struct BackupBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Vault push to a friend's node over loopback vs box-stream bulk (goal ≥ 50 %), second push and restore vs restic.")

    @Option(help: "MiB of incompressible data in the vault.") var sizeMib: Int = 1024
    @Option(help: "Where to put the data, nodes and repositories (default: a temporary directory).") var workDir: String?
    @Flag(help: "Indent the JSON.") var pretty = false

    static let shareGoal = 0.5

    func validate() throws {
        guard (16...65_536).contains(sizeMib) else { throw ValidationError("--size-mib must be between 16 and 65536") }
    }

    func run() async throws {
        warnIfDebug()
        let root = URL(fileURLWithPath: workDir ?? NSTemporaryDirectory()).appendingPathComponent("tandem-backup-bench-\(getpid())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let started = environment()
        let bytes = Int64(sizeMib) << 20
        let source = root.appendingPathComponent("data")
        say("backup: writing \(sizeMib) MiB of incompressible data…")
        try VaultBench.generate(kind: "incompressible", bytes: bytes, into: source)

        say("backup: box-stream bulk rate (tandem-bench bulk)…")
        let bulk = try await BulkBenchmark.run(BenchSettings())
        let bulkMBps = bulk.measured

        let logger = quietLogger("tandem-bench.backup")
        var config = LoopbackNodes.configuration()
        config.vault.keyParameters = .testing
        let (ownerKey, owner, ownerDir) = try LoopbackNodes.node("owner", in: root, configuration: config, logger: logger)
        let (holderKey, holder, holderDir) = try LoopbackNodes.node("holder", in: root, configuration: config, logger: logger)
        var object: [String: Any] = [:]
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await owner.run(signals: false) }
            tasks.addTask { try await holder.run(signals: false) }
            defer { tasks.cancelAll() }
            let holderAddress = try await holder.listener.boundAddress
            _ = try await owner.listener.boundAddress
            let ownerEvents = owner.eventBus.subscribe(since: nil)
            _ = try await owner.friends.request(holderKey.publicKey, message: "bench", address: ("127.0.0.1", holderAddress.port ?? 0))
            try await Self.waitUntil { (try? await holder.friends.accept(ownerKey.publicKey)) != nil }
            let o = try await ControlClient.connect(dataDirectory: ownerDir)
            let h = try await ControlClient.connect(dataDirectory: holderDir)
            _ = try await o.call(method: "vault.init", params: ["pin": "2580"], timeout: .seconds(120))
            say("backup: importing into the owner's vault…")
            for try await _ in o.stream(method: "vault.import", params: ["paths": .array([.string(source.path)]), "pin": "2580"]) {}
            // The holder's offer reaches the owner through its outbox.
            try await Self.waitUntil {
                (try? await h.call(method: "backup.offer", params: ["id": .string(NodeID(publicKey: ownerKey.publicKey).canonical),
                                                                  "quota_bytes": .int(bytes * 2)])) != nil
            }
            for await e in ownerEvents where e.type == "backup.offer.received" { break }
            let vaultBytes = VaultBench.directoryBytes(ownerDir.url.appendingPathComponent("vault/packs"))
                + VaultBench.directoryBytes(ownerDir.url.appendingPathComponent("vault/index"))

            say("backup: first push (\(vaultBytes / 1_000_000) MB of vault)…")
            let t0 = ContinuousClock.now
            let cpu0 = processCPUSeconds()
            let first = try await Self.push(o)
            let seconds = Self.seconds(ContinuousClock.now - t0)
            let pushCPU = processCPUSeconds() - cpu0
            let pushMBps = Double(vaultBytes) / 1e6 / seconds
            say("backup: second push, nothing changed…")
            let s0 = ContinuousClock.now
            let second = try await Self.push(o)
            let secondSeconds = Self.seconds(ContinuousClock.now - s0)

            // Automatic pushes (backup.md 4.1): a small import, then the push the node runs by
            // itself `delay` later; the delay from the import's event to the push's, by the node's clock.
            let delayMs: Int64 = 1_000
            say("backup: automatic push after a change (delay \(delayMs) ms), \(Self.autoRounds) rounds…")
            _ = try await o.call(method: "backup.schedule", params: ["delay_ms": .int(delayMs)])
            var autoDelays: [Double] = []
            var autoStarts: [Double] = []
            var autoPushes: [Double] = []
            for round in 0..<Self.autoRounds {
                let file = root.appendingPathComponent("auto-\(round).txt")
                try Data("a change after the backup, round \(round)\n".utf8).write(to: file)
                let stream = owner.eventBus.subscribe(since: nil)
                for try await _ in o.stream(method: "vault.import", params: ["paths": .array([.string(file.path)]), "pin": "2580"]) {}
                var importedAt: UInt64?
                var pushedAt: UInt64?
                for await e in stream {
                    if e.type == "vault.imported", importedAt == nil { importedAt = e.timeMs }
                    if e.type == "backup.pushed", e.fields["automatic"]?.boolValue == true, importedAt != nil {
                        pushedAt = e.timeMs
                        if let started = e.fields["started_at_ms"]?.intValue, let importedAt {
                            autoStarts.append(Double(started - Int64(importedAt)))
                            autoPushes.append(Double(Int64(e.timeMs) - started))
                        }
                        break
                    }
                    if e.type == "backup.push.failed" { throw BenchError("an automatic push failed: \(e.fields)") }
                }
                guard let importedAt, let pushedAt else { throw BenchError("no automatic push after the change") }
                autoDelays.append(Double(Int64(pushedAt) - Int64(importedAt)))
            }
            autoDelays.sort()
            let autoP50 = autoDelays[autoDelays.count / 2]
            autoStarts.sort()
            autoPushes.sort()
            // "One push": the median duration of the automatic pushes themselves (a small change:
            // one new pack, the index, the snapshot record).
            let onePushMs = autoPushes.isEmpty ? secondSeconds * 1000 : autoPushes[autoPushes.count / 2]
            let autoGoal = Double(delayMs) + onePushMs

            say("backup: restore of the whole node from the holder into a fresh data dir…")
            guard let codeText = try await o.call(method: "recovery.show", params: ["pin": "2580"])["code"]?.stringValue else {
                throw BenchError("the owner shows no recovery code")
            }
            let restoreDir = DataDirectory(url: root.appendingPathComponent("restored"))
            let r0 = ContinuousClock.now
            let rcpu0 = processCPUSeconds()
            let report = try await RestoreClient(group: MultiThreadedEventLoopGroup.singleton, logger: logger)
                .run(.init(holder: NodeID(publicKey: holderKey.publicKey), host: "127.0.0.1", port: holderAddress.port ?? 0,
                           code: try RecoveryCode(parsing: codeText), dataDirectory: restoreDir), events: { _ in })
            let restoreSeconds = Self.seconds(ContinuousClock.now - r0)
            let restoreCPU = processCPUSeconds() - rcpu0
            guard report.id == NodeID(publicKey: ownerKey.publicKey), report.bytesFetched >= vaultBytes / 2 else {
                throw BenchError("the restore brought back \(report.bytesFetched) bytes as \(report.id.short)")
            }
            let restoreMBps = Double(vaultBytes) / 1e6 / restoreSeconds

            say("backup: restic backup twice of the same data, then restic restore…")
            let restic = try Self.resticSecondBackup(source: source, root: root)
            let share = pushMBps / bulkMBps
            object = [
                "benchmark": "backup", "size_mib": sizeMib, "vault_bytes": vaultBytes,
                "push_mb_per_s": pushMBps, "push_seconds": seconds, "push_bytes_sent": first,
                "push_cpu_seconds": pushCPU, "restore_cpu_seconds": restoreCPU,
                "cpu_note": "CPU seconds of this process (both nodes, or the restoring client and the holder) over the step; "
                    + "against the wall time × cores it says whether the step was bound by CPU or by waiting",
                "bulk_mb_per_s": bulkMBps, "share_of_bulk": share, "share_goal": Self.shareGoal,
                "second_push_bytes_sent": second, "second_push_seconds": secondSeconds,
                "auto_push_delay_ms": delayMs, "auto_push_after_change_ms": autoDelays, "auto_push_after_change_p50_ms": autoP50,
                "auto_push_goal_ms": autoGoal, "auto_push_met": autoP50 <= autoGoal,
                "auto_push_start_after_change_ms": autoStarts, "auto_push_duration_ms": autoPushes,
                "auto_push_note": "from the import's event to the automatic push's end (both the node's clock); goal: the delay plus one push", "second_push_share_of_vault": Double(second) / Double(max(1, vaultBytes)),
                "restic_second_backup_bytes_added": restic.added, "restic_seconds": restic.seconds,
                "restore_mb_per_s": restoreMBps, "restore_seconds": restoreSeconds, "restic_restore_mb_per_s": restic.restoreMBps,
                "restore_ratio_to_restic": restoreMBps / restic.restoreMBps,
                "met": share >= Self.shareGoal && Double(second) < Double(vaultBytes) / 1000,
            ]
            say(String(format: "backup: push %.0f MB/s = %.0f %% of bulk %.0f MB/s (goal ≥ %.0f %%); second push %lld bytes "
                        + "(%.4f %% of the vault) vs restic's second backup adding %lld bytes",
                       pushMBps, 100 * share, bulkMBps, 100 * Self.shareGoal, second, 100 * Double(second) / Double(max(1, vaultBytes)),
                       restic.added))
            say(String(format: "backup: restore %.0f MB/s vs restic restore %.0f MB/s (×%.2f)", restoreMBps, restic.restoreMBps,
                       restoreMBps / restic.restoreMBps))
            say(String(format: "backup: automatic push %.0f ms after a change (p50 of %d; goal ≤ %.0f ms = delay + one push)",
                       autoP50, autoDelays.count, autoGoal))
        }
        object["environment"] = started.merging(["load_average_end": loadAverage()]) { a, _ in a }
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: options)) ?? Data("{}".utf8)
        output(String(decoding: data, as: UTF8.self))
    }

    static let autoRounds = 5

    static func push(_ client: ControlClient) async throws -> Int64 {
        var sent: Int64 = -1
        for try await item in client.stream(method: "backup.push", params: [:]) {
            if let r = item["result"] { sent = r["bytes_sent"]?.intValue ?? -1 }
        }
        guard sent >= 0 else { throw BenchError("the push gave no result") }
        return sent
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    /// Retries `body` every 100 ms for up to 30 s until it says true.
    static func waitUntil(_ body: () async -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if await body() { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("timed out waiting for the nodes")
    }

    /// Bytes restic's repository grows by for a second, unchanged backup of `source`.
    static func resticSecondBackup(source: URL, root: URL) throws -> (added: Int64, seconds: [Double], restoreMBps: Double) {
        guard let restic = Measured.which("restic") else {
            throw BenchError("restic is not installed (Debian: apt-get install restic; `make bench` installs it)")
        }
        let repo = root.appendingPathComponent("restic")
        var env = ProcessInfo.processInfo.environment
        env["RESTIC_PASSWORD"] = "tandem-bench"
        env["RESTIC_CACHE_DIR"] = root.appendingPathComponent("restic-cache").path
        _ = try Measured.run(restic, ["init", "-q", "-r", repo.path], environment: env)
        let a = try Measured.run(restic, ["backup", "-q", "-r", repo.path, source.path], environment: env)
        let before = VaultBench.directoryBytes(repo)
        let b = try Measured.run(restic, ["backup", "-q", "-r", repo.path, source.path], environment: env)
        let added = VaultBench.directoryBytes(repo) - before
        let target = root.appendingPathComponent("restic-restored")
        let r = try Measured.run(restic, ["restore", "-q", "-r", repo.path, "latest", "--target", target.path], environment: env)
        return (added, [a.seconds, b.seconds], Double(VaultBench.directoryBytes(target)) / 1e6 / r.seconds)
    }
}

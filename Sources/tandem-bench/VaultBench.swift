import ArgumentParser
import Foundation
import CSodium
import Sodium
import TandemNet
import TandemVault

#if canImport(Glibc)
import Glibc
#endif

/// `tandem-bench vault`: the vault's import against `restic backup` to a local repository, in the
/// same run on the same data: MB/s (goal ≥ 1.0× restic and ≥ 50 % of raw XChaCha20-Poly1305
/// encryption speed) and peak RSS (goal < 100 MB and not above restic's). Two data sets: random
/// bytes in a few large files (incompressible), and generated text documents (compressible). Each
/// side runs in its own process (ours: `tandem-bench vault-import`, the storage layer without a
/// node), measured from outside with wait4; each is run `--runs` times, alternating, and the best
/// time counts (the page cache holds the data for both).
struct VaultBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault",
        abstract: "Vault import vs restic backup on the same data (goal ≥ 1.0× restic, ≥ 50 % of raw AEAD, RSS < 100 MB).")

    @Option(help: "MiB of each data set.") var sizeMib: Int = 1024
    @Option(help: "Runs of each side per data set (the best counts).") var runs: Int = 2
    @Option(help: "Where to put the data and repositories (default: a temporary directory).") var workDir: String?
    @Flag(help: "Indent the JSON.") var pretty = false

    static let ratioGoal = 1.0
    static let aeadShareGoal = 0.5
    static let rssGoalMB = 100.0

    func validate() throws {
        guard (16...65_536).contains(sizeMib) else { throw ValidationError("--size-mib must be between 16 and 65536") }
        guard (1...10).contains(runs) else { throw ValidationError("--runs must be between 1 and 10") }
    }

    func run() async throws {
        warnIfDebug()
        guard let restic = Measured.which("restic") else {
            throw BenchError("restic is not installed (Debian: apt-get install restic; `make bench` installs it)")
        }
        let root = URL(fileURLWithPath: workDir ?? NSTemporaryDirectory()).appendingPathComponent("tandem-vault-bench-\(getpid())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let started = environment()
        let bytes = Int64(sizeMib) << 20

        say("vault: raw XChaCha20-Poly1305 speed…")
        let aead = Self.aeadMBps()
        say("vault: durable write speed of the work directory…")
        let disk = try Self.durableWriteMBps(bytes: bytes, in: root)
        var sets: [String: Any] = [:]
        var met = true
        var lines: [String] = []
        for kind in ["incompressible", "compressible"] {
            let source = root.appendingPathComponent("data-\(kind)")
            say("vault: writing \(sizeMib) MiB of \(kind) data…")
            try Self.generate(kind: kind, bytes: bytes, into: source)
            // The data just written is still being written back; neither side should import while
            // the disk is busy with it (the first one measured would pay for it).
            sync()
            var ours: [Measured.Result] = [], theirs: [Measured.Result] = []
            for run in 0..<runs {
                let vaultDir = root.appendingPathComponent("vault-\(kind)-\(run)")
                say("vault: \(kind) run \(run + 1)/\(runs): tandem import…")
                ours.append(try Measured.run(ChildProcess.ownExecutable(), ["vault-import", "--vault", vaultDir.path, "--source", source.path]))
                ours[ours.count - 1].storedBytes = Self.directoryBytes(vaultDir)
                try? FileManager.default.removeItem(at: vaultDir)
                let repo = root.appendingPathComponent("restic-\(kind)-\(run)")
                var env = ProcessInfo.processInfo.environment
                env["RESTIC_PASSWORD"] = "tandem-bench"
                env["RESTIC_CACHE_DIR"] = root.appendingPathComponent("restic-cache").path
                _ = try Measured.run(restic, ["init", "-q", "-r", repo.path], environment: env)
                say("vault: \(kind) run \(run + 1)/\(runs): restic backup…")
                theirs.append(try Measured.run(restic, ["backup", "-q", "-r", repo.path, source.path], environment: env))
                let stored = Self.directoryBytes(repo)
                try? FileManager.default.removeItem(at: repo)
                theirs[theirs.count - 1].storedBytes = stored
            }
            let best = ours.min { $0.seconds < $1.seconds }!, bestRestic = theirs.min { $0.seconds < $1.seconds }!
            let mbps = Double(bytes) / 1e6 / best.seconds, resticMBps = Double(bytes) / 1e6 / bestRestic.seconds
            let ratio = mbps / resticMBps
            let peakMB = Double(ours.map(\.maxRSSKiB).max() ?? 0) / 1024, resticPeakMB = Double(theirs.map(\.maxRSSKiB).max() ?? 0) / 1024
            let setMet = ratio >= Self.ratioGoal && mbps >= Self.aeadShareGoal * aead && peakMB < Self.rssGoalMB && peakMB <= resticPeakMB
            met = met && setMet
            sets[kind] = [
                "tandem_mb_per_s": mbps, "restic_mb_per_s": resticMBps, "ratio": ratio, "aead_share": mbps / aead,
                "share_of_durable_write": mbps / disk,
                "tandem_peak_rss_mb": peakMB, "restic_peak_rss_mb": resticPeakMB,
                "tandem_seconds": ours.map(\.seconds), "restic_seconds": theirs.map(\.seconds),
                "tandem_stored_bytes": ours.map(\.storedBytes).max() ?? 0, "restic_stored_bytes": theirs.map(\.storedBytes).max() ?? 0,
                "met": setMet,
            ] as [String: Any]
            lines.append(String(format: "%@ %.0f MB/s vs restic %.0f (×%.2f, goal ≥ %.1f), %.0f %% of raw AEAD; RSS %.0f MB vs restic %.0f",
                                kind, mbps, resticMBps, ratio, Self.ratioGoal, 100 * mbps / aead, peakMB, resticPeakMB))
            try? FileManager.default.removeItem(at: source)
        }
        say("vault: " + lines.joined(separator: "; ") + String(format: "; raw AEAD %.0f MB/s; durable writes %.0f MB/s: %@", aead, disk,
                                                                 met ? "OK" : "MISSED"))
        var object: [String: Any] = ["benchmark": "vault", "size_mib": sizeMib, "runs": runs, "raw_aead_mb_per_s": aead,
                                     "durable_write_mb_per_s": disk,
                                     "durable_write_note": "one new file of size_mib written in 1 MiB blocks and fsynced once, in the work "
                                         + "directory (what `dd conv=fsync` measures): an import stores at least the data it imports and "
                                         + "must be durable when it returns, so it cannot run faster than this; when it is below "
                                         + "aead_share_goal × raw_aead_mb_per_s the AEAD share goal cannot be met on this disk",
                                     "ratio_goal": Self.ratioGoal, "aead_share_goal": Self.aeadShareGoal, "rss_goal_mb": Self.rssGoalMB,
                                     "met": met]
        object.merge(sets) { a, _ in a }
        object["environment"] = started.merging(["load_average_end": loadAverage()]) { a, _ in a }
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: options)) ?? Data("{}".utf8)
        output(String(decoding: data, as: UTF8.self))
    }

    /// MB/s of writing `bytes` to a new file in `directory` (1 MiB writes, one fsync at the end).
    static func durableWriteMBps(bytes: Int64, in directory: URL) throws -> Double {
        let path = directory.appendingPathComponent("durable-write-probe").path
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw BenchError("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd); unlink(path) }
        var block = [UInt8](repeating: 0, count: 1 << 20)
        for i in block.indices { block[i] = UInt8(truncatingIfNeeded: i &* 2_654_435_761 >> 13) }
        let start = ContinuousClock.now
        var written: Int64 = 0
        while written < bytes {
            let n = block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw BenchError("cannot write \(path): \(String(cString: strerror(errno)))") }
            written += Int64(n)
        }
        guard fsync(fd) == 0 else { throw BenchError("cannot fsync \(path): \(String(cString: strerror(errno)))") }
        let d = ContinuousClock.now - start
        return Double(written) / 1e6 / (Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
    }

    /// XChaCha20-Poly1305 (what the vault seals chunks with) over 1 MiB buffers, in MB/s.
    static func aeadMBps() -> Double {
        var buffer = Sodium.randomBytes(1 << 20)
        let key = Sodium.randomBytes(32), nonce = Sodium.randomBytes(24)
        var tag = [UInt8](repeating: 0, count: 16)
        let clock = ContinuousClock()
        var rounds = 0
        let start = clock.now
        while clock.now - start < .seconds(1) || rounds < 64 {
            buffer.withUnsafeMutableBytes { b in
                tag.withUnsafeMutableBytes { t in
                    _ = crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
                        b.baseAddress!.assumingMemoryBound(to: UInt8.self), t.baseAddress!.assumingMemoryBound(to: UInt8.self), nil,
                        b.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(b.count), nil, 0, nil, nonce, key)
                }
            }
            rounds += 1
        }
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(rounds << 20) / 1e6 / seconds
    }

    /// Incompressible: random bytes in 64 MiB files. Compressible: text documents of 256 KiB to
    /// 2 MiB made of words (zstd shrinks them about 3×), like a folder of notes and exports.
    static func generate(kind: String, bytes: Int64, into dir: URL) throws {
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var written: Int64 = 0
        var n = 0
        var rng = SplitMix(seed: 42)
        let words = ["focus", "together", "friend", "ledger", "challenge", "minutes", "quiet", "morning", "study", "chapter",
                     "notes", "draft", "meeting", "review", "project", "deadline", "coffee", "window", "garden", "evening",
                     "the", "a", "and", "of", "to", "in", "we", "it", "is", "was"]
        while written < bytes {
            let size = kind == "incompressible" ? min(64 << 20, bytes - written)
                : min(Int64(256 << 10) + Int64(rng.next() % UInt64(1_792 << 10)), bytes - written)
            let url = dir.appendingPathComponent(String(format: "%@-%05d.%@", kind == "incompressible" ? "blob" : "note", n,
                                                        kind == "incompressible" ? "bin" : "txt"))
            guard let handle = FileManager.default.createFile(atPath: url.path, contents: nil) ? FileHandle(forWritingAtPath: url.path) : nil else {
                throw BenchError("cannot write \(url.path)")
            }
            var left = size
            while left > 0 {
                let part = Int(min(left, 4 << 20))
                var block: [UInt8]
                if kind == "incompressible" {
                    block = Sodium.randomBytes(part)
                } else {
                    block = []
                    block.reserveCapacity(part + 16)
                    while block.count < part {
                        block += Array(words[Int(rng.next() % UInt64(words.count))].utf8)
                        block.append(rng.next() % 12 == 0 ? 0x0A : 0x20)
                        if rng.next() % 50 == 0 { block += Array(String(rng.next() % 100_000).utf8) + [0x20] }
                    }
                    block.removeLast(block.count - part)
                }
                handle.write(Data(block))
                left -= Int64(part)
            }
            try handle.close()
            written += size
            n += 1
        }
    }

    static func directoryBytes(_ dir: URL) -> Int64 {
        var total: Int64 = 0
        guard let e = FileManager.default.enumerator(at: dir, includingPropertiesForKeys: [.fileSizeKey]) else { return 0 }
        for case let url as URL in e {
            total += Int64((try? url.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0)
        }
        return total
    }
}

struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A process run to the end and measured from outside: wall time and peak RSS (wait4).
enum Measured {
    struct Result {
        var seconds: Double
        var maxRSSKiB: Int
        var storedBytes: Int64 = 0
    }

    static func which(_ name: String) -> String? {
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let p = "\(dir)/\(name)"
            if access(p, X_OK) == 0 { return p }
        }
        return nil
    }

    static func run(_ path: String, _ arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Result {
        var pid: pid_t = 0
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        let start = ContinuousClock.now
        let rc = posix_spawn(&pid, path, &actions, nil, argv, envp)
        guard rc == 0 else { throw BenchError("cannot start \(path): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        var usage = rusage()
        while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
        let elapsed = ContinuousClock.now - start
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw BenchError("\(path) \(arguments.first ?? "") failed (status \(status))")
        }
        return Result(seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
                      maxRSSKiB: Int(usage.ru_maxrss))
    }
}

/// `tandem-bench vault-import`: imports a directory into a new vault (the storage layer, no
/// node), for `tandem-bench vault` to measure from outside.
struct VaultImportChild: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "vault-import", shouldDisplay: false)
    @Option var vault: String
    @Option var source: String

    func run() throws {
        let dir = URL(fileURLWithPath: vault)
        let repository = try VaultRepository.create(at: dir, masterKey: VaultKeys.randomMasterKey())
        let names = try FileManager.default.contentsOfDirectory(atPath: source).sorted()
        let sources = names.map {
            VaultRepository.ImportSource(url: URL(fileURLWithPath: source).appendingPathComponent($0), name: $0, type: .document,
                                         album: nil, createdAtMs: nil)
        }
        _ = try repository.importFiles(sources, nowMs: 0, progress: { _, _ in }, committed: { _ in })
    }
}

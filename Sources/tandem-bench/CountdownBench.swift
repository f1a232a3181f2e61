import ArgumentParser
import Foundation
import Logging
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// `tandem-bench countdown`: how closely two nodes whose wall clocks disagree by 5 s start and end
/// a shared challenge, and how fast an early exit reaches the partner.
///
/// Two real `tandem node` processes on loopback, friends: an anchor on the true clock, and a
/// partner whose wall clock libfaketime shifts by +N s in one run and −N s in the next (the partner
/// is restarted on the same data directory and port in between; CLOCK_MONOTONIC is left alone).
/// Who invites alternates every two runs, so both the anchor's and a shifted clock serve as the
/// timebase. Every `challenge.started` / `challenge.ended` event carries `mono_us` (CLOCK_MONOTONIC
/// µs, one clock for every process on the machine): the skew of a run is the difference between the
/// two nodes' values. In the extra quit runs one side quits mid-challenge; the notice latency is
/// `challenge.partner.quit` minus `challenge.quit` (both `mono_us`).
///
/// Same-run baselines: how late a plain 2 ms sleep wakes up here and how far apart two such
/// wake-ups are (the timer noise two processes add), the round trip of a signed ping on a secure
/// loopback link, and one synced 4 KiB write (each step of a quit is stored with `synchronous =
/// FULL` before it is announced). The report also gives each node's CPU use: libfaketime 0.9.10
/// shifts the absolute CLOCK_MONOTONIC deadlines libdispatch gives `timerfd_settime` even with
/// FAKETIME_DONT_FAKE_MONOTONIC=1, so a faked node's dispatch manager thread spins on timers that
/// fire early (about one core), which is why only one shifted node runs at a time.
struct CountdownBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "countdown",
        abstract: "Start/end skew of two-node challenges with wall clocks 5 s apart (libfaketime), and quit-notice latency.")

    @Option(help: "Challenges run to the end.") var runs: Int = 20
    @Option(help: "Extra challenges in which one side quits mid-way (for the notice latency).") var quitRuns: Int = 10
    @Option(help: "Length of each challenge (ms).") var durationMs: Int64 = 2000
    @Option(help: "Seconds the partner's wall clock is ahead of (even runs) and behind (odd runs) the anchor's; 0 for a control run without libfaketime.")
    var shift: Int = 5
    @Option(help: "Goal for the p99 start and end skew (ms).") var goalMs: Double = 5
    @Option(help: ArgumentHelp("The tandem binary (default: next to tandem-bench).", valueName: "path")) var tandem: String?
    @Option(help: ArgumentHelp("The faketime wrapper (apt package faketime).", valueName: "path")) var faketime = "/usr/bin/faketime"
    @Flag(help: "Keep the nodes' data directories and logs (they are kept anyway when a run fails).") var keep = false

    func validate() throws {
        guard (1...1000).contains(runs) else { throw ValidationError("--runs must be between 1 and 1000") }
        guard (0...1000).contains(quitRuns) else { throw ValidationError("--quit-runs must be between 0 and 1000") }
        guard (1000...60_000).contains(durationMs) else { throw ValidationError("--duration-ms must be between 1000 and 60000") }
        guard (0...3600).contains(shift) else { throw ValidationError("--shift must be between 0 and 3600 seconds") }
    }

    func run() async throws {
        warnIfDebug()
        let binary = tandem.map { URL(fileURLWithPath: $0).path }
            ?? URL(fileURLWithPath: ChildProcess.ownExecutable()).deletingLastPathComponent().appendingPathComponent("tandem").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw ValidationError("no tandem binary at \(binary) (build it: swift build -c release --product tandem)")
        }
        guard shift == 0 || FileManager.default.isExecutableFile(atPath: faketime) else {
            throw ValidationError("no faketime at \(faketime) (apt-get install faketime)")
        }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-countdown-\(getpid())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let anchor = try BenchNode(name: "anchor", tandem: binary, faketime: faketime, root: root, port: try Self.freeTCPPort())
        let partner = try BenchNode(name: "partner", tandem: binary, faketime: faketime, root: root, port: try Self.freeTCPPort())
        var succeeded = false
        defer {
            anchor.stop()
            partner.stop()
            if succeeded && !keep {
                try? FileManager.default.removeItem(at: root)
            } else {
                say("countdown: data directories and logs kept in \(root.path)")
            }
        }
        let began = monotonicMicros()
        try await anchor.start(shift: 0)
        try await partner.start(shift: shift)
        try await befriend(anchor, partner)
        say("countdown: anchor and partner (wall clock ±\(shift) s) are friends; \(runs) runs + \(quitRuns) quit runs of \(durationMs) ms")

        let sleepBefore = Self.sleepOvershoots(count: 200)
        var results: [RunResult] = []
        for i in 0..<(runs + quitRuns) {
            // Independent bits: the partner's shift, who invites, and (quit runs) who quits.
            let wanted = i % 2 == 0 ? shift : -shift
            if partner.shift != wanted {
                let mark = anchor.feed.count
                try await partner.restart(shift: wanted)
                _ = try await anchor.feed.first("peer.online", ["id": partner.id], after: mark, timeout: 20)
            }
            let (inviter, invitee) = (i / 2) % 2 == 0 ? (anchor, partner) : (partner, anchor)
            let quitter: BenchNode? = i < runs ? nil : ((i - runs) / 4) % 2 == 0 ? invitee : inviter
            var r = try await challenge(run: i, inviter: inviter, invitee: invitee, quitter: quitter)
            r.shift = wanted
            results.append(r)
            say(String(format: "countdown: run %2d  partner %+ds  %@ invites  start skew %.3f ms  end skew %.3f ms  offset error %.0f µs%@",
                       i + 1, wanted, inviter.name, r.startSkewMs, r.endSkewMs, r.offsetErrorUs,
                       r.quitLatencyMs.map { String(format: "  quit notice %.3f ms", $0) } ?? ""))
        }
        let sleepAfter = Self.sleepOvershoots(count: 200)
        let pings = try await Self.pingRoundTrips(to: anchor, count: 50)
        let syncs = try Self.syncedWrites(in: root, count: 50)
        let idleSyncs = try Self.syncedWrites(in: root, count: 30, idleMs: 20)

        var ledgers: [String: Any] = [:]
        var ledgersOK = true
        for n in [anchor, partner] {
            let v = try await n.call("ledger.verify")
            let ok = v["ok"]?.boolValue ?? false
            ledgersOK = ledgersOK && ok
            ledgers[n.name] = ["entries": v["entries"]?.intValue ?? 0, "verified": ok]
        }
        let wallSeconds = Double(monotonicMicros() - began) / 1e6
        let cpu: [String: Any] = [
            "wall_s": wallSeconds,
            "anchor_cpu_s": anchor.cpuSeconds,
            "partner_cpu_s": partner.cpuSeconds,
            "partner_cpu_share": partner.cpuSeconds / wallSeconds,
        ]

        let start = Percentiles(results.map(\.startSkewMs)), end = Percentiles(results.map(\.endSkewMs))
        let quit = Percentiles(results.compactMap(\.quitLatencyMs))
        // By the partner's shift: libfaketime makes a node whose clock runs ahead spin a core on
        // early timers (see above), which slows everything it does on two cores; the runs with
        // the clock behind are the node's own figure.
        var quitByShift: [String: Any] = [:]
        for s in Set(results.map(\.shift)).sorted() {
            let q = results.filter { $0.shift == s }.compactMap(\.quitLatencyMs)
            if !q.isEmpty { quitByShift[String(format: "%+d", s)] = Percentiles(q).json }
        }
        let offsetError = Percentiles(results.map(\.offsetErrorUs))
        let sleeps = sleepBefore + sleepAfter
        let overshoot = Percentiles(sleeps)
        // Two timers set for the same instant in two processes: how far apart they fire.
        let pairs = Percentiles(stride(from: 0, to: sleeps.count - 1, by: 2).map { abs(sleeps[$0] - sleeps[$0 + 1]) })
        let ping = Percentiles(pings), sync = Percentiles(syncs), idleSync = Percentiles(idleSyncs)
        let consistent = results.allSatisfy(\.consistent)
        let pass = start.p99 <= goalMs && end.p99 <= goalMs && consistent && ledgersOK
        let report: [String: Any] = [
            "benchmark": "countdown",
            "runs": results.count,
            "completed_runs": runs,
            "quit_runs": quitRuns,
            "duration_ms": durationMs,
            "clock_shift_s": shift,
            "start_skew_ms": start.json,
            "end_skew_ms": end.json,
            "quit_notice_latency_ms": quitRuns > 0 ? quit.json : NSNull(),
            "quit_notice_latency_ms_by_partner_shift_s": quitByShift,
            "offset_estimate_error_us": offsetError.json,
            "goal_p99_ms": goalMs,
            "pass": pass,
            "results_as_expected": consistent,
            "ledgers": ledgers,
            "cpu": cpu,
            "baseline_sleep_2ms_overshoot_ms": overshoot.json,
            "baseline_timer_pair_difference_ms": pairs.json,
            "baseline_signed_ping_rtt_ms": ping.json,
            "baseline_synced_write_ms": sync.json,
            "baseline_synced_write_after_20ms_idle_ms": idleSync.json,
            "ratio_synced_write_after_idle_p50_to_ping_rtt_p50": idleSync.p50 / max(ping.p50, 1e-6),
            "ratio_start_skew_p99_to_timer_pair_p99": start.p99 / max(pairs.p99, 1e-6),
            "ratio_end_skew_p99_to_timer_pair_p99": end.p99 / max(pairs.p99, 1e-6),
            "ratio_quit_latency_p50_to_ping_rtt_p50": quitRuns > 0 ? quit.p50 / max(ping.p50, 1e-6) : NSNull(),
            "ratio_quit_latency_p50_to_synced_write_p50": quitRuns > 0 ? quit.p50 / max(sync.p50, 1e-6) : NSNull(),
            "environment": environment().merging(["load_average_end": loadAverage()]) { a, _ in a },
            "note": "skew = |mono_us(A) - mono_us(B)| of challenge.started / challenge.ended; quit latency = partner.quit - quit (mono_us); the partner's wall clock is shifted by +clock_shift_s and -clock_shift_s in alternate runs with libfaketime, the monotonic clock is not",
        ]
        let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
        print(String(decoding: data, as: UTF8.self))
        say(String(format: "countdown: start skew p50 %.3f / p99 %.3f ms, end skew p50 %.3f / p99 %.3f ms, quit notice p50 %.3f / p99 %.3f ms; %@ (goal p99 ≤ %.0f ms)",
                   start.p50, start.p99, end.p50, end.p99, quit.p50, quit.p99, pass ? "pass" : "FAIL", goalMs))
        succeeded = true
    }

    struct RunResult {
        var startSkewMs: Double
        var endSkewMs: Double
        var quitLatencyMs: Double?
        /// The partner's clock shift in this run (s).
        var shift = 0
        /// |measured offset − the true shift| on the invitee (µs).
        var offsetErrorUs: Double
        /// Both nodes ended with the results the run called for, and both committed it to their ledger.
        var consistent: Bool
    }

    /// The anchor asks, the partner accepts; returns once the anchor sees the acceptance.
    func befriend(_ anchor: BenchNode, _ partner: BenchNode) async throws {
        _ = try await anchor.call("friend.request", ["id": .string(partner.id), "addr": .string("127.0.0.1:\(partner.port)"),
                                                     "message": "countdown bench"])
        _ = try await partner.feed.first("friend.request.received", ["id": anchor.id], timeout: 20)
        _ = try await partner.call("friend.accept", ["id": .string(anchor.id)])
        _ = try await anchor.feed.first("friend.accepted", ["id": partner.id], timeout: 20)
    }

    /// One challenge: invite, accept, both starts and ends (and a quit), both ledger entries.
    func challenge(run: Int, inviter: BenchNode, invitee: BenchNode, quitter: BenchNode?) async throws -> RunResult {
        let wait = Double(durationMs) / 1000 + 20
        let invite = try await inviter.call("challenge.invite", ["ids": [.string(invitee.id)], "duration_ms": .int(durationMs),
                                                                 "message": .string("bench run \(run + 1)")])
        guard let cid = invite["id"]?.stringValue else { throw TandemBenchError("challenge.invite returned no id") }
        _ = try await invitee.feed.first("challenge.invited", ["id": cid], timeout: wait)
        _ = try await invitee.call("challenge.accept", ["id": .string(cid)])
        let startA = try await inviter.feed.first("challenge.started", ["id": cid], timeout: wait)
        let startB = try await invitee.feed.first("challenge.started", ["id": cid], timeout: wait)

        var quitLatency: Double?
        if let quitter {
            let other = quitter === inviter ? invitee : inviter
            try await Task.sleep(for: .milliseconds(durationMs / 4))
            _ = try await quitter.call("challenge.quit", ["id": .string(cid), "reason": "bench"])
            let q = try await quitter.feed.first("challenge.quit", ["id": cid], timeout: wait)
            let pq = try await other.feed.first("challenge.partner.quit", ["id": cid], timeout: wait)
            quitLatency = try Double(pq.mono() - q.mono()) / 1000
        }
        let endA = try await inviter.feed.first("challenge.ended", ["id": cid], timeout: wait)
        let endB = try await invitee.feed.first("challenge.ended", ["id": cid], timeout: wait)
        _ = try await inviter.feed.first("ledger.appended", ["challenge_id": cid], timeout: wait)
        _ = try await invitee.feed.first("ledger.appended", ["challenge_id": cid], timeout: wait)

        func expected(_ n: BenchNode) -> String { n === quitter ? "quit" : "completed" }
        let consistent = endA.fields["result"]?.stringValue == expected(inviter) && endB.fields["result"]?.stringValue == expected(invitee)
        // The invitee's estimate of (inviter's clock − its own) against the shift libfaketime applies.
        let trueOffsetUs = Int64(inviter.shift - invitee.shift) * 1_000_000
        let measured = startB.fields["offset_us"]?.intValue ?? 0
        return RunResult(startSkewMs: Double(abs(try startA.mono() - startB.mono())) / 1000,
                         endSkewMs: Double(abs(try endA.mono() - endB.mono())) / 1000,
                         quitLatencyMs: quitLatency,
                         offsetErrorUs: Double(abs(measured - trueOffsetUs)),
                         consistent: consistent)
    }

    /// How late a plain 2 ms sleep wakes up on this machine now (ms), `count` times.
    static func sleepOvershoots(count: Int) -> [Double] {
        (0..<count).map { _ in
            let t0 = monotonicMicros()
            usleep(2000)
            return Double(monotonicMicros() - t0 - 2000) / 1000
        }
    }

    /// How long a 4 KiB write followed by fdatasync takes in `directory` (ms), `count` times: the
    /// floor under every step a node stores before it tells anyone. `idleMs`: the disk is left idle
    /// that long before each write, as between the steps of a flow (on this project's VM an
    /// fdatasync after 20 ms of idleness costs 4–5× one that follows another at once).
    static func syncedWrites(in directory: URL, count: Int, idleMs: Int = 0) throws -> [Double] {
        let path = directory.appendingPathComponent("sync-probe").path
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw TandemBenchError("cannot open \(path)") }
        defer { close(fd); unlink(path) }
        let block = [UInt8](repeating: 0x5a, count: 4096)
        return try (0..<count).map { i in
            if idleMs > 0 { usleep(UInt32(idleMs) * 1000) }
            let t0 = monotonicMicros()
            guard pwrite(fd, block, block.count, off_t(i % 16) * 4096) == block.count, fdatasync(fd) == 0 else {
                throw TandemBenchError("cannot write \(path)")
            }
            return Double(monotonicMicros() - t0) / 1000
        }
    }

    /// A TCP port on 127.0.0.1 that was free a moment ago (the partner keeps it across restarts).
    static func freeTCPPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TandemBenchError("cannot open a TCP socket") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in bind(fd, sa, len) == 0 && getsockname(fd, sa, &len) == 0 }
        }
        guard ok else { throw TandemBenchError("cannot find a free TCP port") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    /// Signed ping/pong round trips (ms) from a throwaway in-process node to `node`, over one
    /// secure loopback link; the first few (link warm-up) are left out.
    static func pingRoundTrips(to node: BenchNode, count: Int) async throws -> [Double] {
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let probe = try NodeRuntime(identity: SigningKeyPair.generate(), configuration: config, logger: logger)
        guard let remote = NodeID(node.id) else { throw TandemBenchError("unreadable node id \(node.id)") }
        let (link, waiter) = try await probe.connect(host: "127.0.0.1", port: node.port, to: remote)
        defer { link.close() }
        var times: [Double] = []
        for i in 0..<(count + 3) {
            let (rtt, _) = try await waiter.ping()
            if i >= 3 { times.append(rtt.milliseconds) }
        }
        return times
    }
}

/// One `tandem node` child process on loopback (no discovery) on a fixed port, its wall clock
/// shifted by `shift` seconds through the faketime wrapper when not 0, with a control connection
/// and its events. It can be restarted with another shift on the same data directory.
///
/// The wrapper is used rather than LD_PRELOAD alone: a preloaded libfaketime that creates its
/// shared memory calls setenv() before the Swift runtime reads the arguments (which it finds next
/// to the environment), and the node would start without them. Under the wrapper the child finds
/// FAKETIME_SHARED already set.
final class BenchNode: @unchecked Sendable {
    let name: String
    let tandem: String
    let faketime: String
    let root: URL
    let port: Int
    let directory: DataDirectory
    private(set) var shift = 0
    private(set) var process: Process?
    private(set) var client: ControlClient?
    private(set) var feed: EventFeed!
    private(set) var id = ""
    /// CPU time of the node processes that have exited so far (s).
    private var cpuOfStopped = 0.0

    init(name: String, tandem: String, faketime: String, root: URL, port: Int) throws {
        self.name = name
        self.tandem = tandem
        self.faketime = faketime
        self.root = root
        self.port = port
        let dir = root.appendingPathComponent(name)
        directory = DataDirectory(explicit: dir.path)
        try sh(tandem, "init", "--data-dir", dir.path)
    }

    /// Launches the node, waits for its control socket, learns its ID, follows its events.
    func start(shift: Int) async throws {
        self.shift = shift
        let p = Process()
        let nodeArgs = [tandem, "node", "--data-dir", directory.url.path, "--listen", "127.0.0.1:\(port)", "--no-discovery",
                        "--log-level", "notice"]
        var env = ProcessInfo.processInfo.environment
        env["TANDEM_NO_DISCOVERY"] = "1"
        if shift == 0 {
            p.executableURL = URL(fileURLWithPath: tandem)
            p.arguments = Array(nodeArgs.dropFirst())
        } else {
            p.executableURL = URL(fileURLWithPath: faketime)
            p.arguments = ["-f", shift > 0 ? "+\(shift)s" : "\(shift)s"] + nodeArgs
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        }
        p.environment = env
        let log = root.appendingPathComponent("\(name).log")
        if !FileManager.default.fileExists(atPath: log.path) {
            guard FileManager.default.createFile(atPath: log.path, contents: nil) else { throw TandemBenchError("cannot create \(log.path)") }
        }
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        p.standardError = handle
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        process = p

        let deadline = monotonicMicros() + 30_000_000
        while client == nil {
            guard p.isRunning else { throw TandemBenchError("node \(name) exited (see \(log.path))") }
            if let c = try? await ControlClient.connect(dataDirectory: directory) {
                client = c
            } else {
                guard monotonicMicros() < deadline else { throw TandemBenchError("node \(name) has no control socket after 30 s") }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let status = try await call("node.status")
        id = status["id"]?.stringValue ?? ""
        guard !id.isEmpty else { throw TandemBenchError("node \(name) reports no ID") }
        feed = EventFeed(name: name, client: client!)
    }

    func restart(shift: Int) async throws {
        stop()
        try await start(shift: shift)
    }

    func call(_ method: String, _ params: JSONValue = [:]) async throws -> JSONValue {
        guard let client else { throw TandemBenchError("node \(name) is not connected") }
        return try await client.call(method: method, params: params)
    }

    /// The node's own pid (under the wrapper: the wrapper's child).
    var nodePID: Int32? {
        guard let p = process, p.isRunning else { return nil }
        if shift == 0 { return p.processIdentifier }
        let text = (try? String(contentsOfFile: "/proc/\(p.processIdentifier)/task/\(p.processIdentifier)/children", encoding: .utf8)) ?? ""
        return text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }.first
    }

    /// CPU time (user + system, s) of every run of this node so far.
    var cpuSeconds: Double { cpuOfStopped + (nodePID.map(Self.cpuSeconds) ?? 0) }

    static func cpuSeconds(_ pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        // Fields after the command name: state is field 3, utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// SIGTERM to the node (a graceful stop; under the wrapper, to its child, after which the
    /// wrapper exits and removes its shared memory); SIGKILL after 10 s.
    func stop() {
        client?.close()
        client = nil
        guard let p = process, p.isRunning else { return }
        let target = nodePID ?? p.processIdentifier
        cpuOfStopped += Self.cpuSeconds(target)
        kill(target, SIGTERM)
        let deadline = monotonicMicros() + 10_000_000
        while p.isRunning, monotonicMicros() < deadline { usleep(5_000) }
        if p.isRunning {
            kill(target, SIGKILL)
            if target != p.processIdentifier { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
        }
    }
}

/// The challenge, ledger and friend events of one node as they arrive, kept for waiting on.
final class EventFeed: @unchecked Sendable {
    let name: String
    private let lock = NSLock()
    private var events: [NodeEvent] = []
    private var failure: Error?

    init(name: String, client: ControlClient) {
        self.name = name
        let stream = client.stream(method: "events.subscribe",
                                   params: ["since": .int(0), "types": ["challenge.*", "ledger.*", "friend.*", "peer.*"]])
        Task { [weak self] in
            do {
                for try await item in stream {
                    guard let e = NodeEvent(json: item) else { continue }
                    self?.lock.withLock { self?.events.append(e) }
                }
            } catch {
                self?.lock.withLock { self?.failure = error }
            }
        }
    }

    /// How many events arrived so far (a mark for `first(…, after:)`).
    var count: Int { lock.withLock { events.count } }

    /// The first event of `type` whose fields include `match` (as text), among those after the
    /// first `after`, waiting up to `timeout` s.
    func first(_ type: String, _ match: [String: String], after: Int = 0, timeout: Double) async throws -> NodeEvent {
        let deadline = monotonicMicros() + Int64(timeout * 1e6)
        while true {
            let (hit, failure) = lock.withLock {
                (events.dropFirst(after).first { e in e.type == type && match.allSatisfy { e.fields[$0.key]?.stringValue == $0.value } },
                 self.failure)
            }
            if let hit { return hit }
            if let failure { throw TandemBenchError("the event stream of \(name) ended: \(failure)") }
            guard monotonicMicros() < deadline else {
                throw TandemBenchError("\(name): no \(type) \(match) within \(Int(timeout)) s")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }
}

extension NodeEvent {
    /// The event's CLOCK_MONOTONIC stamp (µs).
    func mono() throws -> Int64 {
        guard let v = fields["mono_us"]?.intValue else { throw TandemBenchError("\(type) has no mono_us (an older tandem binary?)") }
        return v
    }
}

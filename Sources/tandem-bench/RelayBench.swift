import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemNode
import TandemProtocol
import TandemRelay

#if canImport(Glibc)
import Glibc
#endif

/// `tandem-bench relay`: what a tandem-relay costs, each figure against a baseline measured in the
/// same run.
///
/// - bulk: box-stream MB/s between two peers in this process (sender and receiver on one
///   event-loop thread each, the `bulk` benchmark's `BulkSource`/`BulkSink`), straight over
///   127.0.0.1 and through a tunnel (RELAY_REGISTER, TUNNEL_OPEN, both ends join with the token,
///   Secret Handshake end to end through the splice), slices alternating path by path.
/// - latency: signed PING/PONG round trips (`LinkWaiter.ping`) on a peer link, direct and through
///   a tunnel; the added p50/p99.
/// - clients: N idle clients, each its own key, linked to a fresh `tandem-relay` process and
///   registered there; the relay's RSS before and after.
/// - handshakes: connect + Secret Handshake + RELAY_REGISTER → RELAY_REGISTERED + close cycles
///   against the `tandem-relay` process, vs the libsodium floor of `tandem-bench handshakes`.
///
/// Tunnels go through two relays in turn: a `RelayServer` in this process (on its own event
/// loops) and a separate `tandem-relay` process (the headline for latency: the two extra hops
/// cross a process as they would in production, and the relay's threads are not this process's).
///
/// A third path, the limit any relay can reach: the same peer link through `socat` (Debian
/// package `socat`), a plain TCP splice in a process of its own (`TCP4-LISTEN:…,fork` to B's
/// listener), no registration and no token. Goals: tandem-relay's bulk ≥ 0.9 × socat's and its
/// ping RTT p50 ≤ 1.1 × socat's, in the same run.
struct RelayBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay",
        abstract: "Relay tunnels vs direct loopback (MB/s, ping RTT), idle registered clients per relay RSS, relay handshakes/s vs floor.",
        discussion: """
        Needs a release build of tandem-relay next to tandem-bench (`swift build -c release --product tandem-relay`)
        and socat (`apt-get install socat`) for bulk and latency.
        Goals: tunnel bulk ≥ 70 % of direct, tunnel ping p50 ≤ 100 µs above direct, tandem-relay bulk ≥ 0.9 × and
        ping RTT p50 ≤ 1.1 × the same link through socat (a plain TCP splice), 10,000 registered idle
        clients in < 300 MB of relay RSS. Relay handshakes/s is reported against the same floor and target as
        `tandem-bench handshakes` (≥ 50 % of one core's libsodium work).
        """)

    @Option(help: "Rounds: each measures every path in turn (direct first).") var rounds = 5
    @Option(help: "Seconds of box-stream bulk per path per round.") var bulkSeconds = 1.0
    @Option(help: "Signed pings per path (split over the rounds; 50 more of warm-up).") var pings = 2000
    @Option(help: "Idle registered clients held on a fresh tandem-relay process.") var clients = 10_000
    @Option(help: "Client links (handshake + register) in flight at once while the idle clients connect.") var inFlight = 200
    @Option(help: "Source addresses (127.0.0.2 and up) the idle clients spread over.") var sourceAddresses = 250
    @Option(help: "Seconds of relay handshake cycles per round.") var handshakeSeconds = 1.0
    @Option(help: "Seconds of floor measurement per round (handshakes).") var floorSeconds = 0.3
    @Option(help: "Parts to run, comma-separated: bulk, latency, clients, handshakes.") var parts = "bulk,latency,clients,handshakes"
    @Option(help: "Event-loop threads of both relays (default: tandem-relay's own default, one).") var relayThreads: Int?
    @Option(help: ArgumentHelp("The tandem-relay binary (default: next to tandem-bench).", valueName: "path")) var tandemRelay: String?
    @Option(help: ArgumentHelp("The socat binary for the plain-splice path of bulk and latency (`none`: leave that path out).",
                               valueName: "path")) var socat = "/usr/bin/socat"
    @Option(help: "socat's transfer block in bytes (its -b: bytes per read and write system call).") var socatBlock = 65536
    @Flag(help: "Indent the JSON.") var pretty = false

    static let bulkTarget = 0.7
    static let latencyGoalMicros = 100.0
    static let clientsGoal = 10_000
    static let rssGoalBytes = 300_000_000
    /// tandem-relay bulk over socat bulk, at least.
    static let socatBulkGoal = 0.9
    /// tandem-relay ping RTT p50 over socat's, at most.
    static let socatLatencyGoal = 1.1
    static let allParts: Set<String> = ["bulk", "latency", "clients", "handshakes"]

    var selected: Set<String> { Set(parts.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }) }

    func validate() throws {
        guard (1...50).contains(rounds) else { throw ValidationError("--rounds must be between 1 and 50") }
        guard (0.05...60).contains(bulkSeconds) else { throw ValidationError("--bulk-seconds must be between 0.05 and 60") }
        guard (10...1_000_000).contains(pings) else { throw ValidationError("--pings must be between 10 and 1000000") }
        guard (1...100_000).contains(clients) else { throw ValidationError("--clients must be between 1 and 100000") }
        guard (1...5_000).contains(inFlight) else { throw ValidationError("--in-flight must be between 1 and 5000") }
        guard (1...254).contains(sourceAddresses) else { throw ValidationError("--source-addresses must be between 1 and 254") }
        guard (0.05...60).contains(handshakeSeconds) else { throw ValidationError("--handshake-seconds must be between 0.05 and 60") }
        guard (0.05...30).contains(floorSeconds) else { throw ValidationError("--floor-seconds must be between 0.05 and 30") }
        guard (512...4_194_304).contains(socatBlock) else { throw ValidationError("--socat-block must be between 512 and 4194304") }
        if let relayThreads { guard (1...64).contains(relayThreads) else { throw ValidationError("--relay-threads must be between 1 and 64") } }
        guard !selected.isEmpty, selected.isSubset(of: Self.allParts) else {
            throw ValidationError("--parts takes a comma-separated list of: bulk, latency, clients, handshakes")
        }
    }

    func run() async throws {
        warnIfDebug()
        let fileLimit = raiseFileLimit()
        let binary = tandemRelay.map { URL(fileURLWithPath: $0).path }
            ?? URL(fileURLWithPath: ChildProcess.ownExecutable()).deletingLastPathComponent().appendingPathComponent("tandem-relay").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw ValidationError("no tandem-relay binary at \(binary) (build it: swift build -c release --product tandem-relay)")
        }
        let want = selected
        var socatBinary: String?
        if socat != "none", !want.isDisjoint(with: ["bulk", "latency"]) {
            guard FileManager.default.isExecutableFile(atPath: socat) else {
                throw ValidationError("no socat at \(socat) (apt-get install socat, or --socat none to leave that path out)")
            }
            socatBinary = socat
        }
        let started = environment()
        var report: [String: Any] = ["benchmark": "relay", "relay_binary": binary, "open_files_limit": fileLimit]
        var met: [Bool] = []

        if !want.isDisjoint(with: ["bulk", "latency", "handshakes"]) {
            let paths = try await RelayPaths.open(binary: binary, relayThreads: relayThreads, socat: socatBinary.map { ($0, socatBlock) })
            do {
                if want.contains("bulk") {
                    let r = try await paths.bulk(rounds: rounds, seconds: bulkSeconds)
                    say(r.summary)
                    report["bulk"] = r.json
                    met.append(r.met)
                    if let m = r.metVsSocat { met.append(m) }
                }
                if want.contains("latency") {
                    let r = try await paths.latency(rounds: rounds, pings: pings)
                    say(r.summary)
                    report["latency"] = r.json
                    met.append(r.met)
                    if let m = r.metVsSocat { met.append(m) }
                }
                if want.contains("handshakes") {
                    let f = try await paths.handshakes(rounds: rounds, seconds: handshakeSeconds, floorSeconds: floorSeconds)
                    say(f.summary)
                    report["handshakes"] = f.json
                    met.append(f.met)
                }
            } catch {
                await paths.close()
                throw error
            }
            report["relays"] = paths.description
            report["tunnel_setup_failures"] = paths.joinFailures
            await paths.close()
        }
        if want.contains("clients") {
            let r = try await IdleClientsBenchmark.run(binary: binary, clients: clients, inFlight: inFlight,
                                                       sourceAddresses: sourceAddresses)
            say(r.summary)
            report["clients"] = r.json
            met.append(r.met)
        }
        report["all_met"] = met.allSatisfy { $0 }
        report["environment"] = started.merging(["load_average_end": loadAverage()]) { a, _ in a }
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = try JSONSerialization.data(withJSONObject: report, options: options)
        output(String(decoding: data, as: UTF8.self))
    }

    /// Raises the soft limit on open files to the hard limit (10,000 idle clients are 10,000
    /// sockets here); returns the limit now in force.
    func raiseFileLimit() -> Int {
        var lim = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &lim) == 0 else { return 0 }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &lim)
            _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &lim)
        }
        return Int(clamping: lim.rlim_cur)
    }
}

// MARK: - the relay process

/// One `tandem-relay` child on 127.0.0.1:0 with a memory mailbox and a throwaway data directory
/// (for its identity), metrics off. Its first stdout line gives its address.
final class RelayProcess: @unchecked Sendable {
    let process = Process()
    let directory: URL
    private(set) var address: RelayAddress!
    let arguments: [String]
    let loops: Int?
    private let stdoutPipe = Pipe()

    /// `loops`: event-loop threads (`--event-loops`); nil leaves tandem-relay's default.
    init(binary: String, name: String, extra: [String] = [], loops: Int? = nil) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-relay-\(getpid())-\(name)")
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        arguments = ["--listen", "127.0.0.1:0", "--metrics", "off", "--memory-mailbox", "--data-dir", directory.path,
                     "--log-level", "warning"] + extra + (loops.map { ["--event-loops", String($0)] } ?? [])
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        self.loops = loops
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = stdoutPipe
        let log = directory.appendingPathComponent("relay.log")
        guard FileManager.default.createFile(atPath: log.path, contents: nil) else {
            throw BenchError("cannot create the relay's log file \(log.path)")
        }
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
        let prefix = "tandem-relay listening: "
        guard let line = readLine(timeoutSeconds: 30), line.hasPrefix(prefix) else {
            let text = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            stop()
            throw BenchError("tandem-relay did not announce its address: \(text.suffix(400))")
        }
        address = try RelayAddress(parsing: String(line.dropFirst(prefix.count)))
    }

    var pid: Int32 { process.processIdentifier }

    /// A field of /proc/<pid>/status in bytes ("VmRSS", "VmHWM").
    func status(_ field: String) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            let kb = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) } ?? 0
            return kb * 1024
        }
        return 0
    }

    var rss: Int { status("VmRSS") }
    var cpuSeconds: Double { BenchNode.cpuSeconds(pid) }

    private var lines = PipeLines()
    private func readLine(timeoutSeconds: Double) -> String? {
        lines.next(from: stdoutPipe.fileHandleForReading.fileDescriptor, timeoutSeconds: timeoutSeconds,
                   running: { process.isRunning })
    }

    /// SIGTERM (the relay says goodbye to its clients), SIGKILL after 10 s; removes the directory.
    func stop() {
        if process.isRunning {
            kill(pid, SIGTERM)
            let deadline = monotonicNanos() + 10_000_000_000
            while process.isRunning, monotonicNanos() < deadline { usleep(5_000) }
            if process.isRunning {
                kill(pid, SIGKILL)
                process.waitUntilExit()
            }
        }
        try? FileManager.default.removeItem(at: directory)
    }
}

// MARK: - a client link to a relay

/// One authenticated link to a relay, as a node keeps it: registers, opens tunnels and hears of
/// incoming ones, through the shared `RelayClientConnection`.
final class RelayPeer: Sendable {
    typealias Incoming = (from: [UInt8], token: [UInt8])
    let relay: RelayAddress
    private let connection: RelayClientConnection
    private let incoming: IncomingTunnels

    private init(connection: RelayClientConnection, incoming: IncomingTunnels) {
        self.relay = connection.relay
        self.connection = connection
        self.incoming = incoming
    }

    static func connect(_ relay: RelayAddress, identity: SigningKeyPair, group: EventLoopGroup, logger: Logger) async throws -> RelayPeer {
        let incoming = IncomingTunnels()
        let gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics())
        let connection = try await RelayClientConnection.connect(to: relay, identity: identity, gate: gate, group: group,
                                                                 logger: logger, delegate: incoming)
        return RelayPeer(connection: connection, incoming: incoming)
    }

    /// RELAY_REGISTER, and RELAY_REGISTERED back (10 s at most).
    func register() async throws {
        _ = try await connection.register(agent: "tandem-bench", timeout: .seconds(10))
    }

    /// TUNNEL_OPEN to `target`; the token of the RELAY_REPLY (10 s at most).
    func openTunnel(to target: [UInt8]) async throws -> [UInt8] {
        switch try await connection.request(.tunnelOpen(target: target), timeout: .seconds(10)) {
        case .tunnel(let token):
            return token
        case .refused(let status, let detail):
            throw BenchError("the relay refused the tunnel: \(status) \(detail)")
        case .stored:
            throw BenchError("the relay answered TUNNEL_OPEN as if it were mail")
        }
    }

    /// The next TUNNEL_INCOMING (10 s at most).
    func nextIncoming() async throws -> Incoming {
        guard let loop = connection.link?.channel.eventLoop else { throw BenchError("not linked to the relay") }
        return try await incoming.next(on: loop, within: .seconds(10))
    }

    func close() { connection.close() }
}

/// The TUNNEL_INCOMINGs a `RelayPeer` heard, kept until asked for, and the one caller waiting.
private final class IncomingTunnels: RelayClientConnectionDelegate {
    typealias Incoming = RelayPeer.Incoming
    private struct State {
        var heard: [Incoming] = []
        var waiter: EventLoopPromise<Incoming>?
        var closed: Error?
    }
    private let state = NIOLockedValueBox(State())

    func next(on loop: EventLoop, within timeout: TimeAmount) async throws -> Incoming {
        let promise = loop.makePromise(of: Incoming.self)
        let ready = state.withLockedValue { s -> Result<Incoming, Error>? in
            if !s.heard.isEmpty { return .success(s.heard.removeFirst()) }
            if let e = s.closed { return .failure(e) }
            s.waiter?.fail(BenchError("another caller waits for TUNNEL_INCOMING"))
            s.waiter = promise
            return nil
        }
        if let ready {
            promise.completeWith(ready)
        } else {
            let timer = loop.scheduleTask(in: timeout) { [state] in
                // No longer waiting: what comes later is kept for the next caller.
                state.withLockedValue { s in if s.waiter?.futureResult === promise.futureResult { s.waiter = nil } }
                promise.fail(BenchError("no TUNNEL_INCOMING from the relay within \(timeout.nanoseconds / 1_000_000_000) s"))
            }
            promise.futureResult.whenComplete { _ in timer.cancel() }
        }
        return try await promise.futureResult.get()
    }

    func relayConnection(_ connection: RelayClientConnection, tunnelIncomingFrom from: [UInt8], token: [UInt8]) {
        let waiter = state.withLockedValue { s -> EventLoopPromise<Incoming>? in
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            s.heard.append((from, token))
            return nil
        }
        waiter?.succeed((from, token))
    }

    func relayConnectionClosed(_ connection: RelayClientConnection, ending: RelayClientSession.Ending) {
        let e = BenchError("the relay closed the link\(ending.reason.map { ": \($0)" } ?? "")")
        state.withLockedValue { s in defer { s.waiter = nil; s.closed = e }; return s.waiter }?.fail(e)
    }
}

// MARK: - the paths

/// Two peers (A sends / pings, B receives / answers), each on its own event-loop thread, and the
/// ways between them: straight over 127.0.0.1, and tunnels through an in-process relay and a
/// `tandem-relay` process, at both of which A and B hold client links (B registered).
final class RelayPaths: @unchecked Sendable {
    struct Relay {
        let name: String
        let address: RelayAddress
        let a: RelayPeer
        let b: RelayPeer
        /// CPU seconds of the relay so far (nil: shares this process).
        let cpu: () -> Double?
    }

    let a = SigningKeyPair.generate()
    let b = SigningKeyPair.generate()
    let gateA: FrameGate
    let gateB: FrameGate
    let senderLoop: EventLoop
    let receiverLoop: EventLoop
    let groups: [MultiThreadedEventLoopGroup]
    let logger = quietLogger("tandem-bench.relay")
    private(set) var relays: [Relay] = []
    private var process: RelayProcess?
    private var server: RelayServer?
    private var serverTask: Task<Void, Error>?
    private var listeners: [Channel] = []
    let relayThreads: Int
    /// --relay-threads was given: the relay process gets as many loops as the in-process relay.
    let relayThreadsSet: Bool
    /// The socat binary and its transfer block for the plain-splice path (nil: no such path).
    let socat: (binary: String, block: Int)?
    /// The socat command lines used, for the report.
    private(set) var socatCommands: [String] = []

    private init(relayThreads: Int?, socat: (binary: String, block: Int)?) {
        self.relayThreads = relayThreads ?? RelayConfiguration().eventLoops
        self.relayThreadsSet = relayThreads != nil
        self.socat = socat
        let sender = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let receiver = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        groups = [sender, receiver]
        senderLoop = sender.next()
        receiverLoop = receiver.next()
        gateA = FrameGate(localPublicKey: a.publicKey, metrics: TransportMetrics())
        gateB = FrameGate(localPublicKey: b.publicKey, metrics: TransportMetrics())
    }

    static func open(binary: String, relayThreads: Int?, socat: (binary: String, block: Int)?) async throws -> RelayPaths {
        let paths = RelayPaths(relayThreads: relayThreads, socat: socat)
        do {
            try await paths.start(binary: binary)
        } catch {
            await paths.close()
            throw error
        }
        return paths
    }

    private func start(binary: String) async throws {
        // In this process: the relay's own defaults but unlimited client rate, on its own event
        // loops (as many as the tandem-relay binary uses).
        var config = RelayConfiguration()
        config.listenHost = "127.0.0.1"
        config.listenPort = 0
        config.metricsHost = nil
        config.clientBytesPerSecond = 0
        let mailbox = try RelayMailbox(path: nil, quotas: config.mailboxQuotas)
        let relayGroup = MultiThreadedEventLoopGroup(numberOfThreads: relayThreads)
        let server = RelayServer(identity: SigningKeyPair.generate(), configuration: config, mailbox: mailbox,
                                 group: relayGroup, logger: quietLogger("tandem-bench.relay.server"))
        self.server = server
        serverTask = Task { try await server.run() }
        let bound = try await server.boundAddress
        let inProcess = RelayAddress(id: server.id, host: "127.0.0.1", port: bound.port ?? 0)

        let process = try RelayProcess(binary: binary, name: "paths", extra: ["--client-rate", "0"], loops: relayThreadsSet ? relayThreads : nil)
        self.process = process

        let targets: [(String, RelayAddress, () -> Double?)] = [("in_process_relay", inProcess, { nil }),
                                                               ("relay_process", process.address!, { process.cpuSeconds })]
        for (name, address, cpu) in targets {
            let peerA = try await RelayPeer.connect(address, identity: a, group: senderLoop, logger: logger)
            let peerB = try await RelayPeer.connect(address, identity: b, group: receiverLoop, logger: logger)
            try await peerB.register()
            relays.append(Relay(name: name, address: address, a: peerA, b: peerB, cpu: cpu))
        }
    }

    var description: [String: Any] {
        [
            "in_process_relay": "RelayServer in this process on \(relayThreads) event-loop threads of its own, "
                + "default configuration but client_bytes_per_second = 0 (unlimited), tunnel queue \(RelayConfiguration().tunnelQueueBytes) bytes",
            "relay_process": "tandem-relay \((process?.arguments ?? []).joined(separator: " ")) (pid \(process?.pid ?? 0); "
                + "\(process?.loops.map { "\($0) event loops" } ?? "its default event loops: \(RelayConfiguration().eventLoops)"))",
            "peers": "A (sender, pinger) and B (receiver) in this process, one event-loop thread each; "
                + "both hold client links to each relay, B registered there",
            "socat": socat == nil ? "left out (--socat none)"
                : "the same peer link through \(socatCommands.joined(separator: "; ")): a plain TCP splice in a process "
                + "of its own (it forks one per connection), no registration, no token; CPU: the listener and its forks",
        ]
    }

    /// A socat splice in front of B's `port`, for the part now running (stopped by the caller).
    private func startSocat(to port: Int) throws -> SocatSplice? {
        guard let socat else { return nil }
        let splice = try SocatSplice(binary: socat.binary, targetPort: port, block: socat.block)
        socatCommands.append(splice.commandLine)
        return splice
    }

    func close() async {
        for r in relays {
            r.a.close()
            r.b.close()
        }
        for l in listeners { try? await l.close() }
        serverTask?.cancel()
        _ = try? await serverTask?.value
        process?.stop()
        for g in groups { try? await g.shutdownGracefully() }
    }

    /// Tunnel joins that failed and were tried again (see `withTunnel`).
    private(set) var joinFailures: [String] = []

    /// Opens a tunnel and sets up its two ends with `body`; when that fails (a join refused or
    /// answered wrongly, a handshake cut short), notes it and tries a new tunnel, five times at most.
    func withTunnel<T>(_ relay: Relay, _ body: ([UInt8]) async throws -> T) async throws -> T {
        var failures = 0
        while true {
            let token = try await tunnel(relay)
            do {
                return try await body(token)
            } catch {
                failures += 1
                joinFailures.append("\(relay.name): \(error)")
                say("relay: tunnel setup through \(relay.name) failed, trying a new tunnel: \(error)")
                if failures >= 5 { throw error }
            }
        }
    }

    /// A asks `relay` for a tunnel to B; B hears of it. The token both join with.
    func tunnel(_ relay: Relay) async throws -> [UInt8] {
        let (peerA, peerB) = (relay.a, relay.b)
        async let incoming = peerB.nextIncoming()
        let token = try await peerA.openTunnel(to: b.publicKey)
        let heard = try await incoming
        guard Array(heard.token) == token, Array(heard.from) == a.publicKey else {
            throw BenchError("TUNNEL_INCOMING does not match the tunnel A opened")
        }
        return token
    }

    // MARK: bulk

    struct BulkResult {
        var direct: [Double] = []
        var tunnels: [String: [Double]] = [:]
        var cpu: [String: [String: Double]] = [:]
        var bytes: [String: UInt64] = [:]
        var headline = "in_process_relay"

        var directMedian: Double { median(direct) }
        /// CPU seconds per GB of every process on the path (this one and the relay process).
        func cpuPerGB(_ name: String) -> Double { (cpu[name] ?? [:]).values.reduce(0, +) }
        func tunnelMedian(_ name: String) -> Double { median(tunnels[name] ?? []) }
        var ratio: Double { fraction(tunnelMedian(headline), directMedian) }
        var met: Bool { ratio >= RelayBench.bulkTarget }
        /// tandem-relay (the relay process) MB/s over socat's; nil without the socat path.
        var socatRatio: Double? { tunnels["socat"].map { _ in fraction(tunnelMedian("relay_process"), tunnelMedian("socat")) } }
        var metVsSocat: Bool? { socatRatio.map { $0 >= RelayBench.socatBulkGoal } }

        var json: [String: Any] {
            var paths: [String: Any] = [:]
            for (name, slices) in tunnels {
                paths[name] = ["mb_s": round3(median(slices)), "slices_mb_s": slices.map(round3),
                               "ratio_to_direct": round3(fraction(median(slices), directMedian)),
                               "best_ratio_to_direct": round3(fraction(slices.max() ?? 0, direct.max() ?? 0)),
                               "bytes": Int(bytes[name] ?? 0), "cpu": cpu[name] ?? [:],
                               "cpu_ratio_to_direct": round3(fraction(cpuPerGB("direct"), cpuPerGB(name)))] as [String: Any]
            }
            return [
                "unit": "MB/s", "mb_is": "10^6 bytes of plaintext",
                "direct_mb_s": round3(directMedian), "direct_slices_mb_s": direct.map(round3),
                "direct_bytes": Int(bytes["direct"] ?? 0), "direct_cpu": cpu["direct"] ?? [:],
                "tunnel_mb_s": round3(tunnelMedian(headline)), "ratio": round3(ratio), "target": RelayBench.bulkTarget,
                "met": met, "headline_path": headline, "tunnels": paths,
                "vs_socat": socatRatio.map { r -> Any in
                    ["socat_mb_s": round3(tunnelMedian("socat")), "tandem_relay_mb_s": round3(tunnelMedian("relay_process")),
                     "ratio": round3(r), "goal": RelayBench.socatBulkGoal, "met": r >= RelayBench.socatBulkGoal,
                     "in_process_relay_ratio": round3(fraction(tunnelMedian("in_process_relay"), tunnelMedian("socat"))),
                     "best_slice_ratio": round3(fraction(tunnels["relay_process"]?.max() ?? 0, tunnels["socat"]?.max() ?? 0)),
                     "splice_cpu_s_per_gb": ["tandem_relay": cpu["relay_process"]?["relay_process_cpu_s_per_gb"] ?? 0,
                                             "socat": cpu["socat"]?["relay_process_cpu_s_per_gb"] ?? 0],
                     "what": "tandem-relay: the relay_process path; socat: the same box-stream link through socat, "
                        + "median slice vs median slice, the paths alternating in each round; splice_cpu_s_per_gb: CPU "
                        + "seconds per GB of the splicing process alone (tandem-relay, or socat's listener and fork)"] as [String: Any]
                } ?? NSNull(),
                "what": "BulkSource → SecureChannelHandler (4 KiB boxes) → TCP → BulkSink, the `bulk` benchmark's "
                    + "mechanism (64 KiB writes, receiver acks every MiB, \(BulkBenchmark.window >> 20) MiB window, a slice "
                    + "ends when its last MiB is acknowledged); sender and receiver in this process on one thread each; "
                    + "direct: one TCP connection over 127.0.0.1; tunnel: each end a TCP connection to the relay, joined "
                    + "by token, Secret Handshake end to end; median slice vs median slice, paths alternating in each round",
                "cpu_note": "cpu: CPU seconds per GB (10^9 plaintext bytes) of this process (both peers, and the relay "
                    + "when it is in process) and of the relay process; cpu_ratio_to_direct: direct CPU per GB over the "
                    + "tunnel's (all processes), which depends less on what else the machine runs than MB/s does",
            ]
        }

        var summary: String {
            var line = String(format: "relay bulk: direct %.1f MB/s, tunnel (%@) %.1f MB/s = %.1f %% (target %.0f %%) %@; tunnel (relay_process) %.1f MB/s = %.1f %%",
                              directMedian, headline, tunnelMedian(headline), ratio * 100, RelayBench.bulkTarget * 100, met ? "OK" : "MISSED",
                              tunnelMedian("relay_process"), fraction(tunnelMedian("relay_process"), directMedian) * 100)
            if let r = socatRatio {
                line += String(format: "; socat %.1f MB/s, tandem-relay/socat %.2f (goal ≥ %.1f) %@", tunnelMedian("socat"), r,
                               RelayBench.socatBulkGoal, r >= RelayBench.socatBulkGoal ? "OK" : "MISSED")
            }
            return line
        }
    }

    /// One box-stream sender, its channel and the path it takes.
    private struct BulkLink {
        let name: String
        let source: BulkSource
        let channel: Channel
        let relayCPU: () -> Double?
    }

    func bulk(rounds: Int, seconds: Double) async throws -> BulkResult {
        let a = self.a, b = self.b, logger = self.logger
        let metrics = TransportMetrics()
        // B's direct listener.
        let listener = try await ServerBootstrap(group: receiverLoop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    try ch.pipeline.syncOperations.addHandler(SecureChannelHandler(server: b, metrics: metrics, logger: logger))
                    try ch.pipeline.syncOperations.addHandler(BulkSink())
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        listeners.append(listener)
        var links: [BulkLink] = []
        defer { for l in links { l.channel.close(promise: nil) } }

        let direct = BulkSource(eventLoop: senderLoop)
        let directChannel = try await ClientBootstrap(group: senderLoop)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    try ch.pipeline.syncOperations.addHandler(SecureChannelHandler(client: a, serverPublicKey: b.publicKey,
                                                                                   metrics: metrics, logger: logger))
                    try ch.pipeline.syncOperations.addHandler(direct)
                }
            }
            .connect(host: "127.0.0.1", port: listener.localAddress?.port ?? 0).get()
        links.append(BulkLink(name: "direct", source: direct, channel: directChannel, relayCPU: { nil }))
        try await direct.established.futureResult.get()

        // The same link through socat, a plain TCP splice to B's listener.
        let splice = try startSocat(to: listener.localAddress?.port ?? 0)
        defer { splice?.stop() }
        if let splice {
            let source = BulkSource(eventLoop: senderLoop)
            let channel = try await ClientBootstrap(group: senderLoop)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        try ch.pipeline.syncOperations.addHandler(SecureChannelHandler(client: a, serverPublicKey: b.publicKey,
                                                                                       metrics: metrics, logger: logger))
                        try ch.pipeline.syncOperations.addHandler(source)
                    }
                }
                .connect(host: "127.0.0.1", port: splice.port).get()
            links.append(BulkLink(name: "socat", source: source, channel: channel, relayCPU: { splice.cpuSeconds }))
            try await source.established.futureResult.get()
        }

        for relay in relays {
            let address = relay.address, receiverLoop = self.receiverLoop, senderLoop = self.senderLoop
            let link = try await withTunnel(relay) { token -> BulkLink in
                let source = BulkSource(eventLoop: senderLoop)
                let sink = Task {
                    try await RelayTunnel.join(relay: address, token: token, group: receiverLoop) { ch in
                        try ch.pipeline.syncOperations.addHandler(SecureChannelHandler(server: b, metrics: metrics, logger: logger))
                        try ch.pipeline.syncOperations.addHandler(BulkSink())
                    }
                }
                do {
                    let channel = try await RelayTunnel.join(relay: address, token: token, group: senderLoop) { ch in
                        try ch.pipeline.syncOperations.addHandler(SecureChannelHandler(client: a, serverPublicKey: b.publicKey,
                                                                                       metrics: metrics, logger: logger))
                        try ch.pipeline.syncOperations.addHandler(source)
                    }
                    do {
                        _ = try await sink.value
                        try await source.established.futureResult.get()
                    } catch {
                        channel.close(promise: nil)
                        throw error
                    }
                    return BulkLink(name: relay.name, source: source, channel: channel, relayCPU: relay.cpu)
                } catch {
                    switch await sink.result {
                    case .success(let c): c.close(promise: nil)
                    case .failure(let e): throw BenchError("\(error); B's end: \(e)")
                    }
                    throw error
                }
            }
            links.append(link)
        }

        let loop = senderLoop
        for l in links {
            let source = l.source
            _ = try await loop.flatSubmit { source.burst(seconds: 0.3) }.get() // warm-up
        }
        var result = BulkResult()
        var cpuSelf: [String: Double] = [:], cpuRelay: [String: Double] = [:]
        let received0 = BulkSink.received.withLockedValue { $0 }
        var sentTotal: UInt64 = 0
        for _ in 0..<rounds {
            for l in links {
                let selfCPU = processCPUSeconds(), relayCPU = l.relayCPU()
                let source = l.source
                let r = try await loop.flatSubmit { source.burst(seconds: seconds) }.get()
                cpuSelf[l.name, default: 0] += processCPUSeconds() - selfCPU
                if let before = relayCPU, let after = l.relayCPU() { cpuRelay[l.name, default: 0] += after - before }
                let mbs = Double(r.bytes) / r.seconds / 1e6
                if l.name == "direct" { result.direct.append(mbs) } else { result.tunnels[l.name, default: []].append(mbs) }
                result.bytes[l.name, default: 0] += r.bytes
                sentTotal += r.bytes
            }
        }
        let received = BulkSink.received.withLockedValue { $0 } - received0
        guard received == sentTotal else { throw BenchError("the receivers got \(received) of \(sentTotal) bytes") }
        for l in links {
            let gb = Double(result.bytes[l.name] ?? 0) / 1e9
            var c: [String: Double] = ["bench_process_cpu_s_per_gb": round3((cpuSelf[l.name] ?? 0) / max(gb, 1e-9))]
            if let r = cpuRelay[l.name] { c["relay_process_cpu_s_per_gb"] = round3(r / max(gb, 1e-9)) }
            result.cpu[l.name] = c
        }
        return result
    }

    // MARK: latency

    struct LatencyResult {
        var direct: [Double] = []
        var tunnels: [String: [Double]] = [:]
        var headline = "relay_process"

        func added(_ name: String) -> (p50: Double, p99: Double) {
            let t = Percentiles(tunnels[name] ?? []), d = Percentiles(direct)
            return (t.p50 - d.p50, t.p99 - d.p99)
        }
        var met: Bool { added(headline).p50 <= RelayBench.latencyGoalMicros }
        /// tandem-relay (the relay process) RTT p50 over socat's; nil without the socat path.
        var socatRatio: Double? {
            tunnels["socat"].map { Percentiles($0).p50 }.map { fraction(Percentiles(tunnels["relay_process"] ?? []).p50, $0) }
        }
        var metVsSocat: Bool? { socatRatio.map { $0 <= RelayBench.socatLatencyGoal } }

        var json: [String: Any] {
            let d = Percentiles(direct)
            var paths: [String: Any] = [:]
            for (name, samples) in tunnels {
                let p = Percentiles(samples), add = added(name)
                paths[name] = ["rtt_us": p.json.mapValues(round3), "added_p50_us": round3(add.p50), "added_p99_us": round3(add.p99),
                               "ratio_p50_to_direct": round3(fraction(p.p50, d.p50)), "pings": samples.count] as [String: Any]
            }
            let h = added(headline)
            return [
                "unit": "µs", "direct_rtt_us": d.json.mapValues(round3), "pings_per_path": direct.count,
                "added_p50_us": round3(h.p50), "added_p99_us": round3(h.p99), "goal_added_p50_us": RelayBench.latencyGoalMicros,
                "met": met, "headline_path": headline, "tunnels": paths,
                "vs_socat": socatRatio.map { r -> Any in
                    let t = Percentiles(tunnels["relay_process"] ?? []), s = Percentiles(tunnels["socat"] ?? [])
                    return ["socat_rtt_us": s.json.mapValues(round3), "tandem_relay_rtt_us": t.json.mapValues(round3),
                            "ratio_p50": round3(r), "ratio_p99": round3(fraction(t.p99, s.p99)),
                            "goal_ratio_p50": RelayBench.socatLatencyGoal, "met": r <= RelayBench.socatLatencyGoal,
                            "in_process_relay_ratio_p50": round3(fraction(Percentiles(tunnels["in_process_relay"] ?? []).p50, s.p50)),
                            "what": "tandem-relay: the relay_process path; socat: the same peer link through socat"] as [String: Any]
                } ?? NSNull(),
                "what": "LinkWaiter.ping: a signed PING from A, B's PeerLinkHandler answers a signed PONG (Ed25519 sign and "
                    + "verify on both sides, box-stream both ways), timed from the calling task; one at a time; direct: a "
                    + "peer link over 127.0.0.1; tunnel: the same peer link run through the relay's splice (two more "
                    + "loopback hops each way); pings of every path interleaved in blocks, one block per path per round",
            ]
        }

        var summary: String {
            let d = Percentiles(direct), t = Percentiles(tunnels[headline] ?? []), h = added(headline)
            let i = added("in_process_relay")
            var line = String(format: "relay latency: ping RTT p50/p99 direct %.1f/%.1f µs, tunnel (%@) %.1f/%.1f µs: +%.1f µs at p50 (goal ≤ %.0f) %@; in-process relay +%.1f µs",
                              d.p50, d.p99, headline, t.p50, t.p99, h.p50, RelayBench.latencyGoalMicros, met ? "OK" : "MISSED", i.p50)
            if let r = socatRatio {
                let s = Percentiles(tunnels["socat"] ?? [])
                line += String(format: "; socat %.1f/%.1f µs, tandem-relay/socat p50 %.2f (goal ≤ %.1f) %@", s.p50, s.p99, r,
                               RelayBench.socatLatencyGoal, r <= RelayBench.socatLatencyGoal ? "OK" : "MISSED")
            }
            return line
        }
    }

    func latency(rounds: Int, pings: Int) async throws -> LatencyResult {
        let a = self.a, b = self.b, gateA = self.gateA, gateB = self.gateB, logger = self.logger
        let listener = try await ServerBootstrap(group: receiverLoop)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    _ = try PeerPipeline.configure(channel: ch, identity: b, serverPublicKey: nil, gate: gateB,
                                                   delegate: nil, options: .init(), logger: logger)
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        listeners.append(listener)
        var links: [(name: String, link: PeerLink, waiter: LinkWaiter)] = []
        defer { for l in links { l.link.close() } }
        let (directLink, directWaiter) = try await PeerConnector.connect(
            host: "127.0.0.1", port: listener.localAddress?.port ?? 0, remote: b.publicKey, identity: a, gate: gateA,
            group: senderLoop, logger: logger)
        links.append(("direct", directLink, directWaiter))
        let splice = try startSocat(to: listener.localAddress?.port ?? 0)
        defer { splice?.stop() }
        if let splice {
            let (link, waiter) = try await PeerConnector.connect(
                host: "127.0.0.1", port: splice.port, remote: b.publicKey, identity: a, gate: gateA,
                group: senderLoop, logger: logger)
            links.append(("socat", link, waiter))
        }
        for relay in relays {
            let receiverLoop = self.receiverLoop, senderLoop = self.senderLoop, address = relay.address
            let (link, waiter) = try await withTunnel(relay) { token -> (PeerLink, LinkWaiter) in
                let far = Task {
                    try await RelayTunnel.connect(relay: address, token: token, remote: nil, identity: b, gate: gateB,
                                                  group: receiverLoop, logger: logger).0
                }
                do {
                    let (link, waiter) = try await RelayTunnel.connect(relay: address, token: token, remote: b.publicKey,
                                                                       identity: a, gate: gateA, group: senderLoop, logger: logger)
                    do {
                        let farLink = try await far.value
                        guard link.relay == address.id.publicKey, farLink.remotePublicKey == a.publicKey else {
                            throw BenchError("the tunnel's ends do not know each other")
                        }
                    } catch {
                        link.close()
                        throw error
                    }
                    return (link, waiter)
                } catch {
                    switch await far.result {
                    case .success(let l): l.close()
                    case .failure(let e): throw BenchError("\(error); B's end: \(e)")
                    }
                    throw error
                }
            }
            links.append((relay.name, link, waiter))
        }
        for l in links { for _ in 0..<50 { _ = try await l.waiter.ping() } } // warm-up
        var result = LatencyResult()
        let perBlock = max(1, pings / rounds)
        for round in 0..<rounds {
            let n = round == rounds - 1 ? pings - perBlock * (rounds - 1) : perBlock
            for l in links {
                for _ in 0..<n {
                    let (rtt, _) = try await l.waiter.ping()
                    let us = rtt.milliseconds * 1000
                    if l.name == "direct" { result.direct.append(us) } else { result.tunnels[l.name, default: []].append(us) }
                }
            }
        }
        return result
    }

    // MARK: handshakes

    func handshakes(rounds: Int, seconds: Double, floorSeconds: Double) async throws -> Figure {
        guard let process, let relay = relays.first(where: { $0.name == "relay_process" }) else {
            throw BenchError("no relay process")
        }
        let floor = Floors.handshakes()
        let address = relay.address
        let eventLoop = senderLoop
        let logger = self.logger
        /// Sequential cycles on one event loop, each with the next key of a pool of `keys`.
        @Sendable func cycles(seconds: Double, limit: Int) async throws -> Int {
            let loop = RegisterLoop(eventLoop: eventLoop, relay: address, keys: 64, logger: logger, seconds: seconds, limit: limit)
            return try await loop.run()
        }
        _ = try await cycles(seconds: 0.3, limit: 100) // warm-up
        var sequential = Samples(), concurrent = Samples()
        var totalSequential = 0, totalConcurrent = 0
        let concurrency = HandshakeBenchmark.concurrency
        for _ in 0..<rounds {
            let f = floor(floorSeconds)
            sequential.add(floor: f)
            concurrent.add(floor: f)

            var t0 = monotonicNanos(), cpu0 = processCPUSeconds() + process.cpuSeconds
            let n = try await cycles(seconds: seconds, limit: HandshakeBenchmark.maximumPerSlice)
            var wall = Double(monotonicNanos() - t0) / 1e9, cpu = processCPUSeconds() + process.cpuSeconds - cpu0
            sequential.link.append(Double(n) / wall)
            sequential.linkCPU.append(Double(n) / max(cpu, 1e-6))
            totalSequential += n

            t0 = monotonicNanos()
            cpu0 = processCPUSeconds() + process.cpuSeconds
            let m = try await withThrowingTaskGroup(of: Int.self) { tasks in
                for _ in 0..<concurrency {
                    tasks.addTask { try await cycles(seconds: seconds, limit: HandshakeBenchmark.maximumPerSlice / concurrency) }
                }
                return try await tasks.reduce(0, +)
            }
            wall = Double(monotonicNanos() - t0) / 1e9
            cpu = processCPUSeconds() + process.cpuSeconds - cpu0
            concurrent.link.append(Double(m) / wall)
            concurrent.linkCPU.append(Double(m) / max(cpu, 1e-6))
            totalConcurrent += m
        }
        return Figure(
            name: "relay_handshakes", unit: "handshakes/s", samples: sequential, target: HandshakeBenchmark.target,
            floorMethod: "in-process rate of one handshake's libsodium calls, both sides, on one core "
                + "(the floor of `tandem-bench handshakes`); " + measuringNote,
            details: [
                "what": "sequential cycles of TCP connect + Secret Handshake with the relay + RELAY_REGISTER → "
                    + "RELAY_REGISTERED (signed frames both ways, the registration recorded in the relay's mailbox) + "
                    + "close, over 127.0.0.1 against the tandem-relay process; client: PeerPipeline on one event loop "
                    + "of this process, keys taken in turn from a pool of 64",
                "cycles": totalSequential,
                "cpu_note": "cpu_link_slices: cycles per CPU-second of this process and the relay process together",
                "concurrent": ["connections": concurrency, "cycles": totalConcurrent,
                               "median_rate": round3(concurrent.medianLink), "ratio": round3(concurrent.medianRatio),
                               "samples": concurrent.json,
                               "note": "the relay uses one event loop per core, so this may exceed the one-core floor"],
                "target_note": "the target of `tandem-bench handshakes`, borrowed; a relay cycle also carries a registration",
            ])
    }
}

func fraction(_ a: Double, _ b: Double) -> Double { b > 0 ? a / b : 0 }

/// Connect, handshake, register, close, again, until the time or count is used up: one chain of
/// futures on one event loop (as `HandshakeLoop`). Confined to that loop.
final class RegisterLoop: @unchecked Sendable {
    private let eventLoop: EventLoop
    private let relay: RelayAddress
    private let pool: [(SigningKeyPair, FrameGate)]
    private let logger: Logger
    private let seconds: Double
    private let limit: Int
    private var deadline: UInt64 = 0
    private var completed = 0
    private let done: EventLoopPromise<Int>

    init(eventLoop: EventLoop, relay: RelayAddress, keys: Int, logger: Logger, seconds: Double, limit: Int) {
        self.eventLoop = eventLoop
        self.relay = relay
        self.pool = (0..<keys).map { _ in
            let k = SigningKeyPair.generate()
            return (k, FrameGate(localPublicKey: k.publicKey, metrics: TransportMetrics(), replayCapacity: 64))
        }
        self.logger = logger
        self.seconds = seconds
        self.limit = limit
        self.done = eventLoop.makePromise()
    }

    func run() async throws -> Int {
        eventLoop.execute {
            self.deadline = monotonicNanos() + UInt64(self.seconds * 1e9)
            self.next()
        }
        return try await done.futureResult.get()
    }

    private func next() {
        guard completed < limit, monotonicNanos() < deadline else {
            done.succeed(completed)
            return
        }
        let (identity, gate) = pool[completed % pool.count]
        let delegate = RegisterOnce(relay: relay.id.publicKey)
        let remote = relay.id.publicKey, logger = logger
        ClientBootstrap(group: eventLoop)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    _ = try PeerPipeline.configure(channel: ch, identity: identity, serverPublicKey: remote,
                                                   gate: gate, delegate: delegate, options: .init(), logger: logger)
                }
            }
            .connect(host: relay.host, port: relay.port)
            .flatMap { $0.closeFuture }
            .whenComplete { result in
                switch result {
                case .success where delegate.registered:
                    self.completed += 1
                    self.next()
                case .success:
                    self.done.fail(BenchError("a relay handshake + registration did not complete"))
                case .failure(let error):
                    self.done.fail(error)
                }
            }
    }
}

/// Sends RELAY_REGISTER as soon as the link is up and closes the link at RELAY_REGISTERED, through
/// the shared `RelayClientSession`: `RegisterLoop`'s chain of futures, with no wait of its own (the
/// loop goes on when the link closes). Callbacks come on the link's event loop.
final class RegisterOnce: PeerLinkDelegate, Sendable {
    private let session: NIOLockedValueBox<RelayClientSession>

    init(relay: [UInt8]) {
        self.session = NIOLockedValueBox(RelayClientSession(relay: relay, nowMs: 0))
    }

    var registered: Bool { session.withLockedValue { $0.wasRegistered } }

    func linkEstablished(_ link: PeerLink) {
        if let frame = session.withLockedValue({ $0.register(agent: "tandem-bench") }) {
            link.send(type: frame.type, payload: frame.payload)
        }
    }

    func link(_ link: PeerLink, received envelope: Envelope) {
        // The session answers .registered once, for the relay's own confirmation only.
        guard case .registered? = session.withLockedValue({ $0.receive(envelope) }) else { return }
        link.close()
    }

    func linkClosed(_ link: PeerLink, error: Error?) {
        _ = session.withLockedValue { $0.closed(error: error.map { "\($0)" }) }
    }
}

// MARK: - idle clients

/// N clients, each its own key, link to a fresh tandem-relay process (default configuration),
/// register, and stay connected; the relay's RSS before and after.
enum IdleClientsBenchmark {
    struct Result {
        var clients = 0
        var registered = 0
        var failed = 0
        var firstError: String?
        var droppedAfterRegistering = 0
        var rssBefore = 0
        var rssAfter = 0
        var hwmAfter = 0
        var connectSeconds = 0.0
        var keygenSeconds = 0.0
        var relayCPUSeconds = 0.0
        var benchRSSAfter = 0
        var timeline: [[String: Int]] = []
        var inFlight = 0
        var sourceAddresses = 0
        var relayArguments: [String] = []

        var perClient: Double { registered > 0 ? Double(rssAfter - rssBefore) / Double(registered) : 0 }
        var met: Bool {
            registered >= RelayBench.clientsGoal && droppedAfterRegistering == 0 && rssAfter < RelayBench.rssGoalBytes
        }

        var json: [String: Any] {
            var j: [String: Any] = [
                "clients": clients, "registered": registered, "failed": failed,
                "dropped_after_registering": droppedAfterRegistering,
                "relay_rss_before_bytes": rssBefore, "relay_rss_after_bytes": rssAfter, "relay_rss_hwm_bytes": hwmAfter,
                "relay_rss_before_mb": round3(Double(rssBefore) / 1e6), "relay_rss_after_mb": round3(Double(rssAfter) / 1e6),
                "bytes_per_client": Int(perClient.rounded()),
                "goal": "\(RelayBench.clientsGoal) registered clients with relay RSS < \(RelayBench.rssGoalBytes / 1_000_000) MB (10^6 bytes)",
                "met": met,
                "connect_seconds": round3(connectSeconds),
                "registrations_per_second": round3(connectSeconds > 0 ? Double(registered) / connectSeconds : 0),
                "relay_cpu_seconds_while_connecting": round3(relayCPUSeconds),
                "keygen_seconds": round3(keygenSeconds),
                "bench_process_rss_bytes": benchRSSAfter,
                "relay_rss_timeline": timeline,
                "relay": "tandem-relay " + relayArguments.joined(separator: " ") + " (default limits)",
                "how": "each client: its own Ed25519 key, a TCP connection from 127.0.0.X (X = 2 + worker % "
                    + "\(sourceAddresses)), Secret Handshake with the relay, RELAY_REGISTER → RELAY_REGISTERED, then idle; "
                    + "\(inFlight) workers keep one client each in flight, so no source address has more than "
                    + "\((inFlight + sourceAddresses - 1) / sourceAddresses) handshake(s) pending (the relay's default "
                    + "max-pending-per-address is 64, max-pending 1024: left as they are); RSS from /proc/<pid>/status "
                    + "VmRSS of the idle relay before the first client and 2 s after the last registration",
            ]
            if let firstError { j["first_error"] = firstError }
            return j
        }

        var summary: String {
            String(format: "relay clients: %d/%d registered idle clients, relay RSS %.1f MB → %.1f MB (%.0f bytes per client; goal < %d MB) %@; %.1f registrations/s",
                   registered, clients, Double(rssBefore) / 1e6, Double(rssAfter) / 1e6, perClient,
                   RelayBench.rssGoalBytes / 1_000_000, met ? "OK" : "MISSED", connectSeconds > 0 ? Double(registered) / connectSeconds : 0)
        }
    }

    static func run(binary: String, clients: Int, inFlight: Int, sourceAddresses: Int) async throws -> Result {
        let relay = try RelayProcess(binary: binary, name: "clients")
        defer { relay.stop() }
        var result = Result()
        result.clients = clients
        result.inFlight = inFlight
        result.sourceAddresses = sourceAddresses
        result.relayArguments = relay.arguments
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let logger = quietLogger("tandem-bench.relay.clients")

        var t0 = monotonicNanos()
        let keys = (0..<clients).map { _ in SigningKeyPair.generate() }
        result.keygenSeconds = Double(monotonicNanos() - t0) / 1e9
        try await Task.sleep(for: .seconds(1))
        result.rssBefore = relay.rss

        let address = relay.address!
        let nextIndex = NIOLockedValueBox(0)
        let outcome = NIOLockedValueBox<(registered: Int, failed: Int, firstError: String?)>((0, 0, nil))
        let links = NIOLockedValueBox<[RelayClientConnection]>([])
        let cpu0 = relay.cpuSeconds
        t0 = monotonicNanos()
        // RSS while the clients arrive, every half second.
        let sampler = Task {
            var samples: [[String: Int]] = []
            while !Task.isCancelled {
                samples.append(["ms": Int((monotonicNanos() - t0) / 1_000_000), "registered": outcome.withLockedValue { $0.registered },
                                "rss_bytes": relay.rss])
                try? await Task.sleep(for: .milliseconds(500))
            }
            return samples
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for worker in 0..<min(inFlight, clients) {
                let source = try SocketAddress(ipAddress: "127.0.0.\(2 + worker % sourceAddresses)", port: 0)
                tasks.addTask {
                    while true {
                        let i = nextIndex.withLockedValue { n -> Int in defer { n += 1 }; return n }
                        guard i < clients else { return }
                        do {
                            let c = try await connect(keys[i], to: address, from: source, group: group, logger: logger)
                            links.withLockedValue { $0.append(c) }
                            outcome.withLockedValue { $0.registered += 1 }
                        } catch {
                            outcome.withLockedValue { o in
                                o.failed += 1
                                if o.firstError == nil { o.firstError = "\(error)" }
                            }
                        }
                    }
                }
            }
            try await tasks.waitForAll()
        }
        result.connectSeconds = Double(monotonicNanos() - t0) / 1e9
        result.relayCPUSeconds = relay.cpuSeconds - cpu0
        try await Task.sleep(for: .seconds(2))
        sampler.cancel()
        result.timeline = await sampler.value
        result.rssAfter = relay.rss
        result.hwmAfter = relay.status("VmHWM")
        result.benchRSSAfter = ownRSS()
        let o = outcome.withLockedValue { $0 }
        result.registered = o.registered
        result.failed = o.failed
        result.firstError = o.firstError
        let all = links.withLockedValue { $0 }
        result.droppedAfterRegistering = all.filter { !$0.isOpen }.count
        for c in all { c.close() }
        for c in all { try? await c.link?.channel.closeFuture.get() }
        try? await group.shutdownGracefully()
        return result
    }

    /// One client: connect from `source`, handshake, register (30 s at most); returns with the link open.
    static func connect(_ identity: SigningKeyPair, to relay: RelayAddress, from source: SocketAddress,
                        group: EventLoopGroup, logger: Logger) async throws -> RelayClientConnection {
        let gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics(), replayCapacity: 64)
        let connection = try await RelayClientConnection.connect(to: relay, identity: identity, gate: gate, group: group.next(),
                                                                 logger: logger, localAddress: source)
        do {
            _ = try await connection.register(agent: "tandem-bench", timeout: .seconds(30))
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    static func ownRSS() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return (line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0) * 1024
        }
        return 0
    }
}

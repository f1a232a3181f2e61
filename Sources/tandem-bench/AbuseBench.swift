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

#if canImport(Glibc)
import Glibc
#endif

/// `tandem-bench abuse`: an honest peer's signed ping p50/p99 to a real node (a child process:
/// a full NodeRuntime with an in-memory store) while hostile links flood it, against the same node
/// idle in the same run, and the node's RSS. The flood comes from a second child process, from
/// other loopback addresses (127.0.0.2, or `--attacker-addresses N` of them, links assigned in turn), on four kinds of links that reconnect whenever the node
/// closes them: 4-byte empty frames from a peer that never reads, PINGs with bad signatures,
/// PONGs dated 9.5 minutes ahead (fresh ids, a new author every 4,000), and FRIEND_REQUESTs from
/// throwaway strangers. Goals: p99 under attack ≤ 3 × idle p99, node RSS < 150 MB.
///
/// The flooder stands for peers on other machines: by default it runs at idle scheduling
/// priority (`chrt --idle 0`), so the CPU it spends signing and sending is not taken from the node
/// or the honest peer on a small machine; its volume is reported (`flood`, and the node's own
/// counts) to show the node was still flooded. `--attacker-priority normal` runs it as an equal
/// and then measures the machine's scheduler as much as the node.
struct AbuseBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abuse",
        abstract: "Honest ping p50/p99 to a node while hostile links flood it, vs idle (goal p99 ≤ 3× idle, RSS < 150 MB).")

    @Option(help: "Seconds of pinging per phase (idle, then under attack).") var seconds: Double = 5
    @Option(help: "Hostile links of each of the four kinds.") var linksPerKind: Int = 2
    @Option(help: "Milliseconds between the honest peer's pings.") var interval: Double = 5
    @Option(help: "Kinds of hostile links, comma-separated: empty, bad_signature, future, stranger_request.")
    var kinds: String = FloodKind.allCases.map(\.rawValue).joined(separator: ",")
    @Option(help: "Source addresses the hostile links come from (127.0.0.2 on): 1 puts every link under one address's budgets.")
    var attackerAddresses: Int = 1
    @Option(help: "Scheduling of the flooding process: idle (stands for another machine) or normal (competes for the same cores).")
    var attackerPriority: AttackerPriority = .idle
    @Flag(help: "Indent the JSON.") var pretty = false

    enum AttackerPriority: String, ExpressibleByArgument, Sendable { case idle, normal }

    static let p99RatioGoal = 3.0
    static let rssGoalMB = 150.0

    func validate() throws {
        guard (0.5...120).contains(seconds) else { throw ValidationError("--seconds must be between 0.5 and 120") }
        guard (1...64).contains(linksPerKind) else { throw ValidationError("--links-per-kind must be between 1 and 64") }
        guard (0...1000).contains(interval) else { throw ValidationError("--interval must be between 0 and 1000") }
        guard (1...250).contains(attackerAddresses) else { throw ValidationError("--attacker-addresses must be between 1 and 250") }
        _ = try FloodKind.parseList(kinds)
    }

    func run() async throws {
        warnIfDebug()
        let started = environment()
        let report = try await AbuseBenchmark.run(seconds: seconds, linksPerKind: linksPerKind, intervalMs: interval,
                                                  kinds: kinds, attackerAddresses: attackerAddresses, attackerPriority: attackerPriority)
        say(report.summary)
        var object = report.json
        object["environment"] = started.merging(["load_average_end": loadAverage()]) { a, _ in a }
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: options)) ?? Data("{}".utf8)
        output(String(decoding: data, as: UTF8.self))
    }
}

enum AbuseBenchmark {
    struct Report {
        let idle: Percentiles
        let attack: Percentiles
        let idleCount: Int, attackCount: Int, failedPings: Int
        let rssIdleMB: Double, rssPeakMB: Double, rssEndMB: Double
        let node: [String: Any]
        let flood: [String: Any]
        let kinds: String
        let attackerAddresses: Int
        let attackerPriority: AbuseBench.AttackerPriority

        var ratio: Double { attack.p99 / max(idle.p99, 1e-9) }
        var met: Bool { ratio <= AbuseBench.p99RatioGoal && rssPeakMB < AbuseBench.rssGoalMB && failedPings == 0 }

        var summary: String {
            String(format: "abuse: honest ping p50/p99 idle %.3f/%.3f ms, under attack %.3f/%.3f ms (p99 ×%.2f, goal ≤ %.0f); node RSS %.1f → peak %.1f MB (goal < %.0f); %d failed pings: %@",
                   idle.p50, idle.p99, attack.p50, attack.p99, ratio, AbuseBench.p99RatioGoal, rssIdleMB, rssPeakMB,
                   AbuseBench.rssGoalMB, failedPings, met ? "OK" : "MISSED")
        }

        var json: [String: Any] {
            ["benchmark": "abuse",
             "honest_ping_idle_ms": idle.json.merging(["count": Double(idleCount)]) { a, _ in a },
             "honest_ping_under_attack_ms": attack.json.merging(["count": Double(attackCount)]) { a, _ in a },
             "failed_pings": failedPings,
             "p99_ratio": round3(ratio), "p99_ratio_goal": AbuseBench.p99RatioGoal,
             "node_rss_mb": ["idle": round3(rssIdleMB), "peak": round3(rssPeakMB), "end": round3(rssEndMB)],
             "node_rss_goal_mb": AbuseBench.rssGoalMB,
             "met": met, "node": node, "flood": flood, "kinds": kinds,
             "attacker_priority": attackerPriority.rawValue, "attacker_addresses": attackerAddresses]
        }
    }

    static func run(seconds: Double, linksPerKind: Int, intervalMs: Double, kinds: String, attackerAddresses: Int,
                    attackerPriority: AbuseBench.AttackerPriority) async throws -> Report {
        let timeout = Int(seconds * 4) + 120
        let node = try ChildProcess(arguments: ["abuse-child", "--role", "node", "--timeout", String(timeout)],
                                    timeoutSeconds: timeout)
        defer { node.stop() }
        let pid = node.process.processIdentifier
        let identity = SigningKeyPair.generate()
        let gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics())
        let logger = quietLogger("tandem-bench.abuse")
        var (link, waiter) = try await PeerConnector.connect(host: "127.0.0.1", port: node.port, remote: node.publicKey,
                                                             identity: identity, gate: gate, group: benchEventLoops,
                                                             logger: logger)
        var failed = 0
        func pings(for seconds: Double, sample: () -> Void) async throws -> [Double] {
            var out: [Double] = []
            let end = monotonicNanos() + UInt64(seconds * 1e9)
            while monotonicNanos() < end {
                do {
                    out.append(try await waiter.ping(timeout: .seconds(5)).rtt.milliseconds)
                } catch {
                    failed += 1
                    if !link.channel.isActive {
                        (link, waiter) = try await PeerConnector.connect(host: "127.0.0.1", port: node.port, remote: node.publicKey,
                                                                         identity: identity, gate: gate, group: benchEventLoops,
                                                                         logger: logger)
                    }
                }
                sample()
                if intervalMs > 0 { try await Task.sleep(for: .microseconds(Int(intervalMs * 1000))) }
            }
            return out
        }
        // Warm up, then idle.
        _ = try await pings(for: min(1, seconds), sample: {})
        failed = 0
        let idle = try await pings(for: seconds, sample: {})
        let rssIdle = residentMB(pid)
        // Under attack.
        let flood = try ChildProcess(arguments: ["abuse-child", "--role", "flood", "--port", String(node.port),
                                                 "--key", hexString(node.publicKey), "--links-per-kind", String(linksPerKind), "--kinds", kinds,
                                                 "--addresses", String(attackerAddresses),
                                                 "--timeout", String(timeout)],
                                     timeoutSeconds: timeout, idlePriority: attackerPriority == .idle)
        defer { flood.stop() }
        var peak = rssIdle
        var lastSample = monotonicNanos()
        let sample = {
            if monotonicNanos() - lastSample > 100_000_000 {
                lastSample = monotonicNanos()
                peak = max(peak, residentMB(pid))
            }
        }
        try await Task.sleep(for: .milliseconds(500))   // let the flood start
        let attack = try await pings(for: seconds, sample: sample)
        peak = max(peak, residentMB(pid))
        let floodStats = (try? flood.stats().raw) ?? [:]
        let nodeStats = (try? node.stats().raw) ?? [:]
        flood.stop()
        link.close()
        return Report(idle: Percentiles(idle), attack: Percentiles(attack), idleCount: idle.count, attackCount: attack.count,
                      failedPings: failed, rssIdleMB: rssIdle, rssPeakMB: peak, rssEndMB: residentMB(pid),
                      node: nodeStats, flood: floodStats, kinds: kinds, attackerAddresses: attackerAddresses,
                      attackerPriority: attackerPriority)
    }
}

/// VmRSS of a process, in MB (0 if it cannot be read).
func residentMB(_ pid: Int32) -> Double {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kib = line.split(separator: " ").dropFirst().first.flatMap { Double($0) } ?? 0
        return kib / 1024
    }
    return 0
}

// MARK: the children

/// The hidden children of `abuse`: the node under attack, and the flooder.
struct AbuseChild: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abuse-child", abstract: "Node or flooder for `tandem-bench abuse` (started by it).", shouldDisplay: false)

    enum Role: String, ExpressibleByArgument { case node, flood }

    @Option var role: Role
    @Option var timeout: Int = 300
    @Option var port: Int = 0
    @Option var key: String = ""
    @Option var linksPerKind: Int = 2
    /// Links take their source from 127.0.0.2 … 127.0.0.(1 + addresses), in turn.
    @Option var addresses: Int = 1
    @Option var kinds: String = FloodKind.allCases.map(\.rawValue).joined(separator: ",")

    func run() async throws {
        switch role {
        case .node: try await runNode()
        case .flood: try await runFlood()
        }
    }

    private func runNode() async throws {
        let identity = SigningKeyPair.generate()
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let node = try NodeRuntime(identity: identity, configuration: config, logger: quietLogger("tandem-bench.node"))
        Watchdog.start(timeoutSeconds: timeout) {
            let m = node.metrics.snapshot
            return ["frames_accepted": m.framesAccepted, "frames_rejected": m.framesRejected,
                    "handshakes_succeeded": m.handshakesSucceeded, "handshakes_failed": m.handshakesFailed,
                    "handshakes_refused": m.handshakesRefused, "links_closed": m.linksClosed, "reads_paused": m.readsPaused,
                    "error_replies_suppressed": m.errorRepliesSuppressed,
                    "replies_dropped_unwritable": m.repliesDroppedUnwritable,
                    "cpu_seconds": processCPUSeconds()]
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await node.run(signals: false) }
            let address = try await node.listener.boundAddress
            printJSONLine(["port": address.port ?? 0, "public_key": hexString(identity.publicKey), "mode": "node"])
            try await tasks.next()
        }
    }

    private func runFlood() async throws {
        guard let target = parseHex(key), target.count == 32 else { throw ValidationError("--key: 32 bytes of hex") }
        let counters = FloodCounters()
        Watchdog.start(timeoutSeconds: timeout) { counters.json }
        printJSONLine(["port": 0, "public_key": hexString(SigningKeyPair.generate().publicKey), "mode": "flood"])
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let sources = try (0..<max(1, addresses)).map { try SocketAddress(ipAddress: "127.0.0.\(2 + $0)", port: 0) }
        var next = 0
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for kind in try FloodKind.parseList(kinds) {
                for _ in 0..<linksPerKind {
                    let source = sources[next % sources.count]
                    next += 1
                    tasks.addTask {
                        while true {
                            await FloodLink.runOnce(kind: kind, host: "127.0.0.1", port: port, target: target,
                                                    source: source, group: group, counters: counters)
                            try await Task.sleep(for: .milliseconds(10))
                        }
                    }
                }
            }
            try await tasks.next()
        }
    }
}

enum FloodKind: String, CaseIterable, Sendable {
    case empty, badSignature = "bad_signature", future, strangerRequest = "stranger_request"

    static func parseList(_ text: String) throws -> [FloodKind] {
        let kinds = try text.split(separator: ",").map { name in
            guard let k = FloodKind(rawValue: String(name)) else {
                throw ValidationError("unknown kind '\(name)': use \(allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return k
        }
        guard !kinds.isEmpty else { throw ValidationError("--kinds: name at least one kind") }
        return kinds
    }
}

final class FloodCounters: Sendable {
    private let box = NIOLockedValueBox<[String: [String: Int]]>([:])
    func add(_ kind: FloodKind, _ what: String, _ n: Int = 1) {
        box.withLockedValue { $0[kind.rawValue, default: [:]][what, default: 0] += n }
    }
    var json: [String: Any] { box.withLockedValue { $0 } }
}

/// One hostile link: handshake as a throwaway identity, then write its kind of frames as fast as
/// the node takes them, until the node closes it.
enum FloodLink {
    static func runOnce(kind: FloodKind, host: String, port: Int, target: [UInt8], source: SocketAddress,
                        group: EventLoopGroup, counters: FloodCounters) async {
        let identity = SigningKeyPair.generate()
        let logger = quietLogger("tandem-bench.flood")
        counters.add(kind, "connections")
        do {
            let channel = try await ClientBootstrap(group: group)
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .bind(to: source)
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        let sync = ch.pipeline.syncOperations
                        try sync.addHandler(SecureChannelHandler(client: identity, serverPublicKey: target,
                                                                 metrics: TransportMetrics(), logger: logger))
                        try sync.addHandler(FloodWriter(kind: kind, identity: identity, target: target, counters: counters))
                    }
                }
                .connect(host: host, port: port).get()
            try await channel.closeFuture.get()
        } catch {
            counters.add(kind, "connect_failures")
        }
        counters.add(kind, "closed_by_node")
    }
}

final class FloodWriter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let kind: FloodKind
    let identity: SigningKeyPair
    let target: [UInt8]
    let counters: FloodCounters
    private var established = false
    private var author = SigningKeyPair.generate()
    private var authored = 0
    private lazy var badSignatureBatch: [UInt8] = {
        var out: [UInt8] = []
        for i in 0..<16 {
            var ping = Tandem_V1_Ping()
            ping.nonce = UInt64(i)
            let env = Envelope.sign(type: .ping, author: identity, recipient: target, createdAt: wallClockMilliseconds(),
                                    payload: (try? ping.serializedBytes()) ?? [])
            var bytes = env.bytes
            bytes[bytes.count - 1] ^= 0x01
            out += frameBytes(bytes)
        }
        return out
    }()

    init(kind: FloodKind, identity: SigningKeyPair, target: [UInt8], counters: FloodCounters) {
        self.kind = kind
        self.identity = identity
        self.target = target
        self.counters = counters
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SecureChannelEstablished {
            established = true
            if kind == .empty {
                // The empty-frame peer never reads once the handshake is done.
                try? context.channel.syncOptions?.setOption(.autoRead, value: false)
            }
            pump(context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}   // dropped

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        pump(context: context)
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }

    private func pump(context: ChannelHandlerContext) {
        guard established, context.channel.isActive else { return }
        var batches = 0
        while context.channel.isWritable, batches < 8 {
            let bytes = batch()
            context.write(wrapOutboundOut(context.channel.allocator.buffer(bytes: bytes)), promise: nil)
            counters.add(kind, "bytes", bytes.count)
            batches += 1
        }
        context.flush()
        if context.channel.isWritable {
            // Yield to the loop, then go on.
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.execute { loopBound.value.0.pump(context: loopBound.value.1) }
        }
    }

    private func batch() -> [UInt8] {
        switch kind {
        case .empty:
            return [UInt8](repeating: 0, count: 4096)
        case .badSignature:
            return badSignatureBatch
        case .future:
            var out: [UInt8] = []
            for i in 0..<16 {
                if authored >= 4_000 { author = SigningKeyPair.generate(); authored = 0 }
                authored += 1
                var pong = Tandem_V1_Pong()
                pong.nonce = UInt64(i)
                let env = Envelope.sign(type: .pong, author: author, recipient: target,
                                        createdAt: wallClockMilliseconds() + 570_000, payload: (try? pong.serializedBytes()) ?? [])
                out += frameBytes(env.bytes)
            }
            return out
        case .strangerRequest:
            var out: [UInt8] = []
            for i in 0..<4 {
                let stranger = SigningKeyPair.generate()
                var contact = Tandem_V1_ContactRecord()
                contact.publicKey = Data(stranger.publicKey)
                contact.displayName = "stranger-\(i)"
                contact.version = 1
                var request = Tandem_V1_FriendRequest()
                request.message = "hello"
                request.contact = contact
                let env = Envelope.sign(type: .friendRequest, author: stranger, recipient: target,
                                        createdAt: wallClockMilliseconds(), payload: (try? request.serializedBytes()) ?? [])
                out += frameBytes(env.bytes)
            }
            return out
        }
    }

    private func frameBytes(_ envelope: [UInt8]) -> [UInt8] {
        let n = UInt32(envelope.count)
        return [UInt8(n >> 24), UInt8((n >> 16) & 0xFF), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)] + envelope
    }
}

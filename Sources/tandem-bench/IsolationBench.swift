import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol
import TandemStore

#if canImport(Glibc)
import Glibc
#endif

/// `tandem-bench isolation`: does a friend that drives durable frames into a node slow down
/// another friend's pings? A real node (a child process: a full NodeRuntime whose store is on disk,
/// in a temporary directory, `synchronous = FULL`) and two friends in this process, each on its own
/// event-loop thread and its own loopback address (A on 127.0.0.1, B on 127.0.0.2: the node's
/// per-address frame budget is not shared). Both become friends the way a user's node does:
/// FRIEND_REQUEST, the node accepts (the child accepts exactly these two keys), FRIEND_ACCEPT
/// through the node's outbox, acknowledged. The node's links run on one event loop unless
/// `--node-loops` says otherwise, so A's and B's share it (with several, whether they do is chance).
///
/// Friend A sends one signed PING at a time, a few ms apart, for as long as B works. B works in two
/// phases, alternating in rounds, the same number of frames each:
/// - pings: signed PINGs (answered on the event loop, nothing written), paced at `--rate`;
/// - durable: CONTACT_UPDATEs with increasing record version, each a committed change at the node
///   (handled-id mark, contact row, event row) acknowledged after the commit; paced at `--rate`
///   with at most `--window` frames unacknowledged, so B goes as fast as the node acknowledges
///   them when that is slower than the rate.
/// The figure: A's p99 RTT during durable frames over A's p99 RTT during pings (goal ≤ 1.5). It
/// shows whether store writes and fsyncs are off the network path.
///
/// Checked (`met` stays false otherwise; a frame unanswered for 10 s ends the run): every frame B
/// sent was answered (PONG or ACK); the node's stored record version of B is the last one sent; the
/// node's event log holds one `contact.updated` per CONTACT_UPDATE; the node reports no store errors
/// and no frames dropped from its flow queue.
struct IsolationBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "isolation",
        abstract: "A friend's ping p99 while another friend drives durable frames into a node, vs pings (goal ≤ 1.5×).")

    @Option(help: "Frames friend B sends in each phase (pings, then durable), split over the rounds.") var frames = 5000
    @Option(help: "Frames per second B aims at in both phases.") var rate = 1000.0
    @Option(help: "Frames B keeps unanswered at most (the node queues at most 64 per author).") var window = 16
    @Option(help: "Rounds: each runs a pings phase, then a durable phase.") var rounds = 2
    @Option(help: "Milliseconds between friend A's pings.") var interval = 2.0
    @Option(help: "Event-loop threads of the node (0: NIO's default, one per core). With one, A's and B's links share it, so a store write on a loop shows; with more they may or may not.")
    var nodeLoops = 1
    @Option(help: "Durable frames and pings B sends first, not measured (opens the store's pages, warms the loops).") var warmup = 300
    @Option(help: ArgumentHelp("Directory for the node's data directory (default: a new one under the temporary directory).",
                               valueName: "path")) var dir: String?
    @Flag(help: "Keep the node's data directory.") var keep = false
    @Flag(help: "Indent the JSON.") var pretty = false

    static let p99RatioGoal = 1.5

    func validate() throws {
        guard (100...50_000).contains(frames) else { throw ValidationError("--frames must be between 100 and 50000") }
        guard (10...20_000).contains(rate) else { throw ValidationError("--rate must be between 10 and 20000") }
        guard (1...64).contains(window) else { throw ValidationError("--window must be between 1 and 64 (the node's per-author queue)") }
        guard (1...20).contains(rounds) else { throw ValidationError("--rounds must be between 1 and 20") }
        guard (0...1000).contains(interval) else { throw ValidationError("--interval must be between 0 and 1000") }
        guard (0...64).contains(nodeLoops) else { throw ValidationError("--node-loops must be between 0 and 64") }
        guard (0...10_000).contains(warmup) else { throw ValidationError("--warmup must be between 0 and 10000") }
    }

    func run() async throws {
        warnIfDebug()
        let started = environment()
        let report = try await IsolationBenchmark.run(IsolationBenchmark.Settings(
            frames: frames, rate: rate, window: window, rounds: rounds, intervalMs: interval, warmup: warmup,
            nodeLoops: nodeLoops, directory: dir, keep: keep))
        say(report.summary)
        var object = report.json
        object["environment"] = started.merging(["load_average_end": loadAverage()]) { a, _ in a }
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = try JSONSerialization.data(withJSONObject: object, options: options)
        output(String(decoding: data, as: UTF8.self))
    }
}

enum IsolationBenchmark {
    struct Settings {
        var frames = 5000
        var rate = 1000.0
        var window = 16
        var rounds = 2
        var intervalMs = 2.0
        var warmup = 300
        var nodeLoops = 1
        var directory: String?
        var keep = false
    }

    /// One phase kind's figures over all rounds.
    struct Phase {
        var aPings: [Double] = []
        var aFailed = 0
        var b = FrameDriver.Result()

        mutating func add(_ other: Phase) {
            aPings += other.aPings
            aFailed += other.aFailed
            b.add(other.b)
        }

        func json(_ s: Settings) -> [String: Any] {
            ["friend_a_ping_rtt_ms": Percentiles(aPings).json.mapValues(round3).merging(["count": Double(aPings.count)]) { a, _ in a },
             "friend_a_failed_pings": aFailed,
             "friend_b": b.json]
        }
    }

    struct Verification {
        var framesSent = 0
        var answered = 0
        var expectedVersion: Int64 = 0
        var storedVersion: Int64 = -1
        var expectedUpdates = 0
        var updateEvents = -1
        var storeErrors = -1
        var droppedFromQueue = -1
        var friends = -1

        var ok: Bool {
            answered == framesSent && storedVersion == expectedVersion && updateEvents == expectedUpdates
                && storeErrors == 0 && droppedFromQueue == 0 && friends == 2
        }
        var json: [String: Any] {
            ["ok": ok, "b_frames_sent": framesSent, "b_frames_answered": answered,
             "b_record_version_sent": expectedVersion, "b_record_version_stored": storedVersion,
             "contact_updates_sent": expectedUpdates, "contact_updated_events_stored": updateEvents,
             "node_store_errors": storeErrors, "node_frames_dropped_queue_full": droppedFromQueue, "node_friends": friends]
        }
    }

    struct Report {
        let settings: Settings
        let pings: Phase
        let durable: Phase
        let verification: Verification
        /// A's p99 in each round's pings and durable phase (ms): how much the machine's noise moves it.
        let roundsP99: [[String: Double]]
        let syncedWrite: Percentiles
        let store: [String: Any]
        let node: [String: Any]

        var ratio: Double { durable.aPings.isEmpty ? 0 : Percentiles(durable.aPings).p99 / max(Percentiles(pings.aPings).p99, 1e-9) }
        var p50Ratio: Double { Percentiles(durable.aPings).p50 / max(Percentiles(pings.aPings).p50, 1e-9) }
        var met: Bool { ratio <= IsolationBench.p99RatioGoal && verification.ok && pings.aFailed + durable.aFailed == 0 }

        var summary: String {
            let p = Percentiles(pings.aPings), d = Percentiles(durable.aPings)
            return String(format: "isolation: friend A ping p50/p99 %.3f/%.3f ms while B pings, %.3f/%.3f ms while B drives durable frames (p99 ×%.2f, goal ≤ %.1f) %@; B: %.0f pings/s (PONG p50/p99 %.3f/%.3f ms), %.0f durable frames/s (ACK p50/p99 %.3f/%.3f ms, synced 4 KiB write p50 %.3f ms); checks %@",
                          p.p50, p.p99, d.p50, d.p99, ratio, IsolationBench.p99RatioGoal, met ? "OK" : "MISSED",
                          pings.b.achievedPerSecond, pings.b.latency.p50, pings.b.latency.p99,
                          durable.b.achievedPerSecond, durable.b.latency.p50, durable.b.latency.p99, syncedWrite.p50,
                          verification.ok ? "passed" : "FAILED")
        }

        var json: [String: Any] {
            ["benchmark": "isolation",
             "frames_per_phase": settings.frames, "rounds": settings.rounds, "rate_target_per_s": settings.rate,
             "window": settings.window, "friend_a_interval_ms": settings.intervalMs, "warmup_frames": settings.warmup,
             "node_event_loops": settings.nodeLoops == 0 ? "one per core (\(System.coreCount))" as Any : settings.nodeLoops,
             "pings_phase": pings.json(settings), "durable_phase": durable.json(settings),
             "friend_a_p99_ms_by_round": roundsP99,
             "p99_ratio": round3(ratio), "p99_ratio_goal": IsolationBench.p99RatioGoal, "p50_ratio": round3(p50Ratio),
             "durable_frames_per_s": round3(durable.b.achievedPerSecond),
             "durable_ack_ms": durable.b.latency.json.mapValues(round3),
             "baseline_synced_write_ms": syncedWrite.json.mapValues(round3),
             "verification": verification.json, "met": met, "store": store, "node": node,
             "what": "node: a child process running a full NodeRuntime, store on disk (WAL, synchronous = FULL); friends A "
                + "(127.0.0.1) and B (127.0.0.2) in this process, one event-loop thread each (the node's links on "
                + "node_event_loops threads: with one, A's and B's links share it), befriended by FRIEND_REQUEST / "
                + "FRIEND_ACCEPT; A: one signed PING at a time (LinkWaiter.ping) with friend_a_interval_ms between; B, per "
                + "round: frames_per_phase / rounds signed PINGs, then as many CONTACT_UPDATEs (record version + 1 each: "
                + "handled-id mark, contact row and event row committed, then ACK), both paced at rate_target_per_s with at "
                + "most `window` unanswered; ratio: A's p99 during CONTACT_UPDATEs over A's p99 during PINGs; "
                + "baseline_synced_write_ms: 4 KiB pwrite + fdatasync in the node's directory, same run",
            ]
        }
    }

    static func run(_ s: Settings) async throws -> Report {
        let root: URL
        if let d = s.directory {
            root = URL(fileURLWithPath: d).appendingPathComponent("tandem-bench-isolation-\(getpid())")
        } else {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-isolation-\(getpid())")
        }
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        var succeeded = false
        defer {
            if succeeded && !s.keep {
                try? FileManager.default.removeItem(at: root)
            } else {
                say("isolation: the node's data directory is kept in \(root.path)")
            }
        }
        let dataDir = root.appendingPathComponent("node")
        let a = SigningKeyPair.generate(), b = SigningKeyPair.generate()
        let perPhaseSeconds = Double(s.frames) / s.rate
        let timeout = Int(perPhaseSeconds * 20) + 180
        let child = try ChildProcess(arguments: ["isolation-child", "--data-dir", dataDir.path,
                                                 "--accept", hexString(a.publicKey) + "," + hexString(b.publicKey),
                                                 "--loops", String(s.nodeLoops), "--timeout", String(timeout)],
                                     timeoutSeconds: timeout)
        defer { child.stop() }
        let nodeKey = child.publicKey
        let logger = quietLogger("tandem-bench.isolation")
        let aGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let bGroup = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer {
            aGroup.shutdownGracefully { _ in }
            bGroup.shutdownGracefully { _ in }
        }

        // Friend A: an ordinary outbound link (LinkWaiter for pings). Friend B: from 127.0.0.2.
        let aFriend = FriendLink(node: nodeKey, loop: aGroup.next())
        let (aLink, aWaiter) = try await PeerConnector.connect(
            host: "127.0.0.1", port: child.port, remote: nodeKey, identity: a,
            gate: FrameGate(localPublicKey: a.publicKey, metrics: TransportMetrics()), delegate: aFriend,
            group: aGroup, logger: logger)
        defer { aLink.close() }
        let bFriend = FriendLink(node: nodeKey, loop: bGroup.next())
        let bLink = try await bFriend.connect(port: child.port, from: "127.0.0.2", identity: b, logger: logger)
        defer { bLink.close() }

        try await befriend(aLink, aFriend, identity: a, name: "bench-a")
        try await befriend(bLink, bFriend, identity: b, name: "bench-b")
        let control = try await ControlClient.connect(dataDirectory: DataDirectory(explicit: dataDir.path))
        defer { control.close() }
        let status0 = try await control.call(method: "node.status")
        guard status0["friends"]?.intValue == 2 else {
            throw BenchError("the node reports \(status0["friends"]?.intValue ?? -1) friends after both were accepted, not 2")
        }
        say("isolation: node \(NodeID(publicKey: nodeKey).short) (store in \(dataDir.path)) has friends A and B")

        var version: Int64 = 1   // the record version the FRIEND_REQUEST carried
        var sentTotal = 0, answeredTotal = 0, updatesSent = 0
        func drive(_ kind: FrameDriver.Kind, count: Int) async throws -> FrameDriver.Result {
            let driver = FrameDriver(link: bLink, identity: b, kind: kind, count: count, rate: s.rate, window: s.window)
            bFriend.driver.withLockedValue { $0 = driver }
            defer { bFriend.driver.withLockedValue { $0 = nil } }
            let r = try await driver.run()
            sentTotal += r.sent
            answeredTotal += r.answered
            if case .contactUpdate = kind { updatesSent += r.sent }
            return r
        }
        /// B's work and A's pings at the same time; A stops when B is done.
        func phase(_ kind: FrameDriver.Kind, count: Int, into p: inout Phase) async throws {
            let done = NIOLockedValueBox(false)
            let pinger = Task { () -> ([Double], Int) in
                var rtts: [Double] = [], failed = 0
                while !done.withLockedValue({ $0 }) {
                    do {
                        rtts.append(try await aWaiter.ping(timeout: .seconds(5)).rtt.milliseconds)
                    } catch {
                        failed += 1
                        if !aLink.channel.isActive { break }
                    }
                    if s.intervalMs > 0 { try? await Task.sleep(for: .microseconds(Int(s.intervalMs * 1000))) }
                }
                return (rtts, failed)
            }
            let result: FrameDriver.Result
            do {
                result = try await drive(kind, count: count)
            } catch {
                done.withLockedValue { $0 = true }
                _ = await pinger.value
                throw error
            }
            done.withLockedValue { $0 = true }
            let (rtts, failed) = await pinger.value
            p.aPings += rtts
            p.aFailed += failed
            p.b.add(result)
        }

        // Warm-up (not measured): the store's pages, the loops, both paths.
        if s.warmup > 0 {
            _ = try await drive(.ping, count: s.warmup)
            _ = try await drive(.contactUpdate(after: version), count: s.warmup)
            version += Int64(s.warmup)
            for _ in 0..<50 { _ = try await aWaiter.ping() }
        }
        var pings = Phase(), durable = Phase()
        var roundsP99: [[String: Double]] = []
        let perRound = s.frames / s.rounds
        for round in 0..<s.rounds {
            let n = round == s.rounds - 1 ? s.frames - perRound * (s.rounds - 1) : perRound
            var p = Phase(), d = Phase()
            try await Task.sleep(for: .milliseconds(200))
            try await phase(.ping, count: n, into: &p)
            try await Task.sleep(for: .milliseconds(200))
            try await phase(.contactUpdate(after: version), count: n, into: &d)
            version += Int64(n)
            let pp = Percentiles(p.aPings).p99, dp = Percentiles(d.aPings).p99
            roundsP99.append(["pings": round3(pp), "durable": round3(dp)])
            say(String(format: "isolation: round %d: A p99 %.3f ms (B pings) / %.3f ms (B durable)", round + 1, pp, dp))
            pings.add(p)
            durable.add(d)
        }

        // Did every CONTACT_UPDATE commit? Give the node a moment for events it publishes after the ACK.
        try await Task.sleep(for: .milliseconds(300))
        var v = Verification()
        v.framesSent = sentTotal
        v.answered = answeredTotal
        v.expectedVersion = version
        v.expectedUpdates = updatesSent
        let stats = try child.stats().raw
        v.storedVersion = (stats["record_version_b"] as? Int).map(Int64.init) ?? -1
        v.updateEvents = stats["contact_updated_events_b"] as? Int ?? -1
        v.friends = stats["friends"] as? Int ?? -1
        let status = try await control.call(method: "node.status")
        v.storeErrors = status["store_errors"]?.intValue.map(Int.init) ?? -1
        v.droppedFromQueue = status["frames_dropped_queue_full"]?.intValue.map(Int.init) ?? -1

        let syncs = try CountdownBench.syncedWrites(in: root, count: 50)
        var store: [String: Any] = ["directory": dataDir.path, "filesystem": filesystemType(root.path),
                                    "synchronous": "FULL (the node's setting)"]
        for name in ["node.sqlite", "node.sqlite-wal"] {
            let size = (try? FileManager.default.attributesOfItem(atPath: dataDir.appendingPathComponent(name).path)[.size] as? Int) ?? 0
            store[name + "_bytes"] = size
        }
        var node = stats
        node["status_transport"] = status["transport"].map(Self.plain) ?? NSNull()
        node["outbox"] = status["outbox"]?.intValue ?? -1
        let report = Report(settings: s, pings: pings, durable: durable, verification: v, roundsP99: roundsP99,
                            syncedWrite: Percentiles(syncs),
                            store: store, node: node)
        if !v.ok { say("isolation: checks FAILED: \(v.json)") }
        succeeded = v.ok
        return report
    }

    /// FRIEND_REQUEST to the node; returns when it is acknowledged and the node's FRIEND_ACCEPT has
    /// arrived (and been acknowledged by `FriendLink`).
    static func befriend(_ link: PeerLink, _ friend: FriendLink, identity: SigningKeyPair, name: String) async throws {
        var contact = Tandem_V1_ContactRecord()
        contact.publicKey = Data(identity.publicKey)
        contact.displayName = name
        contact.version = 1
        var request = Tandem_V1_FriendRequest()
        request.message = "tandem-bench isolation"
        request.contact = contact
        let id = MessageID.random()
        let acked = friend.expectAck(id.bytes)
        link.send(type: .friendRequest, payload: try request.serializedBytes(), messageID: id)
        try await friend.within(acked, seconds: 20, "the ACK of \(name)'s FRIEND_REQUEST")
        try await friend.within(friend.accepted.futureResult, seconds: 20, "FRIEND_ACCEPT for \(name)")
    }

    /// A JSONValue as Foundation objects (for JSONSerialization).
    static func plain(_ v: JSONValue) -> Any {
        if let o = v.objectValue { return o.mapValues(plain) }
        if let a = v.arrayValue { return a.map(plain) }
        if let i = v.intValue { return i }
        if let d = v.doubleValue { return d }
        if let b = v.boolValue { return b }
        if let s = v.stringValue { return s }
        return NSNull()
    }

    /// The file system `path` is on, from /proc/mounts (the durable figures mean little on tmpfs).
    static func filesystemType(_ path: String) -> String {
        guard let mounts = try? String(contentsOfFile: "/proc/mounts", encoding: .utf8) else { return "unknown" }
        let real = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        var best: (point: String, type: String)?
        for line in mounts.split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count > 2 else { continue }
            let point = String(f[1])
            let inside = point == "/" || real == point || real.hasPrefix(point + "/")
            if inside, point.count >= (best?.point.count ?? -1) { best = (point, String(f[2])) }
        }
        return best.map { "\($0.type) (mounted on \($0.point))" } ?? "unknown"
    }
}

// MARK: - a friend's link

/// One friend's link to the node, seen from the friend: acknowledges the node's durable frames
/// (FRIEND_ACCEPT among them), and hands PONGs and ACKs to the frame driver running on it.
/// Callbacks arrive on the link's event loop.
final class FriendLink: PeerLinkDelegate, @unchecked Sendable {
    let node: [UInt8]
    let loop: EventLoop
    let established: EventLoopPromise<Void>
    let accepted: EventLoopPromise<Void>
    let driver = NIOLockedValueBox<FrameDriver?>(nil)
    private let acks = NIOLockedValueBox<[[UInt8]: EventLoopPromise<Void>]>([:])
    /// Durable frames of the node this friend acknowledged, by type.
    let acknowledged = NIOLockedValueBox<[String: Int]>([:])

    init(node: [UInt8], loop: EventLoop) {
        self.node = node
        self.loop = loop
        established = loop.makePromise()
        accepted = loop.makePromise()
    }

    deinit {
        established.fail(BenchError("the link was not established"))
        accepted.fail(BenchError("no FRIEND_ACCEPT"))
    }

    /// A link from `source` (a loopback address of its own) with this as its delegate.
    func connect(port: Int, from source: String, identity: SigningKeyPair, logger: Logger) async throws -> PeerLink {
        let gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics())
        let node = self.node
        let box = NIOLockedValueBox<PeerLink?>(nil)
        _ = try await ClientBootstrap(group: loop)
            .connectTimeout(.seconds(10))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .channelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    let link = try PeerPipeline.configure(channel: ch, identity: identity, serverPublicKey: node, gate: gate,
                                                          delegate: self, options: .init(), logger: logger)
                    box.withLockedValue { $0 = link }
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        try await within(established.futureResult, seconds: 10, "the handshake with the node")
        guard let link = box.withLockedValue({ $0 }) else { throw BenchError("no link") }
        return link
    }

    func expectAck(_ id: [UInt8]) -> EventLoopFuture<Void> {
        let p = loop.makePromise(of: Void.self)
        acks.withLockedValue { $0[id] = p }
        return p.futureResult
    }

    func within(_ future: EventLoopFuture<Void>, seconds: Int64, _ what: String) async throws {
        let timeout = loop.makePromise(of: Void.self)
        let timer = loop.scheduleTask(in: .seconds(seconds)) { timeout.fail(BenchError("no \(what) within \(seconds) s")) }
        future.cascade(to: timeout)
        defer { timer.cancel() }
        try await timeout.futureResult.get()
    }

    func linkEstablished(_ link: PeerLink) { established.succeed(()) }

    func link(_ link: PeerLink, received envelope: Envelope) {
        guard envelope.author == node else { return }
        switch envelope.type {
        case .ack:
            guard let m = try? AckMessage(payload: envelope.payload) else { return }
            if let waiter = acks.withLockedValue({ $0.removeValue(forKey: m.messageID) }) {
                waiter.succeed(())
            } else {
                driver.withLockedValue { $0 }?.answered(m.messageID)
            }
        case .pong:
            guard let m = try? Tandem_V1_Pong(serializedBytes: envelope.payload) else { return }
            driver.withLockedValue { $0 }?.answered(FrameDriver.key(nonce: m.nonce))
        default:
            guard Self.isDurable(envelope.type) else { return }
            var ack = Tandem_V1_Ack()
            ack.messageID = Data(envelope.messageID.bytes)
            link.send(type: .ack, payload: (try? ack.serializedBytes()) ?? [])
            acknowledged.withLockedValue { $0[envelope.type.description, default: 0] += 1 }
            if envelope.type == .friendAccept { accepted.succeed(()) }
        }
    }

    func linkClosed(_ link: PeerLink, error: Error?) {
        let e = error ?? BenchError("the node closed the link")
        established.fail(e)
        accepted.fail(e)
        driver.withLockedValue { $0 }?.fail(e)
    }

    /// The frames a node resends until acknowledged (Protocol/README.md: friend flows and challenges).
    static func isDurable(_ type: MessageType) -> Bool {
        [.friendRequest, .friendAccept, .friendDecline, .friendRemove, .contactUpdate].contains(type)
            || type.isChallenge
    }
}

// MARK: - the driver

/// Sends `count` frames of one kind on a link, paced at `rate` per second with at most `window`
/// unanswered, and times each answer (PONG or ACK). Confined to the link's event loop.
final class FrameDriver: @unchecked Sendable {
    enum Kind {
        case ping
        /// CONTACT_UPDATEs carrying record versions after `after`, one more each.
        case contactUpdate(after: Int64)
    }

    struct Result {
        var sent = 0
        var answered = 0
        var seconds = 0.0
        var latencies: [Double] = []

        var achievedPerSecond: Double { seconds > 0 ? Double(answered) / seconds : 0 }
        var latency: Percentiles { Percentiles(latencies) }

        mutating func add(_ r: Result) {
            sent += r.sent
            answered += r.answered
            seconds += r.seconds
            latencies += r.latencies
        }

        var json: [String: Any] {
            ["frames_sent": sent, "frames_answered": answered, "seconds": round3(seconds),
             "achieved_per_s": round3(achievedPerSecond),
             "answer_latency_ms": latency.json.mapValues(round3)]
        }
    }

    let link: PeerLink
    let identity: SigningKeyPair
    let kind: Kind
    let count: Int
    let intervalNanos: Double
    let window: Int
    private let loop: EventLoop
    private let done: EventLoopPromise<Result>
    private var outstanding: [[UInt8]: UInt64] = [:]
    private var result = Result()
    private var start: UInt64 = 0
    private var lastProgress: UInt64 = 0
    private var wakeup: Scheduled<Void>?
    private var watchdog: RepeatedTask?
    private var finished = false
    private let recipient: [UInt8]

    init(link: PeerLink, identity: SigningKeyPair, kind: Kind, count: Int, rate: Double, window: Int) {
        self.link = link
        self.identity = identity
        self.kind = kind
        self.count = count
        self.intervalNanos = 1e9 / rate
        self.window = window
        self.loop = link.channel.eventLoop
        self.done = loop.makePromise()
        self.recipient = link.remotePublicKey ?? []
    }

    static func key(nonce: UInt64) -> [UInt8] { withUnsafeBytes(of: nonce.bigEndian) { Array($0) } }

    func run() async throws -> Result {
        loop.execute {
            self.start = monotonicNanos()
            self.lastProgress = self.start
            // Nothing answered for 10 s: the node lost a frame (or stalled); the run fails.
            self.watchdog = self.loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { _ in
                if monotonicNanos() - self.lastProgress > 10_000_000_000 {
                    self.fail(BenchError("\(self.outstanding.count) frame(s) unanswered for 10 s (\(self.result.answered) of \(self.count) answered)"))
                }
            }
            self.pump()
        }
        return try await done.futureResult.get()
    }

    /// An answer (PONG nonce or ACKed message id) arrived. On the loop.
    func answered(_ key: [UInt8]) {
        loop.preconditionInEventLoop()
        guard !finished, let sentAt = outstanding.removeValue(forKey: key) else { return }
        let now = monotonicNanos()
        result.answered += 1
        result.latencies.append(Double(now - sentAt) / 1e6)
        lastProgress = now
        if result.answered == count {
            finish()
        } else {
            pump()
        }
    }

    func fail(_ error: Error) {
        loop.execute {
            guard !self.finished else { return }
            self.finished = true
            self.wakeup?.cancel()
            self.watchdog?.cancel()
            self.done.fail(error)
        }
    }

    private func finish() {
        finished = true
        wakeup?.cancel()
        watchdog?.cancel()
        result.seconds = Double(monotonicNanos() - start) / 1e9
        done.succeed(result)
    }

    private func pump() {
        guard !finished else { return }
        let now = monotonicNanos()
        var wrote = false
        while result.sent < count, outstanding.count < window {
            let due = start + UInt64(Double(result.sent) * intervalNanos)
            if due > now {
                if wakeup == nil {
                    wakeup = loop.scheduleTask(in: .nanoseconds(Int64(due - now))) {
                        self.wakeup = nil
                        self.pump()
                    }
                }
                break
            }
            let (envelope, key) = next()
            outstanding[key] = monotonicNanos()
            link.send(envelope, flush: false)
            result.sent += 1
            wrote = true
        }
        if wrote { link.channel.flush() }
    }

    private func next() -> (Envelope, [UInt8]) {
        switch kind {
        case .ping:
            var ping = Tandem_V1_Ping()
            ping.nonce = Sodium.randomUInt64()
            ping.sentAtMs = wallClockMilliseconds()
            let env = Envelope.sign(type: .ping, author: identity, recipient: recipient, createdAt: wallClockMilliseconds(),
                                    payload: (try? ping.serializedBytes()) ?? [])
            return (env, Self.key(nonce: ping.nonce))
        case .contactUpdate(let after):
            var contact = Tandem_V1_ContactRecord()
            contact.publicKey = Data(identity.publicKey)
            contact.displayName = "bench-b"
            contact.version = UInt64(after) + UInt64(result.sent) + 1
            var update = Tandem_V1_ContactUpdate()
            update.contact = contact
            let id = MessageID.random()
            let env = Envelope.sign(type: .contactUpdate, messageID: id, author: identity, recipient: recipient,
                                    createdAt: wallClockMilliseconds(), payload: (try? update.serializedBytes()) ?? [])
            return (env, id.bytes)
        }
    }
}

// MARK: - the node

/// The node of `tandem-bench isolation` (started by it): a full NodeRuntime with its data
/// directory (store on disk, control socket) that accepts friend requests from the keys it is
/// given and no others. Its stats line: friends, B's stored record version, the `contact.updated`
/// events in its log per friend, transport counters.
struct IsolationChild: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "isolation-child", abstract: "The node of `tandem-bench isolation` (started by it).", shouldDisplay: false)

    @Option var dataDir: String
    @Option(help: "Keys (hex, comma-separated) whose friend requests are accepted: A, then B.") var accept: String
    @Option var timeout: Int = 300
    @Option(help: "Event-loop threads for the node (0: NIO's singleton group, one per core).") var loops = 1

    func run() async throws {
        let keys = try accept.split(separator: ",").map { text -> [UInt8] in
            guard let k = parseHex(String(text)), k.count == 32 else { throw ValidationError("--accept: keys of 32 bytes in hex") }
            return k
        }
        guard keys.count == 2 else { throw ValidationError("--accept: two keys (A, B)") }
        let identity = SigningKeyPair.generate()
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let directory = DataDirectory(explicit: dataDir)
        let group: EventLoopGroup = loops > 0 ? MultiThreadedEventLoopGroup(numberOfThreads: loops) : MultiThreadedEventLoopGroup.singleton
        let node = try NodeRuntime(identity: identity, configuration: config, dataDirectory: directory, group: group,
                                   logger: quietLogger("tandem-bench.isolation.node"))
        let bKey = keys[1], bID = NodeID(publicKey: keys[1]).canonical
        Watchdog.start(timeoutSeconds: timeout) {
            let m = node.metrics.snapshot
            var updates = 0, since: Int64 = 0
            while let page = try? node.store.events(since: since, limit: 2000), let last = page.last {
                updates += page.filter { $0.type == "contact.updated" && $0.fields.contains(bID) }.count
                since = last.seq ?? Int64.max
            }
            return ["friends": (try? node.store.friendKeys().count) ?? -1,
                    "record_version_b": (try? node.store.contact(bKey))?.recordVersion ?? -1,
                    "contact_updated_events_b": updates,
                    "frames_accepted": m.framesAccepted, "frames_rejected": m.framesRejected,
                    "handshakes_succeeded": m.handshakesSucceeded, "reads_paused": m.readsPaused,
                    "replies_dropped_unwritable": m.repliesDroppedUnwritable,
                    "cpu_seconds": processCPUSeconds()]
        }
        let events = node.eventBus.subscribe(since: nil)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await node.run(signals: false) }
            tasks.addTask {
                for await e in events where e.type == "friend.request.received" {
                    guard let id = e.fields["id"]?.stringValue, let key = NodeID(id)?.publicKey,
                          keys.contains(key) else { continue }
                    _ = try? await node.friends.accept(key)
                }
            }
            let address = try await node.listener.boundAddress
            printJSONLine(["port": address.port ?? 0, "public_key": hexString(identity.publicKey), "mode": "isolation-node"])
            try await tasks.next()
        }
    }
}

import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemNode
import TandemProtocol
import TandemStore

/// `tandem-bench friends`: friend request → accepted round trip between two nodes on loopback
/// (each request durably queued, delivered, handled and acknowledged, the acceptance likewise),
/// next to the same run's floor: a signed ping/pong round trip on the same kind of link.
struct FriendsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "friends",
        abstract: "Friend request → accepted round trip on loopback (p50/p99), with a ping/pong floor.")

    @Option(help: "Round trips to measure.") var rounds: Int = 100
    @Option(help: "Where the two nodes keep their stores (default: a temporary directory; the disk matters: every step is a committed, fsynced transaction).")
    var workDir: String?

    func validate() throws {
        guard (5...10_000).contains(rounds) else { throw ValidationError("--rounds must be between 5 and 10000") }
    }

    func run() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.friends.requestsPerSenderPerMinute = 1_000_000
        config.friends.requestsPerAddressPerMinute = 1_000_000
        config.friends.retryTick = .milliseconds(200)
        // Real stores on disk, as a node keeps them (WAL, synchronous = FULL): "durable before
        // acknowledged" is part of what is measured.
        let root = URL(fileURLWithPath: workDir ?? NSTemporaryDirectory()).appendingPathComponent("tandem-friends-bench-\(getpid())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let (aliceKey, alice, _) = try LoopbackNodes.node("alice", in: root, configuration: config, logger: logger)
        let (bobKey, bob, _) = try LoopbackNodes.node("bob", in: root, configuration: config, logger: logger)
        let aliceEvents = alice.eventBus.subscribe(since: nil)
        let bobEvents = bob.eventBus.subscribe(since: nil)
        var friendTimes: [Double] = []
        var pingTimes: [Double] = []

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await alice.run(signals: false) }
            tasks.addTask { try await bob.run(signals: false) }
            // Bob accepts every request as soon as his node reports it.
            tasks.addTask {
                for await e in bobEvents where e.type == "friend.request.received" {
                    _ = try? await bob.friends.accept(aliceKey.publicKey)
                }
            }
            let bobPort = try await bob.listener.boundAddress.port!
            var accepted = aliceEvents.makeAsyncIterator()
            let clock = ContinuousClock()
            for round in 0..<(rounds + 3) {
                let start = clock.now
                _ = try await alice.friends.request(bobKey.publicKey, message: "round \(round)", address: ("127.0.0.1", bobPort))
                while let e = await accepted.next(), e.type != "friend.accepted" {}
                let elapsed = clock.now - start
                if round >= 3 { friendTimes.append(elapsed.milliseconds) } // the first rounds open the link
                // Back to strangers for the next round; wait until Bob has been told and Alice has
                // his acknowledgement (nothing left of this round in either node: each round starts
                // from idle nodes, as a user's request would).
                try await alice.friends.remove(bobKey.publicKey)
                // (A relationship that ends leaves no row behind: nil or `none`.)
                try await waitUntil {
                    guard (try? alice.store.outboxCount()) == 0 else { return false }
                    guard let contact = try? bob.store.contact(aliceKey.publicKey) else { return true }
                    return contact.relationship == Relationship.none
                }
            }
            let (link, waiter) = try await alice.connect(host: "127.0.0.1", port: bobPort, to: NodeID(publicKey: bobKey.publicKey))
            for round in 0..<(rounds + 3) {
                let (rtt, _) = try await waiter.ping()
                if round >= 3 { pingTimes.append(rtt.milliseconds) }
            }
            link.close()
            tasks.cancelAll()
        }
        // The disk under the four synced commits of a round, next to the same run's floor: a 4 KiB
        // write + fdatasync in the stores' directory, back to back and after 20 ms of idleness.
        let syncs = Percentiles(try CountdownBench.syncedWrites(in: root, count: 50))
        let idleSyncs = Percentiles(try CountdownBench.syncedWrites(in: root, count: 30, idleMs: 20))
        let f = Percentiles(friendTimes), p = Percentiles(pingTimes)
        let report: [String: Any] = [
            "benchmark": "friends",
            "rounds": rounds,
            "request_to_accepted_ms": f.json,
            "floor_signed_ping_pong_ms": p.json,
            "ratio_p50_to_floor": f.p50 / max(p.p50, 1e-9),
            "synced_write_ms": syncs.json,
            "synced_write_after_20ms_idle_ms": idleSyncs.json,
            "ratio_synced_write_p50_to_floor": syncs.p50 / max(p.p50, 1e-9),
            "ratio_synced_write_after_idle_p50_to_floor": idleSyncs.p50 / max(p.p50, 1e-9),
            "store": "on disk (WAL, synchronous = FULL)",
            "note": "each round: request queued durably, delivered, acknowledged; acceptance queued durably, delivered, acknowledged: four synced commits on the path (Alice's request, Bob's receipt, Bob's acceptance, Alice's receipt)",
        ]
        let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted])
        print(String(decoding: data, as: UTF8.self))
        FileHandle.standardError.write(Data(String(format: "friends: request→accepted p50 %.2f ms, p99 %.2f ms (ping floor p50 %.3f ms: ×%.1f); synced 4 KiB write p50 %.3f ms, after 20 ms idle %.3f ms\n",
                                                   f.p50, f.p99, p.p50, f.p50 / max(p.p50, 1e-9), syncs.p50, idleSyncs.p50).utf8))
    }

    private func waitUntil(_ condition: () -> Bool) async throws {
        for _ in 0..<5000 {
            if condition() { return }
            try await Task.sleep(for: .milliseconds(1))
        }
        throw TandemError("benchmark step did not finish within 5 s")
    }
}

struct Percentiles {
    let p50: Double, p99: Double, max: Double, min: Double
    init(_ values: [Double]) {
        let s = values.sorted()
        func at(_ q: Double) -> Double { s.isEmpty ? 0 : s[Swift.min(s.count - 1, Int((Double(s.count - 1) * q).rounded()))] }
        p50 = at(0.5)
        p99 = at(0.99)
        max = s.last ?? 0
        min = s.first ?? 0
    }
    var json: [String: Double] { ["p50": p50, "p99": p99, "max": max, "min": min] }
}

extension Duration {
    var milliseconds: Double { Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15 }
}

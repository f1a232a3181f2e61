import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemProtocol

/// `tandem demo`: two throwaway nodes on loopback, told as a story.
public enum DemoScenario {
    public static func run(say: @escaping @Sendable (String) -> Void) async throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tandem-demo-\(getpid())-\(Sodium.randomUInt64() % 100_000)")
        defer { try? FileManager.default.removeItem(at: root) }
        var logger = Logger(label: "demo")
        logger.logLevel = .critical

        say("Tandem demo: two nodes, Alice and Bob, on this machine (loopback only).")
        let aliceDir = DataDirectory(url: root.appendingPathComponent("alice"))
        let bobDir = DataDirectory(url: root.appendingPathComponent("bob"))
        try IdentityFile.create(in: aliceDir)
        try IdentityFile.create(in: bobDir)
        let alice = try IdentityFile.load(from: aliceDir)
        let bob = try IdentityFile.load(from: bobDir)
        let aliceID = NodeID(publicKey: alice.publicKey), bobID = NodeID(publicKey: bob.publicKey)
        say("1. Each gets a fresh Ed25519 identity in a temporary data directory:")
        say("   Alice  \(aliceID.display)")
        say("   Bob    \(bobID.display)")

        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let aliceNode = try NodeRuntime(identity: alice, configuration: config, logger: logger)
        let bobNode = try NodeRuntime(identity: bob, configuration: config, logger: logger)

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await aliceNode.run(signals: false) }
            tasks.addTask { try await bobNode.run(signals: false) }
            let aliceAddr = try await aliceNode.listener.boundAddress
            let bobAddr = try await bobNode.listener.boundAddress
            say("2. Both nodes listen on loopback: Alice at \(aliceAddr.hostPort), Bob at \(bobAddr.hostPort).")

            let (link, waiter) = try await aliceNode.connect(host: "127.0.0.1", port: bobAddr.port!, to: bobID)
            say("3. Alice connects to Bob. The Secret Handshake proves both identities with the Tandem network key;")
            say("   from now on every byte is encrypted with box-stream.")
            for i in 1...3 {
                let (rtt, _) = try await waiter.ping()
                say("   Alice → Bob: signed PING #\(i), Bob's signed PONG back in \(formatDuration(rtt)).")
            }

            let (_, bobWaiter) = try await bobNode.connect(host: "127.0.0.1", port: aliceAddr.port!, to: aliceID)
            let (rtt, _) = try await bobWaiter.ping()
            say("4. Bob connects to Alice the other way round and pings her: \(formatDuration(rtt)).")

            // A replayed frame is refused.
            var ping = Tandem_V1_Ping()
            ping.nonce = 7
            ping.sentAtMs = wallClockMilliseconds()
            let frame = Envelope.sign(type: .ping, author: alice, recipient: bob.publicKey,
                                      createdAt: wallClockMilliseconds(), payload: try ping.serializedBytes())
            let errorSeen = RejectionCatcher(eventLoop: link.channel.eventLoop)
            waiter.onError = { errorSeen.record($0) }
            try await link.send(frame).get()
            try await link.send(frame).get()
            let code = try await errorSeen.first.futureResult.get()
            say("5. Alice sends the very same signed frame twice: Bob answers the first and rejects the copy (\(code)).")

            let m = bobNode.metrics.snapshot
            say("6. Bob's counters: \(m.handshakesSucceeded) handshakes, \(m.framesAccepted) frames accepted, \(m.framesRejected.values.reduce(0, +)) rejected.")
            link.close()
            tasks.cancelAll()
            _ = try? await tasks.next()
        }
        say("7. Both nodes shut down and their temporary data directories are removed. Done.")
    }

    public static func formatDuration(_ d: Duration) -> String {
        let us = Double(d.components.seconds) * 1e6 + Double(d.components.attoseconds) / 1e12
        if us < 1000 { return String(format: "%.0f µs", us) }
        return String(format: "%.2f ms", us / 1000)
    }
}

/// Completes with the first ERROR code a peer reports.
final class RejectionCatcher: @unchecked Sendable {
    let first: EventLoopPromise<String>
    private var done = false
    private let eventLoop: EventLoop
    init(eventLoop: EventLoop) {
        self.eventLoop = eventLoop
        self.first = eventLoop.makePromise()
    }
    func record(_ error: Tandem_V1_Error) {
        eventLoop.execute {
            guard !self.done else { return }
            self.done = true
            self.first.succeed(error.code.name)
        }
    }
}

import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

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

        // Loopback has no broadcast address, so each node's beacons go straight to the other's
        // discovery port; on a real LAN they go to every interface's broadcast address.
        let (alicePort, bobPort) = (try freeUDPPort(), try freeUDPPort())
        func config(discoveryPort: Int, target: Int) throws -> NodeConfiguration {
            var c = NodeConfiguration()
            c.host = "127.0.0.1"
            c.port = 0
            var d = DiscoveryConfiguration()
            d.bindHost = "127.0.0.1"
            d.port = discoveryPort
            d.interval = .milliseconds(300)
            d.targets = [try SocketAddress(ipAddress: "127.0.0.1", port: target)]
            c.discovery = d
            return c
        }
        let aliceNode = try NodeRuntime(identity: alice, configuration: try config(discoveryPort: alicePort, target: bobPort),
                                        dataDirectory: aliceDir, logger: logger)
        let bobNode = try NodeRuntime(identity: bob, configuration: try config(discoveryPort: bobPort, target: alicePort),
                                      dataDirectory: bobDir, logger: logger)
        try aliceNode.friends.setName("Alice")
        try bobNode.friends.setName("Bob")
        let aliceEvents = aliceNode.eventBus.subscribe(since: nil)
        let bobEvents = bobNode.eventBus.subscribe(since: nil)

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await aliceNode.run(signals: false) }
            tasks.addTask { try await bobNode.run(signals: false) }
            let aliceAddr = try await aliceNode.listener.boundAddress
            let bobAddr = try await bobNode.listener.boundAddress
            say("2. Both nodes start: Alice listens at \(aliceAddr.hostPort), Bob at \(bobAddr.hostPort), and each sends")
            say("   signed UDP beacons so nodes nearby can find it. Nobody tells either node where the other is.")

            let seen = try await next(bobEvents, "peer.discovered", ["id": aliceID.canonical])
            say("3. Bob's node hears Alice's beacon: \(seen.fields["name"]?.stringValue ?? "?") at \(seen.fields["address"]?.stringValue ?? "?").")

            _ = try bobNode.friends.request(alice.publicKey, message: "Focus together this week?", address: nil)
            say("4. Bob sends Alice a friend request (stored in his outbox first, then delivered over the link).")
            let req = try await next(aliceEvents, "friend.request.received", ["id": bobID.canonical])
            say("   Alice's node checks the signature and shows it: \(req.fields["name"]?.stringValue ?? "?") asks “\(req.fields["message"]?.stringValue ?? "")”.")

            _ = try aliceNode.friends.accept(bob.publicKey)
            _ = try await next(bobEvents, "friend.accepted", ["id": aliceID.canonical])
            _ = try await next(bobEvents, "peer.online", ["id": aliceID.canonical])
            say("5. Alice accepts. Bob's node gets her signed answer: they are friends, and each sees the other online.")
            say("   From now on their beacons are private: only a friend can tell who sent them.")

            let (link, waiter) = try await aliceNode.connect(host: "127.0.0.1", port: bobAddr.port!, to: bobID)
            say("6. Every connection starts with the Secret Handshake (both identities proven, Tandem network key);")
            say("   then every byte is encrypted with box-stream. Alice pings Bob over a fresh link:")
            for i in 1...3 {
                let (rtt, _) = try await waiter.ping()
                say("   signed PING #\(i) → signed PONG in \(formatDuration(rtt))")
            }

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
            say("7. Alice sends the very same signed frame twice: Bob answers the first and rejects the copy (\(code)).")

            let m = bobNode.metrics.snapshot
            say("8. Bob's counters: \(m.handshakesSucceeded) handshakes, \(m.framesAccepted) frames accepted, \(m.framesRejected.values.reduce(0, +)) rejected.")
            link.close()
            tasks.cancelAll()
            _ = try? await tasks.next()
        }
        say("9. Both nodes shut down and their temporary data directories are removed. Done.")
    }

    /// Waits for the next event of `type` whose fields include `match`.
    static func next(_ events: AsyncStream<NodeEvent>, _ type: String, _ match: [String: String],
                     timeout: Duration = .seconds(20)) async throws -> NodeEvent {
        try await withThrowingTaskGroup(of: NodeEvent?.self) { group in
            group.addTask {
                for await e in events where e.type == type {
                    if match.allSatisfy({ e.fields[$0.key]?.stringValue == $0.value }) { return e }
                }
                return nil
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let event = first else {
                throw TandemError("the demo timed out waiting for \(type)", exitCode: TandemError.timeoutExitCode)
            }
            return event
        }
    }

    /// A UDP port that was free a moment ago.
    static func freeUDPPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw TandemError("cannot open a UDP socket") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bind(fd, sa, len) == 0 && getsockname(fd, sa, &len) == 0
            }
        }
        guard ok else { throw TandemError("cannot find a free UDP port") }
        return Int(UInt16(bigEndian: addr.sin_port))
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

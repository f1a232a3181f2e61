import Foundation
import Logging
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol
import TandemRelay

/// `tandem-bench messages`, through a relay (issue 33, "Same through a relay tunnel, and through the
/// mailbox"). Two more nodes, on disk, whose only way to each other is a relay on loopback: the
/// `tandem-relay` binary next to tandem-bench when there is one (`swift build -c release --product
/// tandem-relay`), else a `RelayServer` in this process. They befriend through it (no address of
/// each other is ever known), so their link is a tunnel.
///
/// - Tunnel: send → `message.delivered` on the sender, one message at a time, p50/p99; the floor
///   beside it is a signed PING/PONG through a tunnel of the same relay (two bare links).
/// - Mailbox: per round, the friend's node is stopped; a message is sent (the outbox dials, the
///   relay says the friend is offline, the frame is sealed into its mailbox: `outbox.deposited`);
///   then the friend's node starts on the same data directory. Timed from that start: the node
///   up (store open, listener bound), registered at the relay, the mail stored (`message.received`),
///   and its DELIVERED receipt back at the sender through a fresh tunnel (`message.delivered`).
struct MessagesRelayRun {
    let root: URL
    let configuration: NodeConfiguration
    let logger: Logger
    let rounds: Int
    let mailRounds: Int

    struct Figures {
        var relay = ""
        var tunnel: [Double] = []
        var tunnelPing: [Double] = []
        var mailbox: [[String: Double]] = []
    }

    func call(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    /// The relay: the `tandem-relay` process next to this binary, else one in this process.
    func run() async throws -> Figures {
        let binary = URL(fileURLWithPath: ChildProcess.ownExecutable()).deletingLastPathComponent().appendingPathComponent("tandem-relay").path
        if FileManager.default.isExecutableFile(atPath: binary) {
            let process = try RelayProcess(binary: binary, name: "messages")
            defer { process.stop() }
            var figures = try await measure(via: process.address)
            figures.relay = "tandem-relay process (\(binary))"
            return figures
        }
        var c = RelayConfiguration()
        c.listenHost = "127.0.0.1"
        c.listenPort = 0
        c.metricsHost = nil
        let mailbox = try RelayMailbox(path: nil, quotas: c.mailboxQuotas)  // what tandem-relay itself uses
        let server = RelayServer(identity: .generate(), configuration: c, mailbox: mailbox, logger: logger, maximumConnections: 256)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            defer { group.cancelAll() }
            let bound = try await server.boundAddress
            var figures = try await measure(via: RelayAddress(id: server.id, host: "127.0.0.1", port: bound.port ?? 0))
            figures.relay = "RelayServer in the bench process (no tandem-relay binary next to tandem-bench)"
            return figures
        }
    }

    /// Polls `condition` every 10 ms for at most `seconds`.
    func eventually(_ seconds: Double, _ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw BenchError("timed out waiting for \(what)")
    }

    func registered(_ node: NodeRuntime) -> Bool {
        node.relays.status().contains { $0["connected"]?.boolValue == true }
    }

    func measure(via relay: RelayAddress) async throws -> Figures {
        var figures = Figures()
        figures.tunnelPing = try await tunnelPings(via: relay)
        let aliceKey = SigningKeyPair.generate(), bobKey = SigningKeyPair.generate()
        let alice = try NodeRuntime(identity: aliceKey, configuration: configuration,
                                    dataDirectory: DataDirectory(url: root.appendingPathComponent("relay-alice")), logger: logger)
        let bobDirectory = DataDirectory(url: root.appendingPathComponent("relay-bob"))
        let bobID = NodeID(publicKey: bobKey.publicKey).canonical
        let clock = ContinuousClock()
        try await withThrowingTaskGroup(of: Void.self) { nodes in
            nodes.addTask { try await alice.run(signals: false) }
            defer { nodes.cancelAll() }
            let aliceEvents = alice.eventBus.subscribe(since: nil)
            var aliceIterator = aliceEvents.makeAsyncIterator()
            _ = try await call(alice, "relay.add", ["address": .string(relay.description)])
            try await eventually(30, "alice registered at the relay") { registered(alice) }

            // Bob's first life: befriend through the relay, then the tunnel rounds.
            let bob = try NodeRuntime(identity: bobKey, configuration: configuration, dataDirectory: bobDirectory, logger: logger)
            try await withThrowingTaskGroup(of: Void.self) { life in
                life.addTask { try await bob.run(signals: false) }
                defer { life.cancelAll() }
                let bobEvents = bob.eventBus.subscribe(since: nil)
                var bobIterator = bobEvents.makeAsyncIterator()
                _ = try await bob.listener.boundAddress
                _ = try await call(bob, "relay.add", ["address": .string(relay.description)])
                try await eventually(30, "bob registered at the relay") { registered(bob) }
                _ = try await alice.friends.request(bobKey.publicKey, message: "", address: nil, relay: relay)
                while let e = await bobIterator.next(), e.type != "friend.request.received" {}
                _ = try await bob.friends.accept(aliceKey.publicKey)
                while let e = await aliceIterator.next(), e.type != "friend.accepted" {}
                for round in 0..<(rounds + 3) {
                    let start = clock.now
                    let id = try await call(alice, "message.send", ["to": .string(bobID), "text": .string("tunnel \(round)")])["id"]?.stringValue
                    while let e = await aliceIterator.next(), !(e.type == "message.delivered" && e.fields["id"]?.stringValue == id) {}
                    if round >= 3 { figures.tunnel.append((clock.now - start).milliseconds) }
                }
                guard let link = alice.peers.link(to: bobKey.publicKey), link.relay == relay.id.publicKey else {
                    throw BenchError("alice's link to bob is not a tunnel through the relay")
                }
            }
            // The relay sees bob go (its link closes with the node).
            try await eventually(30, "alice to see bob offline") { alice.peers.link(to: bobKey.publicKey) == nil }

            for round in 0..<mailRounds {
                let sendStart = clock.now
                let id = try await call(alice, "message.send", ["to": .string(bobID), "text": .string("mail \(round)")])["id"]?.stringValue
                while let e = await aliceIterator.next(), !(e.type == "outbox.deposited" && e.fields["message_id"]?.stringValue == id) {}
                let deposited = (clock.now - sendStart).milliseconds
                let bob = try NodeRuntime(identity: bobKey, configuration: configuration, dataDirectory: bobDirectory, logger: logger)
                let bobEvents = bob.eventBus.subscribe(since: nil)
                let start = clock.now
                var figure: [String: Double] = ["send_to_deposited_ms": deposited]
                try await withThrowingTaskGroup(of: Void.self) { life in
                    life.addTask { try await bob.run(signals: false) }
                    defer { life.cancelAll() }
                    _ = try await bob.listener.boundAddress
                    figure["start_to_listening_ms"] = (clock.now - start).milliseconds
                    async let registeredAt: ContinuousClock.Instant = {
                        try await eventually(30, "bob registered again") { registered(bob) }
                        return clock.now
                    }()
                    var bobIterator = bobEvents.makeAsyncIterator()
                    while let e = await bobIterator.next(), !(e.type == "message.received" && e.fields["id"]?.stringValue == id) {}
                    figure["start_to_received_ms"] = (clock.now - start).milliseconds
                    while let e = await aliceIterator.next(), !(e.type == "message.delivered" && e.fields["id"]?.stringValue == id) {}
                    figure["start_to_delivered_ms"] = (clock.now - start).milliseconds
                    figure["start_to_registered_ms"] = (try await registeredAt - start).milliseconds
                }
                figures.mailbox.append(figure)
                try await eventually(30, "alice to see bob offline") { alice.peers.link(to: bobKey.publicKey) == nil }
            }
        }
        return figures
    }

    /// Signed PING/PONG round trips through a tunnel of `relay` between two bare links (no node):
    /// the floor of the tunnel figure, as the LAN figure's is a direct link's.
    func tunnelPings(via relay: RelayAddress) async throws -> [Double] {
        let group = MultiThreadedEventLoopGroup.singleton
        let a = SigningKeyPair.generate(), b = SigningKeyPair.generate()
        let peerA = try await RelayPeer.connect(relay, identity: a, group: group, logger: logger)
        let peerB = try await RelayPeer.connect(relay, identity: b, group: group, logger: logger)
        defer { peerA.close(); peerB.close() }
        try await peerA.register()
        try await peerB.register()
        async let incoming = peerB.nextIncoming()
        let token = try await peerA.openTunnel(to: b.publicKey)
        _ = try await incoming
        let gateA = FrameGate(localPublicKey: a.publicKey, metrics: TransportMetrics())
        let gateB = FrameGate(localPublicKey: b.publicKey, metrics: TransportMetrics())
        let logger = self.logger
        async let far = RelayTunnel.connect(relay: relay, token: token, remote: nil, identity: b, gate: gateB, group: group, logger: logger)
        let (link, waiter) = try await RelayTunnel.connect(relay: relay, token: token, remote: b.publicKey, identity: a, gate: gateA,
                                                           group: group, logger: logger)
        let (farLink, _) = try await far
        defer { link.close(); farLink.close() }
        var pings: [Double] = []
        for round in 0..<(rounds + 3) {
            let (rtt, _) = try await waiter.ping()
            if round >= 3 { pings.append(rtt.milliseconds) }
        }
        return pings
    }
}

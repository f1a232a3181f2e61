import Foundation
@_spi(StoreOwner) import TandemStore
import Logging
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import TandemRelay

/// A relay and two nodes in one process on loopback: real sockets, real handshakes. The nodes
/// know no address of each other, only the relay, so whatever link they get is a tunnel.
final class RelayLoopbackTests: XCTestCase {
    let logger: Logger = {
        var l = Logger(label: "relay-loopback-test")
        l.logLevel = .critical
        return l
    }()

    struct RunningRelay {
        let server: RelayServer
        let address: RelayAddress
        let task: Task<Void, Error>
    }

    func startRelay() async throws -> RunningRelay {
        var c = RelayConfiguration()
        c.listenHost = "127.0.0.1"
        c.listenPort = 0
        c.metricsHost = nil
        let mailbox = try RelayMailbox(path: nil, quotas: c.mailboxQuotas)
        let server = RelayServer(identity: .generate(), configuration: c, mailbox: mailbox, logger: logger,
                                 maximumConnections: 256)
        let task = Task { try await server.run() }
        let bound = try await server.boundAddress
        let address = RelayAddress(id: server.id, host: "127.0.0.1", port: try XCTUnwrap(bound.port))
        return RunningRelay(server: server, address: address, task: task)
    }

    func startNode(identity: SigningKeyPair = .generate()) async throws -> RunningNode {
        try await RunningNode.start(identity: identity, logger: logger)
    }

    func stop(_ tasks: [Task<Void, Error>]) async {
        for t in tasks { t.cancel() }
        for t in tasks { _ = await t.result }
    }

    func eventually(_ seconds: Double = 8, _ condition: () -> Bool) async -> Bool {
        await TestSupport.eventually(seconds, condition)
    }

    func event(_ node: NodeRuntime, _ type: String, seconds: Double = 8,
               where match: @escaping @Sendable (NodeEvent) -> Bool = { _ in true }) async throws -> NodeEvent {
        try await TestSupport.event(node, type, seconds: seconds, where: match)
    }

    /// Makes `relay` the node's home relay, the way `tandem relay add` does it.
    func setHome(_ node: NodeRuntime, _ relay: RelayAddress) throws {
        _ = try node.store.batch { try $0.addRelay(relay.id.publicKey, host: relay.host, port: relay.port, nowMs: Int64(wallClockMilliseconds())) }
        node.relays.poke()
    }

    func relayStatus(_ node: NodeRuntime) -> JSONValue? { node.relays.status().first }

    func isConnected(_ node: NodeRuntime) -> Bool { relayStatus(node)?["connected"]?.boolValue == true }

    func isFriend(_ node: NodeRuntime, _ other: NodeRuntime) -> Bool {
        ((try? node.store.friendKeys()) ?? []).contains(other.identity.publicKey)
    }

    // MARK: tests

    func testTwoNodesBefriendEachOtherThroughARelayTunnel() async throws {
        let relay = try await startRelay()
        let a = try await startNode(), b = try await startNode()
        defer { for t in [a.task, b.task, relay.task] { t.cancel() } }
        do {
            try setHome(a.node, relay.address)
            try setHome(b.node, relay.address)
            let registered = await eventually { self.isConnected(a.node) && self.isConnected(b.node) }
            XCTAssertTrue(registered, "both nodes register at the relay: \(String(describing: relayStatus(a.node))), "
                          + "\(String(describing: relayStatus(b.node)))")
            XCTAssertTrue(relay.server.book.withLockedValue { $0.isOnline(b.node.identity.publicKey) })

            let bKey = b.node.identity.publicKey, aKey = a.node.identity.publicKey
            _ = try await a.node.friends.request(bKey, message: "via the relay", address: nil, relay: relay.address)
            let received = try await event(b.node, "friend.request.received")
            XCTAssertEqual(received.fields["message"]?.stringValue, "via the relay")
            _ = try await b.node.friends.accept(aKey)
            _ = try await event(a.node, "friend.accepted")

            let friends = await eventually { self.isFriend(a.node, b.node) && self.isFriend(b.node, a.node) }
            XCTAssertTrue(friends, "both see each other as friends")
            // The only link between them is a tunnel through this relay.
            XCTAssertTrue(a.node.peers.isRelayed(bKey), "A's link to B is a tunnel")
            XCTAssertTrue(b.node.peers.isRelayed(aKey), "B's link to A is a tunnel")
            XCTAssertEqual(a.node.peers.link(to: bKey)?.relay, relay.address.id.publicKey)
            XCTAssertEqual(b.node.peers.link(to: aKey)?.relay, relay.address.id.publicKey)
            XCTAssertGreaterThanOrEqual(relay.server.metrics.snapshot.tunnelsOpened, 1)
            XCTAssertGreaterThan(relay.server.metrics.snapshot.bytesRelayed, 0)
            XCTAssertGreaterThanOrEqual(relay.server.book.withLockedValue { $0.splicedTunnelCount }, 1)
        }
        await stop([a.task, b.task, relay.task])
    }

    func testRelayShutdownMakesTheNodeReportDisconnected() async throws {
        let relay = try await startRelay()
        let a = try await startNode()
        defer { for t in [a.task, relay.task] { t.cancel() } }
        do {
            try setHome(a.node, relay.address)
            let connected = await eventually { self.isConnected(a.node) }
            XCTAssertTrue(connected, "registered: \(String(describing: relayStatus(a.node)))")
            _ = try await event(a.node, "relay.connected")

            // Cancelling the server's task shuts it down: RELAY_GOODBYE to every client, then close.
            relay.task.cancel()
            let ended = await eventually(5) { !self.isConnected(a.node) }
            XCTAssertTrue(ended, "the node reports the relay disconnected: \(String(describing: relayStatus(a.node)))")
            let gone = try await event(a.node, "relay.disconnected")
            XCTAssertEqual(gone.fields["relay"]?.stringValue, relay.address.description)
            XCTAssertEqual(gone.fields["reason"]?.stringValue, "the relay is shutting down",
                           "the reason comes from the RELAY_GOODBYE")
            XCTAssertEqual(relayStatus(a.node)?["connected"]?.boolValue, false)
            XCTAssertEqual(relayStatus(a.node)?["last_error"]?.stringValue, "the relay is shutting down")
        }
        await stop([a.task, relay.task])
    }

    func testASecondLinkFromTheSameNodeReplacesTheFirstWithAGoodbye() async throws {
        let relay = try await startRelay()
        let identity = SigningKeyPair.generate()
        let first = try await startNode(identity: identity)
        defer { for t in [first.task, relay.task] { t.cancel() } }
        do {
            try setHome(first.node, relay.address)
            let connected = await eventually { self.isConnected(first.node) }
            XCTAssertTrue(connected)
            // The same identity registers again from another process (a restarted node).
            let second = try await startNode(identity: identity)
            defer { second.task.cancel() }
            try setHome(second.node, relay.address)
            let gone = try await event(first.node, "relay.disconnected")
            XCTAssertEqual(gone.fields["reason"]?.stringValue, "replaced by a newer link from the same node")
            await stop([second.task])
        }
        await stop([first.task, relay.task])
    }
}

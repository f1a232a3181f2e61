import Foundation
@_spi(StoreOwner) import TandemStore
import Logging
import Sodium
import TandemNet
import TandemProtocol
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import TandemRelay

/// Messages to a friend whose node is stopped go into its mailbox at its home relay, and arrive
/// once, in order, when it starts again; its DELIVERED receipt then makes them delivered at the sender.
final class MessageMailboxTests: XCTestCase {
    let logger: Logger = {
        var l = Logger(label: "message-mailbox-test")
        l.logLevel = .critical
        return l
    }()

    func startRelay() async throws -> (server: RelayServer, address: RelayAddress, task: Task<Void, Error>) {
        var c = RelayConfiguration()
        c.listenHost = "127.0.0.1"
        c.listenPort = 0
        c.metricsHost = nil
        let mailbox = try RelayMailbox(path: nil, quotas: c.mailboxQuotas)
        let server = RelayServer(identity: .generate(), configuration: c, mailbox: mailbox, logger: logger, maximumConnections: 256)
        let task = Task { try await server.run() }
        let bound = try await server.boundAddress
        return (server, RelayAddress(id: server.id, host: "127.0.0.1", port: try XCTUnwrap(bound.port)), task)
    }

    func call(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue] = [:]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    func setHome(_ node: NodeRuntime, _ relay: RelayAddress) throws {
        _ = try node.store.batch { try $0.addRelay(relay.id.publicKey, host: relay.host, port: relay.port, nowMs: Int64(wallClockMilliseconds())) }
        node.relays.poke()
    }

    func testMessagesToAStoppedFriendWaitInItsMailbox() async throws {
        let relay = try await startRelay()
        defer { relay.task.cancel() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tdm-mail-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: dir) }
        let bIdentity = SigningKeyPair.generate()
        func startB() async throws -> (node: NodeRuntime, task: Task<Void, Error>) {
            let node = try NodeRuntime(identity: bIdentity, configuration: TestSupport.loopbackConfiguration(),
                                       dataDirectory: DataDirectory(explicit: dir.path), logger: logger)
            let task = Task { try await node.run(signals: false) }
            _ = try await node.listener.boundAddress
            return (node, task)
        }
        let a = try await RunningNode.start(logger: logger)
        defer { a.task.cancel() }
        let b1 = try await startB()
        try setHome(a.node, relay.address)
        try setHome(b1.node, relay.address)
        let registered = await TestSupport.eventually(10) {
            relay.server.book.withLockedValue { $0.isOnline(bIdentity.publicKey) && $0.isOnline(a.node.identity.publicKey) }
        }
        XCTAssertTrue(registered)
        _ = try await a.node.friends.request(bIdentity.publicKey, message: "", address: nil, relay: relay.address)
        _ = try await TestSupport.event(b1.node, "friend.request.received")
        _ = try await b1.node.friends.accept(a.node.identity.publicKey)
        _ = try await TestSupport.event(a.node, "friend.accepted")
        b1.task.cancel()
        _ = await b1.task.result
        let offline = await TestSupport.eventually(10) { !relay.server.book.withLockedValue { $0.isOnline(bIdentity.publicKey) } }
        XCTAssertTrue(offline)
        let bID = NodeID(publicKey: bIdentity.publicKey).canonical
        var ids: [String] = []
        for i in 1...3 {
            let sent = try await call(a.node, "message.send", ["to": .string(bID), "text": .string("by mail \(i)")])
            ids.append(try XCTUnwrap(sent["id"]?.stringValue))
        }
        let last = ids[2]
        _ = try await TestSupport.event(a.node, "outbox.deposited", seconds: 30, where: { $0.fields["message_id"]?.stringValue == last })
        var states: [String?] = []
        for _ in 0..<50 {
            states = (try await call(a.node, "message.list", ["friend": .string(bID)])["messages"]?.arrayValue ?? []).map { $0["state"]?.stringValue }
            if states == ["sent", "sent", "sent"] { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTAssertEqual(states, ["sent", "sent", "sent"], "left at the relay: sent, not delivered")
        let b2 = try await startB()
        defer { b2.task.cancel() }
        _ = try await TestSupport.event(b2.node, "message.received", seconds: 30, where: { $0.fields["id"]?.stringValue == last })
        let shown = try await call(b2.node, "message.list", ["friend": .string(a.node.id.canonical)])["messages"]?.arrayValue ?? []
        XCTAssertEqual(shown.map { $0["id"]?.stringValue }, ids, "once each, in order")
        XCTAssertEqual(shown.map { $0["text"]?.stringValue }, ["by mail 1", "by mail 2", "by mail 3"])
        // b's DELIVERED (queued with the messages it stored from mail) makes them delivered at a.
        _ = try await TestSupport.event(a.node, "message.delivered", seconds: 30, where: { $0.fields["id"]?.stringValue == last })
        for _ in 0..<50 {
            states = (try await call(a.node, "message.list", ["friend": .string(bID)])["messages"]?.arrayValue ?? []).map { $0["state"]?.stringValue }
            if states == ["delivered", "delivered", "delivered"] { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTAssertEqual(states, ["delivered", "delivered", "delivered"], "the friend's receipt came back")
    }
}

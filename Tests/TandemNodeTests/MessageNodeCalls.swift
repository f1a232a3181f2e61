import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore

/// What the in-process message tests do through two nodes' control methods: call a method, wait
/// for an event, list events, wait for an outbox to drain, befriend, send and list messages.
protocol MessageNodeCalls {}

extension MessageNodeCalls {
    func call(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue] = [:]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    func event(_ node: NodeRuntime, _ type: String, seconds: Double = 15,
               where match: @escaping @Sendable (NodeEvent) -> Bool = { _ in true }) async throws -> NodeEvent {
        try await TestSupport.event(node, type, seconds: seconds, where: match)
    }

    /// Every stored event of `type`, oldest first.
    func events(_ node: NodeRuntime, _ type: String) async throws -> [NodeEvent] {
        var out: [NodeEvent] = []
        var since: Int64 = 0
        while true {
            let page = try await call(node, "events.list", ["since": .int(since), "limit": 1000, "types": [.string(type)]])
            out += (page["events"]?.arrayValue ?? []).compactMap(NodeEvent.init(json:))
            guard page["more"]?.boolValue == true, let next = page["next_since"]?.intValue, next > since else { return out }
            since = next
        }
    }

    /// Waits until every frame in `node`'s outbox was acknowledged.
    func outboxDrains(_ node: NodeRuntime, file: StaticString = #filePath, line: UInt = #line) async throws {
        var waiting = -1
        for _ in 0..<300 {
            waiting = await NodeCore.run { (try? node.store.outboxCount()) ?? -1 }  // a failed read: reported below
            if waiting == 0 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTFail("\(waiting) frames still unacknowledged", file: file, line: line)
    }

    func befriend(_ a: RunningNode, _ b: RunningNode) async throws {
        let (aID, bID) = (a.node.id.canonical, b.node.id.canonical)
        _ = try await a.node.friends.request(b.node.identity.publicKey, message: "", address: ("127.0.0.1", b.port))
        _ = try await event(b.node, "friend.request.received", where: { $0.fields["id"]?.stringValue == aID })
        _ = try await b.node.friends.accept(a.node.identity.publicKey)
        _ = try await event(a.node, "friend.accepted", where: { $0.fields["id"]?.stringValue == bID })
    }

    func send(_ from: NodeRuntime, to: NodeRuntime, _ text: String, _ extra: [String: JSONValue] = [:]) async throws -> String {
        var params: [String: JSONValue] = ["to": .string(to.id.canonical), "text": .string(text)]
        for (k, v) in extra { params[k] = v }
        let sent = try await call(from, "message.send", params)
        return try XCTUnwrap(sent["id"]?.stringValue)
    }

    func list(_ node: NodeRuntime, with friend: NodeRuntime, limit: Int64 = 1000) async throws -> [JSONValue] {
        try await call(node, "message.list", ["friend": .string(friend.id.canonical), "limit": .int(limit)])["messages"]?.arrayValue ?? []
    }
}

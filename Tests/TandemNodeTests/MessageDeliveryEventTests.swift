import Foundation
import TandemNet
import TandemProtocol
import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// One event row per delivered message (Protocol/messages.md 11.6): an ACK of a MESSAGE is announced
/// as `message.delivered` only, not also as `outbox.delivered`; an ACK of any other frame (a
/// reaction here) is still announced as `outbox.delivered`.
final class MessageDeliveryEventTests: XCTestCase, MessageNodeCalls {
    func testAnAcknowledgedMessageIsAnnouncedOnceAsMessageDeliveredOnly() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        var ids: [String] = []
        for i in 0..<3 { ids.append(try await send(a.node, to: b.node, "delivered \(i)")) }
        for id in ids { _ = try await event(a.node, "message.delivered", where: { $0.fields["id"]?.stringValue == id }) }
        try await outboxDrains(a.node)

        let delivered = try await events(a.node, "message.delivered").compactMap { $0.fields["id"]?.stringValue }
        XCTAssertEqual(delivered.filter { ids.contains($0) }, ids, "each once, in order")
        let outboxBefore = try await events(a.node, "outbox.delivered")
        XCTAssertEqual(outboxBefore.filter { ids.contains($0.fields["message_id"]?.stringValue ?? "") }.count, 0,
                       "no outbox.delivered beside message.delivered")

        // A frame whose flow has no delivery event of its own keeps `outbox.delivered`.
        _ = try await call(a.node, "message.react", ["id": .string(ids[0]), "emoji": .string("👍")])
        _ = try await event(b.node, "message.reaction")
        try await outboxDrains(a.node)
        var after: [NodeEvent] = []
        for _ in 0..<100 {
            after = try await events(a.node, "outbox.delivered")
            if after.count > outboxBefore.count { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTAssertEqual(after.count, outboxBefore.count + 1, "the reaction's ACK is announced")
        XCTAssertEqual(after.last?.fields["to"]?.stringValue, b.node.id.canonical)
        XCTAssertFalse(ids.contains(after.last?.fields["message_id"]?.stringValue ?? ""))
    }
}

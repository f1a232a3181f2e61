import Foundation
import TandemNet
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// The acknowledgements of an ACKS are told to their flow in runs, and a run of MESSAGEs stores its
/// `message.delivered` events in one statement (Protocol/messages.md 11.6, session 10): each message
/// still announced once, and the sender's events in the order its frames were acknowledged — an ACK
/// of a frame no flow announces (a reaction: `outbox.delivered`) between the messages around it.
final class MessageDeliveredRunsTests: XCTestCase, MessageNodeCalls {
    static func rpc(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no \(method)") }
        return try await handler(.object(params))
    }

    func testARunOfDeliveriesKeepsTheOrderOfTheAcknowledgedFrames() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        for _ in 0..<200 {
            if b.node.peers.link(to: a.node.identity.publicKey)?.takesAcks == true { break }
            try await Task.sleep(for: .milliseconds(25))
        }
        let to = b.node.id.canonical
        // The friendship's own frames to b were announced already (`outbox.delivered`): not the reaction's.
        try await outboxDrains(a.node)
        let earlier = try await events(a.node, "outbox.delivered").filter { $0.fields["to"]?.stringValue == to }.count
        let n = 160, target = 40
        // A burst; once message `target` is answered, a reaction to it, sent while the burst goes on.
        let ids = try await withThrowingTaskGroup(of: (Int, String).self) { group in
            for i in 0..<n {
                group.addTask { [a] in
                    let sent = try await Self.rpc(a.node, "message.send", ["to": .string(to), "text": .string("run \(i)")])
                    return (i, try XCTUnwrap(sent["id"]?.stringValue))
                }
            }
            var ids = [String](repeating: "", count: n)
            for try await (i, id) in group where i >= 0 {
                ids[i] = id
                if i == target {
                    group.addTask { [a] in
                        _ = try await Self.rpc(a.node, "message.react", ["id": .string(id), "emoji": .string("👍")])
                        return (-1, "")
                    }
                }
            }
            return ids
        }
        try await outboxDrains(a.node)
        var reactionDelivered: [NodeEvent] = []
        for _ in 0..<200 {
            reactionDelivered = Array(try await events(a.node, "outbox.delivered").filter { $0.fields["to"]?.stringValue == to }.dropFirst(earlier))
            if !reactionDelivered.isEmpty { break }
            try await Task.sleep(for: .milliseconds(25))
        }
        XCTAssertEqual(reactionDelivered.count, 1, "the reaction's ACK announced once")
        let delivered = try await events(a.node, "message.delivered").filter { ids.contains($0.fields["id"]?.stringValue ?? "") }
        let seqByID = Dictionary(delivered.map { ($0.fields["id"]?.stringValue ?? "", $0.seq) }) { first, _ in first }
        XCTAssertEqual(delivered.count, n, "each message announced once")
        XCTAssertEqual(seqByID.count, n)
        // In the order of the messages' seqs (the receiver stores and acknowledges them in order).
        let sent = try await list(a.node, with: b.node).compactMap { $0["id"]?.stringValue }.filter { ids.contains($0) }
        XCTAssertEqual(delivered.compactMap { $0.fields["id"]?.stringValue }, sent)
        // The receiver handled the frames in the order they were queued (one link, oldest first):
        // the sender's events say the same of each message and the reaction.
        let received = try await events(b.node, "message.received").filter { ids.contains($0.fields["id"]?.stringValue ?? "") }
        XCTAssertEqual(received.count, n)
        let reactions = try await events(b.node, "message.reaction")
        let reaction = try XCTUnwrap(reactions.last)
        let reactionSeq = try XCTUnwrap(reactionDelivered.first?.seq)
        for r in received {
            let id = r.fields["id"]?.stringValue ?? ""
            let before = try XCTUnwrap(seqByID[id]) < reactionSeq
            XCTAssertEqual(before, r.seq < reaction.seq, "message \(id): announced on the sender's side as handled on the receiver's")
        }
    }
}

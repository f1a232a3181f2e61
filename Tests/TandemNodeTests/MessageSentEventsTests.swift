import Foundation
import NIOConcurrencyHelpers
import TandemNet
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// A send batch stores its `message.sent` events together, in one multi-row INSERT (Protocol/messages.md
/// 11.6): one per send, consecutive seqs in send order, handed out once each after the commit, and
/// none from a batch rolled back or from a send that failed.
final class MessageSentEventsTests: XCTestCase, MessageNodeCalls {
    func testABatchOfSendsYieldsItsEventsInSendOrderOnceEachAfterTheCommit() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let node = a.node, messages = a.node.messages, store = a.node.store, to = b.node.id.canonical
        // Each `message.sent` as handed out, with whether its message was committed by then.
        let seen = NIOLockedValueBox<[(NodeEvent, Bool)]>([])
        let stream = a.node.eventBus.subscribe(since: nil)
        let n = 40, bad: Set<Int> = [5, 17]
        let watcher = Task {
            for await e in stream where e.type == "message.sent" {
                let id = parseHex(e.fields["id"]?.stringValue ?? "") ?? []
                let committed = ((try? store.message(id)) ?? nil) != nil
                let count = seen.withLockedValue { $0.append((e, committed)); return $0.count }
                if count >= n - bad.count { return }
            }
        }
        // The core held until all the sends wait in the lane: they are drained as one batch.
        let hold = Task { try await NodeCore.perform {
            let deadline = Date().addingTimeInterval(30)
            while messages.sendLane.waiting < n, Date() < deadline { usleep(1000) }
            XCTAssertEqual(messages.sendLane.waiting, n, "all the sends wait for one batch")
        } }
        let answers = await withTaskGroup(of: (Int, JSONValue?).self) { group -> [Int: JSONValue?] in
            for i in 0..<n {
                group.addTask {
                    var params: [String: JSONValue] = ["to": .string(to), "text": .string("s\(i)")]
                    if bad.contains(i) { params["reply_to"] = .string("00") }  // refused: its event goes with it
                    return (i, try? await MessageCPUNodeTests.send(node, params))
                }
            }
            var out: [Int: JSONValue?] = [:]
            for await (i, answer) in group { out[i] = answer }
            return out
        }
        try await hold.value
        XCTAssertEqual(Set(answers.filter { $0.value == nil }.keys), bad, "the bad sends answered with an error")
        // Send order: the order of the seqs the sends were answered with.
        let sent = answers.compactMap { $0.value }.sorted { ($0["seq"]?.intValue ?? 0) < ($1["seq"]?.intValue ?? 0) }
        XCTAssertEqual(sent.count, n - bad.count)

        let deadline = Date().addingTimeInterval(30)
        while seen.withLockedValue({ $0.count }) < n - bad.count, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        watcher.cancel()
        let got = seen.withLockedValue { $0 }
        XCTAssertEqual(got.count, n - bad.count, "one event per send that succeeded")
        XCTAssertTrue(got.allSatisfy(\.1), "handed out after the commit")
        // Consecutive seqs, in send order (the order of the sends' conversation seqs and answers).
        let seqs = got.map(\.0.seq)
        XCTAssertEqual(seqs, (0..<seqs.count).map { seqs[0] + Int64($0) })
        XCTAssertEqual(got.map { $0.0.fields["id"]?.stringValue }, sent.map { $0["id"]?.stringValue })
        XCTAssertEqual(got.map { $0.0.fields["seq"]?.intValue }, sent.map { $0["seq"]?.intValue })
        XCTAssertEqual(got.map { $0.0.fields["to"] }, got.map { _ in .array([.string(to)]) })
        // Stored as handed out: the log holds the same events, once each.
        let stored = try await events(a.node, "message.sent")
        XCTAssertEqual(stored.map(\.seq), seqs)
        XCTAssertEqual(stored.map { $0.fields["id"] }, got.map { $0.0.fields["id"] })
    }

    func testEventsOfABatchRolledBackAreNeitherStoredNorHandedOut() async throws {
        let a = try await RunningNode.start()
        defer { a.task.cancel() }
        let bus = a.node.eventBus, store = a.node.store
        let stream = bus.subscribe(since: nil)
        let before = try store.lastEventSeq()
        struct Abandon: Error {}
        let outcome = await NodeCore.run { () -> Bool in
            do {
                try store.step { step in
                    XCTAssertTrue(bus.emit((0..<10).map { bus.record("test.rolled_back", ["i": .int(Int64($0))]) }, in: step))
                    throw Abandon()
                }
            } catch { }
            bus.published()
            return bus.emit("test.after") != nil
        }
        XCTAssertTrue(outcome)
        XCTAssertEqual(try store.events(since: before, limit: 1000).map(\.type).filter { $0.hasPrefix("test.") }, ["test.after"],
                       "none of the rolled-back batch stored")
        // The first test event a live subscriber gets is the one stored after (others: the node's own).
        var it = stream.makeAsyncIterator()
        var first: NodeEvent?
        while let e = await it.next() { if e.type.hasPrefix("test.") { first = e; break } }
        XCTAssertEqual(first?.type, "test.after")
    }
}

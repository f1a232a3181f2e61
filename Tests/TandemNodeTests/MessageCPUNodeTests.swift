import Foundation
import TandemNet
import TandemProtocol
@_spi(StoreOwner) import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// What session 9 changed on a message's way through two nodes (Protocol/messages.md 11.6): a send
/// batch carries its conversation from send to send, an inbound step reads it once, and received
/// messages reach their `on-message` hooks a step at a time — with the same outcome as before.
final class MessageCPUNodeTests: XCTestCase, MessageNodeCalls {
    /// Sends that wait together share a step; those that fail (a bad reply-to) take no seq, and
    /// the others get consecutive seqs, arrive once and in order.
    func testSendsSharingAStepGetConsecutiveSeqsWhateverFailsAmongThem() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let to = b.node.id.canonical, node = a.node
        let answers = await withTaskGroup(of: (Int, Int64?).self) { group -> [Int: Int64?] in
            for i in 0..<60 {
                group.addTask {
                    var params: [String: JSONValue] = ["to": .string(to), "text": .string("m\(i)")]
                    if i % 7 == 3 { params["reply_to"] = .string("00") }  // refused: not a message id
                    let seq = try? await Self.send(node, params)["seq"]?.intValue
                    return (i, seq)
                }
            }
            var out: [Int: Int64?] = [:]
            for await (i, seq) in group { out[i] = seq }
            return out
        }
        let failed = answers.filter { $0.value == nil }.map(\.key).sorted()
        XCTAssertEqual(failed, (0..<60).filter { $0 % 7 == 3 })
        let seqs = answers.compactMap { $0.value }.sorted()
        XCTAssertEqual(seqs, Array(1...Int64(60 - failed.count)), "consecutive, none taken by a failed send")
        try await outboxDrains(a.node)
        let theirs = try await list(b.node, with: a.node)
        XCTAssertEqual(theirs.count, seqs.count, "each once")
        // In seq order on Bob's side, and each text under the seq its sender was answered with.
        let bySeq = Dictionary(uniqueKeysWithValues: answers.compactMap { i, seq in seq.map { ($0, "m\(i)") } })
        XCTAssertEqual(theirs.compactMap { $0["text"]?.stringValue }, seqs.map { bySeq[$0]! })
    }

    /// `message.send` on `node` (from a child task: no test case captured).
    static func send(_ node: NodeRuntime, _ params: [String: JSONValue]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry("message.send") else { throw TandemError("no method message.send") }
        return try await handler(.object(params))
    }

    /// A burst's messages reach the hook once each, in order, however many share a step.
    func testTheHookRunsOnceForEachMessageOfABurstInOrder() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-hooks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("out").path
        let script = dir.appendingPathComponent("on-message").path
        try "#!/bin/sh\nprintf '%s\\n' \"$TANDEM_TEXT_SAFE\" >> \(out)\n".write(toFile: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script)
        let a = try await RunningNode.start()
        let b = try await RunningNode.start(configure: { $0.focus.hooksDirectory = dir.path })
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        // Sent at once: they share send batches, and Bob's node stores them a batch per step.
        let to = b.node.id.canonical, node = a.node
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 1...40 { group.addTask { _ = try await Self.send(node, ["to": .string(to), "text": .string("burst \(i)")]) } }
            try await group.waitForAll()
        }
        try await outboxDrains(a.node)
        let texts = try await list(b.node, with: a.node).compactMap { $0["text"]?.stringValue }
        XCTAssertEqual(texts.count, 40)
        var lines: [String] = []
        for _ in 0..<300 {
            lines = ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            if lines.count >= texts.count { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTAssertEqual(lines, texts, "each message once, in the order stored")
    }
}

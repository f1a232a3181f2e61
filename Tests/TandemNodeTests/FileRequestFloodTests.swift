import Foundation
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// A friend that asks for far more than a receiver's window (Protocol/messages.md 7.4, 7.5): the
/// sender keeps at most its serving bound queued and at most `pendingPerFriend` requests waiting,
/// drops the rest, serves what it kept, and is left with nothing waiting.
final class FileRequestFloodTests: XCTestCase, MessageNodeCalls {
    func testAFriendAskingFarPastTheWindowIsServedWithinTheSendersBounds() async throws {
        let a = try await RunningNode.start(configure: { $0.fileLimits.queuedChunksPerFriend = 4 })
        // The friend does not fetch the file itself: every request is the test's.
        let b = try await RunningNode.start(configure: { $0.fileLimits.autoAcceptBytes = 0 })
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let chunks = 12
        let bytes = (0..<(chunks * ChatLimits.chunkBytes)).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-flood-\(hexString(Sodium.randomBytes(6)))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("big.bin").path
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        let sent = try await call(a.node, "message.send_file", ["to": .string(b.node.id.canonical), "path": .string(path)])
        let id = try XCTUnwrap(FileID(bytes: parseHex(try XCTUnwrap(sent["file_id"]?.stringValue)) ?? []))
        let files = a.node.messageFiles, bKey = b.node.identity.publicKey
        let link = try XCTUnwrap(a.node.peers.link(to: bKey))
        // Forty requests for the whole file at once, each past what one request is served
        // (a window of 480 chunks asked for a 12-chunk file).
        let (queued, waiting) = try await NodeCore.perform {
            try a.node.store.step { step in
                for _ in 0..<40 {
                    files.serve(FileRequestMessage(fileID: id, ranges: [ChunkRange(first: 0, count: chunks)]), from: bKey, link: link, step)
                }
            }
            return (files.disk.queuedChunks(for: bKey), files.waitingReads[bKey]?.count ?? 0)
        }
        XCTAssertLessThanOrEqual(queued, 4, "never more than the serving bound queued")
        XCTAssertLessThanOrEqual(waiting, MessageFiles.Limits().pendingPerFriend, "the rest waits, within its bound; the others are dropped")
        // What was kept is served, and nothing stays waiting.
        var left = 1
        for _ in 0..<300 where left > 0 {
            left = await NodeCore.run { (files.waitingReads[bKey]?.count ?? 0) + files.disk.queuedChunks(for: bKey) }
            if left > 0 { try await Task.sleep(for: .milliseconds(100)) }
        }
        XCTAssertEqual(left, 0, "every kept request served")
        // At most the first request and the waiting ones went out: 9 × 12 chunks, not 40 × 12.
        var moved: Int64 = 0
        for _ in 0..<50 {
            let now = try await call(a.node, "message.file_info", ["id": .string(id.description)])["bytes_sent"]?.intValue ?? 0
            if now == moved, now > 0 { break }
            moved = now
            try await Task.sleep(for: .milliseconds(100))
        }
        XCTAssertGreaterThanOrEqual(moved, Int64(bytes.count))
        XCTAssertLessThanOrEqual(moved, Int64((1 + MessageFiles.Limits().pendingPerFriend) * bytes.count))
    }
}

import Foundation
import Logging
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeMessages

/// Files between two in-process nodes on loopback (Protocol/messages.md 7): a small and a
/// multi-chunk file arrive byte for byte; a chunk whose path does not verify is refused; a
/// stranger's offer stores nothing; the pending-files bound answers FILE_CANCEL.
final class MessageFileTests: XCTestCase, MessageNodeCalls {
    /// An offer of a three-chunk file (bytes from `salt`) from `a` put straight on `b`, which
    /// accepts it and asks for the chunks; `a` never serves them: the test plays them.
    func offer(from a: RunningNode, to b: RunningNode, name: String, salt: Int) async throws
        -> (id: FileID, chunks: [[UInt8]], tree: ChunkTreeLevels) {
        let data = (0..<(2 * ChatLimits.chunkBytes + 100)).map { UInt8(truncatingIfNeeded: $0 &* salt) }
        let chunks = stride(from: 0, to: data.count, by: ChatLimits.chunkBytes).map { Array(data[$0..<min(data.count, $0 + ChatLimits.chunkBytes)]) }
        let tree = ChunkTreeLevels(leaves: chunks.map { ChunkTree.leafHash($0) })
        let id = FileID.random()
        let offer = FileOfferMessage(fileID: id, name: name, size: UInt64(data.count), fileHash: Hash.blake2b(data), chunkRoot: tree.root)
        let files = b.node.messageFiles, aKey = a.node.identity.publicKey
        try await NodeCore.perform {
            try b.node.store.step { step in
                files.loadIfNeeded(step)
                try files.receiveOffer(offer, from: aKey, step)
            }
        }
        return (id, chunks, tree)
    }

    func tempFile(_ bytes: [UInt8], name: String) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-file-test-\(hexString(Sodium.randomBytes(6)))")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let path = dir.appendingPathComponent(name).path
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        return path
    }

    func testASmallAndAMultiChunkFileArriveByteForByte() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let small = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let large = (0..<(3 * ChatLimits.chunkBytes + 12_345)).map { UInt8(truncatingIfNeeded: ($0 &* 7) ^ ($0 >> 9)) }
        for (bytes, name, caption) in [(small, "note.txt", Optional<String>.none), (large, "desk photo.jpg", "my desk")] {
            let path = try tempFile(bytes, name: name)
            var params: [String: JSONValue] = ["to": .string(b.node.id.canonical), "path": .string(path)]
            if let caption { params["text"] = .string(caption) }
            let sent = try await call(a.node, "message.send_file", params)
            let fileID = try XCTUnwrap(sent["file_id"]?.stringValue)
            let got = try await TestSupport.event(b.node, "message.file_received", seconds: 30,
                                                  where: { $0.fields["file_id"]?.stringValue == fileID })
            let stored = try XCTUnwrap(got.fields["path"]?.stringValue)
            XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: stored))), bytes, name)
            XCTAssertEqual((stored as NSString).lastPathComponent, name)
            XCTAssertEqual(got.fields["bytes_received"]?.intValue, Int64(bytes.count), "no chunk twice")
            // `message list` on both sides: the message carries the file and its state.
            let theirs = try await call(b.node, "message.list", ["friend": .string(a.node.id.canonical)])["messages"]?.arrayValue ?? []
            let m = try XCTUnwrap(theirs.first { $0["id"] == sent["id"] })
            XCTAssertEqual(m["text"]?.stringValue, caption ?? name)
            XCTAssertEqual(m["file"]?["state"]?.stringValue, "received")
            XCTAssertEqual(m["file"]?["size"]?.intValue, Int64(bytes.count))
            XCTAssertEqual(m["file"]?["percent"]?.intValue, 100)
            let sentEvent = try await TestSupport.event(a.node, "message.file_sent", where: { $0.fields["file_id"]?.stringValue == fileID })
            XCTAssertEqual(sentEvent.fields["bytes_sent"]?.intValue, Int64(bytes.count))
            let mine = try await call(a.node, "message.file_info", ["id": .string(fileID)])
            XCTAssertEqual(mine["state"]?.stringValue, "sent")
            XCTAssertEqual(mine["direction"]?.stringValue, "out")
        }
        // The same name again lands beside the first, never over it.
        let again = try await call(a.node, "message.send_file", ["to": .string(b.node.id.canonical), "path": .string(try tempFile(small, name: "note.txt"))])
        let got = try await TestSupport.event(b.node, "message.file_received", seconds: 30,
                                              where: { $0.fields["file_id"] == again["file_id"] })
        XCTAssertEqual((got.fields["path"]?.stringValue.map { ($0 as NSString).lastPathComponent }), "note (2).txt")
    }

    /// Several files fetched from one friend at once: requests that find the sender's serving
    /// bound full wait at the sender and are served as its queue drains (messages.md 7.4), never
    /// left to the receiver's request timeout — here an hour, so a request cut short would never
    /// be asked again and its file never arrive.
    func testRequestsPastTheServingBoundAreServedAsTheQueueDrains() async throws {
        let a = try await RunningNode.start(configure: { $0.fileLimits.queuedChunksPerFriend = 4 })
        let b = try await RunningNode.start(configure: { $0.fileLimits.requestTimeoutMs = 3_600_000 })
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        var expected: [String: [UInt8]] = [:]
        for n in 0..<3 {
            let bytes = (0..<(5 * ChatLimits.chunkBytes + 99)).map { UInt8(truncatingIfNeeded: ($0 &* (n + 3)) ^ ($0 >> 11)) }
            let sent = try await call(a.node, "message.send_file", ["to": .string(b.node.id.canonical),
                                                                    "path": .string(try tempFile(bytes, name: "part\(n).bin"))])
            expected[try XCTUnwrap(sent["file_id"]?.stringValue)] = bytes
        }
        for (fileID, bytes) in expected {
            let got = try await TestSupport.event(b.node, "message.file_received", seconds: 60,
                                                  where: { $0.fields["file_id"]?.stringValue == fileID })
            let stored = try XCTUnwrap(got.fields["path"]?.stringValue)
            XCTAssertEqual(Array(try Data(contentsOf: URL(fileURLWithPath: stored))), bytes)
            XCTAssertEqual(got.fields["bytes_received"]?.intValue, Int64(bytes.count), "no chunk twice")
        }
        let waiting = await NodeCore.run { a.node.messageFiles.waitingReads.count }
        XCTAssertEqual(waiting, 0, "nothing left waiting once every file is served")
    }

    /// A chunk decoded on the event loop and checked by the writing lane (messages.md 11.4) that does
    /// not match its path is refused as on the core: not written, counted, told as
    /// `message.file_bad_chunk`, asked again; the 16th ends the transfer. A good one is held once synced.
    func testAChunkCheckedOffTheCoreThatDoesNotMatchIsRefusedAndCounted() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let (id, chunks, tree) = try await offer(from: a, to: b, name: "y.bin", salt: 11)
        let files = b.node.messageFiles, aKey = a.node.identity.publicKey
        let bad = FileChunkMessage(fileID: id, index: 1, data: chunks[1].map { $0 ^ 1 }, proof: tree.proof(index: 1))
        let good = FileChunkMessage(fileID: id, index: 0, data: chunks[0], proof: tree.proof(index: 0))
        func offCore(_ chunk: FileChunkMessage) async throws {
            try await NodeCore.perform {
                try b.node.store.step { step in files.receive(chunk, from: aKey, checkedOffCore: true, step) }
                b.node.eventBus.published()
            }
        }
        try await offCore(bad)
        let refused = try await TestSupport.event(b.node, "message.file_bad_chunk", seconds: 30)
        XCTAssertEqual(refused.fields["index"]?.intValue, 1)
        XCTAssertEqual(refused.fields["bad_chunks"]?.intValue, 1)
        let afterBad = await NodeCore.run { files.incoming[id].map { ($0.receiver.verifiedChunks, $0.receiver.checking) } }
        XCTAssertEqual(afterBad?.0, 0)
        XCTAssertEqual(afterBad?.1, [], "reported back: no longer being checked")
        // Nothing was written for it (the partial file holds no byte at its offset).
        let partial = await NodeCore.run { files.incoming[id]?.partial } ?? ""
        let size = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0
        XCTAssertLessThanOrEqual(size, ChatLimits.chunkBytes)
        // A good one is held once it is written and synced (the timer syncs a stalled transfer).
        try await offCore(good)
        var held = 0
        for _ in 0..<100 where held == 0 {
            held = await NodeCore.run { files.incoming[id]?.receiver.verifiedChunks } ?? -1
            if held == 0 { try await Task.sleep(for: .milliseconds(100)) }
        }
        XCTAssertEqual(held, 1)
        // Fifteen more bad chunks (each asked again after its refusal) end the transfer.
        for n in 2...16 {
            try await offCore(bad)
            if n < 16 {
                _ = try await TestSupport.event(b.node, "message.file_bad_chunk", seconds: 30,
                                                where: { $0.fields["bad_chunks"]?.intValue == Int64(n) })
            }
        }
        _ = try await TestSupport.event(b.node, "message.file_failed", seconds: 30, where: { $0.fields["reason"]?.stringValue == "bad data" })
        let row = try XCTUnwrap(try b.node.store.fileTransfer(id.bytes))
        XCTAssertEqual(row.state, .failed)
    }

    func testAChunkThatDoesNotMatchItsHashIsRefusedAndAGoodOneIsKept() async throws {
        let a = try await RunningNode.start(), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        // An offer from a (a friend of b) for a file a never serves: b asks, and we play the chunks.
        let (id, chunks, tree) = try await offer(from: a, to: b, name: "x.bin", salt: 13)
        let files = b.node.messageFiles, aKey = a.node.identity.publicKey
        let bad = FileChunkMessage(fileID: id, index: 1, data: chunks[1].map { $0 ^ 1 }, proof: tree.proof(index: 1))
        let good = FileChunkMessage(fileID: id, index: 0, data: chunks[0], proof: tree.proof(index: 0))
        let stranger = SigningKeyPair.generate().publicKey
        try await NodeCore.perform {
            try b.node.store.step { step in
                files.receive(good, from: stranger, step)  // not the offer's sender: dropped
                files.receive(bad, from: aKey, step)
            }
            b.node.eventBus.published()
        }
        let refused = try await TestSupport.event(b.node, "message.file_bad_chunk")
        XCTAssertEqual(refused.fields["index"]?.intValue, 1)
        let held = await NodeCore.run { files.incoming[id]?.receiver.verifiedChunks }
        XCTAssertEqual(held, 0, "neither the stranger's chunk nor the bad one was taken")
        try await NodeCore.perform { try b.node.store.step { step in files.receive(good, from: aKey, step) } }
        let kept = await NodeCore.run { files.incoming[id]?.receiver.verifiedChunks }
        XCTAssertEqual(kept, 1)
        // Fifteen more bad chunks end the transfer (BAD_DATA), and its partial file goes.
        for _ in 0..<15 {
            try await NodeCore.perform {
                try b.node.store.step { step in
                    // Asked again after each refusal, so each one reaches the hash check.
                    files.receive(bad, from: aKey, step)
                }
            }
        }
        _ = try await TestSupport.event(b.node, "message.file_failed", where: { $0.fields["reason"]?.stringValue == "bad data" })
        let row = try XCTUnwrap(try b.node.store.fileTransfer(id.bytes))
        XCTAssertEqual(row.state, .failed)
        let partial = await NodeCore.run { files.partialPath(id) }
        let removed = await TestSupport.eventually { !FileManager.default.fileExists(atPath: partial) }
        XCTAssertTrue(removed)
    }

    func testAStrangersOfferStoresNothingAndPendingFilesAreBounded() async throws {
        let a = try await RunningNode.start(configure: { $0.fileLimits.pendingPerFriend = 2 }), b = try await RunningNode.start()
        defer { a.task.cancel(); b.task.cancel() }
        try await befriend(a, b)
        let files = a.node.messageFiles, bKey = b.node.identity.publicKey
        func offer(_ size: UInt64) -> FileOfferMessage {
            FileOfferMessage(fileID: .random(), name: "f.bin", size: size, fileHash: [UInt8](repeating: 1, count: 32),
                             chunkRoot: [UInt8](repeating: 2, count: 32))
        }
        // A stranger's offer, as mail or on a link: nothing stored.
        let stranger = SigningKeyPair.generate()
        let o = offer(10)
        let env = Envelope.sign(type: .fileOffer, author: stranger, recipient: a.node.identity.publicKey,
                                createdAt: wallClockMilliseconds(), payload: o.payload)
        try await NodeCore.perform { try a.node.store.step { step in files.handle(env, from: nil, step) } }
        XCTAssertNil(try a.node.store.fileTransfer(o.fileID.bytes))
        // Offers over the auto-accept limit wait; the third pending one from the same friend is refused.
        try await NodeCore.perform { try a.node.store.step { step in try step.setSetting(MessageFiles.autoAcceptSetting, "0") } }
        let offers = [offer(5), offer(6), offer(7)]
        try await NodeCore.perform {
            try a.node.store.step { step in for o in offers { try files.receiveOffer(o, from: bKey, step) } }
            a.node.eventBus.published()
        }
        XCTAssertEqual(try a.node.store.fileTransfer(offers[0].fileID.bytes)?.state, .offered)
        XCTAssertEqual(try a.node.store.fileTransfer(offers[1].fileID.bytes)?.state, .offered)
        XCTAssertNil(try a.node.store.fileTransfer(offers[2].fileID.bytes), "over the bound: not stored")
        let refused = try await TestSupport.event(a.node, "message.file_refused")
        XCTAssertEqual(refused.fields["file_id"]?.stringValue, offers[2].fileID.description)
        // The refusal rides the outbox to the friend as FILE_CANCEL TOO_LARGE.
        let frames = try a.node.store.read { db in
            try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox WHERE type = ?", arguments: [Int(MessageType.fileCancel.rawValue)]) ?? 0
        }
        XCTAssertLessThanOrEqual(frames, 1)
        // Accepting one over the limit by hand starts it; cancelling ends it.
        _ = try await call(a.node, "message.file_accept", ["id": .string(offers[0].fileID.description)])
        XCTAssertEqual(try a.node.store.fileTransfer(offers[0].fileID.bytes)?.state, .receiving)
        let cancelled = try await call(a.node, "message.file_cancel", ["id": .string(offers[0].fileID.description)])
        XCTAssertEqual(cancelled["state"]?.stringValue, "failed")
    }

    func testTheLevelTreeGivesRFC9162PathsAndRoots() {
        for n in [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 33] {
            let leaves = (0..<n).map { ChunkTree.leafHash([UInt8(truncatingIfNeeded: $0)]) }
            let t = ChunkTreeLevels(leaves: leaves)
            XCTAssertEqual(t.root, ChunkTree.root(leaves), "n=\(n)")
            for i in 0..<n {
                XCTAssertEqual(t.proof(index: i), ChunkTree.proof(index: i, leaves), "n=\(n) i=\(i)")
                XCTAssertTrue(ChunkTree.verify(leaf: leaves[i], index: i, count: n, proof: t.proof(index: i), root: t.root))
            }
            XCTAssertEqual(ChunkTreeLevels(packedLeaves: t.packedLeaves), t)
        }
        XCTAssertNil(ChunkTreeLevels(packedLeaves: [1, 2, 3]))
        XCTAssertNil(ChunkTreeLevels(packedLeaves: []))
    }
}

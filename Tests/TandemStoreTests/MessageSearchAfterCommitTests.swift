import Foundation
import GRDB
import TandemProtocol
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// The search index after the synced commit (Protocol/messages.md 8 and 11.5): a step that syncs
/// commits its messages with a note each, and the store indexes the notes in a soft transaction of
/// its own once the step's after-commit actions ran; a crash between the two leaves the notes, which
/// the store indexes when it opens.
final class MessageSearchAfterCommitTests: XCTestCase {
    let bob = [UInt8](repeating: 2, count: 32)

    private func mid(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 16) }

    private func inbound(_ c: ConversationRow, _ n: UInt8, text: String) -> StoredMessage {
        StoredMessage(id: mid(n), conversationId: c.id!, author: bob, seq: UInt64(n), lamport: UInt64(n), sentLamport: UInt64(n),
                      text: text, replyTo: nil, sentAtMs: Int64(n), receivedAtMs: Int64(n), state: .received)
    }

    private func noted(_ store: NodeStore) throws -> Int {
        try store.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM messageFtsPending") ?? -1 }
    }

    func testASyncedStepsMessagesAreIndexedAfterItsCommitAndACrashBetweenIsCaughtUpAtOpen() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fts-later-\(UUID().uuidString)")
        let crashed = dir.appendingPathComponent("crashed")
        try FileManager.default.createDirectory(at: crashed, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path
        let store = try NodeStore(path: path)
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        let passesBefore = store.deferredIndexPasses

        // Once the synced commit is on disk (the first after-commit action, where ACKs and answers
        // go), the message and its note are committed and the index does not hold it yet; what is
        // on disk then is what a kill -9 at that moment leaves: a copy of the files.
        var atCommit: (stored: Bool, noted: Int, found: Int)?
        try store.batch { step in
            _ = try step.receiveMessage(inbound(c, 1, text: "searchable after a crash"))
            step.afterCommit {
                atCommit = ((try? store.message(self.mid(1))) != nil, (try? self.noted(store)) ?? -1,
                            (try? store.searchMessages("crash").count) ?? -1)
                for suffix in ["", "-wal"] {
                    try? FileManager.default.copyItem(atPath: path + suffix,
                                                      toPath: crashed.appendingPathComponent("node.sqlite").path + suffix)
                }
            }
        }
        XCTAssertEqual(atCommit?.stored, true)
        XCTAssertEqual(atCommit?.noted, 1, "the note is committed with the message")
        XCTAssertEqual(atCommit?.found, 0, "not indexed in the synced commit")
        // The store's pass after the step: searchable when the step returns, no note left.
        XCTAssertEqual(store.deferredIndexPasses, passesBefore + 1)
        XCTAssertEqual(try store.searchMessages("crash").map(\.messageId), [mid(1)])
        XCTAssertEqual(try noted(store), 0)
        XCTAssertEqual(store.deferredIndexFailures, 0)

        // The crash image: opening it indexes what was noted, once.
        let reopened = try NodeStore(path: crashed.appendingPathComponent("node.sqlite").path)
        XCTAssertEqual(reopened.deferredIndexPasses, 1)
        XCTAssertEqual(try noted(reopened), 0)
        XCTAssertEqual(try reopened.searchMessages("crash").map(\.messageId), [mid(1)])
        try reopened.batch { step in
            try step.read { db in try db.execute(sql: "INSERT INTO messageFts(messageFts) VALUES ('integrity-check')") }
        }
        // A message that changes or goes while it is still noted leaves no stale entry either.
        try reopened.batch { step in
            _ = try step.receiveMessage(inbound(c, 2, text: "gone before the index"))
            step.afterCommit {
                _ = try? reopened.batch { try $0.retractMessage(self.mid(2), author: self.bob) }
            }
        }
        XCTAssertEqual(try reopened.searchMessages("gone").count, 0)
        XCTAssertEqual(try noted(reopened), 0)
        try reopened.batch { step in
            try step.read { db in try db.execute(sql: "INSERT INTO messageFts(messageFts) VALUES ('integrity-check')") }
        }
    }

    /// A message is a durable write: a step opened not to sync that stores one syncs after all
    /// (`write(durable:)`), and so indexes it after its commit too.
    func testAMessageInAStepOpenedUnsyncedIsIndexedAfterItsCommitToo() throws {
        let store = try NodeStore.inMemory()
        let c = try store.batch { try $0.directConversation(peer: bob, nowMs: 1) }
        let passes = store.deferredIndexPasses
        var found = -1
        try store.batch(syncing: false) { step in
            _ = try step.receiveMessage(inbound(c, 1, text: "soft words"))
            step.afterCommit { found = (try? store.searchMessages("soft").count) ?? -1 }
        }
        XCTAssertEqual(found, 0)
        XCTAssertEqual(store.deferredIndexPasses, passes + 1)
        XCTAssertEqual(try store.searchMessages("soft").map(\.messageId), [mid(1)])
    }
}

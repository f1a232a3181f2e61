import Foundation
import GRDB
import TandemStore
import XCTest

/// `NodeStore.batch`: many intents in one commit (group commit), actions after the commit,
/// failures contained.
final class BatchTests: XCTestCase {
    struct Boom: Error {}

    private func fileStore() throws -> (NodeStore, String, URL) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("batch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let path = dir.appendingPathComponent("node.sqlite").path
        return (try NodeStore(path: path), path, dir)
    }

    func testWritesShareOneCommitAndAfterCommitActionsFollowItInOrder() throws {
        let (store, path, dir) = try fileStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        var order: [String] = []
        try store.batch {
            try store.setSetting("a", "1")
            store.afterCommit { order.append("first") }
            try store.setSetting("b", "2")
            // Reads inside the batch see what it wrote.
            XCTAssertEqual(try store.setting("a"), "1")
            XCTAssertTrue(store.isInBatch)
            // Another connection does not see it before the commit.
            let other = try NodeStore(path: path)
            XCTAssertNil(try other.setting("a"))
            store.afterCommit { order.append("second") }
            XCTAssertTrue(order.isEmpty, "nothing runs before the commit")
        }
        XCTAssertFalse(store.isInBatch)
        XCTAssertEqual(order, ["first", "second"])
        let reopened = try NodeStore(path: path)
        XCTAssertEqual(try reopened.setting("a"), "1")
        XCTAssertEqual(try reopened.setting("b"), "2")
    }

    func testABatchThatFailsKeepsNothingAndRunsNoAction() throws {
        let store = try NodeStore.inMemory()
        var ran = false
        XCTAssertThrowsError(try store.batch {
            try store.setSetting("a", "1")
            store.afterCommit { ran = true }
            throw Boom()
        })
        XCTAssertNil(try store.setting("a"))
        XCTAssertFalse(ran)
        // Outside a batch an action runs at once.
        store.afterCommit { ran = true }
        XCTAssertTrue(ran)
    }

    func testAFailingWriteInsideABatchRollsBackOnlyItself() throws {
        let store = try NodeStore.inMemory()
        try store.batch {
            try store.setSetting("kept", "1")
            XCTAssertThrowsError(try store.write { db in
                try db.execute(sql: "INSERT INTO setting (key, value) VALUES ('lost', 'x')")
                throw Boom()
            })
            try store.setSetting("also kept", "2")
        }
        XCTAssertEqual(try store.setting("kept"), "1")
        XCTAssertNil(try store.setting("lost"))
        XCTAssertEqual(try store.setting("also kept"), "2")
    }

    func testANestedBatchJoinsTheOuterOne() throws {
        let store = try NodeStore.inMemory()
        var order: [Int] = []
        try store.batch {
            try store.batch {
                try store.setSetting("inner", "1")
                store.afterCommit { order.append(1) }
            }
            XCTAssertTrue(order.isEmpty, "the inner batch does not commit on its own")
            store.afterCommit { order.append(2) }
        }
        XCTAssertEqual(order, [1, 2])
        XCTAssertEqual(try store.setting("inner"), "1")
    }

    func testABatchOnOneThreadDoesNotCaptureAnotherThreadsWrites() throws {
        let (store, _, dir) = try fileStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let otherDone = expectation(description: "other thread")
        try store.batch {
            try store.setSetting("mine", "1")
            DispatchQueue.global().async {
                // Not in the batch: its own transaction, which waits for the batch to commit.
                XCTAssertFalse(store.isInBatch)
                try? store.setSetting("theirs", "2")
                otherDone.fulfill()
            }
        }
        wait(for: [otherDone], timeout: 10)
        XCTAssertEqual(try store.setting("mine"), "1")
        XCTAssertEqual(try store.setting("theirs"), "2")
    }
}

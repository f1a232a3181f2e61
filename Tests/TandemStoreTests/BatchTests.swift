import Foundation
import GRDB
@_spi(StoreOwner) import TandemStore
import XCTest

/// `NodeStore.batch`: many intents in one commit (group commit), actions after the commit,
/// failures contained. The step is explicit: the body is given a `StoreStep`, and everything that
/// writes in the batch writes through it.
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
        let commitsBefore = store.commits
        let value = try store.batch { step -> Int in
            try step.setSetting("a", "1")
            step.afterCommit { order.append("first") }
            try step.setSetting("b", "2")
            // Reads through the step see what it wrote.
            XCTAssertEqual(try step.setting("a"), "1")
            XCTAssertEqual(try step.setting("b"), "2")
            // (Replaces `isInBatch`: there is no thread state left to ask.) Reads through the store
            // itself are a read transaction of their own: committed state only, so not the step's
            // writes before its commit.
            XCTAssertNil(try store.setting("a"))
            // Another connection does not see it before the commit either.
            let other = try NodeStore(path: path)
            XCTAssertNil(try other.setting("a"))
            step.afterCommit { order.append("second") }
            XCTAssertTrue(order.isEmpty, "nothing runs before the commit")
            XCTAssertEqual(store.commits, commitsBefore, "not committed yet")
            return 42
        }
        XCTAssertEqual(value, 42, "the batch returns its body's value")
        XCTAssertEqual(order, ["first", "second"])
        XCTAssertEqual(store.commits, commitsBefore + 1, "two writes, one commit")
        XCTAssertEqual(try store.setting("a"), "1", "the store's reads see it once committed")
        let reopened = try NodeStore(path: path)
        XCTAssertEqual(try reopened.setting("a"), "1")
        XCTAssertEqual(try reopened.setting("b"), "2")
    }

    func testABatchThatFailsKeepsNothingAndRunsNoAction() throws {
        let store = try NodeStore.inMemory()
        var ran = false
        XCTAssertThrowsError(try store.batch { step in
            try step.setSetting("a", "1")
            step.afterCommit { ran = true }
            throw Boom()
        })
        XCTAssertNil(try store.setting("a"))
        XCTAssertFalse(ran, "an action of a rolled-back step is dropped")
        XCTAssertEqual(store.commits, 0)
        // Replaces "outside a batch an action runs at once" (there is no `store.afterCommit` any
        // more): an action handed to a step that writes nothing still runs once the step ends, and
        // not before.
        try store.batch { step in
            step.afterCommit { ran = true }
            XCTAssertFalse(ran)
        }
        XCTAssertTrue(ran)
        XCTAssertEqual(store.commits, 0, "a step that changed nothing is no commit")
    }

    func testAFailingWriteInsideABatchRollsBackOnlyItself() throws {
        let store = try NodeStore.inMemory()
        try store.batch { step in
            try step.setSetting("kept", "1")
            XCTAssertThrowsError(try step.write { db in
                try db.execute(sql: "INSERT INTO setting (key, value) VALUES ('lost', 'x')")
                throw Boom()
            })
            // The step goes on: its earlier write is still there, the failed one is not.
            XCTAssertEqual(try step.setting("kept"), "1")
            XCTAssertNil(try step.setting("lost"))
            try step.setSetting("also kept", "2")
        }
        XCTAssertEqual(try store.setting("kept"), "1")
        XCTAssertNil(try store.setting("lost"))
        XCTAssertEqual(try store.setting("also kept"), "2")
        XCTAssertEqual(store.commits, 1)
    }

    /// Replaces `testANestedBatchJoinsTheOuterOne`: batches no longer nest (a batch inside a batch
    /// would deadlock). What a nested batch was for, code called from inside a step writing and
    /// queueing actions as part of it, is now that code being given the step: its writes and
    /// actions join the step's one commit, and nothing of it is committed or run when it returns.
    func testCodeGivenTheStepJoinsItsCommit() throws {
        let (store, _, dir) = try fileStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        var order: [Int] = []
        // What a service does with the step it is handed.
        func inner(_ step: StoreStep) throws {
            try step.setSetting("inner", "1")
            step.afterCommit { order.append(1) }
        }
        try store.batch { step in
            try inner(step)
            XCTAssertTrue(order.isEmpty, "the inner code does not commit on its own")
            XCTAssertEqual(store.commits, 0)
            XCTAssertNil(try store.setting("inner"), "not committed: the store's own reads do not see it")
            XCTAssertEqual(try step.setting("inner"), "1", "the step sees it")
            step.afterCommit { order.append(2) }
        }
        XCTAssertEqual(order, [1, 2])
        XCTAssertEqual(store.commits, 1, "one commit for both")
        XCTAssertEqual(try store.setting("inner"), "1")

        // And when the step fails after the inner code wrote, neither its write nor its action stays.
        order = []
        XCTAssertThrowsError(try store.batch { step in
            try step.setSetting("inner", "2")
            try inner(step)
            throw Boom()
        })
        XCTAssertEqual(order, [])
        XCTAssertEqual(try store.setting("inner"), "1")
        XCTAssertEqual(store.commits, 1)
    }

    func testABatchOnOneThreadDoesNotCaptureAnotherThreadsWrites() throws {
        let (store, _, dir) = try fileStore()
        defer { try? FileManager.default.removeItem(at: dir) }
        let otherDone = expectation(description: "other thread")
        try store.batch { step in
            try step.setSetting("mine", "1")
            DispatchQueue.global().async {
                // Not in the batch (it has no step of its own but the one it opens): its own
                // transaction, which waits for the batch to commit.
                try? store.batch { try $0.setSetting("theirs", "2") }
                otherDone.fulfill()
            }
        }
        wait(for: [otherDone], timeout: 10)
        XCTAssertEqual(try store.setting("mine"), "1")
        XCTAssertEqual(try store.setting("theirs"), "2")
        XCTAssertEqual(store.commits, 2, "two transactions, not one")

        // The other thread's write is not the batch's: when the batch fails, it is kept all the same.
        let otherAgain = expectation(description: "other thread again")
        XCTAssertThrowsError(try store.batch { step in
            try step.setSetting("mine", "3")
            DispatchQueue.global().async {
                try? store.batch { try $0.setSetting("theirs", "4") }
                otherAgain.fulfill()
            }
            throw Boom()
        })
        wait(for: [otherAgain], timeout: 10)
        XCTAssertEqual(try store.setting("mine"), "1")
        XCTAssertEqual(try store.setting("theirs"), "4")
        XCTAssertEqual(store.commits, 3)
    }
}

import Foundation
import GRDB
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// What session 12 took off every step (Protocol/messages.md 11.6): the commit's follow-up (the
/// commit counter, the event tail) no longer goes through a transaction observer, whose addition
/// and removal emptied GRDB's statement caches of every statement that can delete rows.
final class StepOverheadTests: XCTestCase {
    func testADeletingStatementStaysCompiledFromStepToStep() throws {
        let store = try NodeStore.inMemory()
        let sql = "DELETE FROM seenMessage WHERE createdAtMs < ?"
        var seen: [Statement] = []
        for n in 0..<3 {
            try store.batch { step in
                // A change (an event row) in each step: what made the old step add its observer.
                _ = try step.appendEvent(type: "test.step", timeMs: Int64(n), fields: "{}")
                try step.read { db in seen.append(try db.cachedStatement(sql: sql)) }
            }
        }
        XCTAssertTrue(seen[0] === seen[1] && seen[1] === seen[2], "the statement was compiled again for a later step")
    }

    func testTheTailAndTheCountFollowCommitsOnly() throws {
        let store = try NodeStore.inMemory()
        let commits = store.commits
        try store.batch { step in _ = try step.appendEvent(type: "test.kept", timeMs: 1, fields: "{\"n\":1}", decoded: ["n": 1]) }
        XCTAssertEqual(store.commits, commits + 1)
        struct Stop: Error {}
        XCTAssertThrowsError(try store.batch { step in
            _ = try step.appendEvent(type: "test.lost", timeMs: 2, fields: "{}")
            throw Stop()
        })
        // A step that changes nothing commits, and is not counted.
        try store.batch { step in _ = try step.read { db in try Int.fetchOne(db, sql: "SELECT 1") } }
        XCTAssertEqual(store.commits, commits + 1)
        let recent = try store.recentEvents(since: 0, limit: 10)
        XCTAssertEqual(recent.map(\.stored.type), ["test.kept"])
        // Handed out as stored by the step, with the fields it held decoded (not read back).
        XCTAssertEqual(recent.first?.decoded as? [String: Int], ["n": 1])
        // A later step's event follows in seq order.
        try store.batch { step in _ = try step.appendEvent(type: "test.next", timeMs: 3, fields: "{}") }
        XCTAssertEqual(try store.recentEvents(since: 0, limit: 10).map(\.stored.type), ["test.kept", "test.next"])
    }
}

import Foundation
import GRDB
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// A batch's event rows in multi-row INSERTs (`StoreStep.appendEvents`, Protocol/messages.md 11.6):
/// the same rows and seqs as one at a time, in order, all or none, pruned to the last `maximumEvents` past a thousandth seq.
final class EventBatchTests: XCTestCase {
    private func pending(_ n: Int) -> [PendingEvent] {
        (0..<n).map { PendingEvent(type: "test.batch", timeMs: Int64(1000 + $0), fields: #"{"i":\#($0)}"#, decoded: $0) }
    }

    func testABatchGetsConsecutiveSeqsInOrderWithTheRowsOneAtATimeWouldStore() throws {
        let store = try NodeStore.inMemory()
        let first = try store.batch { try $0.appendEvent(type: "before", timeMs: 1, fields: "{}") }
        // 100 = 64 + 32 + 4 (three statements), then 1 and 64 (one each), then 0.
        for n in [100, 1, 64, 0] {
            let before = try store.lastEventSeq()
            let events = pending(n)
            let stored = try store.batch { try $0.appendEvents(events) }
            XCTAssertEqual(stored.map(\.seq), (0..<n).map { Optional(before + 1 + Int64($0)) }, "consecutive, in order (\(n))")
            XCTAssertEqual(try store.events(since: before, limit: 1000), stored, "the rows as returned (\(n))")
            XCTAssertEqual(stored.map(\.fields), events.map(\.fields))
            XCTAssertEqual(stored.map(\.timeMs), events.map(\.timeMs))
            // The tail hands them out with the fields decoded by whoever stored them.
            let recent = try store.recentEvents(since: before, limit: 1000)
            XCTAssertEqual(recent.map(\.stored), stored)
            XCTAssertEqual(recent.compactMap { $0.decoded as? Int }, Array(0..<n))
        }
        // Mixed with single rows in one step: one sequence.
        let (a, batch, b) = try store.batch { step in
            (try step.appendEvent(type: "a", timeMs: 2, fields: "{}"), try step.appendEvents(pending(3)),
             try step.appendEvent(type: "b", timeMs: 3, fields: "{}"))
        }
        XCTAssertEqual([a.seq] + batch.map(\.seq) + [b.seq], (0..<5).map { Optional(a.seq! + Int64($0)) })
        XCTAssertEqual(try store.events(since: first.seq!, limit: 10_000).count, 100 + 1 + 64 + 5)
    }

    func testABatchRolledBackLeavesNoRowAndNothingForTheTail() throws {
        let store = try NodeStore.inMemory()
        let before = try store.batch { try $0.appendEvent(type: "before", timeMs: 1, fields: "{}") }.seq!
        struct Abandon: Error {}
        // The step's transaction rolled back: none of its rows, nothing handed out.
        XCTAssertThrowsError(try store.batch { step in
            _ = try step.appendEvents(self.pending(70))
            throw Abandon()
        })
        XCTAssertEqual(try store.lastEventSeq(), before)
        XCTAssertEqual(try store.recentEvents(since: before, limit: 1000).count, 0)
        // A savepoint rolled back around it (a send that failed): its rows go, the step's others stay.
        let kept = try store.batch { step -> [StoredEvent] in
            XCTAssertThrowsError(try step.write { _ in
                _ = try step.appendEvents(self.pending(5))
                throw Abandon()
            })
            return try step.appendEvents(self.pending(2))
        }
        XCTAssertEqual(kept.map(\.seq), [before + 1, before + 2], "no seq taken by the rows rolled back")
        XCTAssertEqual(try store.recentEvents(since: before, limit: 1000).map(\.stored), kept)
    }

    func testABatchPastAThousandthSeqKeepsTheLastMaximumEvents() throws {
        var limits = NodeStore.Limits()
        limits.maximumEvents = 500
        let store = try NodeStore.inMemory(limits: limits)
        for _ in 0..<15 { _ = try store.batch { try $0.appendEvents(self.pending(64)) } }  // seqs 1…960
        XCTAssertEqual(try store.events(since: 0, limit: 10_000).count, 960, "no thousandth seq yet")
        _ = try store.batch { try $0.appendEvents(self.pending(64)) }  // 961…1024: 1000 among them
        let left = try store.events(since: 0, limit: 10_000)
        XCTAssertEqual(left.first?.seq, 1024 - 500 + 1, "the last maximumEvents kept")
        XCTAssertEqual(left.last?.seq, 1024)
    }
}

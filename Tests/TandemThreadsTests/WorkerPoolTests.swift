import Foundation
import TandemThreads
import XCTest

final class WorkerPoolTests: XCTestCase {
    /// Threads of this process whose name is `name` (from /proc/self/task/*/comm).
    private func threads(named name: String) throws -> Int {
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")
        return tasks.filter { task in
            let comm = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)
            return comm?.trimmingCharacters(in: .newlines) == name
        }.count
    }

    private func uniqueName() -> String { "tpool-\(UInt16.random(in: .min ... .max))" }

    private struct Boom: Error, Equatable { let item: Int }

    func testMapKeepsTheItemsOrder() {
        let pool = WorkerPool(name: uniqueName(), threads: 3)
        defer { pool.shutdown() }
        let items = Array(0..<500)
        // Uneven work, so items end out of order on the threads.
        let out = pool.map(items, width: 4) { i -> Int in
            var x = i
            for _ in 0..<((i * 7919) % 2000) { x = (x &* 31 &+ 7) % 1_000_003 }
            return i * 2 + (x & 0)
        }
        XCTAssertEqual(out, items.map { $0 * 2 })
    }

    func testMapRunsOnSeveralThreads() throws {
        let pool = WorkerPool(name: uniqueName(), threads: 3)
        defer { pool.shutdown() }
        // Every item waits until four items run at once: only four threads at once can end it.
        let running = Monitor(0)
        let out = pool.map(Array(0..<4), width: 4) { i -> Int in
            running.update { $0 += 1 }
            return running.wait(until: { $0 >= 4 }, then: { _ in i })
        }
        XCTAssertEqual(out, [0, 1, 2, 3])
    }

    func testTheFirstFailingItemInOrderIsThrownAndNoItemStartsAfterAFailure() {
        let pool = WorkerPool(name: uniqueName(), threads: 1)
        defer { pool.shutdown() }
        let started = Monitor<Set<Int>>([])
        let fiveFailed = Monitor(false)
        // Item 3 fails only after item 5 has: the thread running 3 waits, so the other one runs 4
        // and 5. Both failures end the map; the error thrown is item 3's (the first in order), and
        // no item after 5 is started.
        XCTAssertThrowsError(try pool.map(Array(0..<1000), width: 2) { (i: Int) throws(Boom) -> Int in
            started.update { _ = $0.insert(i) }
            if i == 5 {
                fiveFailed.update { $0 = true }
                throw Boom(item: 5)
            }
            if i == 3 {
                fiveFailed.wait(until: { $0 }, then: { _ in })
                throw Boom(item: 3)
            }
            return i
        }) { error in
            XCTAssertEqual(error as? Boom, Boom(item: 3))
        }
        XCTAssertEqual(started.withLock { $0 }, Set(0...5))
    }

    func testSubmitGivesTheResultOrTheError() throws {
        let pool = WorkerPool(name: uniqueName(), threads: 2)
        defer { pool.shutdown() }
        let a = pool.submit { 6 * 7 }
        let b = pool.submit { () throws -> Int in throw Boom(item: 1) }
        XCTAssertEqual(try a.wait(), 42)
        XCTAssertThrowsError(try b.wait()) { XCTAssertEqual($0 as? Boom, Boom(item: 1)) }
        XCTAssertTrue(a.isDone)
    }

    func testOneThreadRunsJobsInOrder() throws {
        let pool = WorkerPool(name: uniqueName(), threads: 1)
        defer { pool.shutdown() }
        let seen = Monitor<[Int]>([])
        var last: Pending<Void>?
        for i in 0..<200 { last = pool.submit { seen.update { $0.append(i) } } }
        try last?.wait()
        XCTAssertEqual(seen.withLock { $0 }, Array(0..<200))
    }

    func testShutdownRunsQueuedJobsAndLeavesNoThread() throws {
        let name = uniqueName()
        let before = try threads(named: name)
        XCTAssertEqual(before, 0)
        let pool = WorkerPool(name: name, threads: 3)
        XCTAssertEqual(try threads(named: name), 3, "init returns once every thread has started")
        // All three threads busy, so the next job waits in the queue when shutdown starts.
        let gate = Monitor(false)
        let running = Monitor(0)
        for _ in 0..<3 {
            pool.submit {
                running.update { $0 += 1 }
                gate.wait(until: { $0 }, then: { _ in })
            }
        }
        running.wait(until: { $0 == 3 }, then: { _ in })
        let queued = pool.submit { 1 }
        gate.update { $0 = true }
        pool.shutdown()
        XCTAssertEqual(try queued.wait(), 1, "a job queued before shutdown runs")
        XCTAssertEqual(try threads(named: name), 0, "shutdown joined every thread")
        XCTAssertThrowsError(try pool.submit { 2 }.wait()) { XCTAssertTrue($0 is WorkerPool.ShutDown) }
        pool.shutdown()  // idempotent
    }

    func testAPoolWithoutThreadsRunsMapOnTheCaller() {
        let pool = WorkerPool(name: uniqueName(), threads: 0)
        defer { pool.shutdown() }
        XCTAssertEqual(pool.map([1, 2, 3], width: 4) { $0 + 1 }, [2, 3, 4])
    }

    func testABusyPoolDoesNotHoldUpMap() {
        // The pool's only thread is blocked: the caller does every item itself.
        let pool = WorkerPool(name: uniqueName(), threads: 1)
        let gate = Monitor(false)
        pool.submit { gate.wait(until: { $0 }, then: { _ in }) }
        XCTAssertEqual(pool.map(Array(0..<10), width: 2) { $0 * $0 }, (0..<10).map { $0 * $0 })
        gate.update { $0 = true }
        pool.shutdown()
    }
}

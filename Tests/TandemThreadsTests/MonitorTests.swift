import Foundation
import TandemThreads
import XCTest

final class MonitorTests: XCTestCase {
    /// A timed wait whose condition never holds ends at its deadline, saying so.
    func testATimedWaitEndsWithoutTheCondition() {
        let monitor = Monitor(0)
        let before = ContinuousClock.now
        XCTAssertFalse(monitor.wait(atMostMs: 30, until: { $0 > 0 }))
        // Never early (the monotonic clock); how late is the scheduler's business, not asserted.
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - before, .milliseconds(30))
    }

    /// An update from another thread ends a timed wait whose condition it makes true, and a
    /// condition that already holds does not wait at all.
    func testAnUpdateEndsATimedWait() {
        let monitor = Monitor(0)
        let pool = WorkerPool(name: "monitor-test", threads: 1)
        defer { pool.shutdown() }
        pool.execute {
            // Let the waiter go to sleep first, most of the time; either order must work.
            usleep(20_000)
            monitor.update { $0 = 7 }
        }
        XCTAssertTrue(monitor.wait(atMostMs: 600_000, until: { $0 == 7 }))
        XCTAssertTrue(monitor.wait(atMostMs: 0, until: { $0 == 7 }))
        XCTAssertFalse(monitor.wait(atMostMs: -5, until: { $0 == 8 }))
    }
}

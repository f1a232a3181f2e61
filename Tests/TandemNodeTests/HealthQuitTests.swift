import Foundation
import TandemProtocol
import XCTest
@testable import NodeFocus
@testable import TandemNode
@testable import TandemNodeCore
import TandemTestSupport

/// Issue 35: at health 0 quitting a session early is refused before it happens (with when health
/// returns), not charged after the fact.
final class HealthQuitTests: XCTestCase {
    func testDeadRefusesQuittingASessionAndSaysWhenHealthReturns() async throws {
        let node = try NodeRuntime(identity: .generate(), configuration: TestSupport.loopbackConfiguration(), logger: TestSupport.quietLogger)
        let focus = node.focus
        let started = try await node.router.call("focus.start", ["duration_ms": 1_800_000])
        XCTAssertNotNil(started["id"]?.stringValue)
        // Spend the whole pool now (20 quits of 5).
        let now = Int64(clamping: wallClockMilliseconds())
        for i in 0..<20 { await NodeCore.run { focus.recordBypass(.quitEarly, nowMs: now + Int64(i), detail: nil) } }
        let pool = await NodeCore.run { focus.healthJSON(nowMs: Int64(clamping: wallClockMilliseconds())) }
        XCTAssertEqual(pool["health"]?.intValue, 0)
        XCTAssertEqual(pool["state"]?.stringValue, "dead")
        do {
            _ = try await node.router.call("focus.quit", [:])
            XCTFail("a quit at health 0 went through")
        } catch {
            let text = "\(error)"
            XCTAssertEqual((error as? NodeError)?.kind, .refused, text)
            XCTAssertTrue(text.contains("health is 0"), text)
            XCTAssertTrue(text.contains("midnight"), text)
        }
        // Still running, and nothing more was charged.
        let status = try await node.router.call("focus.status", [:])
        XCTAssertEqual(status["session"]?["phase"]?.stringValue, "running")
        let after = await NodeCore.run { focus.healthJSON(nowMs: Int64(clamping: wallClockMilliseconds())) }
        XCTAssertEqual(after["bypasses"]?.arrayValue?.count, 10)  // the last ten are shown; 20 recorded
        let count = try node.store.healthBypasses(sinceMs: now - 1).count
        XCTAssertEqual(count, 20)
    }

    func testAliveQuitGoesThrough() async throws {
        let node = try NodeRuntime(identity: .generate(), configuration: TestSupport.loopbackConfiguration(), logger: TestSupport.quietLogger)
        _ = try await node.router.call("focus.start", ["duration_ms": 1_800_000])
        let quit = try await node.router.call("focus.quit", [:])
        XCTAssertNotNil(quit["id"]?.stringValue)
    }
}

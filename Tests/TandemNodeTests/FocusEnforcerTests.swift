import Foundation
import Logging
import XCTest
@testable import TandemNode
@testable import TandemNodeCore
@testable import NodeFocus

/// The enforcer's two workers as `FocusService.run` runs them: the newest target is what gets
/// written, `sync` waits for a reconcile that saw it, and after `finish` nothing waits any more.
final class FocusEnforcerTests: XCTestCase {
    func testTheNewestTargetIsWrittenAndSyncStopsWaitingAfterFinish() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("enforcer-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }  // a temporary directory
        let hosts = dir.appendingPathComponent("hosts")
        try "127.0.0.1 localhost\n".write(to: hosts, atomically: true, encoding: .utf8)
        var configuration = FocusService.Configuration()
        configuration.hostsFile = hosts.path
        let logger = Logger(label: "test.enforcer")
        let enforcer = FocusEnforcer(configuration: configuration, events: EventBus(log: InMemoryEventLog(), logger: logger), logger: logger)
        let problems = await withDiscardingTaskGroup { group -> [String] in
            group.addTask { await enforcer.runReconciler() }
            group.addTask { await enforcer.runHooks() }
            enforcer.setTarget(.init(mode: "deep", sites: ["a.example"], apps: [], allowedApps: []))
            enforcer.kick()
            enforcer.setTarget(.init(mode: "deep", sites: ["b.example"], apps: [], allowedApps: []))
            let problems = await enforcer.sync()
            enforcer.finish()
            return problems
        }
        XCTAssertEqual(problems, [])
        let text = try String(contentsOf: hosts, encoding: .utf8)
        XCTAssertTrue(text.contains("b.example"), text)
        XCTAssertFalse(text.contains("a.example"), text)
        XCTAssertTrue(text.hasPrefix("127.0.0.1 localhost\n"), text)
        // The workers ended: a later sync returns at once.
        let after = await enforcer.sync(verify: true)
        XCTAssertEqual(after, [])
    }
}

import Foundation
import XCTest
import TandemTestSupport
@testable import TandemNode
@testable import NodeVault
@testable import NodeBackup
@testable import NodeMessages
import NodeFocus
import TandemNodeCore
import NodeWeb

/// A node that has stopped holds nothing: the runtime and the services that own thread pools are
/// freed, and with them their threads (a retain cycle kept every stopped node of a test process
/// alive, with its seven pool threads).
final class NodeLifetimeTests: XCTestCase {
    /// Weak references to what a node owns, taken while it runs.
    private final class Watch: @unchecked Sendable {
        // Written once before the node stops, read after; no concurrent access.
        weak var runtime: NodeRuntime?
        weak var vault: VaultService?
        weak var holder: BackupHolder?
        weak var disk: FileDisk?
        weak var messages: MessageService?
        weak var focus: FocusService?

        var alive: [String] {
            [("runtime", runtime as AnyObject?), ("vault", vault), ("backup holder", holder), ("file disk", disk),
             ("messages", messages), ("focus", focus)].compactMap { $0.1 == nil ? nil : $0.0 }
        }
    }

    func testAStoppedNodeIsFreed() async throws {
        try await ranAndStopped(web: false)
        try await ranAndStopped(web: true)
    }

    private func ranAndStopped(web: Bool) async throws {
        let watch = Watch()
        do {
            let running = try await RunningNode.start(configure: { if web { $0.web = WebConfiguration(host: "127.0.0.1", port: 0) } })
            let node = running.node
            (watch.runtime, watch.vault, watch.holder) = (node, node.vault, node.backup.holder)
            (watch.messages, watch.focus) = (node.messages, node.focus)
            watch.disk = await NodeCore.run { node.messageFiles.disk }
            _ = try await TestSupport.event(node, "node.started")
            if web { _ = try await TestSupport.event(node, "web.listening") }
            await running.stop()
        }
        // The service group's tasks let go of the node as they end, which may be just after `stop`.
        let freed = await TestSupport.eventually(10) { watch.alive.isEmpty }
        XCTAssertTrue(freed, "still alive after the node stopped\(web ? " (with the dashboard)" : ""): \(watch.alive.joined(separator: ", "))")
    }

    func testANodeThatNeverRanIsFreed() async throws {
        try await neverRan(web: false)
        try await neverRan(web: true)
    }

    private func neverRan(web: Bool) async throws {
        let watch = Watch()
        weak var dashboard: WebDashboard?
        do {
            var configuration = TestSupport.loopbackConfiguration()
            if web { configuration.web = WebConfiguration(host: "127.0.0.1", port: 0) }
            let node = try NodeRuntime(identity: .generate(), configuration: configuration, logger: TestSupport.quietLogger)
            dashboard = node.web
            XCTAssertEqual(dashboard != nil, web)
            (watch.runtime, watch.vault, watch.holder) = (node, node.vault, node.backup.holder)
            (watch.messages, watch.focus) = (node.messages, node.focus)
            watch.disk = await NodeCore.run { node.messageFiles.disk }
        }
        // Work the node handed to the core (its start-up events) lets go of it once it has run.
        let freed = await TestSupport.eventually(10) { watch.alive.isEmpty && dashboard == nil }
        XCTAssertTrue(freed, "still alive\(web ? " (with the dashboard)" : ""): \(watch.alive.joined(separator: ", "))")
        XCTAssertNil(dashboard)
    }
}

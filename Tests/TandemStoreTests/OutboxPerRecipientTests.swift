import Foundation
import GRDB
import TandemProtocol
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// Migration v7-outbox-per-recipient: one frame id may wait for several recipients (a thread's
/// inviter sends one message to every participant), each acknowledged by its own recipient.
final class OutboxPerRecipientTests: XCTestCase {
    let bob = [UInt8](repeating: 2, count: 32)
    let carol = [UInt8](repeating: 3, count: 32)
    let id = [UInt8](repeating: 9, count: 16)

    func item(to recipient: [UInt8]) -> OutboxItem {
        OutboxItem(messageId: id, recipient: recipient, type: 0x0501, frame: [1, 2, 3], nowMs: 1000)
    }

    func testOneIdWaitsForEachRecipientUntilItsOwnAcknowledgement() throws {
        let store = try NodeStore.inMemory()
        try store.batch { step in
            try step.enqueue(item(to: bob))
            try step.enqueue(item(to: carol))
            try step.enqueue(item(to: carol))  // the same row again: ignored
        }
        XCTAssertEqual(try store.outboxCount(), 2)
        XCTAssertEqual(try store.batch { try $0.acknowledgeReturningType(id, from: carol) }, 0x0501)
        XCTAssertNil(try store.batch { try $0.acknowledgeReturningType(id, from: carol) }, "acknowledged once")
        XCTAssertEqual(try store.outbox(for: bob).map(\.messageId), [Data(id)], "bob's copy still waits")
        try store.batch { try $0.deferOutbox(for: bob, error: "offline", nowMs: 5000) }
        XCTAssertEqual(try store.outbox(for: bob).first?.attempts, 1)
        XCTAssertTrue(try store.batch { try $0.acknowledge(id) })
        XCTAssertEqual(try store.outboxCount(), 0)
    }

    func testTheUpgradeKeepsWaitingFrames() throws {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("fixtures/store-v4/node.sqlite")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("v7-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path
        try FileManager.default.copyItem(atPath: fixture.path, toPath: path)
        let before = try DatabaseQueue(path: path)
        let waiting = try before.read { db in try Row.fetchAll(db, sql: "SELECT messageId, recipient, frame FROM outbox ORDER BY messageId") }
        try before.close()
        let store = try NodeStore(path: path)
        let applied = try store.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }
        XCTAssertTrue(applied.contains("v7-outbox-per-recipient"))
        let after = try store.read { db in try Row.fetchAll(db, sql: "SELECT messageId, recipient, frame FROM outbox ORDER BY messageId") }
        XCTAssertEqual(after, waiting)
        let pk = try store.read { db in try db.primaryKey("outbox").columns }
        XCTAssertEqual(pk, ["messageId", "recipient"])
    }
}

import Foundation
import GRDB
@_spi(StoreOwner) @testable import TandemStore
import XCTest

/// The write-ahead log gets its working size when the store opens (WriteAheadLogSize.swift,
/// Protocol/messages.md 8): commits then overwrite it instead of growing it, and the zeros past its
/// last frame are nothing SQLite reads, after a clean close or a crash.
final class WriteAheadLogSizeTests: XCTestCase {
    private func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? -1
    }

    func testTheLogIsSizedAtOpenCommitsDoNotGrowItAndItsZerosAreNeverRead() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wal-size-\(UUID().uuidString)")
        let crashed = dir.appendingPathComponent("crashed")
        try FileManager.default.createDirectory(at: crashed, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path, wal = path + "-wal"
        let sized = 32 + WriteAheadLogSize.frames * (24 + 4096)
        let bob = [UInt8](repeating: 2, count: 32)

        var store: NodeStore? = try NodeStore(path: path)
        XCTAssertEqual(size(wal), sized)
        for n in 1...40 {
            try store!.batch { step in
                try step.setPresence(bob, presence: "p\(n)", lastSeenMs: Int64(n))
                _ = try step.appendEvent(type: "x", timeMs: Int64(n), fields: "{\"n\":\(n)}")
            }
        }
        XCTAssertEqual(size(wal), sized, "40 synced commits overwrote the log's zeros")
        // A crash image (the files as a kill -9 leaves them): every commit is there, nothing more.
        for suffix in ["", "-wal"] {
            try FileManager.default.copyItem(atPath: path + suffix, toPath: crashed.appendingPathComponent("node.sqlite").path + suffix)
        }
        let image = try NodeStore(path: crashed.appendingPathComponent("node.sqlite").path)
        XCTAssertEqual(try image.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM event WHERE type = 'x'") }, 40)
        XCTAssertEqual(try image.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") }, "ok")

        // Closed and opened again: the same rows, the log sized again.
        store = nil
        let again = try NodeStore(path: path)
        XCTAssertEqual(size(wal), sized)
        XCTAssertEqual(try again.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM event WHERE type = 'x'") }, 40)
        XCTAssertEqual(try again.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") }, "ok")
    }
}

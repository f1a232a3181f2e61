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

    /// The log is checkpointed after the step whose commit took it past 1,000 frames (not inside
    /// that commit: `sqlite3_wal_hook` replaces SQLite's own checkpoint), and then starts over
    /// within the size it was given.
    func testTheLogIsCheckpointedAfterTheStepThatFillsItAndStartsOverInItsSize() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("wal-ckpt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("node.sqlite").path
        let store = try NodeStore(path: path)
        let sized = 32 + WriteAheadLogSize.frames * (24 + 4096)
        let fields = "{\"pad\":\"" + String(repeating: "x", count: 3000) + "\"}"
        var framesInCommit = -1, checkpointsInCommit = -1
        var n = 0
        while store.checkpoints == 0, n < 40 {
            n += 1
            try store.batch { step in
                for i in 0..<40 { _ = try step.appendEvent(type: "pad", timeMs: Int64(n * 100 + i), fields: fields) }
                step.afterCommit {
                    framesInCommit = store.writeAheadLogFrames
                    checkpointsInCommit = store.checkpoints
                }
            }
        }
        XCTAssertEqual(store.checkpoints, 1, "checkpointed once the log held 1,000 frames")
        XCTAssertGreaterThanOrEqual(framesInCommit, WriteAheadLogFrames.threshold)
        XCTAssertEqual(checkpointsInCommit, 0, "not before the step's after-commit actions")
        try store.batch { step in _ = try step.appendEvent(type: "after", timeMs: 1, fields: "{}") }
        XCTAssertLessThan(store.writeAheadLogFrames, 100, "the next commit started the log over")
        XCTAssertEqual(((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int) ?? -1, sized)
        XCTAssertEqual(try store.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM event WHERE type = 'pad'") }, n * 40)
    }
}

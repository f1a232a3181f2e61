import Foundation
import GRDB
import TandemProtocol
import TandemStore
import XCTest

/// The challenge rows of a database written by an earlier version (Tests/fixtures/store-v4) must
/// still open, upgrade and read back with every field: the stored JSON is a schema.
final class StoredFormatTests: XCTestCase {
    static let challengeKeys: Set<String> = [
        "committed", "durationMs", "early", "endedLocalUs", "expiresAtUs", "graceMs", "id", "inviter", "localStartUs", "me",
        "message", "participants", "phase", "record", "requestedStartUs", "roster", "signatures", "signers", "solo",
        "startAtUs", "startedLocalUs",
    ]
    static let participantKeys: Set<String> = ["addressHint", "answer", "key", "outOfContact", "quitElapsedMs", "reason", "result"]

    private func fixtureCopy() throws -> (String, URL) {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("fixtures/store-v4/node.sqlite")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("fixture-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let path = dir.appendingPathComponent("node.sqlite").path
        try FileManager.default.copyItem(atPath: source.path, toPath: path)
        return (path, dir)
    }

    func testTheFixturesChallengesReadBackWithEveryField() throws {
        let (path, dir) = try fixtureCopy()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try NodeStore(path: path)
        let all = try store.challenges()
        XCTAssertEqual(all.count, 3, "a row that no longer decodes would be missing here")
        let finished = try XCTUnwrap(all.first { $0.message == "fixture run" })
        XCTAssertEqual(finished.phase, .ended)
        XCTAssertEqual(finished.durationMs, 3_000)
        XCTAssertTrue(finished.committed)
        XCTAssertFalse(finished.solo)
        XCTAssertEqual(finished.participants.count, 2)
        let quitter = try XCTUnwrap(finished.participants.first { $0.result == .quit })
        XCTAssertEqual(quitter.reason, "phone call")
        XCTAssertEqual(quitter.quitElapsedMs, 907)
        XCTAssertNotNil(finished.record)
        XCTAssertNotNil(finished.startAtUs)
        XCTAssertNoThrow(try finished.validate())
        let pending = try XCTUnwrap(all.first { $0.message == "later" })
        XCTAssertEqual(pending.phase, .invited)
        XCTAssertEqual(pending.durationMs, 1_500_000)
        XCTAssertFalse(pending.isInviter)
        let solo = try XCTUnwrap(all.first { $0.solo })
        XCTAssertEqual(solo.durationMs, 1_000)
        XCTAssertEqual(solo.participants.map(\.result), [.completed])
    }

    func testTheStoredKeysAreThePinnedOnes() throws {
        let (path, dir) = try fixtureCopy()
        defer { try? FileManager.default.removeItem(at: dir) }
        let queue = try DatabaseQueue(path: path)
        let rows = try queue.read { db in try String.fetchAll(db, sql: "SELECT state FROM challenge") }
        var stored = Set<String>(), storedParticipant = Set<String>()
        for row in rows {
            let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(row.utf8)) as? [String: Any])
            stored.formUnion(json.keys)
            for p in json["participants"] as? [[String: Any]] ?? [] { storedParticipant.formUnion(p.keys) }
            // Read by today's code and written again: the same names (nil optionals are left out).
            let again = try JSONEncoder().encode(try JSONDecoder().decode(Challenge.self, from: Data(row.utf8)))
            let rewritten = try XCTUnwrap(try JSONSerialization.jsonObject(with: again) as? [String: Any])
            XCTAssertEqual(Set(rewritten.keys), Set(json.keys))
        }
        XCTAssertEqual(stored, Self.challengeKeys)
        XCTAssertEqual(storedParticipant, Self.participantKeys)
    }
}

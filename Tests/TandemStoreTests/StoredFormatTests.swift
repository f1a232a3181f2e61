import Foundation
import GRDB
import TandemProtocol
@_spi(StoreOwner) @testable import TandemStore
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

    // From store-v4/expected.json: Alice's node; Bob her friend; the three challenges she holds.
    static let alice = "e634f76794591aaa2c4ece6a8bd60a88d2ec864d0c1ab611df1d123ab7eabf72"
    static let bob = "2bc3ab540ff1661140c72cf98d9c71b25c3f412ddcf7e1a822947a84b7809f49"
    static let finished = "51d338486cc7340ccfb6ae0e51512467"
    static let pending = "ba1a5da7ff2acc74f947195ec9e73523"
    static let solo = "a3e6bfe0a6fafb2e9e30b1ee9cfc0566"

    func bytes(_ hex: String) throws -> [UInt8] { try XCTUnwrap(parseHex(hex)) }

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
        XCTAssertEqual(try store.challenges().count, 3, "a row that no longer decodes would be missing here")
        XCTAssertEqual(try store.challengeRowsFailingValidation(), [])
        XCTAssertEqual(try store.batch { try $0.quarantineInvalidRows(nowMs: 1) }.filter { $0.kind == "challenge" }, [], "no challenge row is set aside")
        let alice = try bytes(Self.alice), bob = try bytes(Self.bob)

        // Alice invited Bob for 3 s; Bob quit after 907 ms ("phone call"); both signed; in the ledger.
        let done = try XCTUnwrap(try store.challenge(try bytes(Self.finished)))
        XCTAssertEqual(done.me, alice)
        XCTAssertEqual(done.inviter, alice)
        XCTAssertEqual(done.phase, .ended)
        XCTAssertTrue(done.committed)
        XCTAssertFalse(done.isActive)
        XCTAssertFalse(done.solo)
        XCTAssertEqual(done.durationMs, 3000)
        XCTAssertEqual(done.graceMs, 60_000)
        XCTAssertEqual(done.message, "fixture run")
        XCTAssertEqual(done.requestedStartUs, 0)
        XCTAssertEqual(done.startAtUs, 1_795_472_200_065_062)
        XCTAssertEqual(done.localStartUs, 1_795_472_200_065_062)
        XCTAssertEqual(done.startedLocalUs, 1_795_472_200_065_218)
        XCTAssertEqual(done.endedLocalUs, 1_795_472_203_065_214)
        XCTAssertEqual(done.expiresAtUs, 1_795_472_797_929_729)
        XCTAssertEqual(done.roster, [alice, bob])
        XCTAssertEqual(done.participants.map(\.key), [alice, bob])
        XCTAssertEqual(done.participants.map(\.answer), [.accepted, .accepted])
        XCTAssertEqual(done.participants.map(\.result), [.completed, .quit])
        XCTAssertEqual(done.participants.map(\.outOfContact), [false, false])
        XCTAssertEqual(done.participants.map(\.addressHint), ["", "127.0.0.1:34667"])
        XCTAssertEqual(done.participant(bob)?.quitElapsedMs, 907)
        XCTAssertEqual(done.participant(bob)?.reason, "phone call")
        XCTAssertNil(done.participant(alice)?.quitElapsedMs)
        XCTAssertEqual(Set(done.signatures.keys), [Self.alice, Self.bob])
        XCTAssertEqual(done.signers, [Self.alice, Self.bob])
        XCTAssertEqual(done.early, [:])
        let record = try XCTUnwrap(done.record)
        for (key, signature) in done.signatureList {
            XCTAssertTrue(Outcome.verify(record, signature: signature, by: key), "a stored signature still verifies")
        }
        let outcome = try XCTUnwrap(Outcome.decode(record))
        XCTAssertEqual(outcome.outcomes.first { Array($0.publicKey) == bob }?.result, .quit)
        XCTAssertEqual(outcome.outcomes.first { Array($0.publicKey) == bob }?.elapsedMs, 907)
        // Its record is the ledger's first entry.
        XCTAssertEqual(try store.ledger().first?.entry.record, record)

        // Bob's invite, unanswered.
        let invite = try XCTUnwrap(try store.challenge(try bytes(Self.pending)))
        XCTAssertEqual(invite.me, alice)
        XCTAssertEqual(invite.inviter, bob)
        XCTAssertFalse(invite.isInviter)
        XCTAssertEqual(invite.phase, .invited)
        XCTAssertEqual(invite.durationMs, 1_500_000)
        XCTAssertEqual(invite.message, "later")
        XCTAssertNil(invite.startAtUs)
        XCTAssertNil(invite.record)
        XCTAssertEqual(invite.roster, [])
        XCTAssertEqual(invite.participants.map(\.answer), [.accepted, .pending])
        XCTAssertEqual(invite.participants.map(\.result), [nil, nil])
        XCTAssertEqual(invite.expiresAtUs, 1_795_472_803_926_996)

        // A solo session of 1 s, in the ledger.
        let session = try XCTUnwrap(try store.challenge(try bytes(Self.solo)))
        XCTAssertTrue(session.solo)
        XCTAssertEqual(session.phase, .ended)
        XCTAssertTrue(session.committed)
        XCTAssertEqual(session.roster, [alice])
        XCTAssertEqual(session.durationMs, 1000)
        XCTAssertEqual(session.participants.map(\.result), [.completed])
        XCTAssertEqual(Set(session.signatures.keys), [Self.alice])

        XCTAssertEqual(try store.activeChallenges().map(\.id), [try bytes(Self.pending)], "only the invite is still on")
        XCTAssertEqual(Set(try store.challenges(phases: [.ended]).map(\.idHex)), [Self.finished, Self.solo])
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

    /// Today's `Codable` still writes each JSON row back as exactly the bytes the earlier version
    /// stored (nothing of the JSON format drifted); a save then turns the row into the stored form
    /// (Protocol/store.proto, a BLOB) holding the same value, read back as such.
    func testEachJSONRowReencodesToItsBytesAndASaveTurnsItIntoTheStoredForm() throws {
        let (path, dir) = try fixtureCopy()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try NodeStore(path: path)
        let rows = try store.read { db in try Row.fetchAll(db, sql: "SELECT id, phase, state FROM challenge") }
        XCTAssertEqual(rows.count, 3)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for row in rows {
            let json: String = row["state"]
            let c = try JSONDecoder().decode(Challenge.self, from: Data(json.utf8))
            XCTAssertEqual(String(decoding: try encoder.encode(c), as: UTF8.self), json)
            XCTAssertEqual(Data(c.id), row["id"] as Data)
            XCTAssertEqual(c.phase.rawValue, row["phase"] as String)

            XCTAssertEqual(try store.challenge(c.id), c)
            _ = try store.batch { try $0.saveChallenge(c, nowMs: 1_795_472_300_000) }
            let saved = try store.read { db in
                try XCTUnwrap(try Row.fetchOne(db, sql: "SELECT typeof(state) AS kind, state FROM challenge WHERE id = ?", arguments: [Data(c.id)]))
            }
            XCTAssertEqual(saved["kind"] as String, "blob", "saved in the stored form")
            XCTAssertEqual(try Challenge(storedBytes: Array(saved["state"] as Data)), c)
            XCTAssertEqual(try store.challenge(c.id), c, "read back from the stored form")
        }
        XCTAssertEqual(try store.challengeRowsFailingValidation(), [])
        XCTAssertEqual(try store.challenges().count, 3)
    }

    /// A stored-form row that does not decode (or holds a value `validate` refuses, or is neither a
    /// BLOB nor text) is set aside at start with its bytes and a reason; the good rows stay.
    func testABrokenStoredFormRowIsQuarantinedWithItsBytes() throws {
        let (path, dir) = try fixtureCopy()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try NodeStore(path: path)
        let good = try XCTUnwrap(try store.challenge(try bytes(Self.pending)))
        var badRange = try Tandem_Store_V1_StoredChallenge(serializedBytes: try good.storedBytes())
        badRange.durationMs = 0
        var badPhase = badRange
        badPhase.durationMs = good.durationMs
        badPhase.phase = .unspecified
        let broken: [(UInt8, Data)] = [
            (0xB1, Data([0xFF, 0xFF, 0xFF, 0xFF, 0x0F])),
            (0xB2, Data(try badRange.serializedBytes() as [UInt8])),
            (0xB3, Data(try badPhase.serializedBytes() as [UInt8])),
        ]
        try store.batch { step in
            try step.write { db in
                for (n, state) in broken {
                    try db.execute(sql: "INSERT INTO challenge(id, phase, solo, createdAtMs, updatedAtMs, state) VALUES (?, 'invited', 0, 1, 1, ?)",
                                   arguments: [Data(repeating: n, count: 16), state])
                }
            }
        }
        XCTAssertEqual(try store.challengeRowsFailingValidation().count, 3)
        XCTAssertEqual(try store.challenges().count, 3, "a row that fails is not handed out")
        let moved = try store.batch { try $0.quarantineInvalidRows(nowMs: 7) }
        XCTAssertEqual(moved.map(\.rowKey).sorted { $0[0] < $1[0] }, broken.map { [UInt8](repeating: $0.0, count: 16) })
        XCTAssertTrue(moved.first { $0.rowKey[0] == 0xB1 }?.reason.contains("not decodable") == true, "\(moved)")
        XCTAssertTrue(moved.first { $0.rowKey[0] == 0xB2 }?.reason.contains("duration") == true, "\(moved)")
        XCTAssertTrue(moved.first { $0.rowKey[0] == 0xB3 }?.reason.contains("unknown phase") == true, "\(moved)")
        let kept = try store.read { db in try Data.fetchAll(db, sql: "SELECT data FROM quarantine WHERE kind = 'challenge' ORDER BY rowKey") }
        XCTAssertEqual(kept, broken.map(\.1), "the bytes are kept as they were")
        XCTAssertEqual(try store.challengeRowsFailingValidation(), [])
        XCTAssertEqual(try store.challenges().count, 3)
    }

    /// The stored invite still moves under today's rules: Alice accepts it, and the answer is stored.
    func testAStoredInviteTakesItsNextStep() throws {
        let (path, dir) = try fixtureCopy()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try NodeStore(path: path)
        var invite = try XCTUnwrap(try store.challenge(try bytes(Self.pending)))
        let actions = try invite.accept()
        XCTAssertEqual(invite.phase, .accepted)
        guard case .send(.challengeAnswer, _, let to) = actions.first else { return XCTFail("no answer sent: \(actions)") }
        XCTAssertEqual(to, [try bytes(Self.bob)])
        _ = try store.batch { try $0.saveChallenge(invite, nowMs: 1_795_472_300_000) }
        XCTAssertEqual(try store.challenge(invite.id)?.phase, .accepted)
        XCTAssertEqual(try store.challenge(invite.id), invite)
    }
}

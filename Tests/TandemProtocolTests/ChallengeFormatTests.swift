import Foundation
import Sodium
import XCTest
@testable import TandemProtocol

/// The stored formats of `Challenge` (the node keeps it whole: JSON until the stored form of
/// Protocol/store.proto replaced it, TandemStore/Challenges.swift) are a contract with every data
/// dir already written: Tests/fixtures/challenge-v1.json holds
/// challenges in states the store fixture (Tests/fixtures/store-v4) lacks, written by the code of
/// that time; every later version must decode them to the same values. challenge-v2.txt holds the
/// same challenges in the stored form. A change to the format adds a new fixture and keeps these
/// decoding; it never edits them.
final class ChallengeFormatTests: XCTestCase {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("fixtures/challenge-v1.json")

    // Fixed keys and ids, so the fixture can be read by a person and regenerated identically.
    static func key(_ n: UInt8) throws -> SigningKeyPair { try SigningKeyPair(seed: [UInt8](repeating: n, count: 32)) }
    static func id(_ n: UInt8) -> [UInt8] { [UInt8](repeating: n, count: 16) }
    static let t0: Int64 = 1_800_000_000_000_000

    /// The challenges of the fixture, by name, built by driving the state machine.
    static func fixtureStates() throws -> [String: Challenge] {
        let alice = try key(1), bob = try key(2), carol = try key(3)
        func outcome(_ actions: [Challenge.Action]) throws -> ChallengeOutcomeMessage {
            for case .send(.challengeOutcome, let payload, _) in actions { return try ChallengeOutcomeMessage(payload: payload) }
            throw Challenge.Refusal("no outcome sent")
        }
        func start(_ actions: [Challenge.Action]) throws -> ChallengeStartMessage {
            for case .send(.challengeStart, let payload, _) in actions { return try ChallengeStartMessage(payload: payload, nowUs: t0) }
            throw Challenge.Refusal("no start sent")
        }
        func received(_ actions: [Challenge.Action], me: SigningKeyPair) throws -> Challenge {
            for case .send(.challengeInvite, let payload, _) in actions {
                return try Challenge.received(ChallengeInviteMessage(payload: payload, nowUs: t0), author: alice.publicKey, me: me.publicKey)
            }
            throw Challenge.Refusal("no invite sent")
        }
        var states: [String: Challenge] = [:]

        // A group of three, running on Alice's side: Carol quit and ended early (her outcome waits
        // in `early`), Bob has been silent past the grace period.
        let startUs = t0 + 30_000_000
        var (a, invite) = try Challenge.invite(id: id(0xA1), me: alice.publicKey, invitees: [bob.publicKey, carol.publicKey],
                                               durationMs: 600_000, startAtUs: startUs, nowUs: t0, graceMs: 45_000,
                                               message: "group focus", addressHints: [bob.publicKey: "10.0.0.2:7700"])
        var b = try received(invite, me: bob), c = try received(invite, me: carol)
        _ = try b.accept(); _ = try c.accept()
        _ = try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0 + 1_000)
        _ = try a.receiveAnswer(from: carol.publicKey, accept: true, nowUs: t0 + 2_000)
        let s = try start(try a.tick(nowUs: startUs - Challenge.startLeadUs))
        _ = try b.receiveStart(from: alice.publicKey, s)
        _ = try c.receiveStart(from: alice.publicKey, s)
        states["group-scheduled-invitee"] = b
        a.markStarted(localUs: startUs + 700)
        c.markStarted(localUs: startUs + 900)
        _ = try c.quit(elapsedMs: 120_000, reason: "meeting")
        _ = try a.receiveQuit(from: carol.publicKey, elapsedMs: 120_000, reason: "meeting")
        let early = try outcome(try c.markEnded(localUs: startUs + 600_000_000, signer: carol))
        XCTAssertEqual(try a.receiveOutcome(from: carol.publicKey, early, signer: alice), [])
        a.setOutOfContact(bob.publicKey, true)
        states["group-running-inviter"] = a

        // Two people, ended on Alice's side: Bob never signed, so after the grace period he is out
        // of contact in her re-signed record (not yet in the ledger).
        var (d, invite2) = try Challenge.invite(id: id(0xB2), me: alice.publicKey, invitees: [bob.publicKey], durationMs: 60_000,
                                                startAtUs: 0, nowUs: t0, message: "")
        var e = try received(invite2, me: bob)
        _ = try e.accept()
        _ = try d.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0 + 3_000_000)
        d.markStarted(localUs: t0 + 5_000_000)
        _ = try d.markEnded(localUs: t0 + 65_000_000, signer: alice)
        _ = try d.settleAfterGrace(nowUs: d.endAtUs! + d.graceMs * 1000, signer: alice)
        states["pair-ended-settled"] = d

        // Answers that end it early: Bob declined; a cancelled invite.
        var (f, invite3) = try Challenge.invite(id: id(0xC3), me: alice.publicKey, invitees: [bob.publicKey], durationMs: 1_000,
                                                startAtUs: 0, nowUs: t0, message: "quick one")
        var g = try received(invite3, me: bob)
        _ = try g.decline()
        states["pair-declined-invitee"] = g
        _ = try f.cancel(reason: "never mind")
        states["pair-cancelled-inviter"] = f

        // A solo session, running.
        var solo = try Challenge.solo(id: id(0xD4), me: alice.publicKey, durationMs: 1_500_000, nowUs: t0)
        solo.markStarted(localUs: t0 + 10)
        states["solo-running"] = solo
        return states
    }

    /// Every key a stored challenge may hold, and a participant's: the format on disk.
    static let challengeKeys: Set<String> = [
        "id", "me", "inviter", "participants", "durationMs", "requestedStartUs", "startAtUs", "expiresAtUs", "graceMs",
        "message", "phase", "roster", "solo", "localStartUs", "startedLocalUs", "endedLocalUs", "record", "signatures",
        "signers", "committed", "early",
    ]
    /// Written only when set (absent while nil).
    static let optionalChallengeKeys: Set<String> = ["startAtUs", "localStartUs", "startedLocalUs", "endedLocalUs", "record"]
    static let participantKeys: Set<String> = ["key", "answer", "result", "quitElapsedMs", "reason", "outOfContact", "addressHint"]
    static let optionalParticipantKeys: Set<String> = ["result", "quitElapsedMs", "reason"]

    /// The fixture's challenges: name → (its JSON object, its bytes as stored).
    func fixtureRows() throws -> [String: (object: [String: Any], bytes: Data)] {
        let text = try String(contentsOf: Self.fixture, encoding: .utf8)
        let all = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: [String: Any]])
        // Each line carries one challenge exactly as the store wrote it.
        var rows: [String: (object: [String: Any], bytes: Data)] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("  \"") {
            let name = String(line.dropFirst(3).prefix { $0 != "\"" })
            var json = line.drop { $0 != "{" }
            if json.hasSuffix(",") { json = json.dropLast() }
            rows[name] = (try XCTUnwrap(all[name]), Data(json.utf8))
        }
        XCTAssertEqual(Set(rows.keys), Set(all.keys))
        return rows
    }

    func decode(_ data: Data) throws -> Challenge { try JSONDecoder().decode(Challenge.self, from: data) }

    func testTheFixtureDecodesToTheSameValues() throws {
        let rows = try fixtureRows()
        XCTAssertEqual(rows.count, 6)
        let alice = try Self.key(1).publicKey, bob = try Self.key(2).publicKey, carol = try Self.key(3).publicKey

        let group = try decode(try XCTUnwrap(rows["group-running-inviter"]).bytes)
        XCTAssertNoThrow(try group.validate())
        XCTAssertEqual(group.id, Self.id(0xA1))
        XCTAssertEqual(group.me, alice)
        XCTAssertEqual(group.inviter, alice)
        XCTAssertTrue(group.isInviter)
        XCTAssertEqual(group.phase, .running)
        XCTAssertEqual(group.durationMs, 600_000)
        XCTAssertEqual(group.graceMs, 45_000)
        XCTAssertEqual(group.message, "group focus")
        XCTAssertEqual(group.requestedStartUs, Self.t0 + 30_000_000)
        XCTAssertEqual(group.startAtUs, Self.t0 + 30_000_000)
        XCTAssertEqual(group.expiresAtUs, Self.t0 + 30_000_000)
        XCTAssertEqual(group.startedLocalUs, Self.t0 + 30_000_700)
        XCTAssertNil(group.endedLocalUs)
        XCTAssertEqual(group.roster, [alice, bob, carol])
        XCTAssertEqual(group.participants.map(\.key), [alice, bob, carol])
        XCTAssertEqual(group.participants.map(\.answer), [.accepted, .accepted, .accepted])
        XCTAssertEqual(group.participants.map(\.result), [.running, .running, .quit])
        XCTAssertEqual(group.participants.map(\.outOfContact), [false, true, false])
        XCTAssertEqual(group.participants.map(\.addressHint), ["", "10.0.0.2:7700", ""])
        XCTAssertEqual(group.participant(carol)?.quitElapsedMs, 120_000)
        XCTAssertEqual(group.participant(carol)?.reason, "meeting")
        XCTAssertNil(group.record)
        XCTAssertEqual(group.signatures, [:])
        XCTAssertEqual(Array(group.early.keys), [hexString(carol)], "Carol's outcome waits for our end")
        XCTAssertFalse(group.solo)
        XCTAssertFalse(group.committed)
        XCTAssertTrue(group.isActive)

        let scheduled = try decode(try XCTUnwrap(rows["group-scheduled-invitee"]).bytes)
        XCTAssertNoThrow(try scheduled.validate())
        XCTAssertEqual(scheduled.me, bob)
        XCTAssertEqual(scheduled.inviter, alice)
        XCTAssertEqual(scheduled.phase, .scheduled)
        XCTAssertEqual(scheduled.startAtUs, Self.t0 + 30_000_000)
        XCTAssertEqual(scheduled.endAtUs, Self.t0 + 630_000_000)
        XCTAssertEqual(scheduled.roster, [alice, bob, carol])
        XCTAssertEqual(scheduled.participant(bob)?.addressHint, "10.0.0.2:7700")
        XCTAssertNil(scheduled.localStartUs)

        let settled = try decode(try XCTUnwrap(rows["pair-ended-settled"]).bytes)
        XCTAssertNoThrow(try settled.validate())
        XCTAssertEqual(settled.id, Self.id(0xB2))
        XCTAssertEqual(settled.phase, .ended)
        XCTAssertEqual(settled.requestedStartUs, 0)
        XCTAssertEqual(settled.startAtUs, Self.t0 + 3_000_000 + Challenge.startLeadUs)
        XCTAssertEqual(settled.endedLocalUs, Self.t0 + 65_000_000)
        XCTAssertEqual(settled.participants.map(\.result), [.completed, .outOfContact])
        XCTAssertEqual(Set(settled.signatures.keys), [hexString(alice)])
        XCTAssertEqual(settled.signers, [hexString(alice)])
        let record = try XCTUnwrap(settled.record.flatMap(Outcome.decode))
        XCTAssertEqual(record.outcomes.first { Array($0.publicKey) == alice }?.result, .completed)
        XCTAssertEqual(record.outcomes.first { Array($0.publicKey) == bob }?.result, .outOfContact)
        XCTAssertTrue(Outcome.verify(settled.record!, signature: settled.signatures[hexString(alice)]!, by: alice))
        XCTAssertTrue(settled.readyToCommit(nowUs: settled.endAtUs! + 60_000_000))
        XCTAssertTrue(settled.isActive)

        let declined = try decode(try XCTUnwrap(rows["pair-declined-invitee"]).bytes)
        XCTAssertEqual(declined.phase, .declined)
        XCTAssertEqual(declined.participant(bob)?.answer, .declined)
        XCTAssertEqual(declined.message, "quick one")
        XCTAssertFalse(declined.isActive)
        let cancelled = try decode(try XCTUnwrap(rows["pair-cancelled-inviter"]).bytes)
        XCTAssertEqual(cancelled.phase, .cancelled)
        XCTAssertEqual(cancelled.participant(bob)?.answer, .pending)
        XCTAssertEqual(cancelled.expiresAtUs, Self.t0 + Challenge.defaultExpiryUs)

        let solo = try decode(try XCTUnwrap(rows["solo-running"]).bytes)
        XCTAssertNoThrow(try solo.validate())
        XCTAssertTrue(solo.solo)
        XCTAssertEqual(solo.phase, .running)
        XCTAssertEqual(solo.roster, [alice])
        XCTAssertEqual(solo.localStartUs, Self.t0)
        XCTAssertEqual(solo.startedLocalUs, Self.t0 + 10)
        XCTAssertEqual(solo.durationMs, 1_500_000)
    }

    /// What today's code writes for each fixture challenge is byte for byte what the fixture holds
    /// (same keys, same encodings), and the fixture's state still moves: each decoded challenge
    /// takes its next step.
    func testTheFixtureReencodesExactlyAndStillMoves() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for (name, row) in try fixtureRows() {
            let c = try decode(row.bytes)
            XCTAssertEqual(String(decoding: try encoder.encode(c), as: UTF8.self), String(decoding: row.bytes, as: UTF8.self), name)
        }
        let alice = try Self.key(1), carol = try Self.key(3)
        var group = try decode(try XCTUnwrap(try fixtureRows()["group-running-inviter"]).bytes)
        let acts = try group.markEnded(localUs: Self.t0 + 630_000_000, signer: alice)
        XCTAssertEqual(group.phase, .ended)
        XCTAssertEqual(group.early, [:], "the early outcome was taken up at the end")
        XCTAssertTrue(group.signers.contains(hexString(carol.publicKey)))
        // Silent to Alice, but Carol's signed view says Bob completed: her testimony merges in.
        XCTAssertEqual(group.participant(try Self.key(2).publicKey)?.result, .completed)
        XCTAssertEqual(group.participant(carol.publicKey)?.result, .quit)
        XCTAssertFalse(acts.isEmpty)
    }

    /// The key set of the stored JSON is pinned: a renamed or dropped field would orphan every
    /// row already written.
    func testTheStoredKeysArePinned() throws {
        let states = try Self.fixtureStates()
        for (name, c) in states {
            let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: JSONEncoder().encode(c)) as? [String: Any])
            let keys = Set(object.keys)
            XCTAssertTrue(keys.isSubset(of: Self.challengeKeys), "\(name): \(keys.subtracting(Self.challengeKeys))")
            XCTAssertTrue(Self.challengeKeys.subtracting(Self.optionalChallengeKeys).isSubset(of: keys), name)
            for p in try XCTUnwrap(object["participants"] as? [[String: Any]]) {
                XCTAssertTrue(Set(p.keys).isSubset(of: Self.participantKeys), name)
                XCTAssertTrue(Self.participantKeys.subtracting(Self.optionalParticipantKeys).isSubset(of: Set(p.keys)), name)
            }
        }
        // With every optional set, exactly the pinned keys.
        var ended = try XCTUnwrap(states["group-running-inviter"])
        _ = try ended.markEnded(localUs: Self.t0 + 630_000_000, signer: try Self.key(1))
        ended.noteLocalStart(try XCTUnwrap(ended.startAtUs))
        let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: JSONEncoder().encode(ended)) as? [String: Any])
        XCTAssertEqual(Set(object.keys), Self.challengeKeys)
        let quitter = try XCTUnwrap((object["participants"] as? [[String: Any]])?.last)
        XCTAssertEqual(Set(quitter.keys), Self.participantKeys)
        XCTAssertEqual(Set(Challenge.CodingKeys.allCases.map(\.stringValue)), Self.challengeKeys)
        XCTAssertEqual(Set(Challenge.Participant.CodingKeys.allCases.map(\.stringValue)), Self.participantKeys)
    }

    /// The stored spellings of the enums (also the challenge table's `phase` column).
    func testTheStoredEnumValuesArePinned() throws {
        XCTAssertEqual([Challenge.Phase.invited, .accepted, .declined, .expired, .cancelled, .scheduled, .running, .ended].map(\.rawValue),
                       ["invited", "accepted", "declined", "expired", "cancelled", "scheduled", "running", "ended"])
        XCTAssertEqual([Challenge.Answer.pending, .accepted, .declined, .expired].map(\.rawValue), ["pending", "accepted", "declined", "expired"])
        XCTAssertEqual([Challenge.Result.running, .completed, .quit, .outOfContact].map(\.rawValue),
                       ["running", "completed", "quit", "out_of_contact"])
    }

    func testARowMissingAFieldOrWithAnUnknownPhaseIsNotAChallenge() throws {
        let row = try XCTUnwrap(try fixtureRows()["solo-running"])
        for key in Self.challengeKeys.subtracting(Self.optionalChallengeKeys) {
            var o = row.object
            o[key] = nil
            XCTAssertThrowsError(try decode(JSONSerialization.data(withJSONObject: o)), "without \(key)")
        }
        var o = row.object
        o["phase"] = "paused"
        XCTAssertThrowsError(try decode(JSONSerialization.data(withJSONObject: o)))
    }

    // MARK: - The stored form (Protocol/store.proto), what the store writes since JSON

    static let storedFixture = fixture.deletingLastPathComponent().appendingPathComponent("challenge-v2.txt")

    /// The stored-form fixture: name → bytes (one `name hex` a line), the same challenges as the
    /// JSON fixture, written by the code that introduced the format.
    func storedFixtureRows() throws -> [String: [UInt8]] {
        var rows: [String: [UInt8]] = [:]
        for line in try String(contentsOf: Self.storedFixture, encoding: .utf8).split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            XCTAssertEqual(parts.count, 2, String(line))
            rows[String(parts[0])] = try XCTUnwrap(parseHex(String(parts[1])), String(line))
        }
        return rows
    }

    /// Each stored-form row decodes to the value its JSON row holds, passes validation, and today's
    /// encoder writes exactly its bytes again (map entries in key order: one value, one encoding).
    func testTheStoredFormFixtureDecodesToTheJSONFixturesValuesAndReencodesExactly() throws {
        let json = try fixtureRows()
        let stored = try storedFixtureRows()
        XCTAssertEqual(Set(stored.keys), Set(json.keys))
        for (name, bytes) in stored {
            let c = try Challenge(storedBytes: bytes)
            XCTAssertNoThrow(try c.validate(), name)
            XCTAssertEqual(c, try decode(try XCTUnwrap(json[name]).bytes), name)
            XCTAssertEqual(try c.storedBytes(), bytes, name)
        }
    }

    /// Every value the state machine reaches survives the stored form, every optional set or not.
    func testTheStoredFormRoundTripsEveryState() throws {
        var states = Array(try Self.fixtureStates().values)
        var ended = try XCTUnwrap(try Self.fixtureStates()["group-running-inviter"])
        _ = try ended.markEnded(localUs: Self.t0 + 630_000_000, signer: try Self.key(1))
        ended.noteLocalStart(try XCTUnwrap(ended.startAtUs))
        states.append(ended)
        for c in states {
            let back = try Challenge(storedBytes: try c.storedBytes())
            XCTAssertEqual(back, c)
            XCTAssertEqual(back.startAtUs, c.startAtUs)
            XCTAssertEqual(back.participants.map(\.result), c.participants.map(\.result))
        }
    }

    /// Enum values nobody wrote (zero, or from a later version) and bytes that are not protobuf
    /// are refused with a reason; damaged rows never trap (every prefix, every one-byte flip),
    /// and what still decodes is then judged by `validate`.
    func testAStoredFormWithAnUnknownEnumOrDamageIsRefusedNeverATrap() throws {
        let good = try XCTUnwrap(try Self.fixtureStates()["group-running-inviter"])
        let bytes = try good.storedBytes()
        func refused(_ s: Tandem_Store_V1_StoredChallenge, _ what: String) throws {
            XCTAssertThrowsError(try Challenge(storedBytes: try s.serializedBytes())) { error in
                XCTAssertTrue("\(error)".contains(what), "\(error)")
            }
        }
        var s = try Tandem_Store_V1_StoredChallenge(serializedBytes: bytes)
        s.phase = .unspecified
        try refused(s, "unknown phase")
        s.phase = .UNRECOGNIZED(42)
        try refused(s, "unknown phase")
        s = try Tandem_Store_V1_StoredChallenge(serializedBytes: bytes)
        s.participants[1].answer = .unspecified
        try refused(s, "unknown answer")
        s = try Tandem_Store_V1_StoredChallenge(serializedBytes: bytes)
        s.participants[2].result = .UNRECOGNIZED(9)
        try refused(s, "unknown result")
        XCTAssertThrowsError(try Challenge(storedBytes: [0xFF, 0xFF, 0xFF])) { XCTAssertTrue("\($0)".contains("not decodable")) }
        XCTAssertThrowsError(try Challenge(storedBytes: Array("{\"id\":[]}".utf8)), "JSON is not the stored form")

        var decoded = 0
        for n in 0..<bytes.count {
            if let c = try? Challenge(storedBytes: Array(bytes[..<n])) { decoded += 1; _ = try? c.validate() }
            for bit in [0x01, 0x80] as [UInt8] {
                var flipped = bytes
                flipped[n] ^= bit
                if let c = try? Challenge(storedBytes: flipped) { decoded += 1; _ = try? c.validate() }
            }
        }
        XCTAssertLessThan(decoded, bytes.count * 3, "most damage is refused at decoding")
    }

    /// Writes the fixture when asked (TANDEM_WRITE_CHALLENGE_FIXTURE=1 the JSON one, =2 the stored
    /// form's, from the JSON one); each is written once per stored-format version and then only read.
    func testWriteFixtureWhenAsked() throws {
        if ProcessInfo.processInfo.environment["TANDEM_WRITE_CHALLENGE_FIXTURE"] == "2" {
            let lines = try fixtureRows().sorted { $0.key < $1.key }.map { name, row in
                "\(name) \(hexString(try decode(row.bytes).storedBytes()))"
            }
            let header = "# Challenges in the stored form (Protocol/store.proto), as the store writes them: name, then the bytes in hex.\n"
                + "# The same challenges as challenge-v1.json. Written once (TANDEM_WRITE_CHALLENGE_FIXTURE=2); never edited.\n"
            try Data((header + lines.joined(separator: "\n") + "\n").utf8).write(to: Self.storedFixture)
            return
        }
        guard ProcessInfo.processInfo.environment["TANDEM_WRITE_CHALLENGE_FIXTURE"] == "1" else {
            throw XCTSkip("set TANDEM_WRITE_CHALLENGE_FIXTURE=1 (or 2) to (re)write Tests/fixtures/challenge-v1.json (or challenge-v2.txt)")
        }
        // One challenge a line, each exactly as the store writes it (sorted keys, compact).
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let lines = try Self.fixtureStates().sorted { $0.key < $1.key }.map { name, c in
            "  \"\(name)\": " + String(decoding: try encoder.encode(c), as: UTF8.self)
        }
        let data = Data(("{\n" + lines.joined(separator: ",\n") + "\n}").utf8)
        try (data + Data("\n".utf8)).write(to: Self.fixture)
    }
}

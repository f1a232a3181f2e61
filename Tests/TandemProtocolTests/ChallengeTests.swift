import Foundation
import Sodium
import XCTest
@testable import TandemProtocol

/// The challenge state machine, clock estimation, outcome merging and the ledger: pure, no sockets.
final class ChallengeTests: XCTestCase {
    let alice = SigningKeyPair.generate()
    let bob = SigningKeyPair.generate()
    let carol = SigningKeyPair.generate()
    let t0: Int64 = 1_800_000_000_000_000

    /// Frames an action list sends, as (type, recipients).
    func sends(_ actions: [Challenge.Action]) -> [(MessageType, [[UInt8]], [UInt8])] {
        actions.compactMap { if case .send(let t, let p, let to) = $0 { return (t, to, p) } else { return nil } }
    }

    func notices(_ actions: [Challenge.Action]) -> [Challenge.Notice] {
        actions.compactMap { if case .notify(let n) = $0 { return n } else { return nil } }
    }

    /// Alice invites the others; each invitee builds its copy from the invite she sent.
    func invite(_ invitees: [SigningKeyPair], startAtUs: Int64 = 0, duration: Int64 = 60_000)
        throws -> (Challenge, [Challenge]) {
        let (c, actions) = try Challenge.invite(id: Sodium.randomBytes(16), me: alice.publicKey, invitees: invitees.map(\.publicKey),
                                                durationMs: duration, startAtUs: startAtUs, nowUs: t0, message: "focus?")
        let s = sends(actions)
        XCTAssertEqual(s.count, 1)
        XCTAssertEqual(s[0].0, .challengeInvite)
        XCTAssertEqual(s[0].1, invitees.map(\.publicKey))
        let inv = try ChallengeInviteMessage(payload: s[0].2, nowUs: t0)
        let copies = try invitees.map { try Challenge.received(inv, author: alice.publicKey, me: $0.publicKey) }
        return (c, copies)
    }

    func msg(_ inv: Tandem_V1_ChallengeInvite) throws -> ChallengeInviteMessage {
        try ChallengeInviteMessage(payload: inv.serializedBytes(), nowUs: t0)
    }

    func outcome(_ m: Tandem_V1_ChallengeOutcome) throws -> ChallengeOutcomeMessage {
        try ChallengeOutcomeMessage(payload: m.serializedBytes())
    }

    func payload(_ actions: [Challenge.Action], _ type: MessageType) -> [UInt8]? {
        sends(actions).first { $0.0 == type }?.2
    }

    func testTwoPeopleStartWhenTheInviteeAccepts() throws {
        var (a, bs) = try invite([bob])
        var b = bs[0]
        XCTAssertEqual(b.phase, .invited)
        XCTAssertEqual(b.inviter, alice.publicKey)
        let answer = try b.accept()
        XCTAssertEqual(b.phase, .accepted)
        XCTAssertEqual(sends(answer).map(\.1), [[alice.publicKey]])
        let m = try Tandem_V1_ChallengeAnswer(serializedBytes: payload(answer, .challengeAnswer)!)
        XCTAssertTrue(m.accept)
        let fixed = try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0 + 5_000_000)
        XCTAssertEqual(a.phase, .scheduled)
        XCTAssertEqual(a.startAtUs, t0 + 5_000_000 + Challenge.startLeadUs)
        XCTAssertEqual(a.roster, [alice.publicKey, bob.publicKey])
        XCTAssertEqual(notices(fixed), [.accepted(by: bob.publicKey), .scheduled])
        let start = try ChallengeStartMessage(payload: payload(fixed, .challengeStart)!, nowUs: t0)
        XCTAssertEqual(notices(try b.receiveStart(from: alice.publicKey, start)), [.scheduled])
        XCTAssertEqual(b.phase, .scheduled)
        XCTAssertEqual(b.startAtUs, a.startAtUs)
        XCTAssertEqual(b.endAtUs, a.startAtUs! + 60_000_000)
        // The same answer again changes nothing.
        XCTAssertEqual(try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0 + 6_000_000), [])
    }

    func testDeclineTellsTheInviter() throws {
        var (a, bs) = try invite([bob])
        var b = bs[0]
        _ = try b.decline()
        XCTAssertEqual(b.phase, .declined)
        let acts = try a.receiveAnswer(from: bob.publicKey, accept: false, nowUs: t0 + 1)
        XCTAssertEqual(notices(acts), [.declined(by: bob.publicKey), .allDeclined])
        XCTAssertEqual(a.phase, .declined)
        XCTAssertThrowsError(try b.accept())
    }

    func testUnansweredInvitesExpire() throws {
        var (a, bs) = try invite([bob])
        var b = bs[0]
        XCTAssertEqual(try a.tick(nowUs: t0 + Challenge.defaultExpiryUs - 1), [])
        XCTAssertEqual(notices(try a.tick(nowUs: t0 + Challenge.defaultExpiryUs)), [.expired])
        XCTAssertEqual(notices(try b.tick(nowUs: t0 + Challenge.defaultExpiryUs)), [.expired])
        XCTAssertThrowsError(try b.accept())
    }

    func testGroupStartsAtTheStartTimeWithThoseWhoAccepted() throws {
        let start = t0 + 60_000_000
        var (a, copies) = try invite([bob, carol], startAtUs: start)
        var b = copies[0], c = copies[1]
        _ = try b.accept()
        _ = try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0 + 1000)
        XCTAssertEqual(a.phase, .invited, "a group waits for its start time")
        XCTAssertEqual(try a.tick(nowUs: start - Challenge.startLeadUs - 1), [])
        let acts = try a.tick(nowUs: start - Challenge.startLeadUs)
        XCTAssertEqual(a.phase, .scheduled)
        XCTAssertEqual(a.roster, [alice.publicKey, bob.publicKey])
        XCTAssertEqual(a.participant(carol.publicKey)?.answer, .expired)
        let s = try ChallengeStartMessage(payload: payload(acts, .challengeStart)!, nowUs: t0)
        XCTAssertEqual(sends(acts)[0].1, [bob.publicKey, carol.publicKey], "everyone invited learns the roster")
        _ = try b.receiveStart(from: alice.publicKey, s)
        XCTAssertEqual(b.phase, .scheduled)
        XCTAssertEqual(notices(try c.receiveStart(from: alice.publicKey, s)), [.expired])
        XCTAssertEqual(c.phase, .expired)
    }

    func testGroupNeedsAStartTimeAndInvitesAreChecked() throws {
        XCTAssertThrowsError(try Challenge.invite(id: Sodium.randomBytes(16), me: alice.publicKey, invitees: [bob.publicKey, carol.publicKey],
                                                  durationMs: 60_000, startAtUs: 0, nowUs: t0, message: ""))
        XCTAssertThrowsError(try Challenge.invite(id: Sodium.randomBytes(16), me: alice.publicKey, invitees: [alice.publicKey],
                                                  durationMs: 60_000, startAtUs: 0, nowUs: t0, message: ""))
        XCTAssertThrowsError(try Challenge.invite(id: Sodium.randomBytes(16), me: alice.publicKey, invitees: [bob.publicKey],
                                                  durationMs: 999, startAtUs: 0, nowUs: t0, message: ""))
        var inv = Tandem_V1_ChallengeInvite()
        inv.challengeID = Data(Sodium.randomBytes(16))
        inv.participants = [Data(alice.publicKey), Data(bob.publicKey)]
        inv.durationMs = 60_000
        inv.expiresAtUs = UInt64(t0)
        XCTAssertNoThrow(try Challenge.received(msg(inv), author: alice.publicKey, me: bob.publicKey))
        XCTAssertThrowsError(try Challenge.received(msg(inv), author: carol.publicKey, me: bob.publicKey), "the author must come first")
        XCTAssertThrowsError(try Challenge.received(msg(inv), author: alice.publicKey, me: carol.publicKey), "not for us")
        var dup = inv
        dup.participants = [Data(alice.publicKey), Data(bob.publicKey), Data(bob.publicKey)]
        dup.startAtUs = UInt64(t0)
        XCTAssertThrowsError(try Challenge.received(msg(dup), author: alice.publicKey, me: bob.publicKey))
        var long = inv
        long.message = String(repeating: "x", count: 281)
        XCTAssertThrowsError(try Challenge.received(msg(long), author: alice.publicKey, me: bob.publicKey))
    }

    func testCancelBeforeTheStartOnly() throws {
        var (a, bs) = try invite([bob])
        var b = bs[0]
        XCTAssertThrowsError(try b.cancel(reason: ""), "only the inviter cancels")
        let acts = try a.cancel(reason: "sorry")
        XCTAssertEqual(a.phase, .cancelled)
        XCTAssertEqual(sends(acts).map(\.0), [.challengeCancel])
        XCTAssertEqual(notices(try b.receiveCancel(from: alice.publicKey, sentAtUs: t0)), [.cancelled(by: alice.publicKey)])
        XCTAssertEqual(b.phase, .cancelled)
        XCTAssertThrowsError(try b.receiveCancel(from: bob.publicKey, sentAtUs: t0))
    }

    /// Runs a two-person challenge to `.running` on both sides.
    func running() throws -> (Challenge, Challenge) {
        var (a, bs) = try invite([bob])
        var b = bs[0]
        _ = try b.accept()
        let acts = try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0)
        _ = try b.receiveStart(from: alice.publicKey, ChallengeStartMessage(payload: payload(acts, .challengeStart)!, nowUs: t0))
        a.markStarted(localUs: t0)
        b.markStarted(localUs: t0)
        return (a, b)
    }

    func testQuitIsSentToPartnersAndBothLedgersAgree() throws {
        var (a, b) = try running()
        let q = try b.quit(elapsedMs: 12_345, reason: "phone call")
        XCTAssertEqual(sends(q).map(\.1), [[alice.publicKey]])
        XCTAssertThrowsError(try b.quit(elapsedMs: 13_000, reason: ""), "only once")
        let m = try Tandem_V1_ChallengeQuit(serializedBytes: payload(q, .challengeQuit)!)
        XCTAssertEqual(notices(try a.receiveQuit(from: bob.publicKey, elapsedMs: Int64(m.elapsedMs), reason: m.reason)),
                       [.partnerQuit(key: bob.publicKey, elapsedMs: 12_345, reason: "phone call")])
        XCTAssertEqual(try a.receiveQuit(from: bob.publicKey, elapsedMs: 1, reason: ""), [], "a repeated notice changes nothing")
        let ea = try a.markEnded(localUs: t0 + 60_000_000, signer: alice)
        let eb = try b.markEnded(localUs: t0 + 60_000_000, signer: bob)
        XCTAssertEqual(a.participant(alice.publicKey)?.result, .completed)
        XCTAssertEqual(b.participant(bob.publicKey)?.result, .quit)
        XCTAssertEqual(a.record, b.record, "both saw the same facts")
        _ = try a.receiveOutcome(from: bob.publicKey, ChallengeOutcomeMessage(payload: payload(eb, .challengeOutcome)!), signer: alice)
        _ = try b.receiveOutcome(from: alice.publicKey, ChallengeOutcomeMessage(payload: payload(ea, .challengeOutcome)!), signer: bob)
        XCTAssertTrue(a.readyToCommit(nowUs: t0 + 60_000_001))
        XCTAssertTrue(b.readyToCommit(nowUs: t0 + 60_000_001))
        let ledgerA = Ledger.append(after: nil, record: a.record!, signatures: a.signatureList)
        let ledgerB = Ledger.append(after: nil, record: b.record!, signatures: b.signatureList)
        XCTAssertEqual(ledgerA.hash, ledgerB.hash)
        XCTAssertNil(Ledger.verify([ledgerA]))
        let r = Outcome.decode(a.record!)!
        XCTAssertEqual(r.outcomes.first { Array($0.publicKey) == bob.publicKey }?.result, .quit)
        XCTAssertEqual(r.outcomes.first { Array($0.publicKey) == bob.publicKey }?.elapsedMs, 12_345)
    }

    func testDifferingViewsConvergeWhateverTheOrder() throws {
        var (a, b) = try running()
        // Alice lost contact with Bob near the end; Bob finished fine and signs.
        a.setOutOfContact(bob.publicKey, true)
        let ea = try a.markEnded(localUs: 0, signer: alice)
        XCTAssertEqual(a.participant(bob.publicKey)?.result, .outOfContact)
        XCTAssertFalse(a.readyToCommit(nowUs: t0 + 60_000_000), "Bob has not signed and the grace period is not over")
        let eb = try b.markEnded(localUs: 0, signer: bob)
        XCTAssertNotEqual(a.record, b.record)
        // Bob's signature proves he was there: Alice's view becomes "completed" and she re-signs.
        let resign = try a.receiveOutcome(from: bob.publicKey, ChallengeOutcomeMessage(payload: payload(eb, .challengeOutcome)!),
                                          signer: alice)
        XCTAssertEqual(a.participant(bob.publicKey)?.result, .completed)
        XCTAssertEqual(a.record, b.record)
        XCTAssertFalse(sends(resign).isEmpty, "a changed view is signed and sent again")
        // Bob gets Alice's stale view first, then the new one.
        _ = try b.receiveOutcome(from: alice.publicKey, ChallengeOutcomeMessage(payload: payload(ea, .challengeOutcome)!), signer: bob)
        _ = try b.receiveOutcome(from: alice.publicKey, ChallengeOutcomeMessage(payload: payload(resign, .challengeOutcome)!), signer: bob)
        XCTAssertEqual(a.record, b.record)
        XCTAssertTrue(a.readyToCommit(nowUs: 0))
        XCTAssertTrue(b.readyToCommit(nowUs: 0))
    }

    func testAnOutcomeThatArrivesBeforeOurEndIsKept() throws {
        var (a, b) = try running()
        let eb = try b.markEnded(localUs: 0, signer: bob)
        XCTAssertEqual(try a.receiveOutcome(from: bob.publicKey, ChallengeOutcomeMessage(payload: payload(eb, .challengeOutcome)!),
                                            signer: alice), [])
        _ = try a.markEnded(localUs: 0, signer: alice)
        XCTAssertEqual(a.signatures.count, 2, "Bob's early signature counts once Alice ends")
        XCTAssertTrue(a.readyToCommit(nowUs: 0))
    }

    func testForgedOrForeignOutcomesAreRefused() throws {
        var (a, b) = try running()
        let eb = try b.markEnded(localUs: 0, signer: bob)
        _ = try a.markEnded(localUs: 0, signer: alice)
        var m = try Tandem_V1_ChallengeOutcome(serializedBytes: payload(eb, .challengeOutcome)!)
        XCTAssertThrowsError(try a.receiveOutcome(from: carol.publicKey, outcome(m), signer: alice), "not a participant")
        m.signature[0] ^= 1
        XCTAssertThrowsError(try a.receiveOutcome(from: bob.publicKey, outcome(m), signer: alice), "bad signature")
        XCTAssertEqual(a.signatures.count, 1)
    }

    func testOutOfContactCommitsAfterTheGracePeriod() throws {
        var (a, _) = try running()
        a.setOutOfContact(bob.publicKey, true)
        _ = try a.markEnded(localUs: 0, signer: alice)
        let end = a.endAtUs!
        XCTAssertFalse(a.readyToCommit(nowUs: end + a.graceMs * 1000 - 1))
        XCTAssertTrue(a.readyToCommit(nowUs: end + a.graceMs * 1000))
        let e = Ledger.append(after: nil, record: a.record!, signatures: a.signatureList)
        XCTAssertNil(Ledger.verify([e]), "an out-of-contact participant need not sign")
    }

    func testAPartnerWhoNeverSignsIsSettledAsOutOfContact() throws {
        var (a, _) = try running()
        _ = try a.markEnded(localUs: 0, signer: alice)
        XCTAssertEqual(a.participant(bob.publicKey)?.result, .completed, "in contact at the end")
        let end = a.endAtUs!
        XCTAssertEqual(try a.settleAfterGrace(nowUs: end + a.graceMs * 1000 - 1, signer: alice), [])
        XCTAssertFalse(a.readyToCommit(nowUs: end + a.graceMs * 1000 - 1))
        let acts = try a.settleAfterGrace(nowUs: end + a.graceMs * 1000, signer: alice)
        XCTAssertEqual(sends(acts).map(\.0), [.challengeOutcome], "the new view is signed and sent")
        XCTAssertEqual(a.participant(bob.publicKey)?.result, .outOfContact)
        XCTAssertTrue(a.readyToCommit(nowUs: end + a.graceMs * 1000))
        XCTAssertNil(Ledger.verify([Ledger.append(after: nil, record: a.record!, signatures: a.signatureList)]))
    }

    func testACancelAfterOurStartIsRefusedWhateverItsDate() throws {
        // A CANCEL's created-at is the inviter's to choose: backdated before the start, it must not
        // erase a challenge that is already running here.
        var (_, b) = try running()
        let start = b.startAtUs!
        XCTAssertEqual(try b.receiveCancel(from: alice.publicKey, sentAtUs: start - 1), [], "backdated: refused once running")
        XCTAssertEqual(try b.receiveCancel(from: alice.publicKey, sentAtUs: start + 1), [])
        XCTAssertEqual(b.phase, .running)
        // Before our start it counts.
        var (_, copies) = try invite([bob], startAtUs: t0 + 60_000_000)
        _ = try copies[0].accept()
        XCTAssertEqual(notices(try copies[0].receiveCancel(from: alice.publicKey, sentAtUs: t0)), [.cancelled(by: alice.publicKey)])
    }

    func testAYesCanBecomeANoBeforeTheStart() throws {
        let (a0, copies) = try invite([bob, carol], startAtUs: t0 + 60_000_000)
        var a = a0
        var b = copies[0]
        _ = try b.accept()
        _ = try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0)
        _ = try b.decline()
        XCTAssertEqual(notices(try a.receiveAnswer(from: bob.publicKey, accept: false, nowUs: t0)), [.declined(by: bob.publicKey)], "Carol may still come")
        XCTAssertEqual(a.participant(bob.publicKey)?.answer, .declined)
        XCTAssertEqual(try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0), [], "a no stays a no")
    }

    func testNobodyCanMakeAnotherParticipantAQuitter() throws {
        var (a, b) = try running()
        _ = try a.markEnded(localUs: 0, signer: alice)
        _ = try b.markEnded(localUs: 0, signer: bob)
        // Bob signs a view in which Alice quit; Alice never sent a QUIT.
        var forged = Outcome.decode(b.record!)!
        for i in forged.outcomes.indices where Array(forged.outcomes[i].publicKey) == alice.publicKey {
            forged.outcomes[i].result = .quit
            forged.outcomes[i].elapsedMs = 10
        }
        let bytes = Outcome.encode(forged)
        var m = Tandem_V1_ChallengeOutcome()
        m.record = Data(bytes)
        m.signature = Data(Outcome.sign(bytes, with: bob))
        _ = try a.receiveOutcome(from: bob.publicKey, outcome(m), signer: alice)
        XCTAssertEqual(a.participant(alice.publicKey)?.result, .completed)
        XCTAssertNil(a.signatures[hexString(bob.publicKey)], "a signature over another record does not count")
    }

    /// Bob really quit; Carol's signed record gives him a smaller elapsed time and another reason.
    /// Alice keeps Bob's own word (his QUIT notice), and so does Bob.
    func testNobodyRewritesAnotherParticipantsQuit() throws {
        let (a0, copies) = try invite([bob, carol], startAtUs: t0 + 10_000_000)
        var a = a0, b = copies[0], c = copies[1]
        _ = try b.accept(); _ = try c.accept()
        _ = try a.receiveAnswer(from: bob.publicKey, accept: true, nowUs: t0)
        _ = try a.receiveAnswer(from: carol.publicKey, accept: true, nowUs: t0)
        let fixed = try a.tick(nowUs: t0 + 9_000_000)
        let start = try ChallengeStartMessage(payload: payload(fixed, .challengeStart)!, nowUs: t0)
        _ = try b.receiveStart(from: alice.publicKey, start)
        _ = try c.receiveStart(from: alice.publicKey, start)
        a.markStarted(localUs: t0); b.markStarted(localUs: t0); c.markStarted(localUs: t0)
        _ = try b.quit(elapsedMs: 40_000, reason: "my own words")
        _ = try a.receiveQuit(from: bob.publicKey, elapsedMs: 40_000, reason: "my own words")
        _ = try c.receiveQuit(from: bob.publicKey, elapsedMs: 40_000, reason: "my own words")
        _ = try a.markEnded(localUs: 0, signer: alice)
        _ = try b.markEnded(localUs: 0, signer: bob)
        _ = try c.markEnded(localUs: 0, signer: carol)
        var forged = Outcome.decode(c.record!)!
        for i in forged.outcomes.indices where Array(forged.outcomes[i].publicKey) == bob.publicKey {
            forged.outcomes[i].elapsedMs = 1
            forged.outcomes[i].reason = "gave up at once"
        }
        let bytes = Outcome.encode(forged)
        var m = Tandem_V1_ChallengeOutcome()
        m.record = Data(bytes)
        m.signature = Data(Outcome.sign(bytes, with: carol))
        _ = try a.receiveOutcome(from: carol.publicKey, outcome(m), signer: alice)
        _ = try b.receiveOutcome(from: carol.publicKey, outcome(m), signer: bob)
        for x in [a, b] {
            let mine = Outcome.decode(x.record!)!.outcomes.first { Array($0.publicKey) == bob.publicKey }!
            XCTAssertEqual(mine.elapsedMs, 40_000)
            XCTAssertEqual(mine.reason, "my own words")
        }
        XCTAssertNil(a.signatures[hexString(carol.publicKey)], "her signature is over another record")
    }

    func testExtremeStoredValuesNeverTrap() throws {
        // Such values only come from disk: they are made here the way a damaged row would hold them.
        var (_, b) = try running()
        b = try stored(b) { $0["startAtUs"] = Int64.max - 5 }
        XCTAssertEqual(b.endAtUs, Int64.max, "saturates instead of trapping")
        XCTAssertThrowsError(try b.validate(), "a start past the stored range is refused at load")
        b = try stored(b) {
            $0["startAtUs"] = self.t0
            $0["requestedStartUs"] = Int64.max
            $0["phase"] = "invited"
        }
        XCTAssertNoThrow(try b.tick(nowUs: t0))
        XCTAssertThrowsError(try b.validate())
        var (_, c) = try running()
        c = try stored(c) { json in
            var people = json["participants"] as! [[String: Any]]
            for i in people.indices where (people[i]["key"] as? [Int])?.map({ UInt8($0) }) == self.bob.publicKey {
                people[i]["quitElapsedMs"] = Int64.max
            }
            json["participants"] = people
        }
        XCTAssertThrowsError(try c.validate(), "a quit time past the duration is refused at load")
        XCTAssertNoThrow(try running().1.validate())
    }

    func testAnOutcomeWithAnOutOfRangeQuitIsNotARecord() throws {
        var (a, _) = try running()
        _ = try a.markEnded(localUs: 0, signer: alice)
        var r = Outcome.decode(a.record!)!
        for i in r.outcomes.indices where Array(r.outcomes[i].publicKey) == bob.publicKey {
            r.outcomes[i].result = .quit
            r.outcomes[i].elapsedMs = UInt64.max
        }
        XCTAssertNil(Outcome.decode(Outcome.encode(r)), "elapsed 2^64-1 > duration")
        for i in r.outcomes.indices where Array(r.outcomes[i].publicKey) == bob.publicKey { r.outcomes[i].elapsedMs = 60_000 }
        XCTAssertNotNil(Outcome.decode(Outcome.encode(r)), "elapsed = duration is the maximum")
        for i in r.outcomes.indices where Array(r.outcomes[i].publicKey) == bob.publicKey { r.outcomes[i].elapsedMs = 60_001 }
        XCTAssertNil(Outcome.decode(Outcome.encode(r)))
        r.durationMs = UInt64(1) << 63
        XCTAssertNil(Outcome.decode(Outcome.encode(r)))
    }

    func testALateQuitNoticeChangesAnEndedRecord() throws {
        var (a, _) = try running()
        _ = try a.markEnded(localUs: 0, signer: alice)
        let acts = try a.receiveQuit(from: bob.publicKey, elapsedMs: 500, reason: "late", signer: alice)
        XCTAssertEqual(sends(acts).map(\.0), [.challengeOutcome])
        XCTAssertEqual(Outcome.decode(a.record!)!.outcomes.first { Array($0.publicKey) == bob.publicKey }?.result, .quit)
    }

    func testSettlingKeepsAPartnerWhoSignedAnEarlierView() throws {
        var (a, b) = try running()
        a.setOutOfContact(bob.publicKey, true)
        _ = try a.markEnded(localUs: 0, signer: alice)
        let eb = try b.markEnded(localUs: 0, signer: bob)
        // Bob's view reaches Alice; hers changes (Bob completed) and she re-signs; Bob's signature
        // over her new view has not arrived when the grace period ends.
        _ = try a.receiveOutcome(from: bob.publicKey, ChallengeOutcomeMessage(payload: payload(eb, .challengeOutcome)!), signer: alice)
        a = try stored(a) { json in
            var signatures = json["signatures"] as! [String: Any]
            signatures[hexString(self.bob.publicKey)] = nil
            json["signatures"] = signatures
        }
        XCTAssertEqual(try a.settleAfterGrace(nowUs: a.endAtUs! + a.graceMs * 1000, signer: alice), [])
        XCTAssertEqual(a.participant(bob.publicKey)?.result, .completed)
    }

    func testSoloSessionSignsItsOwnRecord() throws {
        var s = try Challenge.solo(id: Sodium.randomBytes(16), me: alice.publicKey, durationMs: 1500, nowUs: t0)
        XCTAssertEqual(s.phase, .scheduled)
        s.markStarted(localUs: t0)
        XCTAssertEqual(try s.markEnded(localUs: t0 + 1_500_000, signer: alice), [], "nobody to send to")
        XCTAssertTrue(s.readyToCommit(nowUs: t0))
        XCTAssertNil(Ledger.verify([Ledger.append(after: nil, record: s.record!, signatures: s.signatureList)]))
    }

    // MARK: - Transitions the node drives

    func testTheLocalStartIsKeptAsGiven() throws {
        var (_, b) = try running()
        let start = try XCTUnwrap(b.startAtUs)
        // The inviter's clock runs 5 s ahead of Bob's: the start is 5 s earlier on his clock.
        b.noteLocalStart(start - 5_000_000)
        XCTAssertEqual(b.localStartUs, start - 5_000_000)
        b.noteLocalStart(start + 250)
        XCTAssertEqual(b.localStartUs, start + 250, "a later measurement replaces the earlier one")
        XCTAssertEqual(b.phase, .running, "only the local instant changes")
        XCTAssertEqual(b.startAtUs, start)
        XCTAssertNoThrow(try b.validate())
        b.noteLocalStart(-1)
        XCTAssertThrowsError(try b.validate(), "an instant before the epoch is refused at load")
    }

    func testContactIsNotedOnlyForRunningPartnersWhoHaveNotQuit() throws {
        var (s, _) = try invite([bob, carol], startAtUs: t0 + 60_000_000)
        XCTAssertFalse(s.setOutOfContact(bob.publicKey, true), "invited: nothing runs yet")
        XCTAssertEqual(s.participant(bob.publicKey)?.outOfContact, false)
        var (a, b) = try running()
        XCTAssertFalse(a.setOutOfContact(carol.publicKey, true), "not taking part")
        XCTAssertFalse(a.setOutOfContact(alice.publicKey, true), "never ourselves")
        XCTAssertFalse(a.setOutOfContact(bob.publicKey, false), "already in contact: no change")
        XCTAssertTrue(a.setOutOfContact(bob.publicKey, true))
        XCTAssertEqual(a.participant(bob.publicKey)?.outOfContact, true)
        XCTAssertFalse(a.setOutOfContact(bob.publicKey, true), "no change the second time")
        XCTAssertTrue(a.setOutOfContact(bob.publicKey, false), "heard from again")
        XCTAssertEqual(a.participant(bob.publicKey)?.outOfContact, false)
        // A quitter's silence does not matter: the notice settled the result.
        let q = try b.quit(elapsedMs: 1_000, reason: "done")
        let m = try Tandem_V1_ChallengeQuit(serializedBytes: payload(q, .challengeQuit)!)
        _ = try a.receiveQuit(from: bob.publicKey, elapsedMs: Int64(m.elapsedMs), reason: m.reason)
        XCTAssertFalse(a.setOutOfContact(bob.publicKey, true))
        XCTAssertEqual(a.participant(bob.publicKey)?.outOfContact, false)
        // After the end the results are fixed: the flag no longer moves.
        var (c, _) = try running()
        _ = try c.markEnded(localUs: 0, signer: alice)
        XCTAssertFalse(c.setOutOfContact(bob.publicKey, true))
        XCTAssertEqual(c.participant(bob.publicKey)?.outOfContact, false)
        XCTAssertEqual(c.participant(bob.publicKey)?.result, .completed)
    }

    func testASilentPartnerEndsOutOfContact() throws {
        var (a, _) = try running()
        XCTAssertTrue(a.setOutOfContact(bob.publicKey, true))
        _ = try a.markEnded(localUs: 0, signer: alice)
        XCTAssertEqual(a.participant(bob.publicKey)?.result, .outOfContact)
        XCTAssertEqual(Outcome.decode(a.record!)!.outcomes.first { Array($0.publicKey) == bob.publicKey }?.result, .outOfContact)
    }

    func testACommittedChallengeIsOverForGood() throws {
        var (a, _) = try running()
        _ = try a.markEnded(localUs: 0, signer: alice)
        XCTAssertTrue(a.isActive, "ended, not yet in the ledger")
        XCTAssertFalse(a.committed)
        a.markCommitted()
        XCTAssertTrue(a.committed)
        XCTAssertFalse(a.isActive)
        XCTAssertFalse(a.readyToCommit(nowUs: t0 + 3_600_000_000), "it goes into the ledger once")
        // Later notices and outcomes change nothing.
        XCTAssertEqual(try a.receiveQuit(from: bob.publicKey, elapsedMs: 10, reason: "late", signer: alice), [])
        XCTAssertEqual(a.participant(bob.publicKey)?.result, .completed)
        XCTAssertEqual(try a.settleAfterGrace(nowUs: t0 + 3_600_000_000, signer: alice), [])
    }

    func testEveryPhaseIsActiveOrNot() throws {
        // isActive is an exhaustive switch; its answers, reached through real transitions.
        let (a, bs) = try invite([bob])
        XCTAssertTrue(a.isActive)
        var b = bs[0]
        _ = try b.accept()
        XCTAssertTrue(b.isActive)
        var d = bs[0]
        _ = try d.decline()
        XCTAssertFalse(d.isActive)
        var e = bs[0]
        _ = try e.tick(nowUs: t0 + Challenge.defaultExpiryUs)
        XCTAssertEqual(e.phase, .expired)
        XCTAssertFalse(e.isActive)
        var c = a
        _ = try c.cancel(reason: "")
        XCTAssertEqual(c.phase, .cancelled)
        XCTAssertFalse(c.isActive)
        let (r, _) = try running()
        XCTAssertTrue(r.isActive)
    }

    func testStateSurvivesACodableRoundTrip() throws {
        let (a, _) = try running()
        let data = try JSONEncoder().encode(a)
        XCTAssertEqual(try JSONDecoder().decode(Challenge.self, from: data), a)
    }

    // MARK: - Clock estimation

    func testClockSampleArithmetic() {
        // Their clock is 5 s ahead; 2 ms each way; they take 1 ms to answer.
        let s = ClockSample(t1: 1_000_000, t2: 6_002_000, t3: 6_003_000, t4: 1_005_000)
        XCTAssertEqual(s.offsetMicros, 5_000_000)
        XCTAssertEqual(s.delayMicros, 4_000)
    }

    func testEstimatorKeepsTheLeastDelayedSample() {
        var e = ClockEstimator(capacity: 4)
        XCTAssertNil(e.offset(nowMicros: 0))
        // Asymmetric delays distort the offset; the quickest exchange is closest to the truth.
        XCTAssertTrue(e.add(t1: 0, t2: 5_000_900, t3: 5_000_900, t4: 1_000))        // 1 ms, offset +5.0004 s
        XCTAssertTrue(e.add(t1: 10_000, t2: 5_019_000, t3: 5_019_000, t4: 20_000))  // 10 ms, skewed
        XCTAssertEqual(e.offset(nowMicros: 20_000), 5_000_400)
        XCTAssertFalse(e.add(t1: 10, t2: 0, t3: 0, t4: 5), "t4 before t1")
        XCTAssertFalse(e.add(t1: 0, t2: 0, t3: 0, t4: 3_000_000), "a 3 s round trip says nothing")
        for i in 0..<4 { e.add(t1: Int64(100 + i), t2: 6_000_000, t3: 6_000_000, t4: Int64(100 + i) + 5_000) }
        XCTAssertEqual(e.samples.count, 4, "bounded")
        XCTAssertEqual(e.best(nowMicros: 200)?.delayMicros, 5_000)
    }

    func testOldSamplesGiveWayToFreshOnes() {
        var e = ClockEstimator(capacity: 8, maximumAgeMicros: 1_000_000)
        e.add(t1: 0, t2: 100, t3: 100, t4: 200)                   // quick but old
        e.add(t1: 5_000_000, t2: 5_003_000, t3: 5_003_000, t4: 5_010_000)
        XCTAssertEqual(e.best(nowMicros: 5_010_000)?.takenAtMicros, 5_010_000)
    }

    func testAStepInTheirClockReplacesOlderSamples() {
        var e = ClockEstimator()
        // Quick exchanges while their clock is 5 s ahead…
        for i in 0..<4 { e.add(t1: Int64(i) * 1_000_000, t2: Int64(i) * 1_000_000 + 5_000_100, t3: Int64(i) * 1_000_000 + 5_000_100,
                               t4: Int64(i) * 1_000_000 + 200) }
        XCTAssertEqual(e.offset(nowMicros: 4_000_000), 5_000_000)
        // …then it restarts 5 s behind: a slower exchange cannot agree with the older ones, and wins.
        XCTAssertTrue(e.add(t1: 10_000_000, t2: 5_001_000, t3: 5_001_000, t4: 10_002_000))
        XCTAssertEqual(e.offset(nowMicros: 10_002_000), -5_000_000)
        XCTAssertEqual(e.samples.count, 1)
        // A noisy exchange that agrees within its delay keeps the better one.
        XCTAssertTrue(e.add(t1: 11_000_000, t2: 6_009_000, t3: 6_009_000, t4: 11_010_000))
        XCTAssertEqual(e.samples.count, 2)
        XCTAssertEqual(e.offset(nowMicros: 11_010_000), -5_000_000)
    }

    // MARK: - Ledger

    func signedRecord(_ result: Tandem_V1_ParticipantResult = .completed) -> ([UInt8], [(key: [UInt8], signature: [UInt8])]) {
        var r = Tandem_V1_OutcomeRecord()
        r.challengeID = Data(Sodium.randomBytes(16))
        r.durationMs = 1000
        r.inviter = Data(alice.publicKey)
        r.outcomes = [alice, bob].map { k in
            var o = Tandem_V1_ParticipantOutcome()
            o.publicKey = Data(k.publicKey)
            o.result = result
            return o
        }
        let bytes = Outcome.encode(r)
        return (bytes, [(alice.publicKey, Outcome.sign(bytes, with: alice)), (bob.publicKey, Outcome.sign(bytes, with: bob))])
    }

    func testLedgerVerifyReportsTheFirstBreak() {
        var entries: [LedgerEntry] = []
        for _ in 0..<3 {
            let (r, s) = signedRecord()
            entries.append(Ledger.append(after: entries.last, record: r, signatures: s))
        }
        XCTAssertNil(Ledger.verify(entries))
        XCTAssertEqual(entries.map(\.seq), [1, 2, 3])
        XCTAssertEqual(entries[1].previousHash, entries[0].hash)

        var tampered = entries
        tampered[1].record[tampered[1].record.count - 1] ^= 1
        XCTAssertEqual(Ledger.verify(tampered)?.seq, 2)

        var badSig = entries
        badSig[0].signatures[0].signature[5] ^= 1
        XCTAssertEqual(Ledger.verify(badSig)?.seq, 1)

        var unsigned = entries
        unsigned[2].signatures.removeLast()
        XCTAssertEqual(Ledger.verify(unsigned)?.seq, 3)
        XCTAssertTrue(Ledger.verify(unsigned)!.reason.contains("did not sign"))

        var removed = entries
        removed.remove(at: 1)
        XCTAssertEqual(Ledger.verify(removed)?.seq, 3)

        var rehashed = entries
        rehashed[0].hash[0] ^= 1
        XCTAssertEqual(Ledger.verify(rehashed)?.seq, 1)
    }

    func testPackedSignaturesRoundTrip() {
        let (r, s) = signedRecord()
        let e = Ledger.append(after: nil, record: r, signatures: s)
        let unpacked = LedgerEntry.unpackSignatures(e.packedSignatures)!
        XCTAssertEqual(unpacked.map(\.key), e.signatures.map(\.key))
        XCTAssertEqual(unpacked.map(\.signature), e.signatures.map(\.signature))
        XCTAssertNil(LedgerEntry.unpackSignatures([1, 2, 3]))
    }

    func testNonCanonicalRecordsAreRefused() {
        var r = Tandem_V1_OutcomeRecord()
        r.challengeID = Data(Sodium.randomBytes(16))
        r.durationMs = 60_000
        r.inviter = Data(alice.publicKey)
        r.outcomes = [bob, alice].map { k in
            var o = Tandem_V1_ParticipantOutcome()
            o.publicKey = Data(k.publicKey)
            o.result = .completed
            return o
        }
        let unsorted: [UInt8] = try! r.serializedBytes()
        let canonical = Outcome.encode(r)
        if unsorted != canonical { XCTAssertNil(Outcome.decode(unsorted)) }
        XCTAssertNotNil(Outcome.decode(canonical))
        XCTAssertNil(Outcome.decode(canonical + [0x30, 0x01]), "an unknown field makes it non-canonical")
    }

    func testMergeIsOrderIndependent() {
        func rec(_ results: [Tandem_V1_ParticipantResult]) -> Tandem_V1_OutcomeRecord {
            var r = Tandem_V1_OutcomeRecord()
            r.challengeID = Data(repeating: 1, count: 16)
            r.inviter = Data(alice.publicKey)
            r.outcomes = zip([alice, bob, carol], results).map { k, res in
                var o = Tandem_V1_ParticipantOutcome()
                o.publicKey = Data(k.publicKey)
                o.result = res
                if res == .quit { o.elapsedMs = 5 }
                return o
            }
            return r
        }
        let views = [rec([.completed, .outOfContact, .completed]), rec([.completed, .quit, .outOfContact]),
                     rec([.outOfContact, .completed, .completed])]
        let signers: Set<Data> = [Data(alice.publicKey)]
        let ab = Outcome.merge(Outcome.merge(views[0], views[1], signers: signers), views[2], signers: signers)
        let ba = Outcome.merge(Outcome.merge(views[2], views[1], signers: signers), views[0], signers: signers)
        XCTAssertEqual(Outcome.encode(ab), Outcome.encode(ba))
        let byKey = Dictionary(uniqueKeysWithValues: ab.outcomes.map { ($0.publicKey, $0.result) })
        XCTAssertEqual(byKey[Data(alice.publicKey)], .completed)
        XCTAssertEqual(byKey[Data(bob.publicKey)], .quit)
        XCTAssertEqual(byKey[Data(carol.publicKey)], .completed)
    }

    /// `c` as stored, edited as a damaged or older row might hold it, and read back the way the
    /// store reads it (stored fields change only through Challenge's transitions otherwise).
    func stored(_ c: Challenge, _ edit: (inout [String: Any]) -> Void) throws -> Challenge {
        var json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(c)) as! [String: Any]
        edit(&json)
        return try JSONDecoder().decode(Challenge.self, from: JSONSerialization.data(withJSONObject: json))
    }

}

import Foundation
import Sodium
import SwiftProtobuf

/// One focus challenge as one node sees it, and the rules that move it (Protocol/README.md,
/// section 13). Pure: every method takes the facts (a message, the time on the challenge's
/// timebase) and returns what to send and what to tell the user. The node stores the value whole
/// after every step, so a restarted node resumes exactly where it stopped.
///
/// Its fields are readable by anyone and changed only by its own transitions (the methods below).
/// The JSON the node stores is a format on disk: `CodingKeys` and the raw values of the enums
/// spell it out, and Tests/fixtures/store-v4 and challenge-v1.json hold rows every later version
/// must decode.
///
/// Instants ending in `Us` are on the *timebase* (the inviter's wall clock, µs since the epoch);
/// durations and elapsed times are clock-free.
public struct Challenge: Codable, Sendable, Equatable {
    // The raw values below are stored (the JSON state and the challenge table's `phase` column):
    // a case may be renamed, its raw value stays.
    public enum Phase: String, Codable, Sendable {
        /// Waiting for answers (inviter) or for ours (invitee).
        case invited = "invited"
        /// We accepted and wait for the inviter's START.
        case accepted = "accepted"
        case declined = "declined"
        case expired = "expired"
        case cancelled = "cancelled"
        /// The start instant is fixed and still ahead.
        case scheduled = "scheduled"
        case running = "running"
        /// Over; `participant(me)?.result` says how it went for us.
        case ended = "ended"
    }

    public enum Answer: String, Codable, Sendable {
        case pending = "pending"
        case accepted = "accepted"
        case declined = "declined"
        case expired = "expired"
    }

    public enum Result: String, Codable, Sendable {
        case running = "running"
        case completed = "completed"
        case quit = "quit"
        case outOfContact = "out_of_contact"
    }

    public struct Participant: Codable, Sendable, Equatable {
        public fileprivate(set) var key: [UInt8]
        public fileprivate(set) var answer: Answer
        public fileprivate(set) var result: Result?
        public fileprivate(set) var quitElapsedMs: Int64?
        public fileprivate(set) var reason: String?
        /// Shown while a partner has been silent for longer than the grace period.
        public fileprivate(set) var outOfContact: Bool
        public fileprivate(set) var addressHint: String

        /// The stored format (a JSON object per challenge row): these names are a schema that every
        /// later version must read (the fixture in Tests/fixtures/store-v4 pins them).
        /// Each name spelled out: a case may be renamed, the string stays.
        enum CodingKeys: String, CodingKey, CaseIterable {
            case key = "key"
            case answer = "answer"
            case result = "result"
            case quitElapsedMs = "quitElapsedMs"
            case reason = "reason"
            case outOfContact = "outOfContact"
            case addressHint = "addressHint"
        }
    }

    public private(set) var id: [UInt8]
    public private(set) var me: [UInt8]
    public private(set) var inviter: [UInt8]
    /// The inviter first.
    public private(set) var participants: [Participant]
    public private(set) var durationMs: Int64
    /// The start asked for in the invite; 0: when the invitee accepts (two people).
    public private(set) var requestedStartUs: Int64
    public private(set) var startAtUs: Int64?
    public private(set) var expiresAtUs: Int64
    public private(set) var graceMs: Int64
    public private(set) var message: String
    public private(set) var phase: Phase
    /// Who takes part once started: the inviter and everyone who accepted in time.
    public private(set) var roster: [[UInt8]]
    public private(set) var solo: Bool
    /// The start converted to our clock when last scheduled (µs), for a restart before re-sync.
    public private(set) var localStartUs: Int64?
    /// When we entered `running` and `ended`, on our clock (µs).
    public private(set) var startedLocalUs: Int64?
    public private(set) var endedLocalUs: Int64?

    // Outcome collection (13.6).
    /// Our current view of the outcome, canonical bytes.
    public private(set) var record: [UInt8]?
    /// Signatures over `record`, by hex key.
    public private(set) var signatures: [String: [UInt8]]
    /// Everyone who signed any record of this challenge (they were in contact at the end).
    public private(set) var signers: [String]
    public private(set) var committed: Bool
    /// Outcome messages that arrived before we ended (their clock ran a little ahead), by hex key;
    /// handled when we end. At most one per participant.
    public private(set) var early: [String: [UInt8]] = [:]

    /// The stored format (a JSON object per challenge row, TandemStore/Challenges.swift): these
    /// names are a schema that every later version must read; a rename needs a migration. The
    /// fixture in Tests/fixtures/store-v4, written by an earlier version, pins them.
    /// Each name spelled out: a case may be renamed, the string stays.
    enum CodingKeys: String, CodingKey, CaseIterable {
        case id = "id"
        case me = "me"
        case inviter = "inviter"
        case participants = "participants"
        case durationMs = "durationMs"
        case requestedStartUs = "requestedStartUs"
        case startAtUs = "startAtUs"
        case expiresAtUs = "expiresAtUs"
        case graceMs = "graceMs"
        case message = "message"
        case phase = "phase"
        case roster = "roster"
        case solo = "solo"
        case localStartUs = "localStartUs"
        case startedLocalUs = "startedLocalUs"
        case endedLocalUs = "endedLocalUs"
        case record = "record"
        case signatures = "signatures"
        case signers = "signers"
        case committed = "committed"
        case early = "early"
    }

    public static let startLeadUs: Int64 = 2_000_000
    public static let defaultGraceMs: Int64 = 60_000
    public static let defaultExpiryUs: Int64 = 600_000_000
    public static let maximumParticipants = 16
    public static let durationRange: ClosedRange<Int64> = 1_000...86_400_000
    public static let maximumTextBytes = 280

    public var isInviter: Bool { me == inviter }
    /// Saturating: a value loaded from disk is validated (`validate()`), but no arithmetic here traps.
    public var endAtUs: Int64? { startAtUs.map { $0.addingSaturated(durationMs.multipliedSaturated(1000)) } }
    public var isActive: Bool {
        switch phase {
        case .invited, .accepted, .scheduled, .running: return true
        case .ended: return !committed
        case .declined, .expired, .cancelled: return false
        }
    }
    public var idHex: String { hexString(id) }

    public func participant(_ key: [UInt8]) -> Participant? { participants.first { $0.key == key } }
    public var others: [[UInt8]] { participants.map(\.key).filter { $0 != me } }
    public var rosterOthers: [[UInt8]] { roster.filter { $0 != me } }

    private mutating func update(_ key: [UInt8], _ body: (inout Participant) -> Void) {
        if let i = participants.firstIndex(where: { $0.key == key }) { body(&participants[i]) }
    }

    // MARK: - Actions

    public enum Notice: Equatable, Sendable {
        case inviteSent
        case invited
        case accepted(by: [UInt8])
        case declined(by: [UInt8])
        /// Every invitee declined.
        case allDeclined
        case expired
        case cancelled(by: [UInt8])
        case scheduled
        case quit(elapsedMs: Int64, reason: String)
        case partnerQuit(key: [UInt8], elapsedMs: Int64, reason: String)
    }

    public enum Action: Equatable, Sendable {
        /// Queue a frame of this type and payload for each recipient (durable, acknowledged).
        case send(MessageType, [UInt8], to: [[UInt8]])
        case notify(Notice)
    }

    public struct Refusal: Error, Equatable, CustomStringConvertible {
        public let description: String
        public init(_ d: String) { description = d }
    }

    // MARK: - Creating

    /// A new invite from us. `startAtUs` 0 means "when accepted" (two people only).
    public static func invite(id: [UInt8], me: [UInt8], invitees: [[UInt8]], durationMs: Int64, startAtUs: Int64,
                              nowUs: Int64, graceMs: Int64 = defaultGraceMs, message: String,
                              addressHints: [[UInt8]: String] = [:]) throws -> (Challenge, [Action]) {
        guard !invitees.isEmpty else { throw Refusal("invite at least one friend") }
        guard invitees.count < maximumParticipants else { throw Refusal("at most \(maximumParticipants - 1) friends in one challenge") }
        guard Set(invitees).count == invitees.count, !invitees.contains(me) else { throw Refusal("each friend once, and not yourself") }
        guard durationRange.contains(durationMs) else { throw Refusal("a challenge lasts from 1 second to 24 hours") }
        guard message.utf8.count <= maximumTextBytes else { throw Refusal("the message is longer than \(maximumTextBytes) bytes") }
        guard startAtUs == 0 || startAtUs >= nowUs else { throw Refusal("the start time is in the past") }
        guard startAtUs == 0 || startAtUs.subtractingSaturated(nowUs) <= 7 * 86_400_000_000 else { throw Refusal("the start is more than 7 days away") }
        if startAtUs == 0, invitees.count > 1 { throw Refusal("a group challenge needs a start time (--start-in or --start-at)") }
        let expires = startAtUs == 0 ? nowUs.addingSaturated(defaultExpiryUs) : startAtUs
        let c = Challenge(id: id, me: me, inviter: me,
                          participants: ([me] + invitees).map {
                              Participant(key: $0, answer: $0 == me ? .accepted : .pending, outOfContact: false,
                                          addressHint: addressHints[$0] ?? "")
                          },
                          durationMs: durationMs, requestedStartUs: startAtUs, startAtUs: nil, expiresAtUs: expires,
                          graceMs: graceMs, message: message, phase: .invited, roster: [], solo: false,
                          signatures: [:], signers: [], committed: false)
        var inv = Tandem_V1_ChallengeInvite()
        inv.challengeID = Data(id)
        inv.participants = c.participants.map { Data($0.key) }
        inv.durationMs = UInt64(clamping: durationMs)
        inv.startAtUs = UInt64(clamping: startAtUs)
        inv.expiresAtUs = UInt64(clamping: expires)
        inv.message = message
        inv.graceMs = UInt64(clamping: graceMs)
        inv.addressHints = c.participants.map(\.addressHint)
        return (c, [.send(.challengeInvite, try inv.serializedBytes(), to: invitees), .notify(.inviteSent)])
    }

    /// A solo focus session: only us, starting at `nowUs` on our own clock.
    public static func solo(id: [UInt8], me: [UInt8], durationMs: Int64, nowUs: Int64) throws -> Challenge {
        guard durationRange.contains(durationMs) else { throw Refusal("a session lasts from 1 second to 24 hours") }
        return Challenge(id: id, me: me, inviter: me,
                         participants: [Participant(key: me, answer: .accepted, result: .running, outOfContact: false, addressHint: "")],
                         durationMs: durationMs, requestedStartUs: nowUs, startAtUs: nowUs, expiresAtUs: nowUs, graceMs: defaultGraceMs,
                         message: "", phase: .scheduled, roster: [me], solo: true, localStartUs: nowUs,
                         signatures: [:], signers: [], committed: false)
    }

    /// An invite that arrived from `author`, already range-checked (`ChallengeInviteMessage`).
    /// Throws when it breaks the rules that need the author and us.
    public static func received(_ inv: ChallengeInviteMessage, author: [UInt8], me: [UInt8]) throws -> Challenge {
        let keys = inv.participants
        guard keys.first == author else { throw Refusal("the inviter must be the first participant") }
        guard keys.contains(me) else { throw Refusal("we are not a participant") }
        guard inv.startAtUs != 0 || keys.count == 2 else { throw Refusal("a group challenge needs a start time") }
        let hints = inv.addressHints + Array(repeating: "", count: keys.count - inv.addressHints.count)
        return Challenge(id: inv.challengeID, me: me, inviter: author,
                         participants: zip(keys, hints).map {
                             Participant(key: $0.0, answer: $0.0 == author ? .accepted : .pending, outOfContact: false, addressHint: $0.1)
                         },
                         durationMs: inv.durationMs, requestedStartUs: inv.startAtUs, startAtUs: nil,
                         expiresAtUs: inv.expiresAtUs,
                         graceMs: inv.graceMs == 0 ? defaultGraceMs : inv.graceMs, message: inv.message,
                         phase: .invited, roster: [], solo: false, signatures: [:], signers: [], committed: false)
    }

    // MARK: - Our own moves

    public mutating func accept() throws -> [Action] {
        guard !isInviter else { throw Refusal("you sent this invite") }
        guard phase == .invited else { throw Refusal("the challenge is \(phase.rawValue), not waiting for your answer") }
        phase = .accepted
        update(me) { $0.answer = .accepted }
        var a = Tandem_V1_ChallengeAnswer()
        a.challengeID = Data(id)
        a.accept = true
        return [.send(.challengeAnswer, try a.serializedBytes(), to: others)]
    }

    public mutating func decline() throws -> [Action] {
        guard !isInviter else { throw Refusal("you sent this invite; use cancel") }
        guard phase == .invited || phase == .accepted else { throw Refusal("the challenge is \(phase.rawValue); nothing to decline") }
        phase = .declined
        update(me) { $0.answer = .declined }
        var a = Tandem_V1_ChallengeAnswer()
        a.challengeID = Data(id)
        a.accept = false
        return [.send(.challengeAnswer, try a.serializedBytes(), to: others)]
    }

    public mutating func cancel(reason: String) throws -> [Action] {
        guard isInviter, !solo else { throw Refusal("only the inviter can cancel (use decline or quit)") }
        guard phase == .invited || phase == .scheduled else { throw Refusal("the challenge is \(phase.rawValue); only one that has not started can be cancelled") }
        guard reason.utf8.count <= Self.maximumTextBytes else { throw Refusal("the reason is longer than \(Self.maximumTextBytes) bytes") }
        phase = .cancelled
        var m = Tandem_V1_ChallengeCancel()
        m.challengeID = Data(id)
        m.reason = reason
        return [.send(.challengeCancel, try m.serializedBytes(), to: others), .notify(.cancelled(by: me))]
    }

    /// We quit, `elapsedMs` after the start.
    public mutating func quit(elapsedMs: Int64, reason: String) throws -> [Action] {
        guard phase == .running || phase == .scheduled else {
            throw Refusal("the challenge is \(phase.rawValue); only a running one can be quit")
        }
        guard participant(me)?.result != .quit else { throw Refusal("you already quit this challenge") }
        guard reason.utf8.count <= Self.maximumTextBytes else { throw Refusal("the reason is longer than \(Self.maximumTextBytes) bytes") }
        let elapsed = max(0, min(elapsedMs, durationMs))
        update(me) { $0.result = .quit; $0.quitElapsedMs = elapsed; $0.reason = reason }
        var q = Tandem_V1_ChallengeQuit()
        q.challengeID = Data(id)
        q.elapsedMs = UInt64(clamping: elapsed)
        q.reason = reason
        var actions: [Action] = []
        if !rosterOthers.isEmpty { actions.append(.send(.challengeQuit, try q.serializedBytes(), to: rosterOthers)) }
        actions.append(.notify(.quit(elapsedMs: elapsed, reason: reason)))
        return actions
    }

    // MARK: - Messages from the others

    public mutating func receiveAnswer(from key: [UInt8], accept: Bool, nowUs: Int64) throws -> [Action] {
        guard key != inviter, let p = participant(key) else { throw Refusal("an answer from someone not invited") }
        // A yes may still become a no before the start; nothing else changes an answer.
        guard p.answer == .pending || (p.answer == .accepted && !accept) else { return [] }
        guard phase == .invited || phase == .accepted else {
            // Too late (started, expired, cancelled): the START or CANCEL already told them.
            return []
        }
        update(key) { $0.answer = accept ? .accepted : .declined }
        var actions: [Action] = [.notify(accept ? .accepted(by: key) : .declined(by: key))]
        guard isInviter else { return actions }
        let invitees = participants.dropFirst()
        if invitees.allSatisfy({ $0.answer == .declined }) {
            phase = .declined
            actions.append(.notify(.allDeclined))
            return actions
        }
        if accept, requestedStartUs == 0, participants.count == 2 {
            actions += try fixStart(at: nowUs.addingSaturated(Self.startLeadUs))
        }
        return actions
    }

    /// The inviter fixes the start and the roster, and tells every invitee.
    mutating func fixStart(at startUs: Int64) throws -> [Action] {
        for i in participants.indices where participants[i].answer == .pending { participants[i].answer = .expired }
        roster = participants.filter { $0.answer == .accepted }.map(\.key)
        var s = Tandem_V1_ChallengeStart()
        s.challengeID = Data(id)
        s.startAtUs = UInt64(clamping: startUs)
        s.roster = roster.map { Data($0) }
        let payload: [UInt8] = try s.serializedBytes()
        if roster.count < 2 {
            phase = .expired
            return [.send(.challengeStart, payload, to: others), .notify(.expired)]
        }
        startAtUs = startUs
        phase = .scheduled
        for k in roster { update(k) { $0.result = .running } }
        return [.send(.challengeStart, payload, to: others), .notify(.scheduled)]
    }

    public mutating func receiveStart(from key: [UInt8], _ s: ChallengeStartMessage) throws -> [Action] {
        guard key == inviter, !isInviter else { throw Refusal("START from someone other than the inviter") }
        let keys = s.roster
        guard keys.allSatisfy({ participant($0) != nil }), Set(keys).count == keys.count, keys.contains(inviter) else {
            throw Refusal("the roster names someone not invited")
        }
        guard phase == .invited || phase == .accepted else { return [] }
        guard keys.contains(me), phase == .accepted else {
            phase = .expired
            update(me) { $0.answer = .expired }
            return [.notify(.expired)]
        }
        roster = keys
        for i in participants.indices where !keys.contains(participants[i].key) && participants[i].answer == .pending {
            participants[i].answer = .expired
        }
        for k in keys { update(k) { $0.answer = .accepted; $0.result = .running } }
        startAtUs = s.startAtUs
        phase = .scheduled
        return [.notify(.scheduled)]
    }

    /// A cancel counts only before our local start: once we run, the challenge is on, whatever the
    /// CANCEL's created-at claims (the inviter chooses that, so a backdated CANCEL could otherwise
    /// erase a running challenge). `sentAtUs` is kept for the log only.
    public mutating func receiveCancel(from key: [UInt8], sentAtUs: Int64) throws -> [Action] {
        guard key == inviter, !isInviter else { throw Refusal("CANCEL from someone other than the inviter") }
        switch phase {
        case .invited, .accepted, .scheduled: break
        case .declined, .expired, .cancelled, .running, .ended: return []
        }
        phase = .cancelled
        return [.notify(.cancelled(by: key))]
    }

    /// `signer`: when the notice arrives after our end (it was delayed), our record changes and is
    /// signed again.
    public mutating func receiveQuit(from key: [UInt8], elapsedMs: Int64, reason: String,
                                     signer: SigningKeyPair? = nil) throws -> [Action] {
        guard roster.contains(key), key != me else { throw Refusal("QUIT from someone not taking part") }
        guard participant(key)?.result != .quit else { return [] }
        guard phase == .scheduled || phase == .running || (phase == .ended && !committed) else { return [] }
        let elapsed = max(0, min(elapsedMs, durationMs))
        let text = String(reason.utf8.prefix(Self.maximumTextBytes)) ?? ""
        update(key) { $0.result = .quit; $0.quitElapsedMs = elapsed; $0.reason = text; $0.outOfContact = false }
        var actions: [Action] = [.notify(.partnerQuit(key: key, elapsedMs: elapsed, reason: text))]
        if phase == .ended, let signer, let mine = record.flatMap(Outcome.decode) {
            actions += try adoptRecord(Outcome.merge(mine, viewRecord(), signers: signerSet), signer: signer)
        }
        return actions
    }

    // MARK: - Time

    /// What the passing of time does by `nowUs` on the timebase: the inviter fixes a group's
    /// start a little ahead of it; unanswered invites expire.
    public mutating func tick(nowUs: Int64) throws -> [Action] {
        switch phase {
        case .invited where isInviter && requestedStartUs > 0 && nowUs >= requestedStartUs.subtractingSaturated(Self.startLeadUs):
            return try fixStart(at: requestedStartUs)
        case .invited, .accepted:
            // No START by then: the inviter is gone or answered without us.
            let deadline = requestedStartUs > 0 ? requestedStartUs.addingSaturated(graceMs.multipliedSaturated(1000)) : expiresAtUs
            if nowUs >= deadline {
                phase = .expired
                if !isInviter { update(me) { $0.answer = .expired } }
                return [.notify(.expired)]
            }
            return []
        case .declined, .expired, .cancelled, .scheduled, .running, .ended:
            return []
        }
    }

    /// The co-signed record is in the ledger now.
    public mutating func markCommitted() {
        committed = true
    }

    /// Remembers where the start falls on our own clock (µs), for a restart before the next clock sync.
    public mutating func noteLocalStart(_ localUs: Int64) {
        localStartUs = localUs
    }

    /// A partner went silent past the grace period (`silent`), or was heard again. Counts only
    /// while we run, and only for a partner on the roster who has not quit (the quit notice settled
    /// that result); `markEnded` turns it into the result. False when nothing changed.
    @discardableResult
    public mutating func setOutOfContact(_ key: [UInt8], _ silent: Bool) -> Bool {
        switch phase {
        case .running: break
        case .invited, .accepted, .declined, .expired, .cancelled, .scheduled, .ended: return false
        }
        guard key != me, roster.contains(key), let p = participant(key), p.result != .quit, p.outOfContact != silent else { return false }
        update(key) { $0.outOfContact = silent }
        return true
    }

    public mutating func markStarted(localUs: Int64) {
        guard phase == .scheduled else { return }
        phase = .running
        startedLocalUs = localUs
    }

    /// The end: our result is completed unless we quit; partners silent past the grace period are
    /// out of contact. Builds and signs our view of the outcome and sends it to the others.
    public mutating func markEnded(localUs: Int64, signer: SigningKeyPair) throws -> [Action] {
        guard phase == .running || phase == .scheduled else { return [] }
        phase = .ended
        endedLocalUs = localUs
        for i in participants.indices where roster.contains(participants[i].key) {
            if participants[i].result != .quit {
                participants[i].result = participants[i].key == me || !participants[i].outOfContact ? .completed : .outOfContact
            }
        }
        let view = viewRecord()
        var actions = try adoptRecord(Outcome.merge(view, view, signers: signerSet), signer: signer)
        let waiting = early
        early = [:]
        for (keyHex, message) in waiting.sorted(by: { $0.key < $1.key }) {
            guard let key = parseHex(keyHex), let m = try? ChallengeOutcomeMessage(payload: message) else { continue }
            actions += (try? receiveOutcome(from: key, m, signer: signer)) ?? []
        }
        return actions
    }

    /// Our view as an outcome record.
    func viewRecord() -> Tandem_V1_OutcomeRecord {
        var r = Tandem_V1_OutcomeRecord()
        r.challengeID = Data(id)
        r.startAtUs = UInt64(clamping: startAtUs ?? 0)
        r.durationMs = UInt64(clamping: durationMs)
        r.inviter = Data(inviter)
        r.outcomes = participants.filter { roster.contains($0.key) }.map { p in
            var o = Tandem_V1_ParticipantOutcome()
            o.publicKey = Data(p.key)
            switch p.result {
            case .quit:
                o.result = .quit
                o.elapsedMs = UInt64(clamping: p.quitElapsedMs ?? 0)
                o.reason = p.reason ?? ""
            case .outOfContact: o.result = .outOfContact
            case .running, .completed, nil: o.result = .completed
            }
            return o
        }
        return r
    }

    /// Makes `record` our view: sign it, send the signature to the others.
    mutating func adoptRecord(_ r: Tandem_V1_OutcomeRecord, signer: SigningKeyPair) throws -> [Action] {
        let bytes = Outcome.encode(r)
        guard bytes != record else { return [] }
        record = bytes
        let sig = Outcome.sign(bytes, with: signer)
        signatures = [hexString(me): sig]
        let meHex = hexString(me)
        if !signers.contains(meHex) { signers.append(meHex) }
        // Results follow the record.
        for o in r.outcomes {
            update(Array(o.publicKey)) {
                switch o.result {
                case .quit: $0.result = .quit; $0.quitElapsedMs = Int64(clamping: o.elapsedMs); $0.reason = o.reason
                case .outOfContact: $0.result = .outOfContact
                case .completed, .unspecified, .UNRECOGNIZED: $0.result = .completed; $0.outOfContact = false
                }
            }
        }
        var m = Tandem_V1_ChallengeOutcome()
        m.record = Data(bytes)
        m.signature = Data(sig)
        return rosterOthers.isEmpty ? [] : [.send(.challengeOutcome, try m.serializedBytes(), to: rosterOthers)]
    }

    /// Another participant's signed view. Merges it into ours (re-signing when ours changes) and
    /// keeps their signature when they signed exactly our record.
    public mutating func receiveOutcome(from key: [UInt8], _ m: ChallengeOutcomeMessage, signer: SigningKeyPair) throws -> [Action] {
        guard roster.contains(key), key != me else { throw Refusal("an outcome from someone not taking part") }
        let bytes = m.record
        let theirs = m.decoded
        guard Outcome.verify(bytes, signature: m.signature, by: key) else { throw Refusal("the outcome signature does not verify") }
        guard theirs.challengeID == Data(id), theirs.inviter == Data(inviter),
              Set(theirs.outcomes.map { Array($0.publicKey) }) == Set(roster) else {
            throw Refusal("the outcome record describes another challenge")
        }
        guard !committed else { return [] }
        let keyHex = hexString(key)
        guard phase == .ended, let mineBytes = record, let mine = Outcome.decode(mineBytes) else {
            // We have not ended yet (their clock ran ahead): keep it for when we do.
            early[keyHex] = try m.proto.serializedBytes()
            return []
        }
        guard Outcome.sameChallenge(mine, theirs) else { throw Refusal("the outcome record disagrees on the start or duration") }
        if !signers.contains(keyHex) { signers.append(keyHex) }
        // A participant's quit entry (that it quit, when, why) comes only from its own signed word:
        // its QUIT notice or its own record. Another's claim about it is never taken over, whether
        // it invents a quit or rewrites a real one (a smaller elapsed time, another reason); we
        // keep our own entry for everyone but the sender. What the sender says of others' contact
        // (completed / out of contact) is its testimony and merges as before.
        var claimed = theirs
        for i in claimed.outcomes.indices where Array(claimed.outcomes[i].publicKey) != key {
            let other = claimed.outcomes[i]
            guard let own = mine.outcomes.first(where: { $0.publicKey == other.publicKey }) else { continue }
            if other.result == .quit || own.result == .quit { claimed.outcomes[i] = own }
        }
        let merged = Outcome.merge(mine, claimed, signers: signerSet)
        let actions = try adoptRecord(merged, signer: signer)
        if bytes == record { signatures[keyHex] = Array(m.signature) }
        return actions
    }

    /// Whether our record can go into the ledger: everyone signed it, or the grace period after
    /// the end has passed and everyone it records as completed signed it.
    public func readyToCommit(nowUs: Int64) -> Bool {
        guard phase == .ended, !committed, let bytes = record, let r = Outcome.decode(bytes) else { return false }
        let signed = Set(signatures.keys)
        if roster.allSatisfy({ signed.contains(hexString($0)) }) { return true }
        guard let end = endAtUs, nowUs >= end.addingSaturated(graceMs.multipliedSaturated(1000)) else { return false }
        return r.outcomes.allSatisfy { $0.result != .completed || signed.contains(hexString($0.publicKey)) }
    }

    /// Once the grace period after the end has passed, a participant our record calls completed
    /// who has still not signed it is out of contact after all: we re-sign without them, so the
    /// challenge can go into the ledger. (Their node, if it comes back, may record it otherwise.)
    public mutating func settleAfterGrace(nowUs: Int64, signer: SigningKeyPair) throws -> [Action] {
        guard phase == .ended, !committed, let end = endAtUs, nowUs >= end.addingSaturated(graceMs.multipliedSaturated(1000)),
              let bytes = record, var r = Outcome.decode(bytes) else { return [] }
        let signed = Set(signatures.keys)
        var changed = false
        // Only those who never signed any view of it: a partner whose signature on our newest view is
        // merely still on its way has shown it is there.
        for i in r.outcomes.indices where r.outcomes[i].result == .completed && !signed.contains(hexString(r.outcomes[i].publicKey))
            && !signers.contains(hexString(r.outcomes[i].publicKey)) {
            r.outcomes[i].result = .outOfContact
            changed = true
        }
        guard changed else { return [] }
        let kept = signatures
        let actions = try adoptRecord(r, signer: signer)
        // Signatures others made over this exact record stay valid.
        for (k, v) in kept where Outcome.verify(record ?? [], signature: v, by: parseHex(k) ?? []) { signatures[k] = v }
        return actions
    }

    var signerSet: Set<Data> { Set(signers.compactMap { parseHex($0).map { Data($0) } }) }

    public var signatureList: [(key: [UInt8], signature: [UInt8])] {
        signatures.compactMap { k, v in parseHex(k).map { ($0, v) } }
    }
}

extension Challenge {
    /// Instants a stored challenge may hold (µs since the epoch): from the epoch to about the year
    /// 36,000. Anything outside is a corrupt or hostile row.
    public static let storedTimeRange: ClosedRange<Int64> = 0...(1 << 60)

    /// Checks a challenge loaded from disk against the same ranges a received one meets, so a row
    /// written by an older, less careful node (or edited by hand) cannot crash the node at every
    /// start. Throws a `Refusal` naming the first broken rule; the store quarantines such a row.
    public func validate() throws {
        func check(_ ok: Bool, _ what: @autoclosure () -> String) throws {
            if !ok { throw Refusal("stored challenge: \(what())") }
        }
        try check(id.count == 16, "id is not 16 bytes")
        try check(me.count == 32 && inviter.count == 32, "a key is not 32 bytes")
        try check((1...Self.maximumParticipants).contains(participants.count), "\(participants.count) participants")
        try check(participants.allSatisfy { $0.key.count == 32 }, "a participant key is not 32 bytes")
        try check(Set(participants.map(\.key)).count == participants.count, "a participant is named twice")
        try check(participants.contains { $0.key == me }, "we are not a participant")
        try check(Self.durationRange.contains(durationMs), "duration \(durationMs) ms out of range")
        try check(requestedStartUs == 0 || Self.storedTimeRange.contains(requestedStartUs), "requested start out of range")
        try check(startAtUs.map(Self.storedTimeRange.contains) ?? true, "start out of range")
        try check(Self.storedTimeRange.contains(expiresAtUs), "expiry out of range")
        try check((0...3_600_000).contains(graceMs), "grace period out of range")
        for t in [localStartUs, startedLocalUs, endedLocalUs] {
            try check(t.map(Self.storedTimeRange.contains) ?? true, "a local instant is out of range")
        }
        try check(message.utf8.count <= Self.maximumTextBytes * 4, "message too long")
        try check(roster.allSatisfy { k in participants.contains { $0.key == k } }, "the roster names someone not invited")
        for p in participants {
            try check(p.quitElapsedMs.map { (0...durationMs).contains($0) } ?? true, "a quit time is out of range")
            try check((p.reason?.utf8.count ?? 0) <= Self.maximumTextBytes * 4, "a reason is too long")
            try check(p.addressHint.utf8.count <= 256, "an address hint is too long")
        }
        if let record { try check(Outcome.decode(record) != nil, "the outcome record is malformed") }
        try check(signatures.count <= Self.maximumParticipants && signatures.values.allSatisfy { $0.count == 64 }, "bad signatures")
        try check(signers.count <= Self.maximumParticipants, "too many signers")
        try check(early.count <= Self.maximumParticipants && early.values.allSatisfy { $0.count <= 16_384 }, "too many early outcomes")
    }
}

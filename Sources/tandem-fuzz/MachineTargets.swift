import Foundation
import Sodium
import TandemProtocol
import TandemRelay

// The "machines" target: the pure state machines driven with arbitrary event sequences decoded
// from the input. What a peer chooses (message fields, frame times, keys, tokens, datagrams) is
// any value, extremes included (FuzzInput.int64/uint64); what the node itself supplies (its clock,
// its configuration) is realistic: a manual clock that starts in 2025 and moves by
// fuzzer-chosen steps (backwards a little too: wall clocks get stepped). So a trap here is one a
// peer can cause.
//
// Besides "never traps", each machine's documented promises are checked:
// - Challenge: survives its stored form (and the JSON of older rows) after any sequence; a damaged
//   stored form is refused or validated, never a trap;
// - Outcome: decode only accepts canonical bytes; merge is idempotent, keeps the participants,
//   and is commutative on well-formed views;
// - ClockEstimator: keeps at most `capacity` samples, its estimate is one of them;
// - ReplayCache / FrameVerifier: bounded; an id just accepted is refused if it comes again;
//   what is accepted is signed, for us and not from the future;
// - BeaconReceiver: bounded memories; an accepted open beacon names its signer;
// - RelayBook (driven the way RelayServer drives it): counts within the limits.

extension FuzzTarget {
    static let machines = FuzzTarget(
        name: "machines",
        summary: "Challenge, Outcome merge, ClockEstimator, ReplayCache/FrameVerifier, BeaconReceiver, RelayBook, backup decoders/BackupHolderBook/BackupPushPlan",
        shortRunShare: 4,
        run: { MachineTargets.run(&$0) })
}

enum MachineTargets {
    static let names = ["challenge", "outcome", "clock", "replay", "beacon", "relaybook", "relayclient", "backup"]

    /// TANDEM_FUZZ_MACHINES=challenge,outcome… fuzzes only those (to get past a known crash in
    /// another); the first byte picks the machine either way, so an input means the same thing
    /// with or without it.
    static let enabled: [Bool] = {
        guard let list = getenv("TANDEM_FUZZ_MACHINES").map({ String(cString: $0) }), !list.isEmpty else {
            return names.map { _ in true }
        }
        let chosen = Set(list.split(separator: ",").map { String($0) })
        return names.map { chosen.contains($0) }
    }()

    static func run(_ input: inout FuzzInput) {
        // The first byte picks the machine: 0xFE and 0xFF the backup machines (added later, so the
        // kept inputs of Tests/fuzz-crashes, none of which starts with them, keep their meaning),
        // anything else the first seven by its value modulo 7.
        let first = input.u8()
        let machine = first >= 0xFE ? 7 : Int(first) % 7
        guard enabled[machine] else { return }
        switch machine {
        case 0: ChallengeMachine.run(&input)
        case 1: OutcomeMachine.run(&input)
        case 2: ClockMachine.run(&input)
        case 3: ReplayMachine.run(&input)
        case 4: BeaconMachine.run(&input)
        case 5: RelayBookMachine.run(&input)
        case 6: RelayClientMachine.run(&input)
        default: BackupMachine.run(&input)
        }
    }

    /// Steps per input: enough for long sequences, bounded so one input stays fast.
    static let maximumSteps = 64

    static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition { fatalError(message()) }
    }
}

/// The node's own clock: realistic, moved by the fuzzer.
struct ManualClock {
    /// µs since the epoch; starts mid-2025.
    private(set) var us: Int64 = 1_750_000_000_000_000

    var ms: UInt64 { UInt64(us / 1000) }

    mutating func advance(_ input: inout FuzzInput) {
        let step: Int64
        switch input.u8() % 8 {
        case 0: step = 0
        case 1: step = Int64(input.u16())
        case 2: step = Int64(input.u16()) * 1_000
        case 3: step = Int64(input.u16() % 3_600) * 1_000_000
        case 4: step = Int64(input.u8()) * 60_000_000
        case 5: step = Int64(input.u8() % 48) * 3_600_000_000
        case 6: step = -Int64(input.u16()) * 1_000 // stepped back (NTP)
        default: step = Int64(input.u8() % 10) * 86_400_000_000
        }
        us += step
    }
}

// MARK: - Challenge

enum ChallengeMachine {
    static func run(_ input: inout FuzzInput) {
        let people = FuzzKeys.people
        let me = people[input.pick(people.count)]
        var clock = ManualClock()
        // The timebase is the inviter's clock: ours plus the measured offset (±2.5 days).
        let offset = Int64(Int32(bitPattern: input.u32())) * 100
        func timebase(_ clock: ManualClock) -> Int64 { clock.us + offset }

        guard var c = make(&input, me: me, now: timebase(clock)) else { return }
        for _ in 0..<MachineTargets.maximumSteps where !input.isExhausted {
            let who = people[input.pick(people.count)]
            switch input.u8() % 16 {
            case 0: _ = try? c.accept()
            case 1: _ = try? c.decline()
            case 2: _ = try? c.cancel(reason: input.text())
            case 3: _ = try? c.quit(elapsedMs: input.int64(), reason: input.text())
            case 4: _ = try? c.receiveAnswer(from: who.publicKey, accept: input.bool(), nowUs: timebase(clock))
            case 5:
                var s = Tandem_V1_ChallengeStart()
                s.challengeID = input.pick(8) == 0 ? Data(input.take(16)) : Data(c.id)
                s.startAtUs = input.bool() ? input.uint64() : UInt64(clamping: timebase(clock) + Int64(input.u16()) * 1_000_000)
                s.roster = people.filter { _ in input.bool() }.map { Data($0.publicKey) }
                // What reaches the machine has passed the validating decoder (as in the node).
                if let m = try? ChallengeStartMessage(payload: (try? s.serializedBytes()) ?? [], nowUs: clock.us) {
                    _ = try? c.receiveStart(from: who.publicKey, m)
                }
            case 6:
                let sent = input.bool() ? input.int64() : timebase(clock) - Int64(input.u16()) * 1_000_000
                _ = try? c.receiveCancel(from: who.publicKey, sentAtUs: sent)
            case 7: _ = try? c.receiveQuit(from: who.publicKey, elapsedMs: input.int64(), reason: input.text(),
                                           signer: input.bool() ? me : nil)
            case 8: _ = try? c.tick(nowUs: timebase(clock))
            case 9: c.markStarted(localUs: clock.us)
            case 10: _ = try? c.markEnded(localUs: clock.us, signer: me)
            case 11:
                let o = outcome(&input, for: c, signer: who)
                if let m = try? ChallengeOutcomeMessage(payload: (try? o.serializedBytes()) ?? []) {
                    _ = try? c.receiveOutcome(from: who.publicKey, m, signer: me)
                }
            case 12: _ = c.readyToCommit(nowUs: timebase(clock))
            case 13: _ = try? c.settleAfterGrace(nowUs: timebase(clock), signer: me)
            case 14: _ = (c.endAtUs, c.isActive, c.rosterOthers.count, c.signatureList.count)
            default: clock.advance(&input)
            }
        }
        // The node stores the value whole after every step (the stored form, Protocol/store.proto)
        // and reads it back after a restart; rows written before that are JSON, still read.
        guard let stored = try? c.storedBytes() else { return MachineTargets.check(false, "Challenge has no stored form") }
        MachineTargets.check((try? Challenge(storedBytes: stored)) == c, "Challenge does not survive its stored form")
        guard let data = try? JSONEncoder().encode(c) else { return MachineTargets.check(false, "Challenge does not encode") }
        let back = try? JSONDecoder().decode(Challenge.self, from: data)
        MachineTargets.check(back == c, "Challenge does not survive its JSON round trip")
        // A damaged row (bytes the input chooses): refused, or decoded and then judged by validate;
        // never a trap.
        var damaged = stored
        for _ in 0..<Int(input.u8() % 8) where !damaged.isEmpty { damaged[Int(input.u16()) % damaged.count] ^= input.u8() }
        if input.bool() { damaged = Array(damaged.prefix(Int(input.u16()) % (damaged.count + 1))) }
        if let d = try? Challenge(storedBytes: damaged) { _ = try? d.validate() }
    }

    /// A challenge to start from: our invite, a peer's invite, or a solo session.
    static func make(_ input: inout FuzzInput, me: SigningKeyPair, now: Int64) -> Challenge? {
        let people = FuzzKeys.people
        let id = input.exactly(16)
        switch input.u8() % 3 {
        case 0:
            let invitees = people.filter { _ in input.bool() }.map(\.publicKey)
            let start: Int64
            switch input.u8() % 3 {
            case 0: start = 0
            case 1: start = now + Int64(input.u16()) * 1_000_000
            default: start = input.int64()
            }
            let duration = input.bool() ? Int64(input.u16()) * 60_000 : input.int64()
            // Our own invite: the control socket lets through a grace of 10 s to 1 h only
            // (ChallengeControl); the rest is checked by `invite` itself.
            let grace = input.bool() ? Challenge.defaultGraceMs : 10_000 + Int64(input.u32() % 3_590_001)
            return try? Challenge.invite(id: id, me: me.publicKey, invitees: invitees, durationMs: duration,
                                         startAtUs: start, nowUs: now, graceMs: grace, message: input.text()).0
        case 1:
            var inv = Tandem_V1_ChallengeInvite()
            inv.challengeID = Data(input.pick(8) == 0 ? input.take(Int(input.u8() % 20)) : id)
            let author = people[input.pick(people.count)]
            var keys = [author.publicKey] + people.filter { $0.publicKey != author.publicKey && input.bool() }.map(\.publicKey)
            if input.pick(8) == 0 { keys.shuffle() }
            if input.pick(8) == 0 { keys.append(input.take(32)) }
            inv.participants = keys.map { Data($0) }
            inv.durationMs = input.bool() ? UInt64(input.u16()) * 60_000 : input.uint64()
            switch input.u8() % 3 {
            case 0: inv.startAtUs = 0
            case 1: inv.startAtUs = UInt64(clamping: now + Int64(input.u16()) * 1_000_000)
            default: inv.startAtUs = input.uint64()
            }
            inv.expiresAtUs = input.bool() ? UInt64(clamping: now + 600_000_000) : input.uint64()
            inv.message = input.text()
            inv.graceMs = input.bool() ? 0 : input.uint64()
            inv.addressHints = (0..<Int(input.u8() % 4)).map { _ in input.text() }
            guard let m = try? ChallengeInviteMessage(payload: (try? inv.serializedBytes()) ?? [], nowUs: now) else { return nil }
            return try? Challenge.received(m, author: author.publicKey, me: me.publicKey)
        default:
            return try? Challenge.solo(id: id, me: me.publicKey,
                                       durationMs: input.bool() ? Int64(input.u16()) * 1_000 : input.int64(), nowUs: now)
        }
    }

    /// A participant's signed outcome message: mostly about this challenge, with fuzzed results
    /// and elapsed times; sometimes another header or a bad signature.
    static func outcome(_ input: inout FuzzInput, for c: Challenge, signer: SigningKeyPair) -> Tandem_V1_ChallengeOutcome {
        var r = Tandem_V1_OutcomeRecord()
        r.challengeID = Data(c.id)
        r.startAtUs = input.pick(8) == 0 ? input.uint64() : UInt64(clamping: c.startAtUs ?? 0)
        r.durationMs = input.pick(8) == 0 ? input.uint64() : UInt64(clamping: c.durationMs)
        r.inviter = Data(c.inviter)
        let keys = input.pick(8) == 0 ? c.participants.map(\.key) : c.roster
        r.outcomes = keys.map { key in
            var o = Tandem_V1_ParticipantOutcome()
            o.publicKey = Data(key)
            o.result = OutcomeMachine.result(&input)
            o.elapsedMs = input.bool() ? 0 : input.uint64()
            o.reason = input.bool() ? "" : input.text()
            return o
        }
        let bytes = Outcome.encode(r)
        var m = Tandem_V1_ChallengeOutcome()
        m.record = Data(bytes)
        m.signature = Data(input.pick(8) == 0 ? Sodium.randomBytes(64) : Outcome.sign(bytes, with: signer))
        return m
    }
}

// MARK: - Outcome records

enum OutcomeMachine {
    static func result(_ input: inout FuzzInput) -> Tandem_V1_ParticipantResult {
        switch input.u8() % 5 {
        case 0: return .completed
        case 1: return .quit
        case 2: return .outOfContact
        case 3: return .unspecified
        default: return .UNRECOGNIZED(Int(input.u8()) + 4)
        }
    }

    static func run(_ input: inout FuzzInput) {
        if input.pick(4) == 0 {
            // Arbitrary bytes: decode accepts only canonical records.
            let bytes = input.rest()
            if let r = Outcome.decode(bytes) {
                MachineTargets.check(Outcome.encode(r) == bytes, "Outcome.decode accepted bytes that are not canonical")
            }
            return
        }
        let people = FuzzKeys.people.map(\.publicKey)
        let keys = people.filter { _ in input.bool() }
        guard !keys.isEmpty else { return }
        let wellFormed = input.bool()
        var header = Tandem_V1_OutcomeRecord()
        header.challengeID = Data(input.exactly(16))
        header.startAtUs = input.uint64()
        header.durationMs = input.uint64()
        header.inviter = Data(keys[input.pick(keys.count)])
        func view(_ input: inout FuzzInput) -> Tandem_V1_OutcomeRecord {
            var r = header
            r.outcomes = keys.map { key in
                var o = Tandem_V1_ParticipantOutcome()
                o.publicKey = Data(key)
                o.result = result(&input)
                o.elapsedMs = input.uint64()
                o.reason = String(input.text().utf8.prefix(280)) ?? ""
                if wellFormed {
                    // What honest nodes write: only a quit carries an elapsed time and a reason,
                    // and one participant's quit reads the same in every view.
                    if o.result == .quit {
                        o.reason = "quit at \(o.elapsedMs) by \(key[0])"
                    } else {
                        o.elapsedMs = 0
                        o.reason = ""
                        if case .UNRECOGNIZED = o.result { o.result = .outOfContact }
                        if o.result == .unspecified { o.result = .completed }
                    }
                }
                return o
            }
            if input.bool() { r.outcomes.reverse() }
            return r
        }
        let a = view(&input)
        let b = view(&input)
        let signers = Set(keys.filter { _ in input.bool() }.map { Data($0) })
        MachineTargets.check(Outcome.sameChallenge(a, b), "two views of one challenge are not the same challenge")
        let ab = Outcome.merge(a, b, signers: signers)
        let ba = Outcome.merge(b, a, signers: signers)
        MachineTargets.check(Set(ab.outcomes.map(\.publicKey)) == Set(keys.map { Data($0) }), "merge changed the participants")
        MachineTargets.check(Outcome.encode(Outcome.merge(ab, ab, signers: signers)) == Outcome.encode(ab), "merge is not idempotent")
        if wellFormed {
            MachineTargets.check(Outcome.encode(ab) == Outcome.encode(ba), "merge is not commutative on well-formed views")
        }
        let bytes = Outcome.encode(ab)
        if let back = Outcome.decode(bytes) {
            MachineTargets.check(Outcome.encode(back) == bytes, "a merged record does not decode to itself")
        }
        for key in FuzzKeys.people where input.bool() {
            let sig = Outcome.sign(bytes, with: key)
            MachineTargets.check(Outcome.verify(bytes, signature: sig, by: key.publicKey), "an outcome signature does not verify")
        }
    }
}

// MARK: - Clock estimator

enum ClockMachine {
    static func run(_ input: inout FuzzInput) {
        var clock = ManualClock()
        var estimator = input.bool()
            ? ClockEstimator()
            : ClockEstimator(capacity: 1 + Int(input.u8() % 32), maximumAgeMicros: Int64(input.u16()) * 1_000_000,
                             maximumDelayMicros: Int64(input.u16()) * 1_000)
        let offset = Int64(Int32(bitPattern: input.u32())) * 100
        for _ in 0..<MachineTargets.maximumSteps where !input.isExhausted {
            switch input.u8() % 4 {
            case 0, 1:
                // t1 and t4 are our clock; t2 and t3 are whatever the peer wrote in its reply.
                let t1 = clock.us
                clock.advance(&input)
                let t4 = clock.us
                let (t2, t3): (Int64, Int64)
                if input.bool() {
                    let arrived = t1 + offset + Int64(input.u16())
                    (t2, t3) = (arrived, arrived + Int64(input.u16()))
                } else {
                    (t2, t3) = (input.int64(), input.int64())
                }
                if input.pick(4) == 0 { _ = ClockSample(t1: t1, t2: t2, t3: t3, t4: t4) }
                estimator.add(t1: t1, t2: t2, t3: t3, t4: t4)
            case 2:
                let best = estimator.best(nowMicros: clock.us)
                MachineTargets.check(best == nil || estimator.samples.contains(best!), "the estimate is not one of the samples")
                _ = estimator.offset(nowMicros: clock.us)
            default:
                clock.advance(&input)
            }
            MachineTargets.check(estimator.samples.count <= estimator.capacity, "ClockEstimator keeps more than its capacity")
        }
    }
}

// MARK: - Replay window and frame rules

enum ReplayMachine {
    static func run(_ input: inout FuzzInput) {
        var clock = ManualClock()
        let capacity = 1 + Int(input.u8() % 64)
        if input.bool() { cache(&input, capacity: capacity, clock: &clock) } else { verifier(&input, capacity: capacity, clock: &clock) }
    }

    /// A frame's created-at as a peer picks it: near our clock, or anything.
    static func createdAt(_ input: inout FuzzInput, clock: ManualClock) -> UInt64 {
        switch input.u8() % 3 {
        case 0: return clock.ms &- UInt64(input.u16()) * 100
        case 1: return clock.ms &+ UInt64(input.u16()) * 100
        default: return input.uint64()
        }
    }

    static func cache(_ input: inout FuzzInput, capacity: Int, clock: inout ManualClock) {
        var cache = ReplayCache(capacity: capacity)
        for _ in 0..<MachineTargets.maximumSteps where !input.isExhausted {
            switch input.u8() % 4 {
            case 0, 1:
                let id = MessageID(bytes: [UInt8](repeating: input.u8() % 16, count: 16))
                let created = createdAt(&input, clock: clock)
                let author = [UInt8](repeating: input.u8() % 4, count: 32)
                if cache.check(id, author: author, createdAt: created, now: clock.ms) == .fresh {
                    MachineTargets.check(cache.check(id, author: author, createdAt: created, now: clock.ms) != .fresh,
                                         "a replayed id was accepted twice")
                }
            case 2: cache.expire(now: clock.ms)
            default: clock.advance(&input)
            }
            MachineTargets.check(cache.count <= capacity, "ReplayCache holds more than its capacity")
        }
    }

    static func verifier(_ input: inout FuzzInput, capacity: Int, clock: inout ManualClock) {
        let local = FuzzKeys.local
        var verifier = FrameVerifier(localPublicKey: local.publicKey, replayCache: ReplayCache(capacity: capacity))
        var sent: [[UInt8]] = []
        for _ in 0..<(MachineTargets.maximumSteps / 4) where !input.isExhausted {
            if input.pick(4) == 0 { clock.advance(&input); continue }
            let bytes: [UInt8]
            if input.pick(4) == 0, !sent.isEmpty {
                bytes = sent[input.pick(sent.count)] // a replay
            } else {
                let author = input.pick(8) == 0 ? local : FuzzKeys.people[input.pick(FuzzKeys.people.count)]
                let types: [MessageType] = [.ping, .pong, .error, .clockReply, .friendRequest, .challengeOutcome,
                                            MessageType(rawValue: UInt16(truncatingIfNeeded: input.u16())), .backupPiece]
                let envelope = Envelope.sign(type: types[input.pick(types.count)],
                                             messageID: MessageID(bytes: [UInt8](repeating: input.u8() % 16, count: 16)),
                                             author: author, recipient: input.pick(8) == 0 ? author.publicKey : local.publicKey,
                                             createdAt: createdAt(&input, clock: clock), payload: input.take(Int(input.u8() % 32)))
                bytes = envelope.bytes
                sent.append(bytes)
            }
            // The frames come on a link from the first person (a link-authenticated type passes from it only).
            let linkPeer = FuzzKeys.people[0].publicKey
            switch verifier.verify(bytes, linkPeer: linkPeer, now: clock.ms) {
            case .success(let e):
                MachineTargets.check(e.isAuthentic(onLinkFrom: linkPeer) && e.recipient == local.publicKey
                                     && (!(e.type.isLinkAuthenticated || e.needsSignatureOffLink) || e.author == linkPeer),
                                     "FrameVerifier accepted a frame that breaks its rules")
                MachineTargets.check(e.createdAt <= clock.ms || e.createdAt - clock.ms <= verifier.maximumClockSkew,
                                     "FrameVerifier accepted a frame from too far in the future")
                MachineTargets.check(verifier.verify(bytes, linkPeer: linkPeer, now: clock.ms).isFailure, "FrameVerifier accepted the same frame twice")
            case .failure(let rejection):
                _ = FrameVerifier.errorReply(to: rejection, from: local, linkPeer: FuzzKeys.author.publicKey, now: clock.ms)
            }
            MachineTargets.check(verifier.replayCache.count <= capacity, "the verifier's replay cache holds more than its capacity")
        }
    }
}

extension Result {
    var isFailure: Bool {
        if case .failure = self { return true }
        return false
    }
}

// MARK: - LAN beacons

enum BeaconMachine {
    /// Keyrings cost a DH per friend: made once. Ours (people[0]) with each subset of the others
    /// as friends; each person's with us and everyone else as friends.
    static let myKeyrings: [BeaconKeyring] = (0..<8).map { mask in
        BeaconKeyring(identity: FuzzKeys.people[0],
                      friends: (1..<FuzzKeys.people.count).filter { mask & (1 << ($0 - 1)) != 0 }.map { FuzzKeys.people[$0].publicKey })
    }
    static let senderKeyrings: [BeaconKeyring] = FuzzKeys.people.map { sender in
        BeaconKeyring(identity: sender, friends: FuzzKeys.people.map(\.publicKey))
    }

    static func run(_ input: inout FuzzInput) {
        var clock = ManualClock()
        let people = FuzzKeys.people
        let me = people[0]
        var configuration = BeaconReceiverConfiguration()
        configuration.maximumSources = 1 + Int(input.u8() % 8)
        configuration.openReplayCapacity = 1 + Int(input.u8() % 16)
        configuration.privateReplayCapacity = 1 + Int(input.u8() % 16)
        var receiver = BeaconReceiver(keyring: myKeyrings[input.pick(myKeyrings.count)], configuration: configuration, now: clock.ms)
        var heard: [[UInt8]] = []
        for _ in 0..<(MachineTargets.maximumSteps / 2) where !input.isExhausted {
            let source = "10.0.0.\(input.u8() % 12)"
            var signer: [UInt8]?
            let bytes: [UInt8]
            switch input.u8() % 6 {
            case 0:
                bytes = input.take(Int(input.u16() % 600))
            case 1, 2:
                let sender = people[input.pick(people.count)]
                let created = input.bool() ? clock.ms &+ UInt64(input.u16()) &- 30_000 : input.uint64()
                guard let beacon = try? OpenBeacon.make(identity: sender, tcpPort: UInt16(truncatingIfNeeded: input.u16()) | 1,
                                                        createdAt: created, nonce: input.exactly(OpenBeacon.nonceLength),
                                                        displayName: OpenBeacon.fittingName(input.text())) else { continue }
                bytes = beacon.bytes
                signer = sender.publicKey
            case 3:
                let senderIndex = input.pick(people.count)
                let sender = people[senderIndex]
                let keyring = senderKeyrings[senderIndex]
                let epoch = input.bool() ? BeaconFormat.epoch(atMilliseconds: clock.ms) &+ UInt32(input.u8() % 4) &- 2 : input.u32()
                let beacons = PrivateBeacon.makeAll(keyring: keyring, tcpPort: UInt16(truncatingIfNeeded: input.u16()) | 1, epoch: epoch)
                guard let beacon = beacons.first else { continue }
                if sender.publicKey == me.publicKey { receiver.noteSent(beacon) }
                bytes = beacon.bytes
            case 4:
                guard !heard.isEmpty else { continue }
                bytes = heard[input.pick(heard.count)] // a replay
            default:
                clock.advance(&input)
                continue
            }
            heard.append(bytes)
            if case .accepted(let sighting) = receiver.receive(bytes, from: source, now: clock.ms), let signer {
                MachineTargets.check(sighting.publicKey == signer, "an open beacon was accepted for someone other than its signer")
            }
            MachineTargets.check(receiver.trackedSources <= configuration.maximumSources, "BeaconReceiver tracks more sources than allowed")
            MachineTargets.check(receiver.rememberedBeacons <= configuration.openReplayCapacity + configuration.privateReplayCapacity,
                                 "BeaconReceiver remembers more beacons than allowed")
        }
    }
}

// MARK: - Relay bookkeeping

/// RelayBook driven the way RelayServer drives it: connections are admitted before they close,
/// leave the pending set once, clients authenticate with fresh ids, tokens are fresh; what peers
/// choose (addresses, keys, targets, join tokens, connection ids) is arbitrary.
enum RelayBookMachine {
    static func run(_ input: inout FuzzInput) {
        var clock = ManualClock()
        let limits = RelayBook.Limits(maximumClients: 1 + Int(input.u8() % 6), maximumPending: 1 + Int(input.u8() % 6),
                                      maximumPendingPerAddress: 1 + Int(input.u8() % 4), maximumTunnelsPerClient: 1 + Int(input.u8() % 4),
                                      tunnelJoinTimeoutMs: 1_000 * (1 + Int64(input.u8() % 30)), maximumConnections: 1 + Int(input.u8() % 12))
        var book = RelayBook(limits: limits)
        let people = FuzzKeys.people.map(\.publicKey)
        var connections: [(address: String, pending: Bool)] = []
        var clients: [RelayBook.ClientID] = []
        var nextClient: RelayBook.ClientID = 1
        var tokens: [RelayBook.Token] = []
        var nextToken: UInt64 = 1
        func key(_ input: inout FuzzInput) -> [UInt8] {
            input.pick(6) == 0 ? input.take(Int(input.u8() % 40)) : people[input.pick(people.count)]
        }
        for _ in 0..<MachineTargets.maximumSteps where !input.isExhausted {
            switch input.u8() % 11 {
            case 0:
                let address = "192.0.2.\(input.u8() % 4)"
                if book.admit(address: address) == .admitted { connections.append((address, true)) }
            case 1:
                guard !connections.isEmpty else { continue }
                let i = input.pick(connections.count)
                if connections[i].pending {
                    book.leavePending(address: connections[i].address)
                    connections[i].pending = false
                }
            case 2:
                guard !connections.isEmpty else { continue }
                let c = connections.remove(at: input.pick(connections.count))
                if c.pending { book.leavePending(address: c.address) }
                book.connectionClosed()
            case 3:
                if book.authenticated(nextClient, key: key(&input), address: "192.0.2.\(input.u8() % 4)") == .accepted {
                    clients.append(nextClient)
                }
                nextClient += 1
            case 4:
                guard !clients.isEmpty else { continue }
                _ = book.register(clients[input.pick(clients.count)])
            case 5:
                guard !clients.isEmpty else { continue }
                let id = clients.remove(at: input.pick(clients.count))
                book.clientClosed(id)
            case 6:
                guard !clients.isEmpty else { continue }
                let token = withUnsafeBytes(of: nextToken.bigEndian) { Array($0) } + [UInt8](repeating: 0, count: 8)
                nextToken += 1
                if case .ready = book.openTunnel(from: clients[input.pick(clients.count)], to: key(&input), token: token, nowMs: Int64(clock.ms)) {
                    tokens.append(token)
                }
            case 7:
                let token = input.bool() && !tokens.isEmpty ? tokens[input.pick(tokens.count)] : input.take(Int(input.u8() % 20))
                _ = book.join(token: token, connection: UInt64(input.u8()), nowMs: input.bool() ? Int64(clock.ms) : nil)
            case 8:
                guard !tokens.isEmpty else { continue }
                book.dropTunnel(tokens.remove(at: input.pick(tokens.count)))
            case 9:
                _ = book.expireJoins(nowMs: Int64(clock.ms))
            default:
                clock.advance(&input)
            }
            MachineTargets.check(book.pendingCount >= 0 && book.pendingCount <= limits.maximumPending, "RelayBook pending count out of range")
            MachineTargets.check(book.connectionCount >= 0 && book.connectionCount <= limits.maximumConnections, "RelayBook connection count out of range")
            MachineTargets.check(book.clientCount <= limits.maximumClients, "RelayBook holds more clients than allowed")
            MachineTargets.check(book.registeredCount <= book.clientCount, "RelayBook has more homes than clients")
            // A key's load (tunnels it opened, spliced tunnels to it) stays within its cap, and a pair's
            // tunnels within theirs. (A link may take part in more: tunnels merely waiting to reach a
            // target are charged to their initiators, not to the target.)
            for p in people {
                MachineTargets.check(book.tunnelLoad(of: p) <= limits.maximumTunnelsPerClient, "a key carries more tunnels than allowed")
                for q in people where q != p {
                    MachineTargets.check(book.tunnelCount(from: p, to: q) <= limits.maximumTunnelsPerPair, "a pair has more tunnels than allowed")
                }
            }
        }
    }
}

// MARK: - The node's side of a relay link

/// RelayClientSession (the node's relay link, sans IO) driven the way RelayClient drives it, with
/// every frame from "the relay" chosen by the fuzzer: well-formed or not, signed by the relay or by
/// someone else, answering requests that were made, abandoned, never made, or already answered.
enum RelayClientMachine {
    static func run(_ input: inout FuzzInput) {
        let relay = FuzzKeys.people[0]
        let other = FuzzKeys.people[1]
        var clock = ManualClock()
        var session = RelayClientSession(relay: relay.publicKey, nowMs: Int64(clock.ms))
        var waiting = Set<UInt64>()
        var answered = Set<UInt64>()
        var everIssued: [UInt64] = []
        var registerAsked = false
        var registeredTimes = 0
        var closed = false
        for _ in 0..<MachineTargets.maximumSteps where !input.isExhausted {
            switch input.u8() % 8 {
            case 0:
                let frame = session.register(agent: input.text())
                if frame != nil { registerAsked = true }
                MachineTargets.check(frame == nil || !closed, "a closed link registered")
            case 1, 2:
                let request: RelayClientSession.Request = input.bool()
                    ? .tunnelOpen(target: input.take(Int(input.u8() % 40)))
                    : .mailboxPut(recipient: input.take(32), sealed: input.take(Int(input.u8())))
                if let (id, _) = session.request(request, nowMs: Int64(clock.ms)) {
                    MachineTargets.check(!closed, "a closed link took a request")
                    MachineTargets.check(!everIssued.contains(id), "a request id was issued twice")
                    everIssued.append(id)
                    waiting.insert(id)
                }
            case 3:
                let id = !everIssued.isEmpty && input.bool() ? everIssued[input.pick(everIssued.count)] : input.uint64()
                let was = session.abandon(id)
                MachineTargets.check(was == waiting.contains(id), "abandon disagrees with what was waiting")
                waiting.remove(id)
            case 4:
                let ending = session.closed(error: input.bool() ? input.text() : nil)
                MachineTargets.check(closed || Set(ending.unanswered) == waiting, "the ending lists other requests than those waiting")
                MachineTargets.check(ending.retryAfterMs >= 0 && ending.retryAfterMs <= 3_600_000, "retry-after out of range")
                MachineTargets.check(ending.wasRegistered == (registeredTimes > 0), "wasRegistered disagrees with the registrations seen")
                waiting.removeAll()
                closed = true
            case 5:
                clock.advance(&input)
            default:
                let envelope = frame(&input, relay: relay, other: other, issued: everIssued, now: UInt64(clock.ms))
                let action = session.receive(envelope)
                if action != nil {
                    MachineTargets.check(!closed, "a closed link acted on a frame")
                    MachineTargets.check(envelope.author == relay.publicKey, "a frame not signed by the relay was taken")
                }
                switch action {
                case .registered?:
                    registeredTimes += 1
                    MachineTargets.check(registerAsked && registeredTimes == 1, "registered without asking, or twice")
                case .replied(let id, let reply)?:
                    MachineTargets.check(waiting.contains(id) && !answered.contains(id), "a reply to a request that was not waiting")
                    waiting.remove(id)
                    answered.insert(id)
                    if case .tunnel(let token) = reply {
                        MachineTargets.check(token.count == TunnelJoin.tokenLength, "a tunnel token of the wrong length was taken")
                    }
                case .tunnelIncoming(let from, let token)?:
                    MachineTargets.check(from.count == 32 && token.count == TunnelJoin.tokenLength, "a malformed TUNNEL_INCOMING was taken")
                case .goodbye(_, let retry)?:
                    MachineTargets.check(retry >= 0 && retry <= 3_600_000, "goodbye retry-after out of range")
                case .mail?, nil:
                    break
                }
            }
            MachineTargets.check(session.waitingRequests == waiting.count, "the session waits for other requests than were made")
            MachineTargets.check(session.isClosed == closed, "the session's closed state is wrong")
        }
    }

    /// A frame as the relay (or someone else) might send it.
    static func frame(_ input: inout FuzzInput, relay: SigningKeyPair, other: SigningKeyPair, issued: [UInt64], now: UInt64) -> Envelope {
        let author = input.pick(8) == 0 ? other : relay
        let requestID = !issued.isEmpty && input.pick(4) != 0 ? issued[input.pick(issued.count)] : input.uint64()
        let type: MessageType
        let payload: [UInt8]
        switch input.u8() % 7 {
        case 0:
            var m = Tandem_V1_RelayRegistered()
            m.mailboxItems = input.u32()
            (type, payload) = (.relayRegistered, (try? m.serializedBytes()) ?? [])
        case 1:
            var m = Tandem_V1_RelayReply()
            m.requestID = requestID
            m.status = Tandem_V1_RelayStatus(rawValue: Int(input.u8() % 8)) ?? .ok
            m.token = Data(input.bool() ? input.take(TunnelJoin.tokenLength) : input.take(Int(input.u8() % 40)))
            m.itemID = input.uint64()
            m.detail = input.text()
            (type, payload) = (.relayReply, (try? m.serializedBytes()) ?? [])
        case 2:
            var m = Tandem_V1_TunnelIncoming()
            m.from = Data(input.take(input.bool() ? 32 : Int(input.u8() % 40)))
            m.token = Data(input.take(input.bool() ? TunnelJoin.tokenLength : Int(input.u8() % 40)))
            (type, payload) = (.tunnelIncoming, (try? m.serializedBytes()) ?? [])
        case 3:
            var m = Tandem_V1_MailboxItem()
            m.itemID = input.uint64()
            m.sealed = Data(input.take(Int(input.u8())))
            (type, payload) = (.mailboxItem, (try? m.serializedBytes()) ?? [])
        case 4:
            var m = Tandem_V1_RelayGoodbye()
            m.reason = input.text()
            m.retryAfterMs = input.uint64() % 7_200_000
            (type, payload) = (.relayGoodbye, (try? m.serializedBytes()) ?? [])
        case 5:
            // Raw bytes under a relay type, or any type at all.
            type = input.bool() ? MessageType(rawValue: UInt16(0x0300 + Int(input.u8() % 16))) : MessageType(rawValue: UInt16(input.u16()))
            payload = input.take(Int(input.u8()))
        default:
            (type, payload) = (.relayReply, input.take(Int(input.u8())))
        }
        return Envelope.sign(type: type, author: author, recipient: FuzzKeys.local.publicKey, createdAt: now, payload: payload)
    }
}

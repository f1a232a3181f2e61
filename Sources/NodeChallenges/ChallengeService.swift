import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Dispatch
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Focus challenges and solo sessions (Protocol/README.md, section 13): invites and answers
/// through the outbox, a start and end scheduled on the monotonic clock at an instant every
/// participant agrees on, early-exit notices, out-of-contact detection, co-signed outcomes and
/// the ledger.
///
/// The rules live in `TandemProtocol.Challenge` (pure); this service loads a challenge, applies
/// one step, stores the new state together with the frames the step sends, then emits events
/// and (re)arms timers.
///
/// Everything here runs on the node core, one step at a time (load, apply, store); its loop ticks
/// there, and its timers only note the instant and hand the work to the core.
@NodeCore
public final class ChallengeService: Sendable {
    let identity: SigningKeyPair
    let store: NodeStore
    let peers: PeerManager
    let events: EventBus
    let outbox: Outbox
    let presenceService: PresenceService
    let clock: ClockSync
    /// Local focus: a challenge with `--mode` locks that mode; presence says `focusing` while locked.
    let focus: any ChallengeModeLocks
    let health: StoreHealth
    let logger: Logger
    private let clockSamples: AsyncStream<NodeSignal>
    private let focusSignals: AsyncStream<NodeSignal>
    private let timers = NIOLockedValueBox<[[UInt8]: [Scheduled<Void>]]>([:])
    /// When we last heard from a peer (monotonic µs); bounded.
    private let lastHeard = NIOLockedValueBox<[[UInt8]: Int64]>([:])
    private let lastProbe = NIOLockedValueBox<[[UInt8]: Int64]>([:])
    private let presence = NIOLockedValueBox(Tandem_V1_PresenceStatus.idle)
    /// How often partners are re-measured (and so hear from us) while a challenge is on.
    let probeIntervalUs: Int64 = 2_000_000

    package nonisolated init(identity: SigningKeyPair, store: NodeStore, peers: PeerManager, events: EventBus, outbox: Outbox,
         presence: PresenceService, clock: ClockSync, focus: any ChallengeModeLocks, health: StoreHealth, signals: NodeSignals, logger: Logger) {
        self.identity = identity
        self.store = store
        self.peers = peers
        self.events = events
        self.outbox = outbox
        self.presenceService = presence
        self.clock = clock
        self.focus = focus
        self.health = health
        self.logger = logger
        self.clockSamples = signals.subscribe { if case .clockSampled = $0 { true } else { false } }
        self.focusSignals = signals.subscribe {
            switch $0 {
            case .focusChanged, .focusQuitChallenge: true
            default: false
            }
        }
    }

    var me: [UInt8] { identity.publicKey }

    /// Runs `body` as one step of its own (timers, the loop, signals): one transaction, whose
    /// events reach subscribers after its commit. A step that cannot commit is logged and counted.
    package func inStep(_ body: (StoreStep) throws -> Void) {
        defer { events.published() }
        health.attempt("store a challenge step") { try store.step(syncing: false) { step in try body(step) } }
    }

    // MARK: - Time

    /// The inviter's clock minus ours (µs): measured, or what we used before a restart.
    func offset(_ c: Challenge) -> Int64 {
        if c.isInviter { return 0 }
        if let o = clock.offset(to: c.inviter) { return o }
        if let start = c.startAtUs, let local = c.localStartUs { return start - local }
        return 0
    }

    func timebaseNow(_ c: Challenge) -> Int64 { wallClockMicros() + offset(c) }

    func elapsedMs(_ c: Challenge) -> Int64 {
        guard let start = c.startAtUs else { return 0 }
        return max(0, min(c.durationMs, (timebaseNow(c) - start) / 1000))
    }

    // MARK: - One step

    struct NotFound: Error {}

    /// Applies `body` to the stored challenge and keeps the result (state and frames in one transaction).
    /// `announce` runs once the result is stored, before the next step can begin: an event it emits
    /// comes before any event of a later step (a partner's outcome arriving at once cannot get the
    /// entry's `ledger.appended` out ahead of our `challenge.ended`).
    /// `handled`: the frame that caused the step, marked handled in the step's own transaction.
    @discardableResult
    /// `loaded`: the challenge as the caller just read it in this same core job (one read and
    /// decode less; nothing else can have changed it in between).
    package func mutate(_ id: [UInt8], loaded: Challenge? = nil, handled: HandledMark? = nil, announce: ((Challenge) -> Void)? = nil,
                _ step: StoreStep, _ body: (inout Challenge) throws -> [Challenge.Action]) throws -> Challenge {
        guard var c = try loaded ?? step.challenge(id) else { throw NotFound() }
        let before = c
        let actions = try body(&c)
        // Most ticks change nothing: no write then.
        if c != before || !actions.isEmpty { try persist(&c, actions, handled: handled, step) }
        announce?(c)
        after(c, actions, step)
        return c
    }

    /// Stores a challenge with the frames its actions send.
    func persist(_ c: inout Challenge, _ actions: [Challenge.Action], handled: HandledMark? = nil, _ step: StoreStep) throws {
        if let start = c.startAtUs, c.isInviter || clock.hasSample(for: c.inviter) {
            c.noteLocalStart(start - offset(c))
        }
        var frames: [OutboxItem] = []
        for case .send(let type, let payload, let recipients) in actions {
            for r in recipients { frames.append(outbox.frame(type, to: r, payload: payload, in: step)) }
        }
        // The step's notices are stored with it: a crash loses both or neither.
        var pending: [PendingEvent] = []
        for case .notify(let n) in actions {
            let (type, fields) = event(n, c, step)
            pending.append(events.record(type, fields))
        }
        try step.saveChallenge(c, frames: frames, events: pending, nowMs: outbox.now(), handled: handled)
    }

    func after(_ c: Challenge, _ actions: [Challenge.Action], _ step: StoreStep) {
        // The notices were stored with the step (`persist`); they reach subscribers once it commits
        // (read back from the log: inside the step that read would open a second transaction,
        // which an in-memory store refuses).
        step.afterCommit { [events] in events.published() }
        var recipients: [[UInt8]] = []
        for case .send(_, _, let to) in actions { recipients += to }
        if !recipients.isEmpty { outbox.send(to: recipients, in: step) }
        schedule(c)
        if [.cancelled, .declined, .expired].contains(c.phase), focus.mode(ofChallenge: c.idHex) != nil { focus.challengeEnded(c.idHex, step) }
        refreshPresence(step)
    }

    /// The main key opened a challenge's lock early: that is quitting it, with `reason`.
    func focusQuit(_ idHex: String, reason: String, _ step: StoreStep) {
        guard let id = parseHex(idHex), let c = health.read("read a challenge", or: nil, { try step.challenge(id) }),
              c.phase == .running || c.phase == .scheduled else { return }
        do {
            _ = try quit(c, reason: reason, step)
        } catch {
            logger.error("cannot quit the challenge after an unlock", metadata: ["challenge": "\(idHex)", "error": "\(error)"])
        }
    }

    func idText(_ key: [UInt8]) -> JSONValue { .string(NodeID(publicKey: key).canonical) }

    /// The event a notice becomes (stored in the transaction of the step that gave it, `persist`).
    func event(_ n: Challenge.Notice, _ c: Challenge, _ r: StoreReading) -> (String, [String: JSONValue]) {
        let id: JSONValue = .string(c.idHex)
        // Quit notices carry CLOCK_MONOTONIC too, so the notice's latency between two processes
        // on one machine can be measured whatever their wall clocks say.
        let mono = monotonicMicros()
        switch n {
        case .inviteSent:
            return ("challenge.invite.sent", ["id": id, "to": .array(c.others.map(idText)), "duration_ms": .int(c.durationMs)])
        case .invited:
            return ("challenge.invited", ["id": id, "from": idText(c.inviter), "name": .string(name(c.inviter, r)),
                                              "participants": .array(c.participants.map { idText($0.key) }),
                                              "duration_ms": .int(c.durationMs), "message": .string(c.message),
                                              "start_at": c.requestedStartUs > 0 ? isoLocal(c.requestedStartUs - offset(c)) : .null])
        case .accepted(let by):
            return ("challenge.accepted", ["id": id, "by": idText(by), "name": .string(name(by, r))])
        case .declined(let by):
            return ("challenge.declined", ["id": id, "by": idText(by), "name": .string(name(by, r))])
        case .allDeclined:
            return ("challenge.declined", ["id": id, "by": "everyone"])
        case .expired:
            return ("challenge.expired", ["id": id])
        case .cancelled(let by):
            return ("challenge.cancelled", ["id": id, "by": by == me ? "me" : idText(by)])
        case .scheduled:
            return ("challenge.scheduled", ["id": id, "start_at": c.startAtUs.map { isoLocal($0 - offset(c)) } ?? .null,
                                                "roster": .array(c.roster.map(idText)), "offset_us": .int(offset(c))])
        case .quit(let elapsed, let reason):
            return ("challenge.quit", ["id": id, "elapsed_ms": .int(elapsed), "reason": .string(reason), "mono_us": .int(mono)])
        case .partnerQuit(let key, let elapsed, let reason):
            return ("challenge.partner.quit", ["id": id, "who": idText(key), "name": .string(name(key, r)),
                                                   "elapsed_ms": .int(elapsed), "reason": .string(reason), "mono_us": .int(mono)])
        }
    }

    func name(_ key: [UInt8], _ r: StoreReading) -> String {
        if key == me { return health.read("read the display name", or: nil) { try r.setting("display_name") } ?? "" }
        // The nickname this node gave them, else their display name (what the person knows them as).
        if let nick = health.read("read a nickname", or: nil, { try r.nickname(key) }) { return nick }
        return health.read("read a contact", or: nil) { try r.contact(key) }?.displayName ?? ""
    }

    func isoLocal(_ us: Int64) -> JSONValue { JSONValue.iso(us / 1000) }

    // MARK: - Timers

    /// Arms the start and end timers of a scheduled or running challenge on the monotonic clock.
    func schedule(_ c: Challenge) {
        let old = timers.withLockedValue { $0.removeValue(forKey: c.id) } ?? []
        for t in old { t.cancel() }
        guard c.phase == .scheduled || c.phase == .running, let start = c.startAtUs, let end = c.endAtUs else { return }
        let loop = Self.timerLoop
        let now = wallClockMicros()
        let off = offset(c)
        var armed: [Scheduled<Void>] = []
        let id = c.id
        // The timer only notes the instant; the work (a store write, events) happens elsewhere, so a
        // start and an end due together, or a slow disk, do not delay each other's timestamps.
        if c.phase == .scheduled {
            armed.append(loop.scheduleTask(in: .microseconds(max(0, start - off - now))) { [weak self] in
                let (wall, mono) = (wallClockMicros(), monotonicMicros())
                guard let service = self else { return }
                NodeCore.submit { service.inStep { step in service.fireStart(id, wall: wall, mono: mono, step) } }
            })
        }
        armed.append(loop.scheduleTask(in: .microseconds(max(0, end - off - now))) { [weak self] in
            let (wall, mono) = (wallClockMicros(), monotonicMicros())
            guard let service = self else { return }
            NodeCore.submit { service.inStep { step in service.fireEnd(id, wall: wall, mono: mono, step) } }
        })
        timers.withLockedValue { $0[id] = armed }
    }

    /// A thread that only runs challenge timers, so nothing else on an event loop (a link's
    /// frames, a store write) can hold a start or an end back.
    nonisolated static let timerLoop: EventLoop = {
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1).next()
        // Where allowed (root, CAP_SYS_NICE), the thread runs in the real-time class so a busy
        // machine does not wake it late; it only notes the time and hands the work on, so it
        // cannot starve anything. Elsewhere it stays an ordinary thread.
        loop.execute {
            var param = sched_param()
            param.sched_priority = 10
            _ = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param)
        }
        return loop
    }()

    private func fireStart(_ id: [UInt8], wall: Int64, mono: Int64, _ step: StoreStep) {
        do {
            var started = false
            let c = try mutate(id, step) { c in
                guard c.phase == .scheduled else { return [] }
                c.markStarted(localUs: wall)
                started = true
                return []
            }
            guard started, let start = c.startAtUs else { return }
            let late = (wall + offset(c) - start) / 1000
            for k in c.rosterOthers { noteHeard(k, at: mono) }
            events.emit("challenge.started", ["id": .string(c.idHex), "at_us": .int(wall), "mono_us": .int(mono),
                                              "offset_us": .int(offset(c)), "late_ms": .int(max(0, late)),
                                              "duration_ms": .int(c.durationMs), "solo": .bool(c.solo),
                                              "roster": .array(c.roster.map(idText))], in: step)
            focus.challengeStarted(c.idHex, step)
        } catch {
            logger.error("cannot start challenge", metadata: ["challenge": "\(hexString(id))", "error": "\(error)"])
        }
    }

    /// Ends a challenge now instead of at its end instant (a quit solo session).
    package func endNow(_ id: [UInt8], _ step: StoreStep) {
        fireEnd(id, wall: wallClockMicros(), mono: monotonicMicros(), step)
    }

    private func fireEnd(_ id: [UInt8], wall: Int64, mono: Int64, _ step: StoreStep) {
        do {
            var ended = false
            let c = try mutate(id, announce: { [self] c in
                guard ended else { return }
                events.emit("challenge.ended", ["id": .string(c.idHex), "result": .string(c.participant(me)?.result?.rawValue ?? "completed"),
                                                "at_us": .int(wall), "mono_us": .int(mono), "solo": .bool(c.solo)], in: step)
            }, step) { c in
                guard c.phase == .running || c.phase == .scheduled else { return [] }
                if c.phase == .scheduled { c.markStarted(localUs: wall) }
                ended = true
                return try c.markEnded(localUs: wall, signer: identity)
            }
            guard ended else { return }
            focus.challengeEnded(c.idHex, step)
            commitIfReady(c, step)
        } catch {
            logger.error("cannot end challenge", metadata: ["challenge": "\(hexString(id))", "error": "\(error)"])
        }
    }

    /// A new clock sample from `key`: challenges timed by its clock are re-armed.
    func clockSampled(_ key: [UInt8]) {
        noteHeard(key, at: monotonicMicros())
        for c in health.read("read the challenges", or: [], { try store.challenges(phases: [.scheduled, .running]) }) where c.inviter == key {
            schedule(c)
        }
    }

    func refreshPresence(_ step: StoreStep) {
        let running = health.read("read the challenges", or: []) { try step.challenges(phases: [.running, .scheduled]) }
        let status: Tandem_V1_PresenceStatus
        if running.contains(where: { !$0.solo && $0.phase == .running }) {
            status = .inChallenge
        } else if running.contains(where: { $0.solo && $0.phase == .running }) || focus.isLocked {
            status = .focusing
        } else {
            status = .idle
        }
        let changed = presence.withLockedValue { p -> Bool in
            defer { p = status }
            return p != status
        }
        if changed { presenceService.setStatus(status, step) }
    }

    // MARK: - Hearing from peers

    package func heard(_ key: [UInt8]) { noteHeard(key, at: monotonicMicros()) }

    private func noteHeard(_ key: [UInt8], at mono: Int64) {
        lastHeard.withLockedValue { m in
            if m.count >= 4096, m[key] == nil { m.removeAll() }
            m[key] = mono
        }
    }

    func peerConnected(_ key: [UInt8], _ step: StoreStep) {
        // Partners in a challenge get measured at once.
        let active = health.read("read the active challenges", or: []) { try step.activeChallenges() }
        if active.contains(where: { $0.participant(key) != nil && $0.phase != .ended }) {
            clock.probe(key, count: 8)
        }
    }

    // MARK: - The loop

    /// Resumes stored challenges, then ticks: expiries, starts of groups, out-of-contact partners,
    /// periodic re-measurement, commits to the ledger.
    nonisolated public func run() async {
        await NodeCore.run { self.inStep { step in self.resume(step) } }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                for await case .clockSampled(let key) in clockSamples { await NodeCore.run { self.clockSampled(key) } }
            }
            group.addTask { [self] in
                for await signal in focusSignals {
                    switch signal {
                    case .focusQuitChallenge(let id, let reason): await NodeCore.run { self.inStep { step in self.focusQuit(id, reason: reason, step) } }
                    case .focusChanged: await NodeCore.run { self.inStep { step in self.refreshPresence(step) } }
                    default: break
                    }
                }
            }
            while !Task.isCancelled {
                await NodeCore.run { self.inStep { step in self.tick(step) } }
                try? await Task.sleep(for: .milliseconds(200))  // cancelled: the loop ends
            }
            group.cancelAll()
        }
    }

    func resume(_ step: StoreStep) {
        for c in health.read("read the active challenges", or: [], { try step.activeChallenges() }) {
            if c.phase == .running, let end = c.endAtUs {
                let remaining = max(0, (end - timebaseNow(c)) / 1000)
                events.emit("challenge.resumed", ["id": .string(c.idHex), "remaining_ms": .int(remaining)], in: step)
            }
            let mono = monotonicMicros()
            for k in c.rosterOthers { noteHeard(k, at: mono) }
            schedule(c)
        }
        refreshPresence(step)
    }

    package func tick(_ step: StoreStep) {
        let active = health.read("read the active challenges", or: []) { try step.activeChallenges() }
        let mono = monotonicMicros()
        for c in active {
            do {
                switch c.phase {
                case .invited, .accepted:
                    try mutate(c.id, step) { c in try c.tick(nowUs: timebaseNow(c)) }
                case .scheduled, .running:
                    if timers.withLockedValue({ $0[c.id] == nil }) { schedule(c) }
                    probePartners(c, mono: mono)
                    if c.phase == .running { checkContact(c, mono: mono, step) }
                case .ended:
                    let settled = try mutate(c.id, step) { c in try c.settleAfterGrace(nowUs: timebaseNow(c), signer: identity) }
                    commitIfReady(settled, step)
                case .declined, .expired, .cancelled:
                    break
                }
            } catch {
                logger.error("challenge tick failed", metadata: ["challenge": "\(c.idHex)", "error": "\(error)"])
            }
        }
    }

    private func probePartners(_ c: Challenge, mono: Int64) {
        for k in c.rosterOthers {
            let due = lastProbe.withLockedValue { m -> Bool in
                if let last = m[k], mono - last < probeIntervalUs { return false }
                if m.count >= 4096 { m.removeAll() }
                m[k] = mono
                return true
            }
            guard due else { continue }
            if peers.link(to: k) != nil { clock.probe(k, count: clock.hasSample(for: k) ? 1 : 8) }
        }
    }

    private func checkContact(_ c: Challenge, mono: Int64, _ step: StoreStep) {
        for p in c.participants where c.rosterOthers.contains(p.key) && p.result != .quit {
            let last = lastHeard.withLockedValue { $0[p.key] } ?? 0
            let silent = mono - last > c.graceMs * 1000
            guard silent != p.outOfContact else { continue }
            do {
                try mutate(c.id, step) { c in
                    c.setOutOfContact(p.key, silent)
                    return []
                }
            } catch {
                health.failed("mark a partner out of contact", error)
                continue
            }
            events.emit(silent ? "challenge.partner.out_of_contact" : "challenge.partner.back",
                        ["id": .string(c.idHex), "who": idText(p.key), "name": .string(name(p.key, step))], in: step)
        }
    }

    func commitIfReady(_ c: Challenge, _ step: StoreStep) {
        guard c.readyToCommit(nowUs: timebaseNow(c)) else { return }
        do {
            // Re-read: `c` may be older than what another step stored meanwhile.
            let entry = try { () throws -> LedgerEntry? in
                guard let current = try step.challenge(c.id), current.readyToCommit(nowUs: timebaseNow(current)) else { return nil }
                return try step.commitToLedger(current, nowMs: outbox.now()) { entry in
                    [events.record("ledger.appended", ["entry": .int(entry.seq), "challenge_id": .string(c.idHex),
                                                       "hash": .string(hexString(entry.hash)),
                                                       "signers": .int(Int64(entry.signatures.count))])]
                }
            }()
            _ = entry
        } catch {
            logger.error("cannot append to the ledger", metadata: ["challenge": "\(c.idHex)", "error": "\(error)"])
        }
    }

    // MARK: - Frames

    /// A challenge frame from a peer or from mail. The payload becomes a validated message first
    /// (a MALFORMED one is answered with an ERROR on its link and acknowledged, so a sender does
    /// not retry it forever); frames from someone with no part in a challenge we hold are dropped
    /// before anything is written (`step`).
    package func handle(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) {
        let nowUs = wallClockMicros()
        do {
            switch envelope.type {
            case .challengeInvite: try receiveInvite(envelope, from: link, step)
            case .challengeAnswer:
                let m = try ChallengeAnswerMessage(payload: envelope.payload)
                try applyFrame(envelope, link, m.challengeID, step) { c in try c.receiveAnswer(from: envelope.author, accept: m.accept, nowUs: timebaseNow(c)) }
            case .challengeStart:
                let m = try ChallengeStartMessage(payload: envelope.payload, nowUs: nowUs)
                try applyFrame(envelope, link, m.challengeID, step) { c in try c.receiveStart(from: envelope.author, m) }
            case .challengeCancel:
                let m = try ChallengeCancelMessage(payload: envelope.payload)
                try applyFrame(envelope, link, m.challengeID, step) { c in
                    try c.receiveCancel(from: envelope.author, sentAtUs: Int64(clamping: envelope.createdAt).multipliedSaturated(1000))
                }
            case .challengeQuit:
                let m = try ChallengeQuitMessage(payload: envelope.payload)
                try applyFrame(envelope, link, m.challengeID, step) { c in
                    try c.receiveQuit(from: envelope.author, elapsedMs: m.elapsedMs, reason: m.reason, signer: identity)
                }
            case .challengeOutcome:
                let m = try ChallengeOutcomeMessage(payload: envelope.payload)
                try applyFrame(envelope, link, m.challengeID, step) { c in try c.receiveOutcome(from: envelope.author, m, signer: identity) }
                if let c = health.read("read a challenge", or: nil, { try step.challenge(m.challengeID) }) { commitIfReady(c, step) }
            default:
                logger.debug("challenge frame type not handled", metadata: ["type": "\(envelope.type)"])
            }
        } catch let e as PayloadError {
            outbox.refuseMalformed(envelope, e, on: link, step)
        } catch {
            logger.info("challenge frame refused", metadata: ["type": "\(envelope.type)", "from": "\(NodeID(publicKey: envelope.author).short)",
                                                              "error": "\(error)"])
        }
    }

    /// Handles a durable challenge frame once (acknowledging it either way); frames about unknown
    /// challenges are acknowledged and dropped.
    private func applyFrame(_ envelope: Envelope, _ link: PeerLink?, _ id: [UInt8],
                      _ step: StoreStep, _ body: (inout Challenge) throws -> [Challenge.Action]) throws {
        // Only someone taking part in a challenge we hold can change it. Anything else (a stranger,
        // an unknown id) is acknowledged and dropped without a write: no handled-id row, no
        // transaction, so such frames cannot grow the disk (the request throttle bounds the acks).
        guard let current = try step.challenge(id), current.participant(envelope.author) != nil else {
            outbox.dropUnrelated(envelope, on: link, step)
            return
        }
        // Exactly once: a redelivery is only acknowledged; otherwise the mark commits with the step.
        if try step.wasHandled(envelope.messageID.bytes) { return outbox.acknowledge(envelope, on: link, step) }
        var refusal: Error?
        do {
            try mutate(id, loaded: current, handled: outbox.handledMark(envelope, in: step), step, body)
        } catch is NotFound {
            logger.debug("frame about an unknown challenge", metadata: ["challenge": "\(hexString(id))"])
        } catch {
            refusal = error
        }
        outbox.acknowledge(envelope, on: link, step)
        if let refusal { throw refusal }
    }

    private func receiveInvite(_ envelope: Envelope, from link: PeerLink?, _ step: StoreStep) throws {
        let author = envelope.author
        guard outbox.isFriend(author, in: step) else {
            // Only friends may invite; acknowledged so the sender stops (within the throttle), then dropped.
            outbox.dropUnrelated(envelope, on: link, step)
            logger.info("challenge invite from a stranger dropped", metadata: ["from": "\(NodeID(publicKey: author).short)"])
            return
        }
        let inv = try ChallengeInviteMessage(payload: envelope.payload, nowUs: wallClockMicros())
        if try step.wasHandled(envelope.messageID.bytes) { return outbox.acknowledge(envelope, on: link, step) }
        var refusal: Error?
        do {
            var c = try Challenge.received(inv, author: author, me: me)
            if try step.challenge(c.id) != nil { return }
            let open = try step.challenges(phases: [.invited]).filter { !$0.isInviter }.count
            guard open < 100 else { throw Challenge.Refusal("too many unanswered invites (100)") }
            // Hints let group members who are not friends reach each other.
            // They are the inviter's claims: kept only where the dialling policy allows (Protocol 12.8).
            let claimer = link?.directRemoteHost
            for p in c.participants where p.key != me && !p.addressHint.isEmpty && !outbox.isFriend(p.key, in: step) {
                if let (h, port) = try? HostPort.parse(p.addressHint, defaultHost: claimer ?? ""), port > 0, !h.isEmpty,  // a peer's bad hint is ignored
                   DialPolicy.mayRemember(claimed: h, port: port, claimerHost: claimer) {
                    health.attempt("remember an invite's address hint") {
                        try step.rememberAddress(p.key, host: h, port: port, source: AddressSource.claimed.rawValue, nowMs: outbox.now())
                    }
                }
            }
            try persist(&c, [.notify(.invited)], handled: outbox.handledMark(envelope, in: step), step)
            after(c, [.notify(.invited)], step)
        } catch {
            refusal = error
        }
        outbox.acknowledge(envelope, on: link, step)
        clock.probe(author, count: 8)
        if let refusal { throw refusal }
    }
}


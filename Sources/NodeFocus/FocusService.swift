import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle
import Sodium
import TandemBlocking
import TandemKeys
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// Local focus (issue 14, Protocol/focus.md): the modes and keys, the lock machine's owner, and the
/// blocking that follows it. The state lives on the node core (every read and step runs there, each
/// step stored before its effects are carried out); the blocking and the hooks run in two child
/// tasks of `run` (the enforcer's), on the blocking thread pool, never on the core or an event loop.
public final class FocusService: Service, Sendable {
    /// What the node was told about blocking (`tandem node --hosts-file … --hooks-dir …`).
    public struct Configuration: Sendable {
        /// The hosts file the site block goes into; nil (the library's default, for throwaway and
        /// in-process nodes): no site blocking. `tandem node` sets /etc/hosts unless told otherwise.
        public var hostsFile: String? = nil
        /// Per-mode hooks (`<dir>/<mode>/<transition>`); nil: `<data-dir>/hooks` when there is a data directory.
        public var hooksDirectory: String? = nil
        /// Stop the blocked apps while locked (`tandem node` turns it on).
        public var appGuard = false
        /// The user whose processes the app guard stops (`tandem node --app-user`); nil: the node's
        /// own (effective) uid. Another uid needs CAP_KILL.
        public var appGuardUser: uid_t? = nil
        /// How long a hook may run.
        public var hookTimeoutMs = 10_000
        /// The lock's keeper (`tandem keeper`, TandemBlocking/LockKeeper.swift): the executable to
        /// start and the data directory it keeps, so that stopping or killing the node does not lift
        /// a lock. nil (in-process nodes, tests, `tandem node --no-lock-keeper`): none.
        public var keeper: Keeper? = nil
        /// The resolver that blocks a locked mode's sites and every name under them
        /// (`tandem node --dns`, FocusResolver.swift); nil: none (the hosts block still applies).
        public var dns: DNS? = nil
        public struct DNS: Sendable {
            public var listenHost: String
            public var listenPort: Int
            public var upstreamHost: String
            public var upstreamPort: Int
            public init(listenHost: String, listenPort: Int, upstreamHost: String, upstreamPort: Int) {
                (self.listenHost, self.listenPort, self.upstreamHost, self.upstreamPort) = (listenHost, listenPort, upstreamHost, upstreamPort)
            }
        }
        public struct Keeper: Sendable {
            public var executable: String
            public var directory: String
            public init(executable: String, directory: String) { (self.executable, self.directory) = (executable, directory) }
        }
        /// The daylight photo check bedtime asks (tests hand a double; nil: the node's wiring chooses).
        package var daylight: (any DaylightChecking)? = nil
        public init() {}
    }

    struct State {
        var modes = FocusModes()
        var lock = FocusLock()
        /// What each key is (by key id); a key without one was quarantined and must be replaced.
        var materials: [String: FocusKeyMaterial] = [:]
        /// Challenge id (hex) → the mode it locks here.
        var challengeModes: [String: String] = [:]
    }

    /// What unfinished enrolments are sealed under: `focus.enroll.<hex of the name, or of
    /// "replace:" + key id>` (where store v4 kept them; the label stays so those still open).
    nonisolated static let enrollPrefix = "focus.enroll."
    /// What an object key's template is sealed under, before the key's id.
    nonisolated static let keyPrefix = "focus.key."

    let store: NodeStore
    /// What our PRESENCE says; told our health while we share it (HealthSharing.swift).
    let presence: PresenceState?
    let events: EventBus
    let health: StoreHealth
    let signals: NodeSignals
    let logger: Logger
    let secrets: FocusSecrets
    let enforcer: FocusEnforcer
    /// The resolver's settings (`tandem node --dns`), or nil.
    private let dns: Configuration.DNS?
    /// Leaving bedtime asks it about the photo (Bedtime.swift).
    let daylight: any DaylightChecking
    /// Confined to the core (the box only makes the class Sendable).
    let state = NIOLockedValueBox(State())
    /// Read off the core: presence and `tandem status`.
    private let lockedNow = NIOLockedValueBox(false)
    /// What the start found wrong in the stored state (applied and reported by `run`).
    private let loadNotes = NIOLockedValueBox<[String]>([])
    private let wakeup = Wakeup()
    /// Object presentations and enrolments under way (`FocusObjects.swift`).
    let sessions = NIOLockedValueBox<[String: ObjectSession]>([:])
    /// Object keys' verifiers, ready to copy (`FocusObjects.swift`).
    let verifiers = NIOLockedValueBox<[String: ([UInt8], ObjectVerifier)]>([:])
    /// A locked mode's object keys, to be made ready before they are presented (`runWarmer`); only
    /// the newest lock's keys wait.
    let warmJobs: AsyncStream<[WarmKey]>
    let warmInput: AsyncStream<[WarmKey]>.Continuation

    package init(identity: SigningKeyPair, store: NodeStore, events: EventBus, health: StoreHealth, signals: NodeSignals,
         configuration: Configuration, daylight: any DaylightChecking, dataDirectory: DataDirectory?, logger: Logger,
         presence: PresenceState? = nil) throws {
        self.presence = presence
        (warmJobs, warmInput) = AsyncStream.makeStream(of: [WarmKey].self, bufferingPolicy: .bufferingNewest(1))
        self.store = store
        self.events = events
        self.health = health
        self.signals = signals
        self.logger = logger
        self.daylight = configuration.daylight ?? daylight
        self.secrets = try FocusSecrets(identity: identity)
        var config = configuration
        if config.hooksDirectory == nil, let dir = dataDirectory { config.hooksDirectory = dir.url.appendingPathComponent("hooks").path }
        self.enforcer = FocusEnforcer(configuration: config, events: events, logger: logger)
        self.dns = config.dns
        // Before any service runs: nothing else touches the store's focus rows yet.
        state.withLockedValue { $0 = load() }
        lockedNow.withLockedValue { $0 = state.withLockedValue { $0.lock.isLocked } }
    }

    /// Whether a mode is locked now (presence: friends see `focusing`).
    package var isLocked: Bool { lockedNow.withLockedValue { $0 } }

    // MARK: - Loading (every stored value judged like a peer's message; a bad one set aside, never fatal)

    private func load() -> State {
        let stored = health.read("read the focus state", or: StoredFocusState()) { try store.focusState() }
        let (s, aside) = Self.judge(stored)
        let now = Int64(clamping: wallClockMilliseconds())
        if !aside.isEmpty {
            health.attempt("quarantine focus rows") {
                try store.stepWaiting { tx in
                    try tx.saveFocus(aside.map { .quarantine($0.row, data: $0.data, reason: $0.reason, atMs: now) },
                                     events: aside.map {
                                         events.record("focus.quarantined", ["kind": .string($0.row.kind), "key": .string($0.row.key),
                                                                             "reason": .string($0.reason)])
                                     })
                }
            }
        }
        loadNotes.withLockedValue { $0 = aside.map { "\($0.row.kind) \($0.row.key): \($0.reason)" } }
        return s
    }

    /// The stored focus rows judged like a peer's message: what is sound becomes the state, the rest
    /// is listed for quarantine, each row on its own (a key or mode that breaks a rule goes alone; a
    /// mode naming a key that went goes too). Pure: the fuzz target `focus` drives it.
    nonisolated static func judge(_ stored: StoredFocusState) -> (State, [SetAside]) {
        var s = State()
        var aside: [SetAside] = []
        let c = stored.configuration
        var modes = FocusModes()
        for k in c.keys.sorted(by: { $0.id < $1.id }) {
            do {
                try modes.addKey(id: k.id, name: k.name)
            } catch {
                aside.append(SetAside(row: .key(id: k.id), data: copy(k), reason: error.description))
            }
        }
        let keysByMode = Dictionary(grouping: c.modeKeys, by: \.mode)
        let itemsByMode = Dictionary(grouping: c.modeItems, by: \.mode)
        for row in c.modes.sorted(by: { $0.name < $1.name }) {
            let m = FocusMode(row: row, keys: keysByMode[row.name] ?? [], items: itemsByMode[row.name] ?? [])
            do {
                try modes.setMode(m)
            } catch {
                aside.append(SetAside(row: .mode(name: row.name), data: copy(m), reason: error.description))
            }
        }
        let named = Set(c.modes.map(\.name))
        for orphan in Set(keysByMode.keys).union(itemsByMode.keys).subtracting(named).sorted() {
            aside.append(SetAside(row: .mode(name: orphan), data: copy(["keys": keysByMode[orphan]?.map(\.keyId) ?? [],
                                                                       "items": itemsByMode[orphan]?.map(\.item) ?? []]),
                                  reason: "the lists of a mode that does not exist"))
        }
        s.modes = modes
        for r in stored.materials.sorted(by: { $0.keyId < $1.keyId }) {
            if modes.key(r.keyId) != nil, let m = FocusKeyMaterial(record: r) {
                s.materials[r.keyId] = m
            } else {
                aside.append(SetAside(row: .material(keyId: r.keyId), data: copy(r),
                                      reason: modes.key(r.keyId) == nil ? "no such key" : "the key's stored form is damaged"))
            }
        }
        for r in stored.challenges.sorted(by: { $0.challengeId < $1.challengeId }) {
            if FocusLock.isValidChallengeID(r.challengeId), modes.mode(r.mode) != nil { s.challengeModes[r.challengeId] = r.mode } else {
                aside.append(SetAside(row: .challenge(id: r.challengeId), data: copy(r), reason: "a challenge's mode that no longer exists"))
            }
        }
        // Any lock state reads (leniently); `FocusLock.validated` judges it against the modes at the start.
        s.lock = FocusLock(rows: stored.lock)
        return (s, aside)
    }

    // MARK: - The service

    public func run() async throws {
        // The restart: the stored state brought up to now (expiries that passed while down apply),
        // the blocking established from it (it cannot know what survived), the deadline armed.
        await NodeCore.run {
            self.resume()
            self.publishSharedHealth(nowMs: Int64(clamping: wallClockMilliseconds()))
            self.warmLockedKeys()
        }
        for note in loadNotes.withLockedValue({ $0 }) { logger.warning("focus state set aside", metadata: ["what": "\(note)"]) }
        for problem in enforcer.probe() { logger.notice("focus blocking limited", metadata: ["what": "\(problem)"]) }
        enforcer.start()
        await withDiscardingTaskGroup { group in
            // The enforcer's two workers end after `finish`, once what was queued is done.
            group.addTask { await self.enforcer.runReconciler() }
            group.addTask { await self.enforcer.runHooks() }
            if let dns {
                let resolver = FocusResolver(configuration: .init(listenHost: dns.listenHost, listenPort: dns.listenPort,
                                                                  upstreamHost: dns.upstreamHost, upstreamPort: dns.upstreamPort),
                                             zones: enforcer.dnsZones, logger: logger)
                group.addTask { await cancelWhenGracefulShutdown { await resolver.run() } }
            }
            // Quits of challenges and solo sessions cost health (Health.swift).
            group.addTask { await self.chargeQuits() }
            group.addTask { await self.runWarmer() }
            await tick()
            enforcer.finish()
            warmInput.finish()
        }
        enforcer.stop()
    }

    /// The restart's blocking, then the deadline loop until the node stops.
    private func tick() async {
        _ = await enforcer.sync()
        await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                let next = await NodeCore.run { self.state.withLockedValue { $0.lock.nextDeadlineMs } }
                let now = Int64(clamping: wallClockMilliseconds())
                // Wake at the deadline, at a poke (a new lock), and at least every 5 s (a clock step; a
                // hosts block someone edited away is put back then).
                let waitMs = min(5_000, max(0, (next ?? Int64.max).subtractingSaturated(now)))
                if waitMs > 0 { await wakeup.wait(upTo: .milliseconds(waitMs)) }
                if Task.isCancelled { break }
                await NodeCore.run { self.tickNow() }
                _ = await enforcer.sync(verify: true)
            }
        }
    }

    /// On the core: the start's validation, then what challenges did while the node was down.
    @NodeCore private func resume() {
        let now = Int64(clamping: wallClockMilliseconds())
        let loaded = state.withLockedValue { $0 }
        let (lock, step) = FocusLock.validated(loaded: loaded.lock, modes: loaded.modes, nowMs: now)
        commit(lock, step)
        // A challenge lock whose challenge ended (or vanished) while the node was down opens; a
        // challenge that started meanwhile locks now.
        let challengeModes = state.withLockedValue { $0.challengeModes }
        for (idHex, _) in challengeModes {
            guard let id = parseHex(idHex) else { continue }
            let c = health.read("read a challenge", or: nil) { try store.challenge(id) }
            switch c?.phase {
            case .running?:
                health.attempt("lock a running challenge's mode") { try store.step { tx in challengeStarted(idHex, tx) } }
                events.published()
            case .scheduled?, .invited?, .accepted?: break
            case .ended?, .declined?, .expired?, .cancelled?, nil: challengeEnded(idHex)
            }
        }
        if case .challenge(let id)? = state.withLockedValue({ $0.lock.locked?.hold }), challengeModes[id] == nil {
            challengeEnded(id)
        }
        // A node that was off across a bed time locks now (Bedtime.swift).
        bedtimeTick(nowMs: now)
    }

    /// On the core: applies the time.
    @NodeCore func tickNow() {
        var lock = state.withLockedValue { $0.lock }
        let now = Int64(clamping: wallClockMilliseconds())
        let step = lock.tick(nowMs: now)
        commit(lock, step)
        bedtimeTick(nowMs: now)
    }

    // MARK: - Steps

    /// On the core: stores the lock after a step (with its events) in `tx` (a challenge's step), or
    /// in a transaction of its own, then hands the blocking its new target and the hooks their
    /// transitions once that is committed. A refused step stores only its `focus.key_refused`.
    @discardableResult
    @NodeCore func commit(_ lock: FocusLock, _ step: FocusLock.Step, extra: [FocusChange] = [], in tx: StoreStep? = nil) -> FocusLock.Step {
        let before = state.withLockedValue { $0.lock }
        let modes = state.withLockedValue { $0.modes }
        var changes = extra
        if lock != before { changes.append(.lock(lock.rows)) }
        let pending = step.events.map { e -> PendingEvent in let (t, f) = eventFields(e); return events.record(t, f) }
        if !changes.isEmpty || !pending.isEmpty {
            do {
                if let tx {
                    try tx.saveFocus(changes, events: pending)
                } else {
                    try store.step { tx in try tx.saveFocus(changes, events: pending) }
                }
            } catch {
                health.failed("store the focus state", error)
                return FocusLock.Step(effects: [], refusal: FocusRefusal(.invalid, "the node could not store the change: \(error)"))
            }
        }
        state.withLockedValue { $0.lock = lock }
        lockedNow.withLockedValue { $0 = lock.isLocked }
        if let tx {
            // Carried out once the step that holds the change is committed.
            tx.afterCommit { [self] in carryOut(lock, step, before: before, modes: modes) }
        } else {
            events.published()
            carryOut(lock, step, before: before, modes: modes)
        }
        return step
    }

    /// After a lock change is stored: the blocking's new target, hooks, signals.
    @NodeCore private func carryOut(_ lock: FocusLock, _ step: FocusLock.Step, before: FocusLock, modes: FocusModes) {
        // The new target, then a reconcile that sees it (a kick before the commit would see the old one).
        enforcer.setTarget(target(lock: lock, modes: modes))
        enforcer.kick()
        for effect in step.effects {
            switch effect {
            case .block(let m):
                enforcer.hook(mode: modes.mode(m), transition: .locked, lock: lock, reason: "")
                warmLockedKeys()
            case .unblock(let m):
                enforcer.hook(mode: modes.mode(m) ?? FocusMode(name: m, mainKey: nil), transition: .unlocked, lock: lock,
                              reason: step.events.compactMap { if case .unlocked(_, let r) = $0 { r.rawValue } else { nil } }.first ?? "")
            case .allowTemporary(let m, _): enforcer.hook(mode: modes.mode(m), transition: .tempUnlocked, lock: lock, reason: "")
            case .endTemporary(let m): enforcer.hook(mode: modes.mode(m), transition: .relocked, lock: lock, reason: "")
            case .quitChallenge(let id, let reason): signals.post(.focusQuitChallenge(id: id, reason: reason))
            case .emit: break
            }
        }
        if lock.isLocked != before.isLocked { signals.post(.focusChanged) }
        if lock.nextDeadlineMs != before.nextDeadlineMs { wakeup.poke() }
    }

    /// What the blocking must be for this lock: the locked mode's sites and apps, less the
    /// temporary items while a temporary unlock runs.
    func target(lock: FocusLock, modes: FocusModes) -> FocusEnforcer.Target {
        guard case .blocked(let name, let temporaryUntil) = lock.enforcement, let m = modes.mode(name) else { return .none }
        let open = temporaryUntil == nil ? Set<String>() : Set(m.temporaryItems)
        var until: Int64?
        if case .until(let t)? = lock.locked?.hold { until = t }
        return FocusEnforcer.Target(mode: name, sites: m.blockedSites.filter { !open.contains($0) },
                                    apps: m.blockedApps, allowedApps: m.blockedApps.filter { open.contains($0) },
                                    untilMs: until, allowedUntilMs: temporaryUntil)
    }

    /// An event of the lock machine as the node's event stream carries it.
    func eventFields(_ e: FocusLock.Event) -> (String, [String: JSONValue]) {
        var f: [String: JSONValue] = [:]
        switch e {
        case .locked(let mode, let hold):
            f["mode"] = .string(mode)
            switch hold {
            case .key: f["hold"] = "key"
            case .until(let t): f["hold"] = "until"; f["until"] = JSONValue.iso(t); f["until_ms"] = .int(t)
            case .challenge(let id): f["hold"] = "challenge"; f["challenge"] = .string(id)
            case .bedtime: f["hold"] = "bedtime"
            }
        case .unlocked(let mode, let reason):
            f["mode"] = .string(mode); f["reason"] = .string(reason.rawValue)
        case .temporaryUnlocked(let mode, let key, let until):
            f["mode"] = .string(mode); f["key"] = .string(key); f["until"] = JSONValue.iso(until); f["until_ms"] = .int(until)
        case .relocked(let mode, let reason):
            f["mode"] = .string(mode); f["reason"] = .string(reason.rawValue)
        case .keyRefused(let mode, let key, let reason):
            f["mode"] = mode.map(JSONValue.string) ?? .null; f["key"] = key.map(JSONValue.string) ?? .null
            f["reason"] = .string(reason.rawValue)
        case .modeSwitched(let from, let to):
            f["from"] = from.map(JSONValue.string) ?? .null; f["to"] = .string(to)
        }
        return (e.name, f)
    }

    // MARK: - Challenges (called on the core by the challenge service)

    /// `challenge invite|accept --mode M`, `focus start --mode M`: remembers which mode the challenge
    /// locks here. Refused for a mode that cannot lock.
    package func attach(challenge idHex: String, mode name: String, _ tx: StoreStep) throws {
        try checkLockable(mode: name)
        try tx.saveFocus([.challengeMode(FocusChallengeRecord(challengeId: idHex, mode: name))])
        state.withLockedValue { $0.challengeModes[idHex] = name }
    }

    /// Refused for a mode that does not exist or has no main key (it could never open).
    package func checkLockable(mode name: String) throws {
        let modes = state.withLockedValue { $0.modes }
        guard let m = modes.mode(name) else { throw NodeError.invalidArgument("no mode \(name) (tandem mode list)") }
        guard m.mainKey != nil else { throw NodeError.refused("mode \(name) has no main key yet (tandem mode edit \(name) --main-key KEY)") }
    }

    /// The mode a challenge locks here, if any.
    package func mode(ofChallenge idHex: String) -> String? { state.withLockedValue { $0.challengeModes[idHex] } }

    /// The challenge started: its mode locks (unless a lock is already on: the person's own lock stays).
    @NodeCore package func challengeStarted(_ idHex: String, _ tx: StoreStep) {
        guard let mode = mode(ofChallenge: idHex) else { return }
        var (lock, modes) = state.withLockedValue { ($0.lock, $0.modes) }
        if case .challenge(let id)? = lock.locked?.hold, id == idHex { return }
        let step = lock.challengeStarted(id: idHex, mode: mode, modes: modes, nowMs: Int64(clamping: wallClockMilliseconds()))
        if let r = step.refusal {
            logger.notice("a challenge could not lock its mode", metadata: ["challenge": "\(idHex)", "mode": "\(mode)", "why": "\(r)"])
            _ = events.emit("focus.challenge_lock_refused", ["challenge": .string(idHex), "mode": .string(mode), "reason": .string(r.reason.rawValue),
                                                              "message": .string(r.description)], in: tx)
        }
        commit(lock, step, in: tx)
    }

    /// The challenge ended, was cancelled, or is gone: the lock it holds opens; its mode is forgotten.
    @NodeCore package func challengeEnded(_ idHex: String, _ tx: StoreStep? = nil) {
        var lock = state.withLockedValue { $0.lock }
        let step = lock.challengeEnded(id: idHex, nowMs: Int64(clamping: wallClockMilliseconds()))
        let known = state.withLockedValue { $0.challengeModes[idHex] != nil }
        commit(lock, step, extra: known ? [.removeChallengeMode(challengeId: idHex)] : [], in: tx)
        state.withLockedValue { _ = $0.challengeModes.removeValue(forKey: idHex) }
    }

    /// Whether a challenge's lock is on (its early end needs the main key, not `challenge quit`).
    package func holdsLock(challenge idHex: String) -> Bool {
        if case .challenge(let id)? = state.withLockedValue({ $0.lock.locked?.hold }) { return id == idHex }
        return false
    }
}

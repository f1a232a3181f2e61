/// The lock state of a node and the rules that move it (Protocol/focus.md, issue 14). Pure: every
/// input carries the time (`nowMs`, the node's wall clock) and the configuration; the result says
/// what to emit and what the blocking must change. The node stores the value whole after every
/// step that changed it, before it carries out the effects, so a restarted node resumes where it
/// stopped (`validated(loaded:modes:nowMs:)`).
///
/// A presented key arrives already matched: the id of the configured key it matched, or nil.
/// Every input first applies the time (`tick`): a temporary unlock that ended re-locks, a timed
/// lock that ended unlocks, and the effects of that come first in the answer.
public struct FocusLock: Sendable, Equatable {
    /// What holds a lock closed besides the main key (which always opens it).
    public enum Hold: Sendable, Equatable {
        /// Only the main key opens it.
        case key
        /// Opens by itself at `untilMs`.
        case until(Int64)
        /// Opens when the challenge ends; the main key before that is a quit.
        case challenge(id: String)
        /// Bedtime (Protocol/bedtime.md): the node locked it at the bed time; only a daylight
        /// unlock after sunrise or an emergency unlock opens it, never the main key.
        case bedtime
    }

    public struct Temporary: Sendable, Equatable {
        public fileprivate(set) var key: String
        public fileprivate(set) var endsAtMs: Int64
    }

    public struct Locked: Sendable, Equatable {
        public fileprivate(set) var mode: String
        public fileprivate(set) var hold: Hold
        /// The temporary unlock in progress (its key is also in `spent`).
        public fileprivate(set) var temporary: Temporary?
        /// Temporary keys used in this lock cycle.
        public fileprivate(set) var spent: Set<String>
    }

    public enum Phase: Sendable, Equatable {
        case unlocked
        case locked(Locked)
    }

    public enum UnlockReason: String, Sendable, Equatable {
        case mainKey = "main_key"
        case expired = "expired"
        case challengeEnded = "challenge_ended"
        /// Restart: the locked mode no longer exists.
        case modeRemoved = "mode_removed"
        /// Restart: a key-only lock whose mode has no main key any more (it could never open).
        case mainKeyMissing = "main_key_missing"
        /// Bedtime left with a daylight photo after sunrise.
        case daylight = "daylight"
        /// Bedtime left early with `tandem unlock --emergency` (it costs health).
        case emergency = "emergency"
        /// Bedtime was switched off (`tandem bedtime off`) while its lock was on: only outside the
        /// night, or it would be a way out.
        case bedtimeOff = "bedtime_off"
    }

    public enum RelockReason: String, Sendable, Equatable {
        case expired = "expired"
        /// Restart: the key of the temporary unlock is no longer one of the mode's temporary keys.
        case keyRemoved = "key_removed"
    }

    public enum Event: Sendable, Equatable {
        case locked(mode: String, hold: Hold)
        case unlocked(mode: String, reason: UnlockReason)
        case temporaryUnlocked(mode: String, key: String, untilMs: Int64)
        case relocked(mode: String, reason: RelockReason)
        case keyRefused(mode: String?, key: String?, reason: FocusRefusal.Reason)
        case modeSwitched(from: String?, to: String)

        /// The event's name on the node's event stream.
        public var name: String {
            switch self {
            case .locked: return "focus.locked"
            case .unlocked: return "focus.unlocked"
            case .temporaryUnlocked: return "focus.temp_unlocked"
            case .relocked: return "focus.relocked"
            case .keyRefused: return "focus.key_refused"
            case .modeSwitched: return "focus.mode_switched"
            }
        }
    }

    public enum Effect: Sendable, Equatable {
        case emit(Event)
        /// Apply the mode's block.
        case block(mode: String)
        /// Lift the mode's block (and any temporary allowance with it).
        case unblock(mode: String)
        /// Open the mode's temporary items until `untilMs`.
        case allowTemporary(mode: String, untilMs: Int64)
        /// Close the temporary items again (the block stays).
        case endTemporary(mode: String)
        /// The main key ended a challenge's lock early: quit that challenge with this reason.
        case quitChallenge(id: String, reason: String)
    }

    /// The answer to one input: the effects to carry out in order, and the refusal if the input
    /// was refused (the effects then hold only what time did, and `focus.key_refused` when a key
    /// was presented).
    public struct Step: Sendable, Equatable {
        public var effects: [Effect]
        public var refusal: FocusRefusal?

        public init(effects: [Effect], refusal: FocusRefusal?) {
            self.effects = effects
            self.refusal = refusal
        }

        public var events: [Event] { effects.compactMap { if case .emit(let e) = $0 { return e } else { return nil } } }
    }

    /// What the blocking should be right now, for an enforcer that starts (or restarts) and must
    /// establish the state instead of following the edges.
    public enum Enforcement: Sendable, Equatable {
        case none
        case blocked(mode: String, temporaryUntilMs: Int64?)
    }

    public static let maximumTimedLockMs: Int64 = 7 * 86_400_000
    public static let maximumChallengeIDBytes = 128

    /// The mode `lock` uses when none is named; nil until one is chosen.
    public private(set) var activeMode: String?
    public private(set) var phase: Phase

    public init(activeMode: String? = nil) {
        self.activeMode = activeMode
        phase = .unlocked
    }

    public var locked: Locked? {
        switch phase {
        case .unlocked: return nil
        case .locked(let l): return l
        }
    }

    public var isLocked: Bool { locked != nil }

    /// When `tick` next has something to do; nil: nothing scheduled.
    public var nextDeadlineMs: Int64? {
        guard let l = locked else { return nil }
        let until: Int64?
        switch l.hold {
        case .key, .challenge, .bedtime: until = nil
        case .until(let t): until = t
        }
        return [until, l.temporary?.endsAtMs].compactMap { $0 }.min()
    }

    public var enforcement: Enforcement {
        guard let l = locked else { return .none }
        return .blocked(mode: l.mode, temporaryUntilMs: l.temporary?.endsAtMs)
    }

    // MARK: - Inputs

    /// `tandem lock [--mode M] [--until T]`: locks `mode` (the active mode when nil) with its main
    /// key; with `untilMs`, the lock also opens by itself then. The locked mode becomes active.
    public mutating func lock(mode: String?, presentedKey: String?, untilMs: Int64? = nil,
                              modes: FocusModes, nowMs: Int64) -> Step {
        var fx = tick(nowMs: nowMs).effects
        if let l = locked { return refuse(fx, .alreadyLocked, "already locked in mode \(l.mode)") }
        guard let name = mode ?? activeMode else { return refuse(fx, .noModeSelected, "no mode chosen: name one with --mode") }
        guard let m = modes.mode(name) else { return refuse(fx, .unknownMode, "no mode \(name)") }
        guard let main = m.mainKey else { return refuse(fx, .noMainKey, "mode \(name) has no main key yet") }
        guard let key = presentedKey else { return refuseKey(fx, name, nil, .noKeyMatched, "the key matched none of the keys") }
        guard key == main else { return refuseKey(fx, name, key, .wrongKey, "that is not the main key of mode \(name)") }
        var hold = Hold.key
        if let t = untilMs {
            guard t > nowMs, t.subtractingSaturated(nowMs) <= Self.maximumTimedLockMs else {
                return refuse(fx, .badUntil, "a timed lock ends after now and within 7 days")
            }
            hold = .until(t)
        }
        activeMode = name
        phase = .locked(Locked(mode: name, hold: hold, temporary: nil, spent: []))
        fx += [.block(mode: name), .emit(.locked(mode: name, hold: hold))]
        return Step(effects: fx, refusal: nil)
    }

    /// `tandem unlock`: only the locked mode's main key opens it, whatever holds it; every
    /// temporary key of the mode is usable again in the next cycle.
    public mutating func unlock(presentedKey: String?, modes: FocusModes, nowMs: Int64) -> Step {
        var fx = tick(nowMs: nowMs).effects
        guard let l = locked else { return refuse(fx, .notLocked, "not locked") }
        guard let key = presentedKey else { return refuseKey(fx, l.mode, nil, .noKeyMatched, "the key matched none of the keys") }
        if l.hold == .bedtime {
            return refuseKey(fx, l.mode, key, .bedtimeHold,
                             "mode \(l.mode) is held by bedtime: it opens with a daylight photo after sunrise (tandem unlock --daylight PHOTO), or with tandem unlock --emergency")
        }
        guard let main = modes.mode(l.mode)?.mainKey, key == main else {
            return refuseKey(fx, l.mode, key, .wrongKey, "only the main key of mode \(l.mode) unlocks it")
        }
        fx += openFully(l, .mainKey)
        if case .challenge(let id) = l.hold { fx.append(.quitChallenge(id: id, reason: "unlocked")) }
        return Step(effects: fx, refusal: nil)
    }

    /// `tandem temp-unlock`: one of the locked mode's temporary keys not spent in this cycle opens
    /// its temporary items for the mode's temporary duration.
    public mutating func temporaryUnlock(presentedKey: String?, modes: FocusModes, nowMs: Int64) -> Step {
        var fx = tick(nowMs: nowMs).effects
        guard var l = locked else { return refuse(fx, .notLocked, "not locked") }
        guard let key = presentedKey else { return refuseKey(fx, l.mode, nil, .noKeyMatched, "the key matched none of the keys") }
        guard let m = modes.mode(l.mode), m.temporaryKeys.contains(key) else {
            return refuseKey(fx, l.mode, key, .notATemporaryKey, "that is not a temporary key of mode \(l.mode)")
        }
        guard !l.spent.contains(key) else {
            return refuseKey(fx, l.mode, key, .keySpent, "that key was used in this lock cycle; it works again after a full unlock")
        }
        guard l.temporary == nil else { return refuse(fx, .temporaryUnlockRunning, "a temporary unlock is already running") }
        let ends = nowMs.addingSaturated(m.temporaryDurationMs)
        l.temporary = Temporary(key: key, endsAtMs: ends)
        l.spent.insert(key)
        phase = .locked(l)
        fx += [.allowTemporary(mode: l.mode, untilMs: ends), .emit(.temporaryUnlocked(mode: l.mode, key: key, untilMs: ends))]
        return Step(effects: fx, refusal: nil)
    }

    /// Applies the time: a timed lock whose end passed opens (taking any temporary unlock with it);
    /// otherwise a temporary unlock whose end passed re-locks. Ticking at t1 then t2 leaves the same
    /// state as ticking at t2 alone.
    @discardableResult
    public mutating func tick(nowMs: Int64) -> Step {
        guard var l = locked else { return Step(effects: [], refusal: nil) }
        if case .until(let t) = l.hold, t <= nowMs { return Step(effects: openFully(l, .expired), refusal: nil) }
        if let temp = l.temporary, temp.endsAtMs <= nowMs {
            l.temporary = nil
            phase = .locked(l)
            return Step(effects: [.endTemporary(mode: l.mode), .emit(.relocked(mode: l.mode, reason: .expired))], refusal: nil)
        }
        return Step(effects: [], refusal: nil)
    }

    /// `tandem mode switch NAME`: refused while locked.
    public mutating func switchMode(to name: String, modes: FocusModes, nowMs: Int64) -> Step {
        let fx = tick(nowMs: nowMs).effects
        if let l = locked {
            return refuse(fx, .lockedCannotSwitch, "locked in mode \(l.mode): unlock it with its main key before switching")
        }
        guard modes.mode(name) != nil else { return refuse(fx, .unknownMode, "no mode \(name)") }
        guard name != activeMode else { return Step(effects: fx, refusal: nil) }
        let from = activeMode
        activeMode = name
        return Step(effects: fx + [.emit(.modeSwitched(from: from, to: name))], refusal: nil)
    }

    /// A challenge with `--mode` started: locks the mode until `challengeEnded(id:)`; the main key
    /// ends it early as a quit. Refused when already locked (the person's own lock stays as it is,
    /// and the challenge runs without a lock).
    public mutating func challengeStarted(id: String, mode name: String, modes: FocusModes, nowMs: Int64) -> Step {
        var fx = tick(nowMs: nowMs).effects
        guard Self.isValidChallengeID(id) else { return refuse(fx, .badChallengeID, "a challenge id is lowercase hex") }
        if let l = locked { return refuse(fx, .alreadyLocked, "already locked in mode \(l.mode)") }
        guard let m = modes.mode(name) else { return refuse(fx, .unknownMode, "no mode \(name)") }
        guard m.mainKey != nil else { return refuse(fx, .noMainKey, "mode \(name) has no main key yet") }
        activeMode = name
        phase = .locked(Locked(mode: name, hold: .challenge(id: id), temporary: nil, spent: []))
        fx += [.block(mode: name), .emit(.locked(mode: name, hold: .challenge(id: id)))]
        return Step(effects: fx, refusal: nil)
    }

    /// The challenge ended (or was cancelled): opens the lock it holds. Anything else (the lock
    /// was already opened with the key, or is held otherwise) is left alone.
    public mutating func challengeEnded(id: String, nowMs: Int64) -> Step {
        var fx = tick(nowMs: nowMs).effects
        if let l = locked, l.hold == .challenge(id: id) { fx += openFully(l, .challengeEnded) }
        return Step(effects: fx, refusal: nil)
    }

    /// Bedtime began: locks `mode` with the bedtime hold. A lock of the same mode by the key or
    /// until a time becomes a bedtime lock (the stronger hold; a temporary unlock running stays);
    /// any other lock (another mode, a challenge) is refused and left as it is — the node asks
    /// again while the night lasts, so bedtime follows once that lock opens.
    public mutating func bedtimeStarted(mode name: String, modes: FocusModes, nowMs: Int64) -> Step {
        var fx = tick(nowMs: nowMs).effects
        guard modes.mode(name) != nil else { return refuse(fx, .unknownMode, "no mode \(name)") }
        if var l = locked {
            switch l.hold {
            case .bedtime where l.mode == name:
                return Step(effects: fx, refusal: nil)
            case .key, .until:
                guard l.mode == name else { return refuse(fx, .alreadyLocked, "already locked in mode \(l.mode)") }
                l.hold = .bedtime
                phase = .locked(l)
                fx.append(.emit(.locked(mode: name, hold: .bedtime)))
                return Step(effects: fx, refusal: nil)
            case .challenge, .bedtime:
                return refuse(fx, .alreadyLocked, "already locked in mode \(l.mode)")
            }
        }
        activeMode = name
        phase = .locked(Locked(mode: name, hold: .bedtime, temporary: nil, spent: []))
        fx += [.block(mode: name), .emit(.locked(mode: name, hold: .bedtime))]
        return Step(effects: fx, refusal: nil)
    }

    /// Bedtime is left (`reason` daylight, emergency or bedtimeOff; the node checked the sun, the
    /// photo or the health first): opens a bedtime lock. Refused when no bedtime lock is on.
    public mutating func bedtimeEnded(reason: UnlockReason, nowMs: Int64) -> Step {
        var fx = tick(nowMs: nowMs).effects
        guard let l = locked, l.hold == .bedtime else { return refuse(fx, .notLocked, "no bedtime lock is on") }
        fx += openFully(l, reason)
        return Step(effects: fx, refusal: nil)
    }

    /// Whether mode `name` may be edited or deleted now: not while it is locked (a changed block
    /// list, main key or temporary key would be a way out without the key).
    public func checkEditable(mode name: String) throws(FocusRefusal) {
        if let l = locked, l.mode == name {
            throw FocusRefusal(.lockedCannotEdit, "mode \(name) is locked: unlock it with its main key before changing it")
        }
    }

    // MARK: - Restart

    /// A state read back from disk, checked like a peer's message and brought up to `nowMs`:
    /// - the active mode is dropped if it no longer exists;
    /// - a lock whose mode vanished opens (nothing to enforce); a key-only lock whose mode lost its
    ///   main key opens (it could never be opened); a timed or challenge lock stays (it ends by itself);
    /// - spent keys that are no longer temporary keys of the mode are forgotten; a temporary unlock
    ///   whose key is gone re-locks; one ending further ahead than the mode's duration (the clock
    ///   went back) is cut to now + duration; a timed end beyond 7 days is cut to now + 7 days;
    ///   an invalid challenge id makes the lock key-only;
    /// - then `tick(nowMs)`: expiries that passed while the node was down apply now.
    /// Never fails; the effects say what changed, and are what `tick` would have said for a state
    /// that needed no repair.
    public static func validated(loaded: FocusLock, modes: FocusModes, nowMs: Int64) -> (FocusLock, Step) {
        var s = loaded
        var fx: [Effect] = []
        if let a = s.activeMode, modes.mode(a) == nil { s.activeMode = nil }
        if var l = s.locked {
            if let m = modes.mode(l.mode) {
                if case .challenge(let id) = l.hold, !isValidChallengeID(id) { l.hold = .key }
                if case .until(let t) = l.hold, t.subtractingSaturated(nowMs) > maximumTimedLockMs {
                    l.hold = .until(nowMs.addingSaturated(maximumTimedLockMs))
                }
                l.spent = l.spent.intersection(m.temporaryKeys)
                if let temp = l.temporary {
                    if !l.spent.contains(temp.key) {
                        l.temporary = nil
                        fx += [.endTemporary(mode: l.mode), .emit(.relocked(mode: l.mode, reason: .keyRemoved))]
                    } else if temp.endsAtMs.subtractingSaturated(nowMs) > m.temporaryDurationMs {
                        l.temporary?.endsAtMs = nowMs.addingSaturated(m.temporaryDurationMs)
                    }
                }
                s.phase = .locked(l)
                if m.mainKey == nil, l.hold == .key { fx += s.openFully(l, .mainKeyMissing) }
            } else {
                s.activeMode = nil
                fx += s.openFully(l, .modeRemoved)
            }
        }
        fx += s.tick(nowMs: nowMs).effects
        return (s, Step(effects: fx, refusal: nil))
    }

    public static func isValidChallengeID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= maximumChallengeIDBytes
            && id.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    // MARK: - Helpers

    private mutating func openFully(_ l: Locked, _ reason: UnlockReason) -> [Effect] {
        phase = .unlocked
        return [.unblock(mode: l.mode), .emit(.unlocked(mode: l.mode, reason: reason))]
    }

    private func refuse(_ fx: [Effect], _ reason: FocusRefusal.Reason, _ text: String) -> Step {
        Step(effects: fx, refusal: FocusRefusal(reason, text))
    }

    private func refuseKey(_ fx: [Effect], _ mode: String?, _ key: String?, _ reason: FocusRefusal.Reason, _ text: String) -> Step {
        Step(effects: fx + [.emit(.keyRefused(mode: mode, key: key, reason: reason))], refusal: FocusRefusal(reason, text))
    }
}

// MARK: - Stored form

extension FocusLock {
    /// The lock state spelled out field by field, as the node stores it (the `focusLock` table, and
    /// the JSON below): every name a later version must read. Rebuilding a `FocusLock` from it is
    /// lenient about meaning (it only rebuilds the shape; `validated` judges the content) and fails
    /// closed on shape: a lock whose hold cannot be read is held by the key.
    public struct StoredForm: Sendable, Equatable {
        public var activeMode: String?
        /// nil: unlocked (the other fields but `activeMode` are then ignored).
        public var lockedMode: String?
        /// `key`, `until` (with `untilMs`) or `challenge` (with `challengeID`); anything else is `key`.
        public var hold: String?
        public var untilMs: Int64?
        public var challengeID: String?
        /// A temporary unlock needs both.
        public var temporaryKey: String?
        public var temporaryEndsAtMs: Int64?
        /// Sorted; the temporary key is among them.
        public var spent: [String]

        public init(activeMode: String? = nil, lockedMode: String? = nil, hold: String? = nil, untilMs: Int64? = nil,
                    challengeID: String? = nil, temporaryKey: String? = nil, temporaryEndsAtMs: Int64? = nil, spent: [String] = []) {
            self.activeMode = activeMode
            self.lockedMode = lockedMode
            self.hold = hold
            self.untilMs = untilMs
            self.challengeID = challengeID
            self.temporaryKey = temporaryKey
            self.temporaryEndsAtMs = temporaryEndsAtMs
            self.spent = spent
        }
    }

    public init(stored s: StoredForm) {
        activeMode = s.activeMode
        guard let mode = s.lockedMode else {
            phase = .unlocked
            return
        }
        let hold: Hold
        switch s.hold {
        case "until": hold = s.untilMs.map(Hold.until) ?? .key
        case "challenge": hold = s.challengeID.map { .challenge(id: $0) } ?? .key
        case "bedtime": hold = .bedtime
        default: hold = .key
        }
        var spent = Set(s.spent)
        var temporary: Temporary?
        if let k = s.temporaryKey, let t = s.temporaryEndsAtMs {
            temporary = Temporary(key: k, endsAtMs: t)
            spent.insert(k)
        }
        phase = .locked(Locked(mode: mode, hold: hold, temporary: temporary, spent: spent))
    }

    public var stored: StoredForm {
        var s = StoredForm(activeMode: activeMode)
        guard let l = locked else { return s }
        s.lockedMode = l.mode
        switch l.hold {
        case .key: s.hold = "key"
        case .until(let t): s.hold = "until"; s.untilMs = t
        case .challenge(let id): s.hold = "challenge"; s.challengeID = id
        case .bedtime: s.hold = "bedtime"
        }
        s.temporaryKey = l.temporary?.key
        s.temporaryEndsAtMs = l.temporary?.endsAtMs
        s.spent = l.spent.sorted()
        return s
    }
}

/// The JSON form (one object; what store v4 kept in its `focus.lock` setting): the stored form's
/// fields under the same names.
extension FocusLock: Codable {
    enum CodingKeys: String, CodingKey {
        case version = "v"
        case activeMode = "activeMode"
        case lockedMode = "lockedMode"
        case hold = "hold"
        case untilMs = "untilMs"
        case challengeID = "challengeId"
        case temporaryKey = "temporaryKey"
        case temporaryEndsAtMs = "temporaryEndsAtMs"
        case spent = "spent"
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(stored: StoredForm(
            activeMode: try c.decodeIfPresent(String.self, forKey: .activeMode),
            lockedMode: try c.decodeIfPresent(String.self, forKey: .lockedMode),
            hold: try c.decodeIfPresent(String.self, forKey: .hold),
            untilMs: try c.decodeIfPresent(Int64.self, forKey: .untilMs),
            challengeID: try c.decodeIfPresent(String.self, forKey: .challengeID),
            temporaryKey: try c.decodeIfPresent(String.self, forKey: .temporaryKey),
            temporaryEndsAtMs: try c.decodeIfPresent(Int64.self, forKey: .temporaryEndsAtMs),
            spent: try c.decodeIfPresent([String].self, forKey: .spent) ?? []))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        let s = stored
        try c.encode(1, forKey: .version)
        try c.encodeIfPresent(s.activeMode, forKey: .activeMode)
        guard let mode = s.lockedMode else { return }
        try c.encode(mode, forKey: .lockedMode)
        try c.encodeIfPresent(s.hold, forKey: .hold)
        try c.encodeIfPresent(s.untilMs, forKey: .untilMs)
        try c.encodeIfPresent(s.challengeID, forKey: .challengeID)
        try c.encodeIfPresent(s.temporaryKey, forKey: .temporaryKey)
        try c.encodeIfPresent(s.temporaryEndsAtMs, forKey: .temporaryEndsAtMs)
        try c.encode(s.spent, forKey: .spent)
    }
}

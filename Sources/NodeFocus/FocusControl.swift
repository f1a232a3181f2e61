import Foundation
import Sodium
import TandemProtocol
import TandemStore
import TandemNodeCore

/// The control-socket methods of local focus (Protocol/control.md "Local focus"): modes, keys, and
/// the lock. A key input is `tag_b64` (a tag's payload, base64) or an object frame
/// (`session`, `frame_b64`, `last`: one frame per request, `FocusObjects.swift`).
extension FocusService {
    enum KeyAction: String, Sendable {
        case lock, unlock, temporaryUnlock = "temp_unlock", check, enroll, replace
    }

    package nonisolated func registerControlMethods(on router: ControlRouter) {
        router.registerOnCore("mode.list") { [self] _ in
            let s = state.withLockedValue { $0 }
            return ["modes": .array(s.modes.modes.map { describe($0, s) }), "active": s.lock.activeMode.map(JSONValue.string) ?? .null]
        }
        router.registerOnCore("mode.show") { [self] params in
            let s = state.withLockedValue { $0 }
            let name = try params.requiredString("name")
            guard let m = s.modes.mode(name) else { throw NodeError.nothingToActOn("no mode \(name) (tandem mode list)") }
            return describe(m, s)
        }
        router.registerOnCore("mode.create") { [self] params in
            let name = try params.requiredString("name")
            var modes = state.withLockedValue { $0.modes }
            guard modes.mode(name) == nil else { throw NodeError.refused("there is already a mode \(name) (tandem mode edit \(name) …)") }
            var m = FocusMode(name: name, mainKey: nil)
            try edit(&m, params, modes: modes)
            try refusing { try modes.setMode(m) }
            try saveModes(modes, event: ("focus.mode_created", ["mode": .string(name)]))
            return describe(m, state.withLockedValue { $0 })
        }
        router.registerOnCore("mode.edit") { [self] params in
            let name = try params.requiredString("name")
            var (modes, lock) = state.withLockedValue { ($0.modes, $0.lock) }
            guard var m = modes.mode(name) else { throw NodeError.nothingToActOn("no mode \(name) (tandem mode list)") }
            try refusing { try lock.checkEditable(mode: name) }
            try edit(&m, params, modes: modes)
            try refusing { try modes.setMode(m) }
            try saveModes(modes, event: ("focus.mode_changed", ["mode": .string(name)]))
            return describe(m, state.withLockedValue { $0 })
        }
        router.registerOnCore("mode.delete") { [self] params in
            let name = try params.requiredString("name")
            var (modes, lock) = state.withLockedValue { ($0.modes, $0.lock) }
            try refusing { try lock.checkEditable(mode: name) }
            try refusing { try modes.deleteMode(name) }
            try saveModes(modes, event: ("focus.mode_deleted", ["mode": .string(name)]))
            if lock.activeMode == name {
                // The active mode went with it: the stored lock state forgets it.
                let (cleaned, step) = FocusLock.validated(loaded: lock, modes: modes, nowMs: Int64(clamping: wallClockMilliseconds()))
                commit(cleaned, step)
            }
            return ["deleted": .string(name)]
        }
        router.registerOnCore("mode.switch") { [self] params in
            let name = try params.requiredString("name")
            var lock = state.withLockedValue { $0.lock }
            let step = lock.switchMode(to: name, modes: state.withLockedValue { $0.modes }, nowMs: Int64(clamping: wallClockMilliseconds()))
            commit(lock, step)
            if let r = step.refusal { throw refusal(r) }
            return ["active": .string(name)]
        }
        router.registerOnCore("key.list") { [self] _ in
            let s = state.withLockedValue { $0 }
            return ["keys": .array(s.modes.keys.map { describe($0, s) })]
        }
        router.registerOnCore("key.rename") { [self] params in
            var modes = state.withLockedValue { $0.modes }
            let key = try resolveKey(params, modes)
            let name = try params.requiredString("new_name")
            try refusing { try modes.renameKey(id: key.id, to: name) }
            try saveModes(modes, event: ("focus.key_renamed", ["key": .string(key.id), "name": .string(name)]))
            return describe(modes.key(key.id)!, state.withLockedValue { $0 })
        }
        router.registerOnCore("key.delete") { [self] params in
            var modes = state.withLockedValue { $0.modes }
            let key = try resolveKey(params, modes)
            try refusing { try modes.deleteKey(id: key.id) }
            try saveModes(modes, extra: [.removeMaterial(keyId: key.id)], event: ("focus.key_deleted", ["key": .string(key.id)]))
            state.withLockedValue { _ = $0.materials.removeValue(forKey: key.id) }
            // A temporary key of the locked mode leaves its spent set too.
            var lock = state.withLockedValue { $0.lock }
            let (cleaned, step) = FocusLock.validated(loaded: lock, modes: modes, nowMs: Int64(clamping: wallClockMilliseconds()))
            lock = cleaned
            commit(lock, step)
            return ["deleted": .string(key.id)]
        }
        router.register("key.enroll") { [self] params in try await keyInput(.enroll, params) }
        router.register("key.replace") { [self] params in try await keyInput(.replace, params) }
        router.register("key.check") { [self] params in try await keyInput(.check, params) }
        router.register("lock.lock") { [self] params in try await keyInput(.lock, params) }
        router.register("lock.unlock") { [self] params in try await keyInput(.unlock, params) }
        router.register("lock.temp_unlock") { [self] params in try await keyInput(.temporaryUnlock, params) }
        router.registerOnCore("lock.status") { [self] _ in statusJSON() }
        // Bedtime, health and the timeline (Bedtime.swift, Health.swift, Timeline.swift).
        registerBedtimeMethods(on: router)
    }

    // MARK: - Key inputs

    /// One key input for `action`: a tag (one request), or one frame of an object sweep.
    func keyInput(_ action: KeyAction, _ params: JSONValue) async throws -> JSONValue {
        if let text = try params.optionalString("tag_b64") {
            guard let data = Data(base64Encoded: text) else { throw NodeError.invalidArgument("\"tag_b64\" is not base64") }
            let payload = Array(data)
            try refusing { try FocusKeyMaterial.checkTag(payload) }
            return try await tagInput(action, payload, params)
        }
        if params["session"] != nil {
            return try await objectInput(action, params)
        }
        throw NodeError.invalidArgument("give a key: --tag TEXT, --tag-stdin, --qr IMAGE or --object FRAME…")
    }

    private func tagInput(_ action: KeyAction, _ payload: [UInt8], _ params: JSONValue) async throws -> JSONValue {
        switch action {
        case .enroll:
            return try await NodeCore.perform {
                let name = try params.requiredString("name")
                var modes = state.withLockedValue { $0.modes }
                let id = newKeyID(name, modes)
                try refusing { try modes.addKey(id: id, name: name) }
                let material = try refusing { try FocusKeyMaterial.newTag(payload: payload, secrets: secrets) }
                try saveModes(modes, extra: [.material(material.record(keyId: id))],
                              event: ("focus.key_enrolled", ["key": .string(id), "name": .string(name), "kind": "tag"]))
                state.withLockedValue { $0.materials[id] = material }
                return ["key": describe(modes.key(id)!, state.withLockedValue { $0 }), "complete": true]
            }
        case .replace:
            return try await NodeCore.perform {
                let (modes, lock) = state.withLockedValue { ($0.modes, $0.lock) }
                let key = try resolveKey(params, modes)
                try checkReplaceable(key.id, modes: modes, lock: lock)
                let material = try refusing { try FocusKeyMaterial.newTag(payload: payload, secrets: secrets) }
                try store.step { tx in try tx.saveFocus([.material(material.record(keyId: key.id))],
                                    events: [events.record("focus.key_replaced", ["key": .string(key.id), "kind": "tag"])]) }
                events.published()
                state.withLockedValue { $0.materials[key.id] = material }
                return ["key": describe(key, state.withLockedValue { $0 }), "complete": true]
            }
        case .check:
            return try await NodeCore.perform {
                let s = state.withLockedValue { $0 }
                let key = try resolveKey(params, s.modes)
                let match = s.materials[key.id]?.matchesTag(payload, secrets: secrets) ?? false
                return ["match": .bool(match), "key": .string(key.id), "frames": .array([])]
            }
        case .lock, .unlock, .temporaryUnlock:
            let step = try await NodeCore.perform { [self] () -> FocusLock.Step in
                let s = state.withLockedValue { $0 }
                let matched = s.modes.keys.map(\.id).filter { s.materials[$0]?.matchesTag(payload, secrets: secrets) ?? false }
                return try lockStep(action, presented: pick(matched, preferring: candidates(action, s, params)), params)
            }
            return try await finishLockStep(step)
        }
    }

    /// On the core: the lock machine's answer to a matched key (nil: it matched none).
    @NodeCore func lockStep(_ action: KeyAction, presented: String?, _ params: JSONValue) throws -> FocusLock.Step {
        var (lock, modes) = state.withLockedValue { ($0.lock, $0.modes) }
        let now = Int64(clamping: wallClockMilliseconds())
        let step: FocusLock.Step
        switch action {
        case .lock:
            var until = try params.optionalInt("until_ms")
            if let f = try params.optionalInt("for_ms") {
                guard f > 0 else { throw NodeError.invalidArgument("--for must be longer than 0") }
                until = now.addingSaturated(f)
            }
            step = lock.lock(mode: try params.optionalString("mode"), presentedKey: presented, untilMs: until, modes: modes, nowMs: now)
        case .unlock:
            // The main key on a challenge's lock quits it: a bypass, refused at health 0 (Health.swift).
            if case .challenge? = lock.locked?.hold, presented != nil, presented == lock.locked.flatMap({ modes.mode($0.mode)?.mainKey }) {
                try healthGate(.quitEarly, nowMs: now)
            }
            step = lock.unlock(presentedKey: presented, modes: modes, nowMs: now)
        case .temporaryUnlock:
            // A temporary unlock is a bypass: refused at health 0 and in the cooldown; it costs (Health.swift).
            // The lock machine's own refusals (wrong key, spent, one running) come first.
            var trial = lock
            if trial.temporaryUnlock(presentedKey: presented, modes: modes, nowMs: now).refusal == nil {
                try healthGate(.temporaryUnlock, nowMs: now)
            }
            step = lock.temporaryUnlock(presentedKey: presented, modes: modes, nowMs: now)
            if step.refusal == nil {
                let result = commit(lock, step)
                if result.refusal == nil { recordBypass(.temporaryUnlock, nowMs: now, detail: presented) }
                return result
            }
        case .check, .enroll, .replace:
            throw NodeError.invalidArgument("not a lock action")
        }
        return commit(lock, step)
    }

    /// Off the core: the blocking brought in line before the answer (a caller that sees "unlocked"
    /// finds the hosts block gone), then the answer or the refusal.
    func finishLockStep(_ step: FocusLock.Step) async throws -> JSONValue {
        let problems = await enforcer.sync()
        if let r = step.refusal { throw refusal(r) }
        var status = await NodeCore.run { self.statusJSON() }
        if case .object(var o) = status {
            o["events"] = .array(step.events.map { e in let (t, f) = eventFields(e); return .object(f.merging(["type": .string(t)]) { a, _ in a }) })
            o["blocking_problems"] = .array(problems.map(JSONValue.string))
            status = .object(o)
        }
        return status
    }

    /// The keys that would do `action` now, best first (an input matching several keys counts as the relevant one).
    func candidates(_ action: KeyAction, _ s: State, _ params: JSONValue) -> [String] {
        switch action {
        case .lock:
            let name = (try? params.optionalString("mode")) ?? nil  // a mode that is not a string: none named
            return (name ?? s.lock.activeMode).flatMap { s.modes.mode($0)?.mainKey }.map { [$0] } ?? []
        case .unlock:
            return s.lock.locked.flatMap { s.modes.mode($0.mode)?.mainKey }.map { [$0] } ?? []
        case .temporaryUnlock:
            guard let l = s.lock.locked, let m = s.modes.mode(l.mode) else { return [] }
            return m.temporaryKeys.filter { !l.spent.contains($0) } + m.temporaryKeys.filter { l.spent.contains($0) }
        case .check, .enroll, .replace:
            return []
        }
    }

    func pick(_ matched: [String], preferring: [String]) -> String? {
        preferring.first(where: matched.contains) ?? matched.first
    }

    /// Replacing the key material of a locked mode's key would be a way out without it: refused,
    /// unless that key's material was lost (quarantined), which leaves no other way back.
    func checkReplaceable(_ id: String, modes: FocusModes, lock: FocusLock) throws {
        guard let l = lock.locked, let m = modes.mode(l.mode) else { return }
        let uses = m.mainKey == id || m.temporaryKeys.contains(id)
        let lost = state.withLockedValue { $0.materials[id] == nil }
        if uses && !lost {
            throw NodeError.refused("key \(id) belongs to mode \(l.mode), which is locked: unlock it before replacing the key")
        }
    }

    // MARK: - Helpers

    func refusing<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let r as FocusRefusal {
            throw refusal(r)
        }
    }

    func refusal(_ r: FocusRefusal) -> ControlError {
        let exit: Int32 = [.invalid, .duplicate].contains(r.reason) ? 2 : 1
        return ControlError(code: r.reason.rawValue, message: r.description, exitCode: exit)
    }

    /// On the core: stores the configuration (and `extra`), with its event, in one transaction.
    @NodeCore func saveModes(_ modes: FocusModes, extra: [FocusChange] = [], event: (String, [String: JSONValue])) throws {
        try store.step { tx in try tx.saveFocus([.configuration(modes.rows)] + extra, events: [events.record(event.0, event.1)]) }
        state.withLockedValue { $0.modes = modes }
        events.published()
        // A changed block list of an unlocked mode changes nothing on the machine; the target is
        // refreshed anyway (a mode's sites edited while another mode's block is up stay as they are).
        enforcer.setTarget(target(lock: state.withLockedValue { $0.lock }, modes: modes))
    }

    func resolveKey(_ params: JSONValue, _ modes: FocusModes) throws -> FocusKey {
        let text = try params.requiredString("key")
        if let k = modes.key(text) ?? modes.key(named: text) { return k }
        throw NodeError.nothingToActOn("no key \(text) (tandem key list)")
    }

    /// An id for a new key: its name in `a-z 0-9 . _ -`, made unique.
    func newKeyID(_ name: String, _ modes: FocusModes) -> String {
        var slug = String(name.lowercased().unicodeScalars.map { s -> Character in
            (s.isASCII && (CharacterSet.alphanumerics.contains(s) || s == "." || s == "_" || s == "-")) ? Character(s) : "-"
        }.prefix(48))
        slug = slug.trimmingCharacters(in: CharacterSet(charactersIn: "-"))
        if slug.isEmpty || !FocusModes.isValidID(slug) { slug = "key" }
        var id = slug
        var n = 2
        while modes.key(id) != nil { id = "\(slug)-\(n)"; n += 1 }
        return id
    }

    /// Applies a create/edit request's fields to `m` (validated as a whole by `setMode`).
    func edit(_ m: inout FocusMode, _ params: JSONValue, modes: FocusModes) throws {
        func list(_ k: String) throws -> [String] { try params.optionalStrings(k, maximumCount: FocusModes.maximumItems) ?? [] }
        func add(_ a: inout [String], _ items: [String]) { for i in items where !a.contains(i) { a.append(i) } }
        func keyID(_ text: String) throws -> String {
            guard let k = modes.key(text) ?? modes.key(named: text) else { throw NodeError.nothingToActOn("no key \(text) (tandem key list)") }
            return k.id
        }
        add(&m.blockedSites, try list("block_sites").map { $0.lowercased() })
        m.blockedSites.removeAll(where: Set(try list("remove_sites").map { $0.lowercased() }).contains)
        add(&m.blockedApps, try list("block_apps"))
        m.blockedApps.removeAll(where: Set(try list("remove_apps")).contains)
        let allow = try list("temp_allow")
        add(&m.temporaryItems, allow.map { a in m.blockedSites.contains(a.lowercased()) ? a.lowercased() : a })
        m.temporaryItems.removeAll(where: Set(try list("remove_temp_allow")).contains)
        // An item no longer blocked is no longer a temporary item either.
        m.temporaryItems.removeAll { !m.blockedSites.contains($0) && !m.blockedApps.contains($0) && !allow.contains($0) }
        if let d = try params.optionalInt("temp_duration_ms") { m.temporaryDurationMs = d }
        if let k = try params.optionalString("main_key") { m.mainKey = try keyID(k) }
        if params["clear_main_key"]?.boolValue == true { m.mainKey = nil }
        add(&m.temporaryKeys, try list("temp_keys").map(keyID))
        let removeKeys = Set(try list("remove_temp_keys").map(keyID))
        m.temporaryKeys.removeAll(where: removeKeys.contains)
    }

    func describe(_ m: FocusMode, _ s: State) -> JSONValue {
        func key(_ id: String) -> JSONValue {
            ["id": .string(id), "name": .string(s.modes.key(id)?.name ?? id), "usable": .bool(s.materials[id] != nil)]
        }
        return [
            "name": .string(m.name),
            "active": .bool(s.lock.activeMode == m.name),
            "locked": .bool(s.lock.locked?.mode == m.name),
            "main_key": m.mainKey.map(key) ?? .null,
            "temp_keys": .array(m.temporaryKeys.map(key)),
            "block_sites": .array(m.blockedSites.map(JSONValue.string)),
            "block_apps": .array(m.blockedApps.map(JSONValue.string)),
            "temp_allow": .array(m.temporaryItems.map(JSONValue.string)),
            "temp_duration_ms": .int(m.temporaryDurationMs),
        ]
    }

    func describe(_ k: FocusKey, _ s: State) -> JSONValue {
        [
            "id": .string(k.id),
            "name": .string(k.name),
            "kind": s.materials[k.id].map { .string($0.kind) } ?? .null,
            "usable": .bool(s.materials[k.id] != nil),
            "main_key_of": .array(s.modes.modes.filter { $0.mainKey == k.id }.map { .string($0.name) }),
            "temp_key_of": .array(s.modes.modes.filter { $0.temporaryKeys.contains(k.id) }.map { .string($0.name) }),
        ]
    }

    /// On the core: `tandem lock status`.
    @NodeCore package func statusJSON() -> JSONValue {
        let s = state.withLockedValue { $0 }
        var o: [String: JSONValue] = ["locked": .bool(s.lock.isLocked), "active_mode": s.lock.activeMode.map(JSONValue.string) ?? .null]
        if let l = s.lock.locked {
            o["mode"] = .string(l.mode)
            switch l.hold {
            case .key: o["hold"] = "key"
            case .until(let t): o["hold"] = "until"; o["until"] = JSONValue.iso(t); o["until_ms"] = .int(t)
            case .challenge(let id): o["hold"] = "challenge"; o["challenge"] = .string(id)
            case .bedtime: o["hold"] = "bedtime"
            }
            o["temporary"] = l.temporary.map { ["key": .string($0.key), "until": JSONValue.iso($0.endsAtMs), "until_ms": .int($0.endsAtMs)] } ?? .null
            o["spent"] = .array(l.spent.sorted().map(JSONValue.string))
        } else {
            o["mode"] = .null
        }
        // What the blocking holds right now (less what a temporary unlock opened).
        let t = target(lock: s.lock, modes: s.modes)
        o["blocked"] = .object([
            "sites": .array(t.mode == nil ? [] : t.sites.map(JSONValue.string)),
            "apps": .array(t.mode == nil ? [] : t.apps.filter { !t.allowedApps.contains($0) }.map(JSONValue.string)),
            "open_now": .array(t.allowedApps.map(JSONValue.string)),
        ])
        return .object(o)
    }
}

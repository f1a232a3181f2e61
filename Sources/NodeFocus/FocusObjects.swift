import Foundation
import Sodium
import TandemKeys
import TandemProtocol
import TandemStore
import TandemNodeCore

/// One object presentation or enrolment under way: the client sends its frames one request at a
/// time (`session`, `frame_b64`), then a last request (`last: true`, no frame). Sessions are few
/// (`maximumSessions`, the oldest goes) and short-lived (`idleLimitMs`).
struct ObjectSession: Sendable {
    enum Work: Sendable {
        /// Lock, unlock, temporary unlock or check: each candidate key's verifier.
        case verify([(key: String, verifier: ObjectVerifier)])
        /// Enrol a new key `name`, or re-enrol key `replacing`.
        case enroll(ObjectEnrollment, name: String, replacing: String?)
    }

    var action: FocusService.KeyAction
    var work: Work
    var verdicts: [JSONValue] = []
    var lastUsedMs: Int64
}

/// An object key to make ready (`FocusService.runWarmer`): its id and sealed template.
struct WarmKey: Sendable {
    let id: String
    let sealed: [UInt8]
}

extension FocusService {
    nonisolated static let maximumSessions = 8
    nonisolated static let idleLimitMs: Int64 = 120_000
    nonisolated static let maximumFramesPerSession = 240
    nonisolated static let maximumPendingEnrolments = 16

    /// One request of an object key input (see `ObjectSession`).
    func objectInput(_ action: KeyAction, _ params: JSONValue) async throws -> JSONValue {
        let id = try params.requiredString("session")
        guard (8...64).contains(id.utf8.count), id.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            throw NodeError.invalidArgument("\"session\" is 8 to 64 lowercase hex digits")
        }
        let last = params["last"]?.boolValue ?? false
        var frame: PointFrame?
        if let text = try params.optionalString("frame_b64") {
            guard let data = Data(base64Encoded: text) else { throw NodeError.invalidArgument("\"frame_b64\" is not base64") }
            do {
                frame = try KeyFrameWire.decode(Array(data))
            } catch {
                throw NodeError.invalidArgument("\(error)")
            }
        }
        let now = Int64(clamping: wallClockMilliseconds())
        var session: ObjectSession
        if let s = takeSession(id, now: now) {
            guard s.action == action else { throw NodeError.invalidArgument("session \(id) is for another command") }
            session = s
        } else {
            // What the session needs is read on the core; opening templates and enrolments (decryption,
            // decoding, k-d trees) happens here, off it.
            session = build(try await NodeCore.perform { try newSession(action, params) }, action, now: now)
        }
        guard session.verdicts.count < Self.maximumFramesPerSession else {
            throw NodeError.refused("at most \(Self.maximumFramesPerSession) frames in one presentation")
        }
        session.lastUsedMs = now
        switch session.work {
        case .verify(var verifiers):
            var matchedKey: String?
            if let frame {
                // The heavy part (features, alignment, ICP), off the core.
                var best: (FrameVerdict, String)?
                for i in verifiers.indices {
                    let v = verifiers[i].verifier.present(frame)
                    if verifiers[i].verifier.matched, matchedKey == nil { matchedKey = verifiers[i].key }
                    if best == nil || (v.passed && !best!.0.passed) || (v.passed == best!.0.passed && v.score > best!.0.score) {
                        best = (v, verifiers[i].key)
                    }
                }
                session.verdicts.append(best.map { verdictJSON($0.0, key: $0.1) } ?? noCandidateVerdict(frame))
                session.work = .verify(verifiers)
            }
            if matchedKey == nil && !last {
                putSession(id, session)
                return ["done": false, "frame": session.verdicts.last ?? .null, "frames_seen": .int(Int64(session.verdicts.count))]
            }
            let frames = JSONValue.array(session.verdicts)
            if action == .check {
                return ["done": true, "match": .bool(matchedKey != nil), "key": .string(verifiers.first?.key ?? ""), "frames": frames]
            }
            let presented = matchedKey
            let step = try await NodeCore.perform { try lockStep(action, presented: presented, params) }
            if let r = step.refusal, r.reason == .noKeyMatched {
                // Said for an object: what was seen, and what it takes.
                let passed = session.verdicts.filter { $0["passed"]?.boolValue == true }.count
                let why = verifiers.isEmpty ? "no object key can do this now"
                    : "the object was not recognised: \(passed) of \(session.verdicts.count) frames passed, \(ObjectVerifier.requiredConsecutive) in a row are needed"
                _ = await enforcer.sync()
                throw ControlError(code: r.reason.rawValue, message: why, exitCode: 1)
            }
            var result = try await finishLockStep(step)
            if case .object(var o) = result {
                o["done"] = true
                o["frames"] = frames
                o["key"] = matchedKey.map(JSONValue.string) ?? .null
                result = .object(o)
            }
            return result
        case .enroll(var enrollment, let name, let replacing):
            var report: JSONValue = .null
            if let frame {
                let r = enrollment.add(frame)
                report = ["accepted": .bool(r.accepted), "quality": .double(r.quality), "guidance": r.guidance.map(JSONValue.string) ?? .null,
                          "new_viewpoint": .bool(r.newViewpoint), "good_frames": .int(Int64(r.goodFrames)), "viewpoints": .int(Int64(r.viewpoints))]
                session.verdicts.append(report)
            }
            let finishNow = enrollment.isComplete && (enrollment.goodFrames >= ObjectEnrollment.maximumFrames || last)
            let force = last && (params["finish"]?.boolValue ?? false)
            if finishNow || force {
                let template: ObjectTemplate
                do {
                    template = try enrollment.finish(force: force)
                } catch {
                    let kept = enrollment
                    try await NodeCore.perform { try savePending(kept, name: name, replacing: replacing) }
                    throw NodeError.refused("\(error)")
                }
                // Too close to another object key, or to a plain solid of its size, to be told apart:
                // said now (issue 35), not found out when the other object opens it. Off the core.
                let candidates = try await NodeCore.perform { closenessCandidates(replacing: replacing) }
                let close = closenessWarnings(template, candidates)
                let key = try await NodeCore.perform { try saveObjectKey(template, name: name, replacing: replacing, closeness: close) }
                return ["done": true, "complete": true, "key": key, "warnings": .array((template.warnings + close).map(JSONValue.string)),
                        "good_frames": .int(Int64(template.goodFrames)), "frames": .array(session.verdicts)]
            }
            session.work = .enroll(enrollment, name: name, replacing: replacing)
            if last {
                let kept = enrollment
                try await NodeCore.perform {
                    // Nothing good to keep (`--restart` alone, or only bad frames): no unfinished enrolment stays.
                    if kept.goodFrames == 0 {
                        let e = enrolment(name: name, replacing: replacing)
                        try store.step { tx in try tx.saveFocus([.removeEnrolment(target: e.target, replacing: e.replacing)]) }
                    } else {
                        try savePending(kept, name: name, replacing: replacing)
                    }
                }
                return ["done": true, "complete": false, "good_frames": .int(Int64(enrollment.goodFrames)),
                        "viewpoints": .int(Int64(enrollment.viewpoints)), "needed_frames": .int(Int64(ObjectEnrollment.requiredFrames)),
                        "needed_viewpoints": .int(Int64(ObjectEnrollment.requiredViewpoints)), "frames": .array(session.verdicts)]
            }
            putSession(id, session)
            return ["done": false, "frame": report, "good_frames": .int(Int64(enrollment.goodFrames)),
                    "viewpoints": .int(Int64(enrollment.viewpoints))]
        }
    }

    private func takeSession(_ id: String, now: Int64) -> ObjectSession? {
        sessions.withLockedValue { all in
            all = all.filter { now.subtractingSaturated($0.value.lastUsedMs) < Self.idleLimitMs }
            return all.removeValue(forKey: id)
        }
    }

    private func putSession(_ id: String, _ s: ObjectSession) {
        sessions.withLockedValue { all in
            if all.count >= Self.maximumSessions, let oldest = all.min(by: { $0.value.lastUsedMs < $1.value.lastUsedMs })?.key {
                all.removeValue(forKey: oldest)
            }
            all[id] = s
        }
    }

    /// On the core: the session's candidates (their templates opened) or the enrolment it continues.
    /// What a new session is made from, as read on the core.
    enum SessionSource: Sendable {
        case verify([(id: String, sealed: [UInt8])])
        case enroll(name: String, replacing: String?, pendingKey: String, stored: Data?)
    }

    private func build(_ source: SessionSource, _ action: KeyAction, now: Int64) -> ObjectSession {
        switch source {
        case .verify(let keys):
            let verifiers = keys.compactMap { k in verifier(k.id, k.sealed).map { (key: k.id, verifier: $0) } }
            return ObjectSession(action: action, work: .verify(verifiers), lastUsedMs: now)
        case .enroll(let name, let replacing, let pendingKey, let stored):
            var enrollment = ObjectEnrollment()
            if let stored {
                if let plain = secrets.open(Array(stored), context: pendingKey),
                   let e = try? JSONDecoder().decode(ObjectEnrollment.self, from: Data(plain)) {  // a damaged enrollment counts as none
                    enrollment = e
                } else {
                    logger.warning("an unfinished enrolment could not be read; starting over", metadata: ["enrolment": "\(pendingKey)"])
                }
            }
            return ObjectSession(action: action, work: .enroll(enrollment, name: name, replacing: replacing), lastUsedMs: now)
        }
    }

    /// On the core: who the session is for, checked against the configuration and the lock.
    @NodeCore private func newSession(_ action: KeyAction, _ params: JSONValue) throws -> SessionSource {
        let s = state.withLockedValue { $0 }
        switch action {
        case .enroll, .replace:
            var name: String
            var replacing: String?
            if action == .enroll {
                name = try params.requiredString("name")
                guard FocusModes.isValidKeyName(name) else { throw NodeError.invalidArgument("a key name is 1–64 bytes without control characters") }
                guard s.modes.keys.count < FocusModes.maximumKeys else { throw NodeError.refused("at most \(FocusModes.maximumKeys) keys") }
                guard s.modes.key(named: name) == nil else { throw NodeError.refused("there is already a key named \(name) (tandem key replace \(name) … re-enrols it)") }
            } else {
                let key = try resolveKey(params, s.modes)
                try checkReplaceable(key.id, modes: s.modes, lock: s.lock)
                name = key.name
                replacing = key.id
            }
            let pendingKey = pendingKey(name: name, replacing: replacing)
            let pending = try store.focusEnrolments()
            let e = enrolment(name: name, replacing: replacing)
            let stored = pending.first { $0.target == e.target && $0.replacing == e.replacing }
            if stored == nil, pending.count >= Self.maximumPendingEnrolments {
                throw NodeError.refused("\(pending.count) enrolments are unfinished: finish one (--finish) or start it over (--restart) first")
            }
            if params["restart"]?.boolValue == true {
                try store.step { tx in try tx.saveFocus([.removeEnrolment(target: e.target, replacing: e.replacing)]) }
                return .enroll(name: name, replacing: replacing, pendingKey: pendingKey, stored: nil)
            }
            return .enroll(name: name, replacing: replacing, pendingKey: pendingKey, stored: stored?.sealed)
        case .check, .lock, .unlock, .temporaryUnlock:
            var ids: [String]
            if action == .check {
                let key = try resolveKey(params, s.modes)
                guard case .object? = s.materials[key.id] else {
                    throw NodeError.invalidArgument("key \(key.name) is not an object key (check it with --tag, --tag-stdin or --qr)")
                }
                ids = [key.id]
            } else {
                ids = candidates(action, s, params)
            }
            return .verify(ids.compactMap { id in
                if case .object(let sealed, _)? = s.materials[id] { return (id, sealed) } else { return nil }
            })
        }
    }

    /// What an unfinished enrolment of `name` (or re-enrolment of key `replacing`) is sealed under
    /// (the name of the setting store v4 kept it in; `enrolment(name:replacing:)` is its row).
    func pendingKey(name: String, replacing: String?) -> String {
        Self.enrollPrefix + hexString(Array((replacing.map { "replace:" + $0 } ?? name).utf8))
    }

    /// On the core: the locked mode's object keys (its main key and temporary keys) handed to
    /// `runWarmer`, so a person presenting one does not wait for its verifier to be made.
    @NodeCore func warmLockedKeys() {
        let s = state.withLockedValue { $0 }
        guard let l = s.lock.locked, let m = s.modes.mode(l.mode) else { return }
        let keys = ([m.mainKey].compactMap { $0 } + m.temporaryKeys).compactMap { id -> WarmKey? in
            if case .object(let sealed, _)? = s.materials[id] { WarmKey(id: id, sealed: sealed) } else { nil }
        }
        if !keys.isEmpty { warmInput.yield(keys) }
    }

    /// A child task of `run`: each locked mode's object keys opened and their verifiers made ready
    /// (the model's virtual views, near-symmetries, spans and nearest-point grid: 0.3–1 s of CPU per
    /// key, which the first presentation after a start or a new key paid before), off the core, one
    /// lock's keys at a time; then `focus.keys_ready` (`keys`, `ms`).
    func runWarmer() async {
        for await keys in warmJobs {
            let clock = ContinuousClock()
            let start = clock.now
            var ready: [String] = []
            for k in keys where !Task.isCancelled {
                guard let v = verifier(k.id, k.sealed) else { continue }  // damaged: logged, the presentation says so
                v.prepare()
                ready.append(k.id)
            }
            guard !ready.isEmpty else { continue }
            let took = clock.now - start
            let ms = Int64(took.components.seconds) * 1000 + Int64(took.components.attoseconds / 1_000_000_000_000_000)
            await NodeCore.run { [events] in
                _ = events.emit("focus.keys_ready", ["keys": .array(ready.map(JSONValue.string)), "ms": .int(ms)])
            }
        }
    }

    /// A fresh verifier for object key `id` (its template opened, its model's k-d tree built): kept
    /// per key while its sealed template stays the same, so a presentation does not rebuild it.
    private func verifier(_ id: String, _ sealed: [UInt8]) -> ObjectVerifier? {
        if let (cachedSealed, v) = verifiers.withLockedValue({ $0[id] }), cachedSealed == sealed { return v }
        guard let plain = secrets.open(sealed, context: Self.keyPrefix + id), let t = try? ObjectTemplate(serialized: plain) else {  // damaged: handled below
            logger.error("an object key's template cannot be opened", metadata: ["key": "\(id)"])
            return nil
        }
        let v = ObjectVerifier(template: t)
        verifiers.withLockedValue { cache in
            if cache.count >= 16 { cache.removeAll() }
            cache[id] = (sealed, v)
        }
        return v
    }

    /// On the core: an unfinished enrolment kept (sealed) for the next `key enroll NAME --object …`.
    @NodeCore private func savePending(_ e: ObjectEnrollment, name: String, replacing: String?) throws {
        let pendingKey = pendingKey(name: name, replacing: replacing)
        let plain = Array(try JSONEncoder().encode(e))
        let sealed = try secrets.seal(plain, context: pendingKey)
        let e = enrolment(name: name, replacing: replacing)
        try store.step { tx in try tx.saveFocus([.enrolment(FocusEnrolmentRecord(target: e.target, replacing: e.replacing, sealed: Data(sealed)))]) }
    }

    /// On the core: the other object keys (not the one re-enrolled), sealed, with their names.
    @NodeCore private func closenessCandidates(replacing: String?) -> [(id: String, name: String, sealed: [UInt8])] {
        let s = state.withLockedValue { $0 }
        return s.modes.keys.compactMap { k in
            guard k.id != replacing, case .object(let sealed, _)? = s.materials[k.id] else { return nil }
            return (k.id, k.name, sealed)
        }
    }

    /// Off the core: what `KeyCloseness` finds for a new template against the other object keys
    /// (opened as verification opens them) and the plain solids of its size, as warning lines.
    private func closenessWarnings(_ t: ObjectTemplate, _ candidates: [(id: String, name: String, sealed: [UInt8])]) -> [String] {
        let others = candidates.compactMap { c in verifier(c.id, c.sealed).map { (name: c.name, template: $0.template) } }
        return (KeyCloseness.closeKeys(t, others: others) + KeyCloseness.lookAlikes(t)).map(\.warning)
    }

    /// On the core: the finished template becomes a key (or replaces one's), sealed at rest.
    @NodeCore private func saveObjectKey(_ t: ObjectTemplate, name: String, replacing: String?, closeness: [String] = []) throws -> JSONValue {
        var modes = state.withLockedValue { $0.modes }
        let id: String
        if let r = replacing {
            guard modes.key(r) != nil else { throw NodeError.nothingToActOn("key \(r) was deleted meanwhile") }
            id = r
        } else {
            guard modes.key(named: name) == nil else { throw NodeError.refused("there is already a key named \(name)") }
            id = newKeyID(name, modes)
            try refusing { try modes.addKey(id: id, name: name) }
        }
        let material = FocusKeyMaterial.object(sealed: try secrets.seal(t.serialized(), context: Self.keyPrefix + id), frames: max(1, min(64, t.goodFrames)))
        let e = enrolment(name: name, replacing: replacing)
        let fields: [String: JSONValue] = ["key": .string(id), "name": .string(name), "kind": "object", "frames": .int(Int64(t.goodFrames)),
                                           "warnings": .array((t.warnings + closeness).map(JSONValue.string))]
        if replacing == nil {
            try saveModes(modes, extra: [.material(material.record(keyId: id)), .removeEnrolment(target: e.target, replacing: e.replacing)],
                          event: ("focus.key_enrolled", fields))
        } else {
            try store.step { tx in try tx.saveFocus([.material(material.record(keyId: id)), .removeEnrolment(target: e.target, replacing: e.replacing)],
                                events: [events.record("focus.key_replaced", fields)]) }
            events.published()
        }
        state.withLockedValue { $0.materials[id] = material }
        return describe(modes.key(id)!, state.withLockedValue { $0 })
    }

    func verdictJSON(_ v: FrameVerdict, key: String) -> JSONValue {
        ["score": .double(v.score), "fit": .double(v.fit), "rms": .double(v.rms), "coverage": .double(v.coverage), "excess": .double(v.excess),
         "deficit": .double(v.deficit), "quality": .double(v.quality), "guidance": v.guidance.map(JSONValue.string) ?? .null, "passed": .bool(v.passed), "key": .string(key)]
    }

    func noCandidateVerdict(_ frame: PointFrame) -> JSONValue {
        let q = FrameCheck.assess(frame)
        return ["score": .double(0), "fit": .double(0), "rms": .double(0), "coverage": .double(0), "excess": .double(0), "deficit": .double(0),
                "quality": .double(q.quality),
                "guidance": .string(q.guidance ?? "no object key can do this now"), "passed": false, "key": .null]
    }
}

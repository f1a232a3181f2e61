import Foundation
import Sodium
import TandemNet
import TandemProtocol
import TandemStore
import TandemNodeCore

/// The control-socket methods of challenges, solo focus sessions, the ledger and stats
/// (Protocol/control.md).
extension ChallengeService {
    nonisolated static func usage(_ text: String) -> NodeError { .invalidArgument(text) }

    func refusing<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let r as Challenge.Refusal {
            throw NodeError.refused(r.description)
        } catch is NotFound {
            throw NodeError.nothingToActOn("no such challenge")
        }
    }

    /// A challenge named by its id or a unique prefix of at least 4 hex digits.
    func resolve(_ params: JSONValue, _ r: StoreReading) throws -> Challenge {
        guard let text = params["id"]?.stringValue?.lowercased(), !text.isEmpty else { throw Self.usage("missing parameter 'id'") }
        guard text.count >= 4, text.count <= 32, text.allSatisfy({ $0.isHexDigit }) else {
            throw Self.usage("'\(text)' is not a challenge id (hex digits, at least 4; see tandem challenge list)")
        }
        let found = try r.challenges(idPrefix: text)
        guard let first = found.first else {
            throw NodeError.nothingToActOn("no challenge \(text) (see tandem challenge list)")
        }
        guard found.count == 1 else { throw Self.usage("'\(text)' matches several challenges; give more digits") }
        return first
    }

    func describe(_ c: Challenge, _ r: StoreReading) -> JSONValue {
        let off = offset(c)
        let nowTb = wallClockMicros() + off
        var o: [String: JSONValue] = [
            "id": .string(c.idHex),
            "short": .string(String(c.idHex.prefix(8))),
            "phase": .string(c.phase.rawValue),
            "solo": .bool(c.solo),
            "role": .string(c.isInviter ? "inviter" : "invitee"),
            "inviter": idText(c.inviter),
            "message": .string(c.message),
            "duration_ms": .int(c.durationMs),
            "grace_ms": .int(c.graceMs),
            "offset_us": .int(off),
            "committed": .bool(c.committed),
        ]
        if let start = c.startAtUs, let end = c.endAtUs {
            o["start_at"] = isoLocal(start - off)
            o["end_at"] = isoLocal(end - off)
            let elapsed = max(0, min(c.durationMs, (nowTb - start) / 1000))
            o["elapsed_ms"] = .int(c.phase == .ended ? c.durationMs : (c.phase == .running ? elapsed : 0))
            o["remaining_ms"] = .int(c.phase == .ended ? 0 : max(0, min(c.durationMs, (end - nowTb) / 1000)))
            if c.phase == .scheduled { o["starts_in_ms"] = .int(max(0, (start - nowTb) / 1000)) }
        } else if c.requestedStartUs > 0 {
            o["start_at"] = isoLocal(c.requestedStartUs - off)
        }
        if [.invited, .accepted].contains(c.phase) { o["expires_at"] = isoLocal(c.expiresAtUs - off) }
        o["result"] = c.participant(me)?.result.map { .string($0.rawValue) } ?? .null
        o["participants"] = .array(c.participants.map { p in
            .object([
                "id": idText(p.key),
                "name": .string(name(p.key, r)),
                "me": .bool(p.key == me),
                "answer": .string(p.answer.rawValue),
                "in_roster": .bool(c.roster.contains(p.key)),
                "result": p.result.map { .string($0.rawValue) } ?? .null,
                "out_of_contact": .bool(p.outOfContact),
                "online": .bool(p.key == me || peers.link(to: p.key) != nil),
                "quit_elapsed_ms": p.quitElapsedMs.map { .int($0) } ?? .null,
                "reason": p.reason.map { .string($0) } ?? .null,
            ])
        })
        return .object(o)
    }

    func durationParam(_ params: JSONValue) throws -> Int64 {
        guard let ms = params["duration_ms"]?.intValue else { throw Self.usage("missing parameter 'duration_ms'") }
        guard Challenge.durationRange.contains(ms) else { throw Self.usage("a duration is from 1 second to 24 hours") }
        return ms
    }

    nonisolated public func registerControlMethods(on router: ControlRouter) {
        router.registerOnCore(in: store, publishing: events, "challenge.invite", { [self] params, step in
            let ids = params["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
            guard !ids.isEmpty else { throw Self.usage("name at least one friend to invite") }
            var invitees: [[UInt8]] = []
            for text in ids {
                let key = try ContactNames.resolve(text, among: [.friend], in: step, anyID: true)
                guard key != me else { throw Self.usage("you cannot invite yourself") }
                guard outbox.isFriend(key, in: step) else {
                    throw NodeError.refused("\(NodeID(publicKey: key).display) is not your friend (tandem friend request ID first)")
                }
                if !invitees.contains(key) { invitees.append(key) }
            }
            let duration = try durationParam(params)
            let now = wallClockMicros()
            var start: Int64 = 0
            if let inMs = params["start_in_ms"]?.intValue {
                guard inMs >= 0 else { throw Self.usage("--start-in cannot be negative") }
                // Saturating: a control client's number is checked by the machine (at most 7 days ahead), never trapped on.
                start = now.addingSaturated(max(inMs.multipliedSaturated(1000), Challenge.startLeadUs))
            } else if let atMs = params["start_at_ms"]?.intValue {
                start = atMs.multipliedSaturated(1000)
                guard start > now else { throw Self.usage("the start time is in the past") }
            }
            if start == 0, invitees.count > 1 { start = now + 60_000_000 } // a group starts in a minute by default
            let message = params["message"]?.stringValue ?? ""
            let grace = params["grace_ms"]?.intValue ?? Challenge.defaultGraceMs
            // Partners are heard from every 2 s (clock probes): a grace below 10 s would flap.
            guard (10_000...3_600_000).contains(grace) else { throw Self.usage("the grace period is from 10 s to 1 h") }
            guard message.utf8.count <= Challenge.maximumTextBytes else {
                throw Self.usage("the message is longer than \(Challenge.maximumTextBytes) bytes")
            }
            var hints: [[UInt8]: String] = [:]
            for k in invitees {
                if let a = health.read("read a peer's addresses", or: [], { try step.addresses(k) }).first { hints[k] = a.host.contains(":") ? "[\(a.host)]:\(a.port)" : "\(a.host):\(a.port)" }
            }
            let lockMode = try params.optionalString("mode")
            if let m = lockMode { try focus.checkLockable(mode: m) }
            let (created, actions) = try refusing {
                try Challenge.invite(id: Sodium.randomBytes(16), me: me, invitees: invitees, durationMs: duration, startAtUs: start,
                                     nowUs: now, graceMs: grace, message: message, addressHints: hints)
            }
            var c = created
            try persist(&c, actions, step)
            if let m = lockMode { try focus.attach(challenge: c.idHex, mode: m, step) }
            after(c, actions, step)
            for k in invitees { clock.probe(k, count: 8) }
            return c
        }, answer: { [self] c in describe(c, store) })
        router.registerOnCore("challenge.list") { [self] params in
            let all = params["all"]?.boolValue ?? false
            let list = try store.challenges(limit: all ? 1000 : 200).filter { all || $0.isActive || $0.phase == .ended }
            return .object(["challenges": .array(list.prefix(all ? 1000 : 50).map { describe($0, store) })])
        }
        router.registerOnCore("challenge.show") { [self] params in describe(try resolve(params, store), store) }
        router.registerOnCore(in: store, publishing: events, "challenge.accept", { [self] params, step in
            let c = try resolve(params, step)
            if let m = try params.optionalString("mode") {
                try focus.checkLockable(mode: m)
                guard [.invited, .accepted].contains(c.phase) else { throw NodeError.refused("challenge \(c.idHex.prefix(8)) is \(c.phase.rawValue): it can no longer be accepted") }
                try focus.attach(challenge: c.idHex, mode: m, step)
            }
            clock.probe(c.inviter, count: 8)
            return try refusing { try mutate(c.id, step) { try $0.accept() } }
        }, answer: { [self] c in describe(c, store) })
        router.registerOnCore(in: store, publishing: events, "challenge.decline", { [self] params, step in
            let c = try resolve(params, step)
            return try refusing { try mutate(c.id, step) { try $0.decline() } }
        }, answer: { [self] c in describe(c, store) })
        router.registerOnCore(in: store, publishing: events, "challenge.cancel", { [self] params, step in
            let c = try resolve(params, step)
            let reason = params["reason"]?.stringValue ?? ""
            return try refusing { try mutate(c.id, step) { try $0.cancel(reason: reason) } }
        }, answer: { [self] c in describe(c, store) })
        router.registerOnCore(in: store, publishing: events, "challenge.quit", { [self] params, step in
            let c = try resolve(params, step)
            return try quitCommand(c, reason: params["reason"]?.stringValue ?? "", step)
        }, answer: { [self] c in describe(c, store) })
        router.registerOnCore(in: store, publishing: events, "focus.start", { [self] params, step in
            let duration = try durationParam(params)
            if try step.challenges(phases: [.scheduled, .running]).contains(where: \.solo) {
                throw NodeError.refused("a focus session is already running (tandem focus status)")
            }
            let lockMode = try params.optionalString("mode")
            if let m = lockMode { try focus.checkLockable(mode: m) }
            var c = try refusing { try Challenge.solo(id: Sodium.randomBytes(16), me: me, durationMs: duration, nowUs: wallClockMicros()) }
            try persist(&c, [], step)
            if let m = lockMode { try focus.attach(challenge: c.idHex, mode: m, step) }
            after(c, [], step)
            return try step.challenge(c.id) ?? c
        }, answer: { [self] c in describe(c, store) })
        router.registerOnCore("focus.status") { [self] _ in
            let c = try store.challenges(phases: [.scheduled, .running]).first(where: \.solo)
            return .object(["session": c.map { describe($0, store) } ?? .null])
        }
        router.registerOnCore(in: store, publishing: events, "focus.quit", { [self] params, step in
            guard let c = try step.challenges(phases: [.scheduled, .running]).first(where: \.solo) else {
                throw NodeError.nothingToActOn("no focus session is running")
            }
            return try quitCommand(c, reason: params["reason"]?.stringValue ?? "", step)
        }, answer: { [self] c in describe(c, store) })
        router.registerOnCore("ledger.list") { [self] _ in
            .object(["entries": .array(try store.ledger().map { describeEntry($0.entry, committedAtMs: $0.committedAtMs) })])
        }
        router.registerOnCore("ledger.verify") { [self] _ in
            let entries = try store.ledger().map(\.entry)
            if let broken = Ledger.verify(entries) {
                return .object(["ok": false, "entries": .int(Int64(entries.count)),
                                "break": .object(["seq": .int(broken.seq), "reason": .string(broken.reason)])])
            }
            return .object(["ok": true, "entries": .int(Int64(entries.count)),
                            "head": entries.last.map { .string(hexString($0.hash)) } ?? .null])
        }
        router.registerOnCore("stats") { [self] _ in try stats() }
    }

    /// `challenge quit` / `focus quit`: refused while the challenge holds a mode's lock (only its
    /// main key ends that early, `tandem unlock`, which quits with reason "unlocked").
    func quitCommand(_ c: Challenge, reason: String, _ step: StoreStep) throws -> Challenge {
        if focus.holdsLock(challenge: c.idHex), let m = focus.mode(ofChallenge: c.idHex) {
            throw NodeError.refused("mode \(m) is locked for this challenge: present its main key (tandem unlock …) to quit early")
        }
        // A quit costs health (NodeFocus charges it): at 0 it is refused here, not charged after.
        if c.phase == .running || c.phase == .scheduled,
           let refusal = focus.earlyQuitRefusal(nowMs: Int64(clamping: wallClockMilliseconds()), step) {
            throw NodeError.refused(refusal)
        }
        return try quit(c, reason: reason, step)
    }

    func quit(_ c: Challenge, reason: String, _ step: StoreStep) throws -> Challenge {
        let quit = try refusing {
            try mutate(c.id, loaded: c, step) { c in try c.quit(elapsedMs: elapsedMs(c), reason: reason) }
        }
        // Alone, there is nobody to keep the countdown for: a solo session ends at once.
        guard quit.solo else { return quit }
        endNow(quit.id, step)
        return try step.challenge(quit.id) ?? quit
    }

    func describeEntry(_ e: LedgerEntry, committedAtMs: Int64) -> JSONValue {
        var o: [String: JSONValue] = [
            "seq": .int(e.seq),
            "hash": .string(hexString(e.hash)),
            "previous_hash": .string(hexString(e.previousHash)),
            "committed_at": JSONValue.iso(committedAtMs),
            "signers": .array(e.signatures.map { idText($0.key) }),
        ]
        if let r = try? Tandem_V1_OutcomeRecord(serializedBytes: e.record) {  // a stored record that does not parse is shown without it
            o["challenge_id"] = .string(hexString(r.challengeID))
            o["duration_ms"] = .int(Int64(clamping: r.durationMs))
            o["inviter"] = idText(Array(r.inviter))
            o["solo"] = .bool(r.outcomes.count == 1)
            o["outcomes"] = .array(r.outcomes.map { oc in
                .object([
                    "id": idText(Array(oc.publicKey)),
                    "name": .string(name(Array(oc.publicKey), store)),
                    "result": .string(Self.resultName(oc.result)),
                    "elapsed_ms": oc.result == .quit ? .int(Int64(clamping: oc.elapsedMs)) : .null,
                    "reason": oc.result == .quit ? .string(oc.reason) : .null,
                ])
            })
            // Cheers friends sent on results of this entry (messages, `tandem cheer`), and ours.
            let cheers = health.read("read the cheers", or: []) { try store.cheers(challengeId: Array(r.challengeID)) }
            o["cheers"] = .array(cheers.map { c in
                .object(["from": idText(Array(c.author)), "from_name": .string(name(Array(c.author), store)),
                         "subject": idText(Array(c.subject)), "emoji": .string(c.emoji), "text": .string(c.text)])
            })
        }
        return .object(o)
    }

    nonisolated static func resultName(_ r: Tandem_V1_ParticipantResult) -> String {
        switch r {
        case .completed: return "completed"
        case .quit: return "quit"
        case .outOfContact: return "out_of_contact"
        case .unspecified, .UNRECOGNIZED: return "unknown"
        }
    }

    /// Completed and failed challenges, focused minutes and daily streaks, from the ledger.
    func stats() throws -> JSONValue {
        var completed = 0, failed = 0, soloCompleted = 0, soloFailed = 0
        var focusedMs: Int64 = 0
        var days = Set<Int>()
        let calendar = Calendar.current
        /// Our newest results, for the lines beside which cheers are shown.
        var recent: [(seq: Int64, committedAt: Int64, record: Tandem_V1_OutcomeRecord, mine: Tandem_V1_ParticipantOutcome)] = []
        for (entry, committedAt) in try store.ledger() {
            guard let r = try? Tandem_V1_OutcomeRecord(serializedBytes: entry.record),  // a record that does not parse is skipped
                  let mine = r.outcomes.first(where: { Array($0.publicKey) == me }) else { continue }
            recent.append((entry.seq, committedAt, r, mine))
            if recent.count > Self.statsRecentEntries { recent.removeFirst() }
            let solo = r.outcomes.count == 1
            switch mine.result {
            case .completed:
                if solo { soloCompleted += 1 } else { completed += 1 }
                focusedMs += Int64(clamping: r.durationMs)
                let date = Date(timeIntervalSince1970: Double(committedAt) / 1000)
                let comps = calendar.dateComponents([.year, .month, .day], from: date)
                if let d = calendar.date(from: comps) { days.insert(Int(d.timeIntervalSince1970 / 86_400 + 0.5)) }
            case .quit:
                if solo { soloFailed += 1 } else { failed += 1 }
                focusedMs += Int64(clamping: mine.elapsedMs)
            case .outOfContact, .unspecified, .UNRECOGNIZED:
                if solo { soloFailed += 1 } else { failed += 1 }
            }
        }
        let sorted = days.sorted()
        var longest = 0, run = 0
        var previous: Int?
        for d in sorted {
            run = (previous.map { d == $0 + 1 } ?? false) ? run + 1 : 1
            longest = max(longest, run)
            previous = d
        }
        let todayComps = calendar.dateComponents([.year, .month, .day], from: Date())
        let today = calendar.date(from: todayComps).map { Int($0.timeIntervalSince1970 / 86_400 + 0.5) } ?? 0
        var current = 0
        if let last = sorted.last, last >= today - 1 {
            current = 1
            var d = last
            while days.contains(d - 1) { current += 1; d -= 1 }
        }
        return .object([
            "challenges_completed": .int(Int64(completed)),
            "challenges_failed": .int(Int64(failed)),
            "solo_completed": .int(Int64(soloCompleted)),
            "solo_failed": .int(Int64(soloFailed)),
            "focused_minutes": .int(focusedMs / 60_000),
            "current_streak_days": .int(Int64(current)),
            "longest_streak_days": .int(Int64(longest)),
            "cheers_received": .int(Int64(try store.cheersCount(subject: me))),
            "recent": .array(recent.reversed().map { e in
                // Cheers friends sent on our result in this entry (`tandem cheer`).
                let cheers = health.read("read the cheers", or: []) { try store.cheers(challengeId: Array(e.record.challengeID)) }
                    .filter { Array($0.subject) == me }
                return .object([
                    "seq": .int(e.seq),
                    "committed_at": JSONValue.iso(e.committedAt),
                    "duration_ms": .int(Int64(clamping: e.record.durationMs)),
                    "solo": .bool(e.record.outcomes.count == 1),
                    "result": .string(Self.resultName(e.mine.result)),
                    "cheers": .array(cheers.map { c in
                        .object(["from": idText(Array(c.author)), "from_name": .string(name(Array(c.author), store)),
                                 "emoji": .string(c.emoji), "text": .string(c.text)])
                    }),
                ])
            }),
        ])
    }

    /// Entries `stats` lists with their cheers, newest first.
    nonisolated static let statsRecentEntries = 5
}

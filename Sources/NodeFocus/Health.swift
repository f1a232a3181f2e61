import Foundation
import ServiceLifecycle
import TandemProtocol
import TandemStore
import TandemNodeCore

// The health pool on the node (Protocol/bedtime.md "Health"): the pure rules in
// `TandemProtocol.HealthPool`, the bypasses in the `healthBypass` table (migration v9-health).
// Bypasses: a temporary unlock (FocusControl's lockStep), the main key on a challenge's lock and
// any quit of a challenge or solo session (the `challenge.quit` event), an emergency exit from bedtime.
extension FocusService {
    /// The time zone whose midnight resets health: the node's.
    nonisolated var healthTimeZone: TimeZone { TimeZone.current }

    /// The pool as stored, for `nowMs` (today's bypasses, and any recorded later: a clock set back).
    @NodeCore func healthPool(nowMs: Int64, _ r: StoreReading? = nil) -> HealthPool {
        let reader: StoreReading = r ?? store
        let tz = healthTimeZone
        let probe = HealthPool(timeZone: tz, cooldownMinutes: HealthPool.defaultCooldownMinutes, bypasses: [])
        // A read that fails counts as a spent pool: a damaged table is never a way around dead.
        let since = probe.startOfDayMs(nowMs)
        var rows: [HealthBypassRecord]
        do {
            rows = try reader.healthBypasses(sinceMs: since)
        } catch {
            health.failed("read the health pool", error)
            rows = [HealthBypassRecord(atMs: nowMs, kind: "unreadable", cost: 100, detail: nil)]
        }
        let cooldown = health.read("read the health cooldown", or: nil) { try reader.healthCooldownMinutes() }
            .map { Int($0) }.flatMap { HealthPool.cooldownChoices.contains($0) ? $0 : nil } ?? HealthPool.defaultCooldownMinutes
        return HealthPool(timeZone: tz, cooldownMinutes: cooldown, bypasses: rows.map {
            HealthPool.Bypass(atMs: $0.atMs, kind: HealthPool.Kind(rawValue: $0.kind) ?? .quitEarly, cost: Int(clamping: $0.cost))
        })
    }

    /// Local `HH:MM` of an instant on the node's clock.
    nonisolated func clockText(_ ms: Int64) -> String {
        let d = Date(timeIntervalSince1970: Double(ms) / 1000)
        let tz = healthTimeZone
        let local = Int64((d.timeIntervalSince1970 + Double(tz.secondsFromGMT(for: d))) / 60)
        let m = Int(((local % 1440) + 1440) % 1440)
        return String(format: "%02d:%02d", m / 60, m % 60)
    }

    /// Throws the refusal when a bypass of `kind` may not happen now (dead; cooldown for a temporary unlock).
    @NodeCore func healthGate(_ kind: HealthPool.Kind, nowMs: Int64) throws {
        let pool = healthPool(nowMs: nowMs)
        guard let r = pool.check(kind, nowMs: nowMs) else { return }
        let message: String
        let code: String
        switch r {
        case .dead(let until):
            code = "health_dead"
            message = "health is 0 (dead): no bypass of any kind until midnight (\(clockText(until)))"
        case .cooldown(let until):
            code = "health_cooldown"
            message = "cooldown after a bypass: the next temporary unlock is possible at \(clockText(until)) (\((until - nowMs + 59_999) / 60_000) min)"
        }
        _ = events.emit("health.refused", ["kind": .string(kind.rawValue), "reason": .string(code), "message": .string(message),
                                           "health": .int(Int64(pool.health(nowMs)))])
        throw ControlError(code: code, message: message, exitCode: 1)
    }

    /// Records a bypass that happened (after its own step committed), with its event.
    @NodeCore func recordBypass(_ kind: HealthPool.Kind, nowMs: Int64, detail: String?) {
        var pool = healthPool(nowMs: nowMs)
        let before = pool.health(nowMs)
        pool.bypasses.append(HealthPool.Bypass(atMs: nowMs, kind: kind, cost: kind.cost))
        let after = pool.health(nowMs)
        let firstToday = pool.today(nowMs).count == 1
        let recent = pool.today(nowMs).filter { $0.atMs >= nowMs - 15 * 60_000 && $0.atMs <= nowMs }.count
        health.attempt("record a bypass") {
            try store.step { tx in
                try tx.addHealthBypass(HealthBypassRecord(atMs: nowMs, kind: kind.rawValue, cost: Int64(kind.cost), detail: detail.map { String($0.prefix(200)) }),
                                       pruneBeforeMs: nowMs - 3 * 86_400_000)
                _ = events.emit("health.bypass", ["kind": .string(kind.rawValue), "cost": .int(Int64(kind.cost)),
                                                  "health_before": .int(Int64(before)), "health": .int(Int64(after)),
                                                  "state": .string(HealthPool.State(health: after).rawValue),
                                                  "first_today": .bool(firstToday), "within_15_min": .int(Int64(recent)),
                                                  "cooldown_until": JSONValue.iso(pool.cooldownEndsMs(nowMs))], in: tx)
            }
        }
        events.published()
        publishSharedHealth(nowMs: nowMs)
    }

    /// A child task of `run`: every `challenge.quit` (this node quit a challenge or a solo session
    /// early) costs health. Ends with the node.
    func chargeQuits() async {
        let since = health.read("read the event log", or: nil) { try events.lastSeq() }
        await cancelWhenGracefulShutdown { [self] in
            for await e in events.subscribe(since: since) where e.type == "challenge.quit" {
                let now = Int64(clamping: wallClockMilliseconds())
                await NodeCore.run { self.recordBypass(.quitEarly, nowMs: now, detail: e.fields["id"]?.stringValue) }
            }
        }
    }

    /// `tandem health`.
    @NodeCore func healthJSON(nowMs: Int64) -> JSONValue {
        let pool = healthPool(nowMs: nowMs)
        let h = pool.health(nowMs)
        let cooldownLeft = pool.cooldownEndsMs(nowMs).map { max(0, ($0 - nowMs + 999) / 1000) } ?? 0
        return [
            "health": .int(Int64(h)),
            "state": .string(HealthPool.State(health: h).rawValue),
            "cooldown_seconds_left": .int(cooldownLeft),
            "cooldown_minutes": .int(Int64(pool.cooldownMinutes)),
            "resets_at": JSONValue.iso(pool.nextMidnightMs(nowMs)),
            "bypasses": .array(pool.today(nowMs).suffix(10).map {
                ["at": JSONValue.iso($0.atMs), "at_ms": .int($0.atMs), "kind": .string($0.kind.rawValue), "cost": .int(Int64($0.cost))]
            }),
        ]
    }

    nonisolated func registerHealthMethods(on router: ControlRouter) {
        router.registerOnCore("health.show") { [self] _ in healthJSON(nowMs: Int64(clamping: wallClockMilliseconds())) }
        router.registerOnCore("health.set") { [self] params in
            guard let m = try params.optionalInt("cooldown_minutes") else { throw NodeError.invalidArgument("give cooldown_minutes") }
            guard HealthPool.cooldownChoices.contains(Int(clamping: m)) else {
                throw NodeError.invalidArgument("the cooldown is one of 10, 20, 30, 45 or 60 minutes")
            }
            try store.step { tx in
                try tx.setHealthCooldown(minutes: m)
                _ = events.emit("health.cooldown_set", ["minutes": .int(m)], in: tx)
            }
            events.published()
            return healthJSON(nowMs: Int64(clamping: wallClockMilliseconds()))
        }
    }
}

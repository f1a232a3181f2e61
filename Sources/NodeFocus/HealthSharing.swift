import Foundation
import TandemProtocol
import TandemStore
import TandemNodeCore

// Health shared with friends (Protocol/bedtime.md "Health in presence"): off by default; while on,
// our PRESENCE carries today's health (friends derive the state) and `tandem friend list` on their
// side shows it. The switch is the `sharing` table (migration v9-health-share).
extension FocusService {
    /// Tells presence what to say of our health now: nothing while not shared, else today's health
    /// and the next midnight (when it is 100 again). Called at start, after every bypass and when
    /// the switch changes.
    @NodeCore func publishSharedHealth(nowMs: Int64, _ r: StoreReading? = nil) {
        guard let presence else { return }
        let reader: StoreReading = r ?? store
        let on = health.read("read the health sharing switch", or: false) { try reader.sharesHealth() }
        guard on else { return presence.share(health: nil) }
        let pool = healthPool(nowMs: nowMs, reader)
        presence.share(health: SharedHealth(health: pool.health(nowMs), resetsAtMs: pool.nextMidnightMs(nowMs)))
    }

    @NodeCore func sharingJSON(nowMs: Int64) -> JSONValue {
        let on = health.read("read the health sharing switch", or: false) { try store.sharesHealth() }
        return ["health": .bool(on), "shared_health": presence?.sharedHealth(nowMs: nowMs).map { .int(Int64($0)) } ?? .null]
    }

    nonisolated func registerSharingMethods(on router: ControlRouter) {
        router.registerOnCore("share.show") { [self] _ in sharingJSON(nowMs: Int64(clamping: wallClockMilliseconds())) }
        router.registerOnCore("share.set") { [self] params in
            guard let what = params["what"]?.stringValue else { throw NodeError.invalidArgument("missing parameter 'what'") }
            guard what == "health" else { throw NodeError.invalidArgument("only health can be shared (tandem share health on|off)") }
            guard let on = params["on"]?.boolValue else { throw NodeError.invalidArgument("missing parameter 'on' (true or false)") }
            try store.step { tx in
                try tx.setSharesHealth(on)
                _ = events.emit("share.changed", ["what": .string(what), "on": .bool(on)], in: tx)
            }
            events.published()
            let now = Int64(clamping: wallClockMilliseconds())
            publishSharedHealth(nowMs: now)
            return sharingJSON(nowMs: now)
        }
    }
}

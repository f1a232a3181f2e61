import Foundation
import XCTest
@testable import TandemProtocol

/// The health pool (Protocol/bedtime.md "Health"): arithmetic, states at their boundaries, midnight
/// across DST, the cooldown, dead, and — over random events and clock jumps, the clock set back
/// included — that nothing gets through at 0.
final class HealthPoolTests: XCTestCase {
    let oslo = TimeZone(identifier: "Europe/Oslo")!
    let iso = ISO8601DateFormatter()
    func ms(_ text: String) -> Int64 { Int64(iso.date(from: text)!.timeIntervalSince1970 * 1000) }
    let minute: Int64 = 60_000

    func testStatesAtTheirBoundaries() {
        let expected: [(Int, HealthPool.State)] = [(100, .healthy), (80, .healthy), (79, .concerned), (60, .concerned), (59, .tired),
                                                   (40, .tired), (39, .weak), (1, .weak), (0, .dead), (-5, .dead)]
        for (h, s) in expected { XCTAssertEqual(HealthPool.State(health: h), s, "\(h)") }
    }

    func testCostsCooldownAndDeath() {
        var pool = HealthPool(timeZone: oslo, cooldownMinutes: 20, bypasses: [])
        var now = ms("2026-12-01T08:00:00Z")
        XCTAssertEqual(pool.health(now), 100)
        XCTAssertNil(pool.spend(.temporaryUnlock, nowMs: now))
        XCTAssertEqual(pool.health(now), 95)
        // The cooldown refuses the next temporary unlock and says until when; a quit is not put off.
        XCTAssertEqual(pool.check(.temporaryUnlock, nowMs: now + 5 * minute), .cooldown(untilMs: now + 20 * minute))
        XCTAssertNil(pool.check(.quitEarly, nowMs: now + 5 * minute))
        XCTAssertNil(pool.check(.temporaryUnlock, nowMs: now + 20 * minute))
        XCTAssertNil(pool.spend(.emergency, nowMs: now + 21 * minute))
        XCTAssertEqual(pool.health(now + 21 * minute), 75)
        XCTAssertEqual(pool.state(now + 21 * minute), .concerned)
        // Down to 0: dead, every kind refused until local midnight (Oslo: 23:00Z in winter).
        now += 30 * minute
        while pool.health(now) > 0 { XCTAssertNil(pool.spend(.quitEarly, nowMs: now)); now += minute }
        XCTAssertEqual(pool.state(now), .dead)
        for k in HealthPool.Kind.allCases { XCTAssertEqual(pool.check(k, nowMs: now), .dead(untilMs: ms("2026-12-01T23:00:00Z"))) }
        // Midnight: back to 100.
        XCTAssertEqual(pool.health(ms("2026-12-01T23:00:00Z")), 100)
        XCTAssertEqual(pool.health(ms("2026-12-01T22:59:59Z")), 0)
    }

    func testMidnightAcrossDST() {
        let pool = HealthPool(timeZone: oslo, cooldownMinutes: 10, bypasses: [])
        // The day of spring forward is 23 h long, the day of fall back 25 h.
        XCTAssertEqual(pool.nextMidnightMs(ms("2026-03-29T12:00:00Z")) - pool.startOfDayMs(ms("2026-03-29T12:00:00Z")), 23 * 3_600_000)
        XCTAssertEqual(pool.nextMidnightMs(ms("2026-10-25T12:00:00Z")) - pool.startOfDayMs(ms("2026-10-25T12:00:00Z")), 25 * 3_600_000)
        var p = pool
        _ = p.spend(.emergency, nowMs: ms("2026-10-25T22:30:00Z"))  // 23:30 local, in the long day
        XCTAssertEqual(p.health(ms("2026-10-25T22:59:00Z")), 80)
        XCTAssertEqual(p.health(ms("2026-10-25T23:00:00Z")), 100)
    }

    func testClockSetBackBuysNothing() {
        var pool = HealthPool(timeZone: oslo, cooldownMinutes: 30, bypasses: [])
        let t = ms("2026-12-01T12:00:00Z")
        for i in 0..<20 { _ = pool.spend(.quitEarly, nowMs: t + Int64(i) * minute) }
        XCTAssertEqual(pool.health(t + 20 * minute), 0)
        // Back a day, back a week: the bypasses recorded "in the future" still count, and the
        // cooldown runs from the new now.
        let backs: [Int64] = [3_600_000, 86_400_000, 7 * 86_400_000]
        for back in backs {
            XCTAssertEqual(pool.health(t - back), 0, "\(back)")
            XCTAssertEqual(pool.check(.temporaryUnlock, nowMs: t - back), .dead(untilMs: pool.nextMidnightMs(t - back)))
        }
    }

    /// Random events and clock jumps (forward, back, across midnight and DST): whatever happens,
    /// a bypass is granted only with health above 0 before it, health never goes below 0, never
    /// rises unless the clock moved on to a later local day (setting it back never helps), and a
    /// granted temporary unlock never lies in a cooldown.
    func testPropertyNothingBypassesAtZero() {
        var rng = SplitMix64(seed: 0x35)
        var deadSeen = 0
        for run in 0..<300 {
            let cooldown = HealthPool.cooldownChoices.randomElement(using: &rng)!
            var pool = HealthPool(timeZone: [oslo, TimeZone(identifier: "America/Santiago")!, TimeZone(identifier: "UTC")!].randomElement(using: &rng)!,
                                  cooldownMinutes: cooldown, bypasses: [])
            var now = ms("2026-03-28T20:00:00Z") + Int64.random(in: 0...(220 * 86_400_000), using: &rng)
            var lastHealth = pool.health(now)
            var lastDayStart = pool.startOfDayMs(now)
            for _ in 0..<200 {
                switch Int.random(in: 0..<10, using: &rng) {
                case 0: now -= Int64.random(in: 1...(3 * 86_400_000), using: &rng)       // the clock set back
                case 1: now += Int64.random(in: 1...(2 * 86_400_000), using: &rng)       // a jump ahead
                case 2, 3: now += Int64.random(in: 1...(90 * minute), using: &rng)
                default: now += Int64.random(in: 0...(3 * minute), using: &rng)
                }
                let dayStart = pool.startOfDayMs(now)
                let health = pool.health(now)
                XCTAssertGreaterThanOrEqual(health, 0)
                // Health only rises when the clock moved on to a later local day.
                if health > lastHealth { XCTAssertGreaterThan(dayStart, lastDayStart, "run \(run): health rose without a new day") }
                lastDayStart = dayStart
                let kind = HealthPool.Kind.allCases.randomElement(using: &rng)!
                let cooling = pool.cooldownEndsMs(now) != nil
                let granted = pool.spend(kind, nowMs: now) == nil
                if granted {
                    XCTAssertGreaterThan(health, 0, "run \(run): a bypass at 0")
                    if kind == .temporaryUnlock { XCTAssertFalse(cooling, "run \(run): a temporary unlock in the cooldown") }
                }
                if health == 0 { XCTAssertFalse(granted); deadSeen += 1 }
                lastHealth = pool.health(now)
            }
        }
        XCTAssertGreaterThan(deadSeen, 100, "the walks reach dead")
    }
}

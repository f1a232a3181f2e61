import Foundation
import XCTest
@testable import TandemProtocol

/// Bedtime's rules (Protocol/bedtime.md): nights, their opening (the later of sunrise and the wake
/// time), the polar rule, DST-safe windows, and the lock machine's bedtime hold. Time is injected.
final class BedtimeRuleTests: XCTestCase {
    let oslo = PlaceTable.city("Oslo")!
    let iso = ISO8601DateFormatter()

    func at(_ text: String) -> Date { iso.date(from: text)! }
    func ms(_ text: String) -> Int64 { Int64(at(text).timeIntervalSince1970 * 1000) }

    func rule(_ place: SunPlace? = nil, bed: String = "23:00", wake: String = "07:00", zone: String = "Europe/Oslo") -> BedtimeRule {
        BedtimeRule(mode: "night", bed: TimeOfDay(bed)!, wake: TimeOfDay(wake)!, place: place, timeZoneID: zone)
    }

    func testNightsAndOpeningInOsloWinter() {
        let r = rule(oslo)
        // 2026-12-01 02:00 local (01:00Z) belongs to the night that began 2026-11-30 23:00 local.
        let now = at("2026-12-01T01:00:00Z")
        XCTAssertEqual(r.nightStart(atOrBefore: now), at("2026-11-30T22:00:00Z"))
        XCTAssertTrue(r.isNight(now))
        XCTAssertEqual(r.wakeTime(afterNightStart: r.nightStart(atOrBefore: now)), at("2026-12-01T06:00:00Z"))
        let o = r.opening(forNightStarting: r.nightStart(atOrBefore: now))
        // Oslo's sunrise on 1 December is near 08:50 local: later than the wake time.
        XCTAssertEqual(o.because, .sunrise)
        XCTAssertGreaterThan(o.at, at("2026-12-01T07:40:00Z"))
        XCTAssertLessThan(o.at, at("2026-12-01T08:00:00Z"))
        let text = r.explain(o, now: at("2026-12-01T04:00:00Z"))
        XCTAssertTrue(text.hasPrefix("civil sunrise in Oslo today is 08:"), text)
        XCTAssertFalse(r.isNight(at("2026-12-01T12:00:00Z")))
        XCTAssertEqual(r.nextNightStart(after: at("2026-12-01T12:00:00Z")), at("2026-12-01T22:00:00Z"))
    }

    func testSummerWakeTimeIsLater() {
        let o = rule(oslo).opening(forNightStarting: at("2026-06-20T21:00:00Z"))
        XCTAssertEqual(o.because, .wake)
        XCTAssertEqual(o.at, at("2026-06-21T05:00:00Z"))
        XCTAssertNotNil(o.sunrise)
    }

    func testPolarRules() {
        let tromso = SunPlace(name: "Tromsø", country: "NO", latitude: 69.6492, longitude: 18.9553, timeZoneID: "Europe/Oslo")
        let r = rule(tromso)
        // Polar night: no sunrise; solar noon (near 11:45 local) stands in for it.
        let winter = r.opening(forNightStarting: at("2026-12-20T22:00:00Z"))
        XCTAssertEqual(winter.because, .polarNightNoon)
        XCTAssertEqual(winter.polar, .night)
        XCTAssertGreaterThan(winter.at, at("2026-12-21T10:30:00Z"))
        XCTAssertLessThan(winter.at, at("2026-12-21T11:00:00Z"))
        XCTAssertTrue(r.explain(winter, now: at("2026-12-21T06:00:00Z")).hasPrefix("polar night in Tromsø today"))
        // Midnight sun: the wake time alone.
        let summer = r.opening(forNightStarting: at("2026-06-20T21:00:00Z"))
        XCTAssertEqual(summer.because, .wake)
        XCTAssertEqual(summer.polar, .day)
        XCTAssertTrue(r.explain(summer, now: at("2026-06-21T02:00:00Z")).hasPrefix("midnight sun in Tromsø today"))
    }

    func testNoPlaceMeansSevenOClock() {
        let r = rule(nil, wake: "06:00")
        let o = r.opening(forNightStarting: at("2026-12-01T22:00:00Z"))
        XCTAssertEqual(o.because, .fixedSunrise)
        XCTAssertEqual(o.at, at("2026-12-02T06:00:00Z"))
    }

    func testWindowsAcrossDST() {
        // Spring forward in Oslo (2026-03-29 02:00 → 03:00): the night of the 28th is an hour shorter.
        let r = rule(nil, bed: "23:00", wake: "07:00")
        let spring = r.nightStart(atOrBefore: at("2026-03-29T03:00:00Z"))
        XCTAssertEqual(spring, at("2026-03-28T22:00:00Z"))
        XCTAssertEqual(r.wakeTime(afterNightStart: spring), at("2026-03-29T05:00:00Z"))
        // Fall back (2026-10-25 03:00 → 02:00): an hour longer, still 23:00 to 07:00 on the wall.
        let fall = r.nightStart(atOrBefore: at("2026-10-25T03:00:00Z"))
        XCTAssertEqual(fall, at("2026-10-24T21:00:00Z"))
        XCTAssertEqual(r.wakeTime(afterNightStart: fall), at("2026-10-25T06:00:00Z"))
        // A bed time inside the skipped hour (02:30) starts at 03:30 that night.
        let odd = rule(nil, bed: "02:30", wake: "09:00")
        XCTAssertEqual(odd.nightStart(atOrBefore: at("2026-03-29T04:00:00Z")), at("2026-03-29T01:30:00Z"))
        // Every hour of a year: the night start is at or before now, and the next one after it.
        var t = at("2026-01-01T00:00:00Z")
        while t < at("2027-01-01T00:00:00Z") {
            let s = r.nightStart(atOrBefore: t)
            XCTAssertLessThanOrEqual(s, t)
            XCTAssertLessThan(t.timeIntervalSince(s), 26 * 3600)
            XCTAssertGreaterThan(r.nextNightStart(after: t), t)
            t = t.addingTimeInterval(3600)
        }
    }

    func testBookHoldsReleasesAndArms() {
        let r = rule(oslo)
        // Set in the afternoon: the night already past is not owed; the coming one is.
        let book = BedtimeBook.set(r, nowMs: ms("2026-12-01T14:00:00Z"))
        XCTAssertNil(book.holdingNight(nowMs: ms("2026-12-01T14:00:00Z")))
        XCTAssertNil(book.holdingNight(nowMs: ms("2026-12-01T21:59:59Z")))
        XCTAssertEqual(book.holdingNight(nowMs: ms("2026-12-01T22:00:00Z")), at("2026-12-01T22:00:00Z"))
        // Not released: still holding the next afternoon (no timer ends it), and a node off all
        // night finds it holding at its start.
        XCTAssertNotNil(book.holdingNight(nowMs: ms("2026-12-02T15:00:00Z")))
        // Before the opening: refused, with the time.
        XCTAssertNotNil(book.tooEarly(nowMs: ms("2026-12-02T05:00:00Z")))
        XCTAssertNil(book.tooEarly(nowMs: ms("2026-12-02T09:00:00Z")))
        var released = book
        released.releasedAtMs = ms("2026-12-02T09:00:00Z")
        XCTAssertNil(released.holdingNight(nowMs: ms("2026-12-02T15:00:00Z")))
        XCTAssertEqual(released.holdingNight(nowMs: ms("2026-12-02T22:00:00Z")), at("2026-12-02T22:00:00Z"))
        // Set inside the night: holds at once.
        let inside = BedtimeBook.set(r, nowMs: ms("2026-12-01T23:30:00Z"))
        XCTAssertEqual(inside.holdingNight(nowMs: ms("2026-12-01T23:30:00Z")), at("2026-12-01T22:00:00Z"))
    }

    func testLockMachineBedtimeHold() throws {
        let modes = try FocusModes(keys: [FocusKey(id: "house", name: "House")],
                                   modes: [FocusMode(name: "night", mainKey: "house", blockedSites: ["news.example"]),
                                           FocusMode(name: "work", mainKey: "house")])
        let t0: Int64 = 1_800_000_000_000
        var lock = FocusLock()
        var step = lock.bedtimeStarted(mode: "night", modes: modes, nowMs: t0)
        XCTAssertNil(step.refusal)
        XCTAssertEqual(step.effects.first, .block(mode: "night"))
        XCTAssertEqual(lock.locked?.hold, .bedtime)
        XCTAssertNil(lock.nextDeadlineMs, "a bedtime lock has no timer")
        // Idempotent while it holds.
        XCTAssertEqual(lock.bedtimeStarted(mode: "night", modes: modes, nowMs: t0 + 1).effects, [])
        // The main key does not open it.
        step = lock.unlock(presentedKey: "house", modes: modes, nowMs: t0 + 2)
        XCTAssertEqual(step.refusal?.reason, .bedtimeHold)
        XCTAssertTrue(lock.isLocked)
        // Stored and read back.
        XCTAssertEqual(FocusLock(stored: lock.stored), lock)
        let (restored, _) = FocusLock.validated(loaded: FocusLock(stored: lock.stored), modes: modes, nowMs: t0 + 86_400_000)
        XCTAssertEqual(restored.locked?.hold, .bedtime)
        // Daylight opens it.
        step = lock.bedtimeEnded(reason: .daylight, nowMs: t0 + 3)
        XCTAssertNil(step.refusal)
        XCTAssertFalse(lock.isLocked)
        XCTAssertEqual(step.events, [.unlocked(mode: "night", reason: .daylight)])
        XCTAssertEqual(lock.bedtimeEnded(reason: .daylight, nowMs: t0 + 4).refusal?.reason, .notLocked)
        // A key lock of the same mode becomes a bedtime lock; a lock of another mode is left alone.
        _ = lock.lock(mode: "night", presentedKey: "house", modes: modes, nowMs: t0 + 5)
        XCTAssertNil(lock.bedtimeStarted(mode: "night", modes: modes, nowMs: t0 + 6).refusal)
        XCTAssertEqual(lock.locked?.hold, .bedtime)
        _ = lock.bedtimeEnded(reason: .emergency, nowMs: t0 + 7)
        _ = lock.lock(mode: "work", presentedKey: "house", modes: modes, nowMs: t0 + 8)
        XCTAssertEqual(lock.bedtimeStarted(mode: "night", modes: modes, nowMs: t0 + 9).refusal?.reason, .alreadyLocked)
        XCTAssertEqual(lock.locked?.mode, "work")
        var fresh = FocusLock()
        XCTAssertEqual(fresh.bedtimeStarted(mode: "gone", modes: modes, nowMs: t0).refusal?.reason, .unknownMode)
    }
}

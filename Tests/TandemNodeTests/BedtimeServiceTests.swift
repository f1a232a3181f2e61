import Foundation
import Logging
import TandemProtocol
import TandemStore
import XCTest
@testable import NodeFocus
@testable import TandemNode
@testable import TandemNodeCore
import TandemTestSupport

/// A daylight check that answers what the test says (the classifier is another module).
struct FakeDaylight: DaylightChecking {
    let answer: @Sendable (String) -> DaylightCheckResult
    func check(photoAt path: String) async throws -> DaylightCheckResult { answer(path) }
}

/// Bedtime and health on a node (not running its loops: the clock is injected by calling the
/// steps with `nowMs`). Oslo, winter: sunrise near 08:50 local.
final class BedtimeServiceTests: XCTestCase {
    static func ms(_ text: String) -> Int64 { Int64(ISO8601DateFormatter().date(from: text)!.timeIntervalSince1970 * 1000) }
    func ms(_ text: String) -> Int64 { Self.ms(text) }

    /// Capture times by photo name: "day@<ISO>" is daylight taken then, "night@<ISO>" is not daylight, "noexif" has no time.
    static let daylight = FakeDaylight { path in
        let name = URL(fileURLWithPath: path).lastPathComponent
        let parts = name.split(separator: "@").map(String.init)
        let taken = parts.count == 2 ? ISO8601DateFormatter().date(from: parts[1]) : nil
        switch parts.first {
        case "day": return DaylightCheckResult(verdict: .daylight, reason: "a bright blue sky over the ground", capturedAt: taken)
        case "noexif": return DaylightCheckResult(verdict: .daylight, reason: "bright sky", capturedAt: nil)
        default: return DaylightCheckResult(verdict: .notDaylight, reason: "dark frame with point lights", capturedAt: taken)
        }
    }

    func makeNode() throws -> NodeRuntime {
        var config = TestSupport.loopbackConfiguration()
        config.focus.daylight = Self.daylight
        return try NodeRuntime(identity: .generate(), configuration: config, logger: TestSupport.quietLogger)
    }

    @NodeCore static func setUpModes(_ focus: FocusService) throws {
        let modes = try FocusModes(keys: [FocusKey(id: "house", name: "House"), FocusKey(id: "mug", name: "Mug")],
                                   modes: [FocusMode(name: "night", mainKey: "house", temporaryKeys: ["mug"], blockedSites: ["news.example"],
                                                     temporaryItems: ["news.example"])])
        try focus.saveModes(modes, event: ("focus.mode_created", ["mode": "night"]))
    }

    func code(_ body: () async throws -> Any) async -> String? {
        do { _ = try await body(); return nil } catch let e as ControlError { return e.code } catch { return "\(error)" }
    }

    func testNightLocksAndOnlyDaylightAfterSunriseOpens() async throws {
        let node = try makeNode()
        let focus = node.focus
        try await NodeCore.perform { try Self.setUpModes(focus) }
        // Set in the afternoon: nothing locks until 23:00 local (22:00Z).
        _ = try await NodeCore.perform {
            try focus.setBedtime(["mode": "night", "bed": "23:00", "wake": "07:00", "city": "Oslo"], nowMs: Self.ms("2026-12-01T14:00:00Z"))
        }
        await NodeCore.run { focus.bedtimeTick(nowMs: Self.ms("2026-12-01T21:59:00Z")) }
        XCTAssertFalse(focus.isLocked)
        await NodeCore.run { focus.bedtimeTick(nowMs: Self.ms("2026-12-01T22:00:05Z")) }
        XCTAssertTrue(focus.isLocked)
        let hold = await NodeCore.run { focus.state.withLockedValue { $0.lock.locked?.hold } }
        XCTAssertEqual(hold, .bedtime)
        // Changing or switching off bedtime is refused while it holds.
        let setAgain = await code { try await NodeCore.perform {
            try focus.setBedtime(["mode": "night", "bed": "01:00", "wake": "02:00"], nowMs: Self.ms("2026-12-01T23:00:00Z")) } }
        XCTAssertEqual(setAgain, "bedtime_hold")

        // 05:00 local: too early, and the refusal says when (sunrise in Oslo near 08:50).
        do {
            try await NodeCore.perform { try focus.leavePreflight(nowMs: Self.ms("2026-12-02T04:00:00Z")) }
            XCTFail("left bedtime before sunrise")
        } catch let e as ControlError {
            XCTAssertEqual(e.code, "too_early")
            XCTAssertTrue(e.message.contains("civil sunrise in Oslo today is 08:"), e.message)
        }
        // After sunrise: a night photo, a photo without a capture time, an old one, are refused.
        let now = ms("2026-12-02T08:30:00Z")  // 09:30 local
        let clock: @Sendable () -> Int64 = { now }
        let cases: [(String, String)] = [("night@2026-12-02T08:29:00Z", "not_daylight"), ("noexif", "no_capture_time"),
                                         ("day@2026-12-02T08:10:00Z", "photo_too_old"), ("day@2026-12-02T09:00:00Z", "photo_in_future")]
        for (photo, expected) in cases {
            let c = await code { try await focus.leaveWithDaylight(photo: "/photos/\(photo)", clock: clock) }
            XCTAssertEqual(c, expected, photo)
        }
        XCTAssertTrue(focus.isLocked)
        // A photo taken before sunrise but within 10 minutes: refused too.
        let early = ms("2026-12-02T07:52:00Z")
        let c = await code { try await focus.leaveWithDaylight(photo: "/photos/day@2026-12-02T07:45:00Z", clock: { early }) }
        XCTAssertTrue(c == "photo_before_sunrise" || c == "too_early", c ?? "nil")
        // A daylight photo taken two minutes ago: open, until the next bed time.
        _ = try await focus.leaveWithDaylight(photo: "/photos/day@2026-12-02T08:28:00Z", clock: clock)
        XCTAssertFalse(focus.isLocked)
        await NodeCore.run { focus.bedtimeTick(nowMs: Self.ms("2026-12-02T15:00:00Z")) }
        XCTAssertFalse(focus.isLocked, "released for the rest of the day")
        await NodeCore.run { focus.bedtimeTick(nowMs: Self.ms("2026-12-02T22:00:01Z")) }
        XCTAssertTrue(focus.isLocked, "the lock comes back at the next bed time")
        let types = try node.eventBus.log.events(since: 0, limit: 1000).map(\.type)
        XCTAssertEqual(types.filter { $0 == "bedtime.started" }.count, 2)
        XCTAssertEqual(types.filter { $0 == "bedtime.left" }.count, 1)
        XCTAssertTrue(types.contains("bedtime.unlock_refused"))
    }

    func testEmergencyCostsTwentyAndDeadRefusesEverything() async throws {
        let node = try makeNode()
        let focus = node.focus
        try await NodeCore.perform { try Self.setUpModes(focus) }
        // Set inside the night: locks at once.
        let t = ms("2026-12-01T12:00:00Z")
        _ = try await NodeCore.perform {
            try focus.setBedtime(["mode": "night", "bed": "00:00", "wake": "23:59", "time_zone": "UTC",
                                  "latitude": 0.0, "longitude": 0.0], nowMs: t)
        }
        XCTAssertTrue(focus.isLocked)
        // Spend health down to 20 (16 quits), then an emergency takes the last 20.
        for i in 0..<16 { await NodeCore.run { focus.recordBypass(.quitEarly, nowMs: t + Int64(i), detail: nil) } }
        let before = await NodeCore.run { focus.healthJSON(nowMs: t + 100) }
        XCTAssertEqual(before["health"]?.intValue, 20)
        XCTAssertEqual(before["state"]?.stringValue, "weak")
        _ = try await NodeCore.perform { try focus.leaveBedtime(.emergency, nowMs: t + 200, photo: nil) }
        XCTAssertFalse(focus.isLocked)
        let after = await NodeCore.run { focus.healthJSON(nowMs: t + 300) }
        XCTAssertEqual(after["health"]?.intValue, 0)
        XCTAssertEqual(after["state"]?.stringValue, "dead")
        // Dead: no temporary unlock, no quit, no emergency.
        for kind in HealthPool.Kind.allCases {
            let c = await code { try await NodeCore.perform { try focus.healthGate(kind, nowMs: t + 400) } }
            XCTAssertEqual(c, "health_dead", kind.rawValue)
        }
        // The timeline tells it, in a faint tone at the end, the same way twice.
        let day = await NodeCore.run { () -> [String] in
            let events = (try? node.eventBus.log.events(since: 0, limit: 1000)) ?? []
            return TimelineBook.build(events, clock: focus.clockText).entries.map(\.line)
        }
        let again = await NodeCore.run { () -> [String] in
            let events = (try? node.eventBus.log.events(since: 0, limit: 1000)) ?? []
            return TimelineBook.build(events, clock: focus.clockText).entries.map(\.line)
        }
        XCTAssertEqual(day, again)
        XCTAssertTrue(day.contains { $0.contains("midnight") }, "\(day)")
        let (entries, summary) = TimelineBook.build(try node.eventBus.log.events(since: 0, limit: 1000), clock: focus.clockText)
        XCTAssertEqual(entries.first { $0.kind == "first_bypass" }?.tone, "playful")
        XCTAssertTrue(entries.contains { $0.kind == "bypass_streak" })
        XCTAssertEqual(summary?.tone, "faint")
    }

    func testTemplatesCoverEveryKindAndTone() {
        let kinds = ["locked", "unlocked", "temp_unlocked", "relocked", "bypass", "first_bypass", "bypass_streak", "refused",
                     "challenge_started", "challenge_ended", "challenge_quit", "bedtime_started", "bedtime_left", "bedtime_emergency",
                     "bedtime_refused", "quiet_return", "summary"]
        for k in kinds {
            for tone in ["playful", "concerned", "strained", "faint"] {
                XCTAssertNotNil(TimelineBook.templates["\(k) \(tone)"], "\(k) \(tone)")
            }
            XCTAssertGreaterThanOrEqual(TimelineBook.templates["\(k) playful"]?.count ?? 0, k == "refused" ? 1 : 2, k)
        }
        // The choice is stable across processes (FNV-1a, not Swift's seeded Hasher).
        XCTAssertEqual(TimelineBook.stableHash("a"), 0xaf63_dc4c_8601_ec8c)
    }
}

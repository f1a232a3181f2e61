import XCTest
@testable import TandemProtocol

/// The replay cache (Protocol/README.md 5.6, section 10) with explicit clocks: no author can make
/// another author's fresh frames stale, memory stays bounded, and every boundary is where 5.6 says.
final class ReplayCacheTests: XCTestCase {
    let now: UInt64 = 1_800_000_000_000
    let skew = TandemConstants.maximumClockSkewMilliseconds
    let window = TandemConstants.replayWindowMilliseconds

    func key(_ n: Int) -> [UInt8] { (0..<32).map { UInt8(truncatingIfNeeded: n >> (($0 % 4) * 8)) ^ UInt8($0) } }

    func testTheOldPoisoningNoLongerWorks() {
        // One stranger fills the cache with frames dated now + 10 min (the largest date allowed).
        var cache = ReplayCache(capacity: 1_000, perAuthorCapacity: 100)
        let stranger = key(1), friend = key(2)
        for _ in 0..<5_000 {
            _ = cache.check(.random(), author: stranger, createdAt: now + skew, now: now)
        }
        // Its 101st frame made room in its own share (the oldest went, its date became the floor)
        // and was then at the floor itself: 99 entries are left, and nothing more gets in.
        XCTAssertEqual(cache.count(of: stranger), 99, "a stranger fills only its own share")
        XCTAssertEqual(cache.count, 99)
        XCTAssertEqual(cache.floor(of: stranger), now + skew, "its own floor went to the future…")
        XCTAssertEqual(cache.check(.random(), author: stranger, createdAt: now + skew, now: now), .stale, "…so its own frames are refused")
        XCTAssertEqual(cache.watermark, 0, "nothing shared moved")
        XCTAssertEqual(cache.check(.random(), author: friend, createdAt: now, now: now), .fresh)
        XCTAssertEqual(cache.check(.random(), author: friend, createdAt: now - 3_600_000, now: now), .fresh)
    }

    func testManyStrangersAtTheirShareShrinkBeforeAFriendLosesAnything() {
        var cache = ReplayCache(capacity: 1_000, perAuthorCapacity: 100)
        let friend = key(0)
        let friendIDs = (0..<5).map { _ in MessageID.random() }
        for (i, id) in friendIDs.enumerated() {
            XCTAssertEqual(cache.check(id, author: friend, createdAt: now - 60_000 + UInt64(i), now: now), .fresh)
        }
        for s in 1...50 {
            for _ in 0..<100 { _ = cache.check(.random(), author: key(s), createdAt: now + skew, now: now) }
            XCTAssertLessThanOrEqual(cache.count, 1_000)
        }
        // Full, less the odd frame a stranger lost to its own share when it was the largest.
        XCTAssertTrue((990...1_000).contains(cache.count), "\(cache.count)")
        XCTAssertEqual(cache.count(of: friend), 5)
        XCTAssertEqual(cache.floor(of: friend), 0)
        XCTAssertEqual(cache.watermark, 0)
        for id in friendIDs {
            XCTAssertEqual(cache.check(id, author: friend, createdAt: now - 60_000, now: now), .replayed,
                           "the friend's ids are still remembered")
        }
        XCTAssertEqual(cache.check(.random(), author: friend, createdAt: now - 30_000, now: now), .fresh)
    }

    func testSingleEntryStrangersMoveTheWatermarkNoFurtherThanNowMinusTheLag() {
        var cache = ReplayCache(capacity: 100, perAuthorCapacity: 100)
        for s in 1...1_000 {
            XCTAssertEqual(cache.check(.random(), author: key(s), createdAt: now + skew, now: now), .fresh)
            XCTAssertLessThanOrEqual(cache.count, 100)
        }
        XCTAssertEqual(cache.watermark, now - skew, "capped at now − lag, not now + 10 min")
        XCTAssertLessThanOrEqual(cache.authorCount, 100)
        // Boundaries: at the watermark is stale, one ms above is fresh.
        XCTAssertEqual(cache.check(.random(), author: key(5_000), createdAt: now - skew, now: now), .stale)
        XCTAssertEqual(cache.check(.random(), author: key(5_001), createdAt: now - skew + 1, now: now), .fresh)
        XCTAssertEqual(cache.check(.random(), author: key(5_002), createdAt: now, now: now), .fresh)
        XCTAssertEqual(cache.check(.random(), author: key(5_003), createdAt: now + skew, now: now), .fresh)
    }

    func testForgottenAuthorsOlderThanTheLagStayStale() {
        // A forgotten author's newest frame was 20 min old: it is below the cap, so the watermark
        // takes it exactly and the forgotten id cannot be replayed.
        var cache = ReplayCache(capacity: 1, perAuthorCapacity: 10)
        let old = MessageID.random()
        XCTAssertEqual(cache.check(old, author: key(1), createdAt: now - 1_200_000, now: now), .fresh)
        XCTAssertEqual(cache.check(.random(), author: key(2), createdAt: now, now: now), .fresh)
        XCTAssertEqual(cache.watermark, now - 1_200_000)
        XCTAssertEqual(cache.check(old, author: key(1), createdAt: now - 1_200_000, now: now), .stale)
    }

    func testTheLargestShareShrinksFirstAndOnlyItsFloorRises() {
        var cache = ReplayCache(capacity: 10, perAuthorCapacity: 100)
        let a = key(1), b = key(2), c = key(3)
        for i in 0..<8 { XCTAssertEqual(cache.check(.random(), author: a, createdAt: now - 1000 + UInt64(i), now: now), .fresh) }
        for i in 0..<2 { XCTAssertEqual(cache.check(.random(), author: b, createdAt: now - 2000 + UInt64(i), now: now), .fresh) }
        XCTAssertEqual(cache.check(.random(), author: c, createdAt: now, now: now), .fresh)
        XCTAssertEqual(cache.count(of: a), 7)
        XCTAssertEqual(cache.floor(of: a), now - 1000)
        XCTAssertEqual(cache.count(of: b), 2)
        XCTAssertEqual(cache.floor(of: b), 0)
        // Boundary on a floor: equal is stale, one above is fresh.
        XCTAssertEqual(cache.check(.random(), author: a, createdAt: now - 1000, now: now), .stale)
        XCTAssertEqual(cache.check(.random(), author: b, createdAt: now - 1000, now: now), .fresh)
    }

    func testOwnShareEvictsTheAuthorsOldestAndRefusesWhatIsNotNewer() {
        var cache = ReplayCache(capacity: 100, perAuthorCapacity: 2)
        let a = key(1)
        let ids = (0..<3).map { _ in MessageID.random() }
        XCTAssertEqual(cache.check(ids[0], author: a, createdAt: now - 4000, now: now), .fresh)
        XCTAssertEqual(cache.check(ids[1], author: a, createdAt: now - 3000, now: now), .fresh)
        XCTAssertEqual(cache.check(ids[2], author: a, createdAt: now - 2000, now: now), .fresh)
        XCTAssertEqual(cache.floor(of: a), now - 4000)
        XCTAssertEqual(cache.check(ids[0], author: a, createdAt: now - 4000, now: now), .stale, "evicted, not forgotten")
        // Making room evicts now-3000, which becomes the floor: a frame at now-3500 is then stale.
        XCTAssertEqual(cache.check(.random(), author: a, createdAt: now - 3500, now: now), .stale)
        XCTAssertEqual(cache.check(ids[1], author: a, createdAt: now - 3000, now: now), .stale)
        XCTAssertEqual(cache.check(ids[2], author: a, createdAt: now - 2000, now: now), .replayed)
        XCTAssertEqual(cache.watermark, 0)
    }

    func testTheSameIDFromTwoAuthorsIsTwoMessages() {
        var cache = ReplayCache()
        let id = MessageID.random()
        XCTAssertEqual(cache.check(id, author: key(1), createdAt: now, now: now), .fresh)
        XCTAssertEqual(cache.check(id, author: key(2), createdAt: now, now: now), .fresh,
                       "an id seen from one author cannot be claimed first by another")
        XCTAssertEqual(cache.check(id, author: key(1), createdAt: now, now: now), .replayed)
    }

    func testWindowBoundariesAndExpiry() {
        var cache = ReplayCache(capacity: 10, perAuthorCapacity: 10, window: 100)
        let id = MessageID.random()
        XCTAssertEqual(cache.check(.random(), author: key(1), createdAt: 900, now: 1000), .fresh, "exactly now − window")
        XCTAssertEqual(cache.check(.random(), author: key(1), createdAt: 899, now: 1000), .stale, "one ms older")
        XCTAssertEqual(cache.check(id, author: key(2), createdAt: 1000, now: 1000), .fresh)
        XCTAssertEqual(cache.check(id, author: key(2), createdAt: 1000, now: 1050), .replayed)
        XCTAssertEqual(cache.check(id, author: key(2), createdAt: 1000, now: 1101), .stale)
        cache.expire(now: 1101)
        XCTAssertEqual(cache.count, 0, "expired ids are dropped")
        XCTAssertEqual(cache.authorCount, 0, "and authors with nothing left")
    }

    func testSmallClocksDoNotUnderflow() {
        // now below the window and below the lag: cutoff and ceiling are 0, nothing traps.
        var cache = ReplayCache(capacity: 1, perAuthorCapacity: 1, window: 100, watermarkLag: 50)
        XCTAssertEqual(cache.check(.random(), author: key(1), createdAt: 0, now: 5), .stale, "at the initial watermark, 0")
        XCTAssertEqual(cache.check(.random(), author: key(1), createdAt: 1, now: 5), .fresh)
        XCTAssertEqual(cache.check(.random(), author: key(2), createdAt: 7, now: 5), .fresh)
        XCTAssertEqual(cache.watermark, 0)
        XCTAssertEqual(cache.check(.random(), author: key(3), createdAt: UInt64.max, now: UInt64.max), .fresh)
        XCTAssertEqual(cache.check(.random(), author: key(3), createdAt: UInt64.max, now: UInt64.max), .stale,
                       "its own share of 1: the next frame at the same instant is at its floor")
    }

    func testMemoryStaysBoundedUnderAFloodOfAuthorsAndIDs() {
        var cache = ReplayCache(capacity: 500, perAuthorCapacity: 20)
        var rng = SplitMix64(seed: 7)
        for i in 0..<20_000 {
            let author = key(Int(rng.next() % 3_000))
            let offset = rng.next() % (2 * skew)
            _ = cache.check(.random(), author: author, createdAt: now - skew + offset, now: now + UInt64(i))
            XCTAssertLessThanOrEqual(cache.count, 500)
            XCTAssertLessThanOrEqual(cache.authorCount, 500 + 1)
            XCTAssertLessThanOrEqual(cache.watermark, now + UInt64(i) - skew)
        }
    }
}

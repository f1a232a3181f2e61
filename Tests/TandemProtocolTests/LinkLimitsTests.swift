import XCTest
@testable import TandemProtocol

/// The per-link and node-wide transport limits (Protocol/README.md 5.12), with explicit instants.
final class LinkLimitsTests: XCTestCase {
    func testErrorRepliesAreRateLimitedAndTooManyRejectionsClose() {
        let limits = LinkLimits()
        var g = LinkGuard(limits: limits, now: 0)
        var decisions: [LinkGuard.Decision] = []
        for _ in 0..<33 { decisions.append(g.rejected(now: 0)) }
        XCTAssertEqual(Array(decisions[0..<8]), Array(repeating: .reply, count: 8), "a burst of 8 ERROR replies")
        XCTAssertEqual(Array(decisions[8..<32]), Array(repeating: .silent, count: 24), "then counted, not answered")
        XCTAssertEqual(decisions[32], .close, "the 33rd rejection in a burst closes the link")
        XCTAssertEqual(g.unanswered, 24)
    }

    func testASteadyRateAtTheLimitIsNeverClosedAndRepliesComeOncePerSecond() {
        var g = LinkGuard(limits: LinkLimits(), now: 0)
        var replies = 0
        for i in 1...4_000 {  // 4 per second for 1000 s
            let d = g.rejected(now: UInt64(i) * 250)
            XCTAssertNotEqual(d, .close, "rejection \(i)")
            if d == .reply { replies += 1 }
        }
        XCTAssertTrue((1_000...1_008).contains(replies), "\(replies) replies in 1000 s")
    }

    func testARateAboveTheLimitIsClosed() {
        var g = LinkGuard(limits: LinkLimits(), now: 0)
        var closedAt: Int?
        for i in 1...1_000 where closedAt == nil {  // 5 per second
            if g.rejected(now: UInt64(i) * 200) == .close { closedAt = i }
        }
        // 32 tokens, losing 1 − 0.8 per rejection: gone after about 160.
        XCTAssertNotNil(closedAt)
        XCTAssertTrue((150...170).contains(closedAt!), "closed at \(closedAt!)")
    }

    func testHandshakeBookCapsPerAddressAndInTotal() {
        var book = HandshakeBook(maximum: 3, maximumPerAddress: 2)
        XCTAssertTrue(book.admit(address: "10.0.0.1"))
        XCTAssertTrue(book.admit(address: "10.0.0.1"))
        XCTAssertFalse(book.admit(address: "10.0.0.1"), "per address")
        XCTAssertTrue(book.admit(address: "10.0.0.2"))
        XCTAssertFalse(book.admit(address: "10.0.0.3"), "in total")
        XCTAssertEqual(book.count, 3)
        book.leave(address: "10.0.0.1")
        XCTAssertEqual(book.pending(from: "10.0.0.1"), 1)
        XCTAssertTrue(book.admit(address: "10.0.0.3"))
        book.leave(address: "10.9.9.9")
        XCTAssertEqual(book.count, 3, "leaving an address that has nothing pending changes nothing")
        for a in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.3"] { book.leave(address: a) }
        XCTAssertEqual(book.count, 0)
    }

    func testByteBudgetBoundaries() {
        var b = ByteBudget(capacity: 100)
        XCTAssertTrue(b.reserve(100))
        XCTAssertFalse(b.reserve(1))
        b.release(40)
        XCTAssertFalse(b.reserve(41))
        XCTAssertTrue(b.reserve(40))
        XCTAssertFalse(b.reserve(-1))
        XCTAssertFalse(b.reserve(Int.max), "no overflow")
        b.release(Int.max)
        XCTAssertEqual(b.used, 0, "never below zero")
        b.release(-5)
        XCTAssertEqual(b.used, 0)
    }
}

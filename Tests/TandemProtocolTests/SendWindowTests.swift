import TandemProtocol
import XCTest

/// The outbox's per-recipient window (`DeliveryBook.toWrite(_:to:link:nowMs:)`) and a friend's
/// link's rejection rules (`LinkGuard.rejected(_:trusted:now:)`), with explicit instants.
final class SendWindowTests: XCTestCase {
    let bob: [UInt8] = Array(repeating: 2, count: 32)
    let carol: [UInt8] = Array(repeating: 3, count: 32)

    func keys(_ range: Range<Int>, for recipient: [UInt8]) -> [[UInt8]] {
        range.map { withUnsafeBytes(of: UInt64($0).bigEndian) { Array($0) } + Array(repeating: 0, count: 8) + recipient }
    }

    func testABurstGoesOutAWindowAtATimeInOrderAsAcknowledgementsMakeRoom() {
        var book = DeliveryBook(resendAfterMs: 30_000, window: 4)
        let burst = keys(0..<10, for: bob)
        XCTAssertEqual(book.toWrite(burst, to: bob, link: 1, nowMs: 0), Array(burst[0..<4]), "the oldest four")
        XCTAssertTrue(book.isHolding(bob))
        XCTAssertEqual(book.room(bob), 0)
        // Asked again with no acknowledgement: nothing more (the four keep their places).
        XCTAssertEqual(book.toWrite(burst, to: bob, link: 1, nowMs: 10), [])
        // Two acknowledged: two more, the next in order; the acknowledged are no longer offered.
        book.done(burst[0], recipient: bob)
        book.done(burst[1], recipient: bob)
        XCTAssertEqual(book.room(bob), 2)
        XCTAssertEqual(book.toWrite(Array(burst[2...]), to: bob, link: 1, nowMs: 20), Array(burst[4..<6]))
        // Everything acknowledged as it goes: the rest, and then no longer holding.
        for k in burst[2..<6] { book.done(k, recipient: bob) }
        XCTAssertEqual(book.toWrite(Array(burst[6...]), to: bob, link: 1, nowMs: 30), Array(burst[6..<10]))
        XCTAssertFalse(book.isHolding(bob))
    }

    /// The window's bytes bound it as well as its frames (messages.md 11.1): large frames go a few
    /// at a time, the first always; an acknowledgement frees its bytes; a frame too large for the
    /// whole window still goes alone.
    func testTheWindowsBytesBoundLargeFrames() {
        var book = DeliveryBook(resendAfterMs: 30_000, window: 100, windowBytes: 1000)
        let burst = keys(0..<6, for: bob)
        let sizes = [400, 400, 400, 100, 2000, 10]
        XCTAssertEqual(book.toWrite(burst, sizes: sizes, to: bob, link: 1, nowMs: 0), Array(burst[0..<2]), "800 bytes; a third is over 1000")
        XCTAssertTrue(book.isHolding(bob))
        XCTAssertEqual(book.freePlaces(bob, link: 1, nowMs: 0), 98, "frames free, bytes not yet at the bound")
        XCTAssertTrue(book.inFlight(to: bob, link: 1, nowMs: 0) == (2, 800))
        XCTAssertEqual(book.toWrite(burst, sizes: sizes, to: bob, link: 1, nowMs: 1), [], "the third still does not fit")
        book.done(burst[0], recipient: bob)
        XCTAssertEqual(book.toWrite(Array(burst[1...]), sizes: Array(sizes[1...]), to: bob, link: 1, nowMs: 2), Array(burst[2..<4]),
                       "400 freed: the third and the fourth (900 in flight), not the 2000")
        for k in burst[1..<4] { book.done(k, recipient: bob) }
        XCTAssertEqual(book.toWrite(Array(burst[4...]), sizes: Array(sizes[4...]), to: bob, link: 1, nowMs: 3), [burst[4]],
                       "nothing in flight: the oversized frame goes alone")
        XCTAssertEqual(book.freePlaces(bob, link: 1, nowMs: 3), 0, "its bytes fill the window")
        book.done(burst[4], recipient: bob)
        XCTAssertEqual(book.toWrite([burst[5]], sizes: [10], to: bob, link: 1, nowMs: 4), [burst[5]])
        XCTAssertFalse(book.isHolding(bob))
        // Without sizes, frames alone count (as before).
        var plain = DeliveryBook(window: 3, windowBytes: 1)
        XCTAssertEqual(plain.toWrite(keys(0..<5, for: carol), to: carol, link: 1, nowMs: 0).count, 3)
    }

    func testRecipientsHaveWindowsOfTheirOwn() {
        var book = DeliveryBook(window: 2)
        XCTAssertEqual(book.toWrite(keys(0..<3, for: bob), to: bob, link: 1, nowMs: 0).count, 2)
        XCTAssertEqual(book.toWrite(keys(0..<3, for: carol), to: carol, link: 2, nowMs: 0).count, 2)
        XCTAssertTrue(book.isHolding(bob) && book.isHolding(carol))
    }

    func testANewLinkOrTheResendTimeFreesThePlaces() {
        var book = DeliveryBook(resendAfterMs: 1_000, window: 2)
        let burst = keys(0..<4, for: bob)
        XCTAssertEqual(book.toWrite(burst, to: bob, link: 1, nowMs: 0), Array(burst[0..<2]))
        // The link went down with two frames unacknowledged: on the new link they go again first.
        XCTAssertEqual(book.toWrite(burst, to: bob, link: 2, nowMs: 10), Array(burst[0..<2]))
        // No acknowledgement within the resend time: written again, still the oldest first.
        XCTAssertEqual(book.toWrite(burst, to: bob, link: 2, nowMs: 1_010), Array(burst[0..<2]))
        XCTAssertEqual(book.room(bob), 0)
    }

    func testTheWindowTablesStayBounded() {
        var book = DeliveryBook(maximumTracked: 10, window: 1)
        for i in 0..<100 {
            let r = Array(repeating: UInt8(i), count: 32)
            XCTAssertEqual(book.toWrite(keys(0..<2, for: r), to: r, link: 1, nowMs: 0).count, 1, "recipient \(i)")
        }
        // Past the bound the oldest knowledge goes: at worst a frame is written sooner, never lost.
        let first = Array(repeating: UInt8(0), count: 32)
        XCTAssertEqual(book.toWrite(keys(0..<2, for: first), to: first, link: 1, nowMs: 1).count, 1)
    }

    func testAFriendsReplayedCopiesAreAnsweredAndNeverCloseItsLink() {
        var g = LinkGuard(limits: LinkLimits(), now: 0)
        var decisions: [LinkGuard.Decision] = []
        // A reconnect rewrites thousands of frames whose ACKs were lost with the old link.
        for _ in 0..<5_000 { decisions.append(g.rejected(.replayed, trusted: true, now: 0)) }
        XCTAssertFalse(decisions.contains(.close))
        XCTAssertEqual(decisions.count(where: { $0 == .reply }), 4_096, "the burst of answers")
        XCTAssertEqual(decisions.count(where: { $0 == .silent }), 5_000 - 4_096)
        // The budget refills: a second later, 1,000 more answers.
        for _ in 0..<1_000 { XCTAssertEqual(g.rejected(.replayed, trusted: true, now: 1_000), .reply) }
    }

    func testStrangersAndOtherRejectionsKeepTheirBounds() {
        // A stranger's replayed copies: the 33rd in a burst closes the link, as before.
        var stranger = LinkGuard(limits: LinkLimits(), now: 0)
        var closedAt: Int?
        for i in 1...40 where closedAt == nil {
            if stranger.rejected(.replayed, trusted: false, now: 0) == .close { closedAt = i }
        }
        XCTAssertEqual(closedAt, 33)
        // A friend's forged or malformed frames count like anyone's.
        var friend = LinkGuard(limits: LinkLimits(), now: 0)
        closedAt = nil
        for i in 1...40 where closedAt == nil {
            if friend.rejected(.badSignature, trusted: true, now: 0) == .close { closedAt = i }
        }
        XCTAssertEqual(closedAt, 33)
    }

    func testANodesLimitsGiveAFriendsLinkABudgetOfItsOwn() {
        let node = LinkLimits.node
        XCTAssertEqual(node.framesPerAddressPerSecond, 1_000, "strangers: as before")
        XCTAssertEqual(node.trustedFramesPerSecond, 20_000)
        XCTAssertNil(LinkLimits().trustedFramesPerSecond, "the bare pipeline: no budget")
    }
}

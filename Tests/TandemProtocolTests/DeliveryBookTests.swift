import TandemProtocol
import XCTest

/// The outbox's delivery decisions with a manual clock (Protocol/README.md 12.5 and 12.7).
final class DeliveryBookTests: XCTestCase {
    let alice: [UInt8] = Array(repeating: 1, count: 32)
    let bob: [UInt8] = Array(repeating: 2, count: 32)
    let m1: [UInt8] = Array(repeating: 0xA1, count: 16)
    let m2: [UInt8] = Array(repeating: 0xA2, count: 16)

    func testEachFrameIsWrittenOncePerLinkUntilTheResendTime() {
        var book = DeliveryBook(resendAfterMs: 30_000)
        XCTAssertEqual(book.toWrite([m1, m2], link: 7, nowMs: 1_000), [m1, m2])
        // A second round on the same link (the dial's write raced by "link up, deliver now"): nothing.
        XCTAssertEqual(book.toWrite([m1, m2], link: 7, nowMs: 1_001), [])
        XCTAssertEqual(book.toWrite([m1, m2], link: 7, nowMs: 30_999), [])
        // No acknowledgement in time: written again on the same link, and the clock starts again.
        XCTAssertEqual(book.toWrite([m1, m2], link: 7, nowMs: 31_000), [m1, m2])
        XCTAssertEqual(book.toWrite([m1], link: 7, nowMs: 31_001), [])
        XCTAssertEqual(book.wasWritten(m1), DeliveryBook.Written(link: 7, atMs: 31_000))
    }

    func testANewLinkGetsEveryWaitingFrameAtOnce() {
        var book = DeliveryBook()
        XCTAssertEqual(book.toWrite([m1], link: 1, nowMs: 0), [m1])
        // The link died before the ACK came: the next link is written at once, in order.
        XCTAssertEqual(book.toWrite([m1, m2], link: 2, nowMs: 10), [m1, m2])
        XCTAssertEqual(book.toWrite([m1, m2], link: 2, nowMs: 20), [])
    }

    func testAcknowledgedFramesAreForgotten() {
        var book = DeliveryBook()
        _ = book.toWrite([m1], link: 1, nowMs: 0)
        book.done(m1)
        XCTAssertNil(book.wasWritten(m1))
        // A new frame that reuses nothing is written; a done one that somehow comes back is too.
        XCTAssertEqual(book.toWrite([m1], link: 1, nowMs: 1), [m1])
    }

    func testClockGoingBackwardsNeitherTrapsNorResendsEarly() {
        var book = DeliveryBook(resendAfterMs: 30_000)
        _ = book.toWrite([m1], link: 1, nowMs: .max)
        XCTAssertEqual(book.toWrite([m1], link: 1, nowMs: .min), [])
        XCTAssertEqual(book.toWrite([m2], link: 1, nowMs: .min), [m2])
        XCTAssertEqual(book.toWrite([m2], link: 1, nowMs: .max), [m2])
    }

    func testDialBackoffDoublesToItsCapAndClearsOnSuccess() {
        var book = DeliveryBook(maximumBackoffMs: 60_000)
        XCTAssertTrue(book.shouldDial(alice, nowMs: 0))
        var now: Int64 = 0
        var waits: [Int64] = []
        for _ in 0..<8 {
            book.dialFailed(alice, nowMs: now)
            var t = now
            while !book.shouldDial(alice, nowMs: t) { t += 500 }
            waits.append(t - now)
            now = t
        }
        XCTAssertEqual(waits, [2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000])
        XCTAssertEqual(book.failures(alice), 8)
        XCTAssertTrue(book.shouldDial(bob, nowMs: now), "backoff is per peer")
        book.dialSucceeded(alice)
        XCTAssertTrue(book.shouldDial(alice, nowMs: now))
        XCTAssertEqual(book.failures(alice), 0)
    }

    func testDialBackoffNearTheEndOfTimeDoesNotTrap() {
        var book = DeliveryBook()
        for _ in 0..<100 { book.dialFailed(alice, nowMs: .max - 1) }
        XCTAssertFalse(book.shouldDial(alice, nowMs: .max - 1))
        XCTAssertTrue(book.shouldDial(alice, nowMs: .max))
    }

    func testPresenceWaitsForTheFramesThatMakeItMeaningful() {
        var book = DeliveryBook()
        // Nothing waiting: at once.
        XCTAssertTrue(book.presenceDue(alice, framesWaiting: false))
        XCTAssertFalse(book.takeOwedPresence(alice))
        // A FRIEND_ACCEPT waits: owed, handed out once after the frames are written.
        XCTAssertFalse(book.presenceDue(bob, framesWaiting: true))
        XCTAssertTrue(book.takeOwedPresence(bob))
        XCTAssertFalse(book.takeOwedPresence(bob))
        // Owed, then the outbox emptied another way (the ACK came): the next greeting sends it, once.
        XCTAssertFalse(book.presenceDue(bob, framesWaiting: true))
        XCTAssertTrue(book.presenceDue(bob, framesWaiting: false))
        XCTAssertFalse(book.takeOwedPresence(bob))
    }

    func testTablesStayBounded() {
        var book = DeliveryBook(maximumTracked: 100)
        for i in 0..<1_000 {
            let id = withUnsafeBytes(of: UInt64(i).bigEndian) { Array($0) } + Array(repeating: 0, count: 8)
            _ = book.toWrite([id], link: 1, nowMs: 0)
            book.dialFailed(id + id, nowMs: 0)
            _ = book.presenceDue(id, framesWaiting: true)
        }
        // Past the bound the oldest knowledge goes: at worst a frame is written again, never lost.
        let first = Array(repeating: UInt8(0), count: 16)
        XCTAssertEqual(book.toWrite([first], link: 1, nowMs: 1), [first])
    }
}

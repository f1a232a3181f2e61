import Foundation
import Sodium
import SwiftProtobuf
import XCTest
@testable import TandemProtocol

/// The client's side of a relay link, without I/O: what it sends for each request, what it makes
/// of each frame the relay (or anyone else) sends, and how the link's end is reported.
final class RelayClientSessionTests: XCTestCase {
    let relay = fixedPair(0x51)
    let me = fixedPair(0x52)
    let stranger = fixedPair(0x53)

    func frame(_ type: MessageType, _ message: some SwiftProtobuf.Message, from author: SigningKeyPair? = nil) -> Envelope {
        Envelope.sign(type: type, author: author ?? relay, recipient: me.publicKey, createdAt: 1_000,
                      payload: (try? message.serializedBytes()) ?? [])
    }

    func session() -> RelayClientSession { RelayClientSession(relay: relay.publicKey, nowMs: 5_000) }

    func registered(items: UInt32 = 0) -> Envelope {
        var m = Tandem_V1_RelayRegistered()
        m.mailboxItems = items
        return frame(.relayRegistered, m)
    }

    func reply(_ id: UInt64, _ status: Tandem_V1_RelayStatus = .ok, token: [UInt8] = [], itemID: UInt64 = 0,
               detail: String = "") -> Envelope {
        var m = Tandem_V1_RelayReply()
        m.requestID = id
        m.status = status
        m.token = Data(token)
        m.itemID = itemID
        m.detail = detail
        return frame(.relayReply, m)
    }

    // MARK: registration

    func testRegistrationIsSentOnceAndConfirmedByTheRelayOnly() throws {
        var s = session()
        let out = try XCTUnwrap(s.register(agent: "tandem/test"))
        XCTAssertEqual(out.type, .relayRegister)
        XCTAssertEqual(try Tandem_V1_RelayRegister(serializedBytes: out.payload).agent, "tandem/test")
        XCTAssertNil(s.register(agent: "again"), "a second RELAY_REGISTER while the first waits")
        // Signed by someone else: not a confirmation.
        var m = Tandem_V1_RelayRegistered()
        m.mailboxItems = 3
        XCTAssertNil(s.receive(frame(.relayRegistered, m, from: stranger)))
        XCTAssertFalse(s.isRegistered)
        XCTAssertEqual(s.receive(registered(items: 3)), .registered(mailboxItems: 3))
        XCTAssertTrue(s.isRegistered)
        XCTAssertNil(s.receive(registered()), "a second RELAY_REGISTERED changes nothing")
    }

    func testAnUnsolicitedRegistrationIsIgnored() {
        var s = session()
        XCTAssertNil(s.receive(registered()))
        XCTAssertFalse(s.isRegistered)
    }

    // MARK: requests and replies

    func testTunnelRequestCarriesAFreshIDAndItsReplyTheToken() throws {
        var s = session()
        let target = fixedPair(0x60).publicKey
        let (id1, out) = try XCTUnwrap(s.request(.tunnelOpen(target: target), nowMs: 6_000))
        let (id2, _) = try XCTUnwrap(s.request(.tunnelOpen(target: target), nowMs: 7_000))
        XCTAssertNotEqual(id1, id2)
        XCTAssertEqual(s.lastUsedMs, 7_000)
        XCTAssertEqual(out.type, .tunnelOpen)
        let open = try Tandem_V1_TunnelOpen(serializedBytes: out.payload)
        XCTAssertEqual(open.requestID, id1)
        XCTAssertEqual(Array(open.target), target)
        let token = [UInt8](repeating: 7, count: TunnelJoin.tokenLength)
        XCTAssertEqual(s.receive(reply(id1, token: token)), .replied(requestID: id1, .tunnel(token: token)))
        XCTAssertNil(s.receive(reply(id1, token: token)), "a request is answered once")
        XCTAssertEqual(s.waitingRequests, 1)
    }

    func testATunnelTokenOfTheWrongLengthIsARefusalNotAToken() throws {
        // TunnelJoin.preamble traps on a token that is not 32 bytes: a relay must not reach it.
        var s = session()
        for length in [0, 31, 33] {
            let (id, _) = try XCTUnwrap(s.request(.tunnelOpen(target: me.publicKey), nowMs: 6_000))
            guard case .replied(id, .refused(_, let detail))? = s.receive(reply(id, token: [UInt8](repeating: 1, count: length))) else {
                return XCTFail("a \(length)-byte token was taken")
            }
            XCTAssertTrue(detail.contains("\(length) bytes"), detail)
        }
    }

    func testRepliesToUnknownOrAbandonedRequestsAreIgnored() throws {
        var s = session()
        XCTAssertNil(s.receive(reply(1, itemID: 9)), "nothing was asked")
        let (id, _) = try XCTUnwrap(s.request(.mailboxPut(recipient: me.publicKey, sealed: [1, 2, 3]), nowMs: 6_000))
        XCTAssertNil(s.receive(reply(id &+ 1, itemID: 9)))
        XCTAssertTrue(s.abandon(id))
        XCTAssertFalse(s.abandon(id))
        XCTAssertNil(s.receive(reply(id, itemID: 9)), "answered after the caller gave up")
    }

    func testMailboxPutAndItsAnswers() throws {
        var s = session()
        let (id, out) = try XCTUnwrap(s.request(.mailboxPut(recipient: me.publicKey, sealed: [1, 2, 3]), nowMs: 6_000))
        let put = try Tandem_V1_MailboxPut(serializedBytes: out.payload)
        XCTAssertEqual(out.type, .mailboxPut)
        XCTAssertEqual(put.requestID, id)
        XCTAssertEqual(Array(put.sealed), [1, 2, 3])
        XCTAssertEqual(s.receive(reply(id, itemID: 42)), .replied(requestID: id, .stored(itemID: 42)))
        let (id2, _) = try XCTUnwrap(s.request(.mailboxPut(recipient: me.publicKey, sealed: [4]), nowMs: 6_000))
        let long = String(repeating: "x", count: 10_000)
        guard case .replied(id2, .refused(.limit, let detail))? = s.receive(reply(id2, .limit, detail: long)) else {
            return XCTFail("a refusal was not reported")
        }
        XCTAssertEqual(detail.utf8.count, PayloadLimits.relayTextBytes, "the relay's text is capped")
    }

    // MARK: what the relay announces

    func testTunnelIncomingNeedsAKeyAndATokenOfExactLength() {
        var s = session()
        func incoming(from: Int, token: Int) -> Envelope {
            var m = Tandem_V1_TunnelIncoming()
            m.from = Data(repeating: 2, count: from)
            m.token = Data(repeating: 3, count: token)
            return frame(.tunnelIncoming, m)
        }
        XCTAssertEqual(s.receive(incoming(from: 32, token: 32)),
                       .tunnelIncoming(from: [UInt8](repeating: 2, count: 32), token: [UInt8](repeating: 3, count: 32)))
        XCTAssertNil(s.receive(incoming(from: 31, token: 32)))
        XCTAssertNil(s.receive(incoming(from: 32, token: 33)))
        XCTAssertNil(s.receive(incoming(from: 32, token: 0)))
    }

    func testMailIsCountedAndAcknowledged() throws {
        var s = session()
        var m = Tandem_V1_MailboxItem()
        m.itemID = 77
        m.sealed = Data([9, 9])
        XCTAssertEqual(s.receive(frame(.mailboxItem, m)), .mail(itemID: 77, sealed: [9, 9]))
        XCTAssertNil(s.receive(frame(.mailboxItem, m, from: stranger)), "mail only from the relay")
        XCTAssertEqual(s.mailReceived, 1)
        let ack = s.acknowledge([77])
        XCTAssertEqual(ack.type, .mailboxAck)
        XCTAssertEqual(try Tandem_V1_MailboxAck(serializedBytes: ack.payload).itemIds, [77])
    }

    func testMalformedPayloadsAndOtherTypesNeedNothing() {
        var s = session()
        _ = s.register(agent: "t")
        for type in [MessageType.relayRegistered, .relayReply, .tunnelIncoming, .mailboxItem] {
            let e = Envelope.sign(type: type, author: relay, recipient: me.publicKey, createdAt: 1, payload: [0xff, 0xff, 0xff])
            XCTAssertNil(s.receive(e), "\(type)")
        }
        XCTAssertNil(s.receive(frame(.ping, Tandem_V1_Ping())))
        XCTAssertFalse(s.isRegistered)
    }

    // MARK: the end of a link

    func testGoodbyeRetryAfterIsTakenWithinItsRangeOnly() {
        var s = session()
        var g = Tandem_V1_RelayGoodbye()
        g.reason = "full"
        g.retryAfterMs = 60_000
        XCTAssertEqual(s.receive(frame(.relayGoodbye, g)), .goodbye(reason: "full", retryAfterMs: 60_000))
        // 2^63 and 2^64-1 (a hostile relay): not taken; the earlier valid goodbye stands.
        for retry in [UInt64(1) << 63, UInt64.max] {
            g.retryAfterMs = retry
            XCTAssertEqual(s.receive(frame(.relayGoodbye, g)), .goodbye(reason: "full", retryAfterMs: 60_000))
        }
        var fresh = session()
        XCTAssertEqual(fresh.receive(frame(.relayGoodbye, g)), .goodbye(reason: "goodbye", retryAfterMs: 0))
    }

    func testClosingReportsTheGoodbyeAndEveryUnansweredRequest() throws {
        var s = session()
        _ = s.register(agent: "t")
        let (a, _) = try XCTUnwrap(s.request(.tunnelOpen(target: me.publicKey), nowMs: 1))
        let (b, _) = try XCTUnwrap(s.request(.mailboxPut(recipient: me.publicKey, sealed: [1]), nowMs: 1))
        var g = Tandem_V1_RelayGoodbye()
        g.reason = "shutting down"
        g.retryAfterMs = 5_000
        _ = s.receive(frame(.relayGoodbye, g))
        let end = s.closed(error: "connection reset")
        XCTAssertEqual(end, .init(reason: "shutting down", retryAfterMs: 5_000, wasRegistered: false,
                                  unanswered: [a, b], registrationUnanswered: true))
        XCTAssertTrue(s.isClosed)
        XCTAssertNil(s.request(.tunnelOpen(target: me.publicKey), nowMs: 2), "no requests on a closed link")
        XCTAssertNil(s.register(agent: "t"))
        XCTAssertNil(s.receive(reply(a)), "nothing is taken after the close")
    }

    func testClosingARegisteredLinkWithoutGoodbyeGivesTheLinkError() {
        var s = session()
        _ = s.register(agent: "t")
        _ = s.receive(registered())
        XCTAssertEqual(s.closed(error: "reset"), .init(reason: "reset", retryAfterMs: 0, wasRegistered: true,
                                                       unanswered: [], registrationUnanswered: false))
        XCTAssertEqual(s.closed(error: nil).wasRegistered, true, "a second close reports the same link")
    }

    // MARK: backoff

    func testBackoffDoublesToAMinuteWithBoundedJitter() {
        var b = RelayBackoff()
        XCTAssertTrue(b.isDue(nowMs: 0))
        var delays: [Int64] = []
        for _ in 0..<10 {
            // Each attempt when it is due, and failing again.
            let now = b.nextAttemptMs
            b.failed("down", nowMs: now, jitter: { _ in 0 })
            delays.append(b.nextAttemptMs - now)
        }
        XCTAssertEqual(delays, [1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000])
        var j = RelayBackoff()
        j.failed("down", nowMs: 0, jitter: { n in n * 10 })
        XCTAssertEqual(j.nextAttemptMs, 1_250, "jitter is at most a quarter")
        var k = RelayBackoff()
        k.failed("down", nowMs: 0, jitter: { _ in -5_000 })
        XCTAssertEqual(k.nextAttemptMs, 1_000, "negative jitter is none")
    }

    func testBackoffHonoursRetryAfterAndNeverShortensIt() {
        var b = RelayBackoff()
        b.failed("full", nowMs: 10_000, minimumDelayMs: 3_600_000, jitter: { _ in 0 })
        XCTAssertEqual(b.nextAttemptMs, 3_610_000)
        // A later, ordinary failure does not bring the attempt forward.
        b.failed("refused", nowMs: 20_000, jitter: { _ in 0 })
        XCTAssertEqual(b.nextAttemptMs, 3_610_000)
        XCTAssertEqual(b.lastError, "refused")
        XCTAssertFalse(b.isDue(nowMs: 3_609_999))
        XCTAssertTrue(b.isDue(nowMs: 3_610_000))
        // Reset: the doubling starts again after a link that was up.
        b.failed("lost", nowMs: 4_000_000, resetCount: true, jitter: { _ in 0 })
        XCTAssertEqual(b.failures, 1)
        XCTAssertEqual(b.nextAttemptMs, 4_001_000)
        // Near the end of time: saturates, does not trap.
        b.failed("x", nowMs: .max - 10, minimumDelayMs: 3_600_000, jitter: { _ in 0 })
        XCTAssertEqual(b.nextAttemptMs, .max)
    }
}

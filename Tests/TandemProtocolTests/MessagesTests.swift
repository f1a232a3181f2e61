import Foundation
import Sodium
import SwiftProtobuf
import XCTest
@testable import TandemProtocol

/// Every validating decoder at its boundaries: min, max, max+1, 2^63, 2^64-1 (Protocol/README.md,
/// "Payload ranges"). A value just inside is taken, one just outside throws MALFORMED, and no
/// value traps.
final class MessagesTests: XCTestCase {
    let author = SigningKeyPair.generate().publicKey
    let other = SigningKeyPair.generate().publicKey
    let nowUs: Int64 = 1_800_000_000_000_000
    let extremes: [UInt64] = [UInt64(Int64.max), UInt64(Int64.max) + 1, UInt64.max]

    func bytes<M: SwiftProtobuf.Message>(_ m: M) -> [UInt8] { try! m.serializedBytes() }

    func record(version: UInt64 = 1, name: String = "ann", addresses: [String] = [":7810"], relay: String = "") -> Tandem_V1_ContactRecord {
        var r = Tandem_V1_ContactRecord()
        r.publicKey = Data(author)
        r.displayName = name
        r.addresses = addresses
        r.homeRelay = relay
        r.version = version
        return r
    }

    func request(_ r: Tandem_V1_ContactRecord, message: String = "hi") -> [UInt8] {
        var m = Tandem_V1_FriendRequest()
        m.message = message
        m.contact = r
        return bytes(m)
    }

    func testContactRecordVersionBounds() throws {
        XCTAssertEqual(try FriendRequestMessage(payload: request(record(version: 0)), author: author).contact.version, 0)
        let max = PayloadLimits.maximumRecordVersion
        XCTAssertEqual(try FriendRequestMessage(payload: request(record(version: max)), author: author).contact.storedVersion, Int64(max))
        for v in [max + 1] + extremes {
            XCTAssertThrowsError(try FriendRequestMessage(payload: request(record(version: v)), author: author), "version \(v)")
            var u = Tandem_V1_ContactUpdate(); u.contact = record(version: v)
            XCTAssertThrowsError(try ContactUpdateMessage(payload: bytes(u), author: author))
            var a = Tandem_V1_FriendAccept(); a.contact = record(version: v)
            XCTAssertThrowsError(try FriendAcceptMessage(payload: bytes(a), author: author))
        }
    }

    func testContactRecordSizesAndKey() throws {
        XCTAssertNoThrow(try FriendRequestMessage(payload: request(record(name: String(repeating: "n", count: 64))), author: author))
        XCTAssertThrowsError(try FriendRequestMessage(payload: request(record(name: String(repeating: "n", count: 65))), author: author))
        let eight = Array(repeating: String(repeating: "a", count: 256), count: 8)
        XCTAssertNoThrow(try FriendRequestMessage(payload: request(record(addresses: eight)), author: author))
        XCTAssertThrowsError(try FriendRequestMessage(payload: request(record(addresses: eight + ["x"])), author: author))
        XCTAssertThrowsError(try FriendRequestMessage(payload: request(record(addresses: [String(repeating: "a", count: 257)])), author: author))
        XCTAssertThrowsError(try FriendRequestMessage(payload: request(record()), author: other), "a record must name its author")
        XCTAssertThrowsError(try FriendRequestMessage(payload: request(record(relay: "not a relay")), author: author))
        XCTAssertNoThrow(try FriendRequestMessage(payload: request(record(), message: String(repeating: "m", count: 280)), author: author))
        XCTAssertThrowsError(try FriendRequestMessage(payload: request(record(), message: String(repeating: "m", count: 281)), author: author))
        XCTAssertThrowsError(try FriendRequestMessage(payload: Tandem_V1_FriendRequest().serializedBytes(), author: author), "no record")
        XCTAssertThrowsError(try FriendRequestMessage(payload: [0xff, 0xff, 0xff], author: author), "not protobuf")
        XCTAssertThrowsError(try FriendRequestMessage(payload: [UInt8](repeating: 0, count: PayloadLimits.maximumPayloadBytes + 1), author: author))
    }

    /// Unknown fields (up to the frame cap) are not kept: the stored bytes are the re-encoded record.
    func testStoredRecordDropsUnknownFields() throws {
        // A record followed by an unknown field 127 of 8 KiB, spliced in by hand.
        var raw = request(record())
        var contact = try Tandem_V1_FriendRequest(serializedBytes: raw).contact.serializedBytes() as [UInt8]
        contact += [0xfa, 0x07, 0x80, 0x40] + [UInt8](repeating: 0x41, count: 8192)
        var m = Tandem_V1_FriendRequest()
        m.contact = try Tandem_V1_ContactRecord(serializedBytes: contact)
        raw = try m.serializedBytes()
        XCTAssertGreaterThan(raw.count, 8192)
        let v = try FriendRequestMessage(payload: raw, author: author)
        XCTAssertLessThan(v.contact.canonicalBytes.count, 200)
        XCTAssertLessThanOrEqual(v.contact.canonicalBytes.count, PayloadLimits.maximumRecordBytes)
        XCTAssertTrue(try Tandem_V1_ContactRecord(serializedBytes: v.contact.canonicalBytes).unknownFields.data.isEmpty)
    }

    func testClockReplyWithinADayOnly() throws {
        func reply(_ t1: UInt64, _ t2: UInt64, _ t3: UInt64) -> [UInt8] {
            var r = Tandem_V1_ClockReply(); r.t1Us = t1; r.t2Us = t2; r.t3Us = t3
            return bytes(r)
        }
        let now = UInt64(nowUs), day = PayloadLimits.clockToleranceMicros
        XCTAssertNoThrow(try ClockReplyMessage(payload: reply(now - day, now + day, now + day), nowUs: nowUs))
        XCTAssertThrowsError(try ClockReplyMessage(payload: reply(now - day - 1, now, now), nowUs: nowUs))
        XCTAssertThrowsError(try ClockReplyMessage(payload: reply(now, now + day + 1, now + day + 1), nowUs: nowUs))
        XCTAssertThrowsError(try ClockReplyMessage(payload: reply(now, now + 2, now + 1), nowUs: nowUs), "t3 before t2")
        // The reported crash: t1 = 0, t2 = t3 = 2^64-1.
        XCTAssertThrowsError(try ClockReplyMessage(payload: reply(0, .max, .max), nowUs: nowUs))
        for e in extremes { XCTAssertThrowsError(try ClockReplyMessage(payload: reply(now, e, e), nowUs: nowUs)) }
        var probe = Tandem_V1_ClockProbe(); probe.t1Us = .max
        XCTAssertThrowsError(try ClockProbeMessage(payload: bytes(probe), nowUs: nowUs))
        // The estimator itself saturates whatever it is fed.
        var est = ClockEstimator()
        _ = est.add(t1: 0, t2: .max, t3: .max, t4: 0)
        _ = est.add(t1: .min, t2: .max, t3: .max, t4: .max)
        _ = ClockSample(t1: .max, t2: .min, t3: .max, t4: .min)
    }

    func invite(start: UInt64, expires: UInt64? = nil, duration: UInt64 = 60_000, grace: UInt64 = 0,
                participants: Int = 2) -> [UInt8] {
        var m = Tandem_V1_ChallengeInvite()
        m.challengeID = Data(Sodium.randomBytes(16))
        m.participants = (0..<participants).map { _ in Data(Sodium.randomBytes(32)) }
        m.durationMs = duration
        m.startAtUs = start
        m.expiresAtUs = expires ?? (start == 0 ? UInt64(nowUs) : start)
        m.graceMs = grace
        return bytes(m)
    }

    func testChallengeInviteRanges() throws {
        let now = UInt64(nowUs), tol = PayloadLimits.challengeTimeToleranceMicros
        XCTAssertNoThrow(try ChallengeInviteMessage(payload: invite(start: 0), nowUs: nowUs))
        XCTAssertNoThrow(try ChallengeInviteMessage(payload: invite(start: now + tol), nowUs: nowUs))
        XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: now + tol + 1), nowUs: nowUs))
        // The reported crash loop: start_at_us = 2^63-1.
        for e in extremes { XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: e), nowUs: nowUs), "start \(e)") }
        XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: 0, expires: .max), nowUs: nowUs))
        XCTAssertNoThrow(try ChallengeInviteMessage(payload: invite(start: 0, duration: 1_000), nowUs: nowUs))
        XCTAssertNoThrow(try ChallengeInviteMessage(payload: invite(start: 0, duration: 86_400_000), nowUs: nowUs))
        XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: 0, duration: 999), nowUs: nowUs))
        XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: 0, duration: 86_400_001), nowUs: nowUs))
        for e in extremes { XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: 0, duration: e), nowUs: nowUs)) }
        XCTAssertNoThrow(try ChallengeInviteMessage(payload: invite(start: 0, grace: 3_600_000), nowUs: nowUs))
        XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: 0, grace: 3_600_001), nowUs: nowUs))
        XCTAssertNoThrow(try ChallengeInviteMessage(payload: invite(start: now, participants: 16), nowUs: nowUs))
        XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: now, participants: 17), nowUs: nowUs))
        XCTAssertThrowsError(try ChallengeInviteMessage(payload: invite(start: now, participants: 1), nowUs: nowUs))
    }

    func testChallengeStartQuitAndOutcomeRanges() throws {
        let now = UInt64(nowUs), tol = PayloadLimits.challengeTimeToleranceMicros
        func start(_ t: UInt64) -> [UInt8] {
            var s = Tandem_V1_ChallengeStart(); s.challengeID = Data(Sodium.randomBytes(16)); s.startAtUs = t
            s.roster = [Data(author), Data(other)]
            return bytes(s)
        }
        XCTAssertNoThrow(try ChallengeStartMessage(payload: start(now - tol), nowUs: nowUs))
        XCTAssertThrowsError(try ChallengeStartMessage(payload: start(now + tol + 1), nowUs: nowUs))
        for e in extremes { XCTAssertThrowsError(try ChallengeStartMessage(payload: start(e), nowUs: nowUs)) }
        func quit(_ e: UInt64) -> [UInt8] {
            var q = Tandem_V1_ChallengeQuit(); q.challengeID = Data(Sodium.randomBytes(16)); q.elapsedMs = e
            return bytes(q)
        }
        XCTAssertEqual(try ChallengeQuitMessage(payload: quit(0)).elapsedMs, 0)
        XCTAssertEqual(try ChallengeQuitMessage(payload: quit(86_400_000)).elapsedMs, 86_400_000)
        XCTAssertThrowsError(try ChallengeQuitMessage(payload: quit(86_400_001)))
        for e in extremes { XCTAssertThrowsError(try ChallengeQuitMessage(payload: quit(e))) }
        var badID = Tandem_V1_ChallengeAnswer(); badID.challengeID = Data(Sodium.randomBytes(15))
        XCTAssertThrowsError(try ChallengeAnswerMessage(payload: bytes(badID)))
        var o = Tandem_V1_ChallengeOutcome(); o.record = Data([1, 2, 3]); o.signature = Data(count: 64)
        XCTAssertThrowsError(try ChallengeOutcomeMessage(payload: bytes(o)), "not a record")
    }

    func testRelayGoodbyeRetryAtMostAnHour() throws {
        func goodbye(_ r: UInt64) -> [UInt8] { var g = Tandem_V1_RelayGoodbye(); g.retryAfterMs = r; g.reason = "bye"; return bytes(g) }
        XCTAssertEqual(try RelayGoodbyeMessage(payload: goodbye(0)).retryAfterMs, 0)
        XCTAssertEqual(try RelayGoodbyeMessage(payload: goodbye(3_600_000)).retryAfterMs, 3_600_000)
        XCTAssertThrowsError(try RelayGoodbyeMessage(payload: goodbye(3_600_001)))
        for e in extremes { XCTAssertThrowsError(try RelayGoodbyeMessage(payload: goodbye(e))) }
    }

    func testPresenceAndAck() throws {
        var p = Tandem_V1_Presence(); p.status = .UNRECOGNIZED(99); p.heartbeatSeconds = 3600
        XCTAssertEqual(try PresenceMessage(payload: bytes(p)).status, .idle)
        p.heartbeatSeconds = 3601
        XCTAssertThrowsError(try PresenceMessage(payload: bytes(p)))
        var a = Tandem_V1_Ack(); a.messageID = Data(count: 16)
        XCTAssertNoThrow(try AckMessage(payload: bytes(a)))
        a.messageID = Data(count: 17)
        XCTAssertThrowsError(try AckMessage(payload: bytes(a)))
    }

    func testDialPolicy() {
        XCTAssertEqual(AddressScope(host: "127.0.0.1"), .loopback)
        XCTAssertEqual(AddressScope(host: "::1"), .loopback)
        XCTAssertEqual(AddressScope(host: "[::ffff:10.1.2.3]"), .privateNetwork)
        XCTAssertEqual(AddressScope(host: "192.168.4.4"), .privateNetwork)
        XCTAssertEqual(AddressScope(host: "172.31.0.1"), .privateNetwork)
        XCTAssertEqual(AddressScope(host: "172.32.0.1"), .global)
        XCTAssertEqual(AddressScope(host: "169.254.1.1"), .linkLocal)
        XCTAssertEqual(AddressScope(host: "fe80::1%eth0"), .linkLocal)
        XCTAssertEqual(AddressScope(host: "0.0.0.0"), .unusable)
        XCTAssertEqual(AddressScope(host: "8.8.8.8"), .global)
        XCTAssertEqual(AddressScope(host: "relay.example.org"), .name)
        // A remote peer cannot make us probe our own machine or LAN.
        XCTAssertFalse(DialPolicy.mayRemember(claimed: "127.0.0.1", port: 22, claimerHost: "203.0.113.9"))
        XCTAssertFalse(DialPolicy.mayRemember(claimed: "192.168.1.1", port: 80, claimerHost: "203.0.113.9"))
        XCTAssertFalse(DialPolicy.mayRemember(claimed: "10.0.0.1", port: 80, claimerHost: nil), "through a relay or mail")
        XCTAssertTrue(DialPolicy.mayRemember(claimed: "10.0.0.7", port: 7810, claimerHost: "10.0.0.3"), "a LAN peer names a LAN host")
        XCTAssertTrue(DialPolicy.mayRemember(claimed: "127.0.0.1", port: 7810, claimerHost: "127.0.0.1"))
        XCTAssertTrue(DialPolicy.mayRemember(claimed: "198.51.100.4", port: 7810, claimerHost: nil))
        XCTAssertFalse(DialPolicy.mayRemember(claimed: "198.51.100.4", port: 0, claimerHost: nil))
        XCTAssertFalse(DialPolicy.mayDialSighting(host: "8.8.8.8"))
        XCTAssertTrue(DialPolicy.mayDialSighting(host: "10.9.0.2"))
        // Order: ours first; claimed ones at most two, never in the peer's order.
        let claimed = (1...6).map { DialPolicy.Candidate(host: "198.51.100.\($0)", port: 7810, source: .claimed) }
        let known = claimed + [DialPolicy.Candidate(host: "10.0.0.2", port: 7810, source: .lan),
                               DialPolicy.Candidate(host: "10.0.0.3", port: 7810, source: .manual),
                               DialPolicy.Candidate(host: "10.0.0.3", port: 7810, source: .observed)]
        let order = DialPolicy.order(known, shuffle: { $0.reversed() })
        XCTAssertEqual(order.map(\.source), [.manual, .lan, .claimed, .claimed])
        XCTAssertEqual(order[2].host, "198.51.100.6", "the shuffle, not the peer, decides")
    }
}

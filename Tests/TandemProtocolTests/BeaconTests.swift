import Foundation
import Sodium
import XCTest
@testable import TandemProtocol

final class BeaconTests: XCTestCase {
    let alice = fixedPair(1)
    let bob = fixedPair(2)
    let carol = fixedPair(3)
    /// A wall-clock instant in the middle of an epoch.
    let now: UInt64 = 1_790_000_150_000

    private func open(_ who: SigningKeyPair? = nil, createdAt: UInt64? = nil, name: String = "alice",
                      port: UInt16 = 7810) -> OpenBeacon {
        try! OpenBeacon.make(identity: who ?? alice, tcpPort: port, createdAt: createdAt ?? now, displayName: name)
    }

    private func receiver(_ who: SigningKeyPair, friends: [SigningKeyPair] = [],
                          configuration: BeaconReceiverConfiguration = .init()) -> BeaconReceiver {
        BeaconReceiver(keyring: BeaconKeyring(identity: who, friends: friends.map(\.publicKey)),
                       configuration: configuration, now: now)
    }

    private func rejected(_ bytes: [UInt8]) -> Bool {
        guard let b = try? OpenBeacon.parse(bytes) else { return true }
        return !b.verifySignature()
    }

    // MARK: open beacons

    func testOpenLayoutAndRoundTrip() throws {
        let b = open(name: "Alice ☀︎")
        let name = Array("Alice ☀︎".utf8)
        XCTAssertEqual(b.bytes.count, 121 + name.count)
        XCTAssertEqual(Array(b.bytes[0..<6]), [0x54, 0x44, 0x4D, 0x42, 1, 1])
        XCTAssertEqual(Array(b.bytes[6..<38]), alice.publicKey)
        XCTAssertEqual(Array(b.bytes[38..<40]), [0x1E, 0x82])
        XCTAssertEqual(Array(b.bytes[40..<48]), (0..<8).map { UInt8(truncatingIfNeeded: now >> (56 - 8 * $0)) })
        XCTAssertEqual(Int(b.bytes[56]), name.count)
        XCTAssertEqual(Array(b.bytes[57..<(57 + name.count)]), name)
        let signed = BeaconFormat.openSigningDomain + b.bytes[0..<(57 + name.count)]
        XCTAssertTrue(Ed25519.verify(signature: Array(b.bytes.suffix(64)), message: signed, publicKey: alice.publicKey))
        let parsed = try OpenBeacon.parse(b.bytes)
        XCTAssertEqual(parsed, b)
        XCTAssertTrue(parsed.verifySignature())
        XCTAssertEqual(parsed.displayName, "Alice ☀︎")
        XCTAssertEqual(parsed.tcpPort, 7810)
        XCTAssertEqual(parsed.createdAt, now)
    }

    func testEveryByteOfAnOpenBeaconIsCovered() {
        let b = open()
        for i in 0..<b.bytes.count {
            for bit in [0, 3, 7] {
                var m = b.bytes
                m[i] ^= UInt8(1 << bit)
                XCTAssertTrue(rejected(m), "flipping bit \(bit) of byte \(i) went unnoticed")
            }
        }
        // The domain tag matters too: a signature over the bare bytes does not verify.
        var bare = Array(b.bytes.dropLast(64))
        bare += alice.sign(bare)
        XCTAssertTrue(rejected(bare))
    }

    func testOpenTruncationsOversizeAndGarbage() {
        let b = open()
        for n in 0..<b.bytes.count {
            XCTAssertThrowsError(try OpenBeacon.parse(Array(b.bytes.prefix(n))), "prefix of \(n) bytes")
        }
        XCTAssertThrowsError(try OpenBeacon.parse(b.bytes + [0]))
        var r = receiver(bob)
        XCTAssertEqual(r.receive([UInt8](repeating: 0x54, count: 513), from: "10.0.0.1", now: now), .dropped(.oversized))
        XCTAssertEqual(r.receive(b.bytes + [UInt8](repeating: 0, count: 400), from: "10.0.0.1", now: now), .dropped(.oversized))
        XCTAssertEqual(r.receive([], from: "10.0.0.1", now: now), .dropped(.malformed))
        var rng = SplitMix64(seed: 7)
        for i in 0..<5000 {
            let n = Int.random(in: 0...512, using: &rng)
            var g = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if i % 2 == 0, g.count >= 6 { g.replaceSubrange(0..<6, with: [0x54, 0x44, 0x4D, 0x42, 1, UInt8(1 + i % 4)]) }
            switch r.receive(g, from: "10.0.0.\(i % 200)", now: now + UInt64(i)) {
            case .accepted: XCTFail("garbage accepted")
            case .dropped: break
            }
        }
        // Name length byte pointing past the end, and an unknown version / kind.
        var m = b.bytes
        m[56] = 65
        XCTAssertThrowsError(try OpenBeacon.parse(m))
        m = b.bytes
        m[4] = 2
        XCTAssertThrowsError(try OpenBeacon.parse(m))
        m = b.bytes
        m[5] = 3
        XCTAssertThrowsError(try beaconKind(of: m))
    }

    func testNames() throws {
        XCTAssertNoThrow(try OpenBeacon.make(identity: alice, tcpPort: 1, createdAt: now, displayName: String(repeating: "a", count: 64)))
        XCTAssertThrowsError(try OpenBeacon.make(identity: alice, tcpPort: 1, createdAt: now, displayName: String(repeating: "a", count: 65)))
        XCTAssertThrowsError(try OpenBeacon.make(identity: alice, tcpPort: 1, createdAt: now, displayName: "a\nb"))
        XCTAssertThrowsError(try OpenBeacon.make(identity: alice, tcpPort: 0, createdAt: now, displayName: "a"))
        let long = String(repeating: "é", count: 40) // 80 bytes
        let fit = OpenBeacon.fittingName(long)
        XCTAssertEqual(fit.utf8.count, 64)
        XCTAssertEqual(OpenBeacon.fittingName("a\u{7}b\nc"), "abc")
        XCTAssertNoThrow(try OpenBeacon.make(identity: alice, tcpPort: 1, createdAt: now, displayName: fit))
        // A signed beacon whose name is not UTF-8 is refused by the parser.
        var bytes = BeaconFormat.magic + [1, 1] + alice.publicKey + [0x1E, 0x82]
        appendBigEndian(&bytes, now)
        bytes += [UInt8](repeating: 9, count: 8) + [2, 0xC3, 0x28]
        bytes += alice.sign(BeaconFormat.openSigningDomain + bytes)
        XCTAssertThrowsError(try OpenBeacon.parse(bytes))
    }

    func testOpenFreshnessReplayAndOwn() {
        var r = receiver(bob)
        let b = open()
        guard case .accepted(let s) = r.receive(b.bytes, from: "10.0.0.1", now: now) else { return XCTFail() }
        XCTAssertEqual(s, BeaconSighting(publicKey: alice.publicKey, tcpPort: 7810, displayName: "alice", isFriendBeacon: false))
        XCTAssertEqual(r.receive(b.bytes, from: "10.0.0.1", now: now + 1), .dropped(.replayed))
        XCTAssertEqual(r.receive(b.bytes, from: "10.0.0.2", now: now + 299_999), .dropped(.replayed))
        XCTAssertEqual(r.receive(b.bytes, from: "10.0.0.2", now: now + 300_001), .dropped(.stale))
        let f = BeaconFormat.openFreshnessMilliseconds
        XCTAssertEqual(r.receive(open(createdAt: now - f - 1).bytes, from: "10.0.0.3", now: now), .dropped(.stale))
        XCTAssertEqual(r.receive(open(createdAt: now + f + 1).bytes, from: "10.0.0.3", now: now), .dropped(.future))
        if case .dropped(let why) = r.receive(open(createdAt: now - f).bytes, from: "10.0.0.3", now: now) { XCTFail("\(why)") }
        if case .dropped(let why) = r.receive(open(createdAt: now + f).bytes, from: "10.0.0.3", now: now) { XCTFail("\(why)") }
        XCTAssertEqual(r.receive(open(bob).bytes, from: "10.0.0.4", now: now), .dropped(.own))
        // A bad signature is counted as such.
        var m = open().bytes
        m[m.count - 1] ^= 1
        XCTAssertEqual(r.receive(m, from: "10.0.0.5", now: now), .dropped(.badSignature))
    }

    // MARK: private beacons

    func testPairwiseKeysAgreeAndAreDirectional() {
        let a = BeaconKeyring(identity: alice, friends: [bob.publicKey])
        let b = BeaconKeyring(identity: bob, friends: [alice.publicKey])
        XCTAssertEqual(a.friends[0].sendKey.exposedCopy, b.friends[0].receiveKey.exposedCopy)
        XCTAssertEqual(a.friends[0].receiveKey.exposedCopy, b.friends[0].sendKey.exposedCopy)
        XCTAssertNotEqual(a.friends[0].sendKey.exposedCopy, a.friends[0].receiveKey.exposedCopy)
        // Own key, duplicates, garbage and non-points are refused.
        let k = BeaconKeyring(identity: alice, friends: [alice.publicKey, bob.publicKey, bob.publicKey, [1, 2, 3],
                                                        [1] + [UInt8](repeating: 0, count: 31)])
        XCTAssertEqual(k.friends.map(\.publicKey), [bob.publicKey])
        XCTAssertEqual(k.rejected.count, 3)
    }

    func testPrivateLayoutAndRecognition() throws {
        let epoch = BeaconFormat.epoch(atMilliseconds: now)
        let a = BeaconKeyring(identity: alice, friends: [bob.publicKey])
        let beacons = PrivateBeacon.makeAll(keyring: a, tcpPort: 40123, epoch: epoch)
        XCTAssertEqual(beacons.count, 1)
        let p = beacons[0]
        XCTAssertEqual(p.bytes.count, 27 + 18 * 8)
        XCTAssertEqual(Array(p.bytes[0..<6]), [0x54, 0x44, 0x4D, 0x42, 1, 2])
        XCTAssertEqual(readBigEndian(p.bytes, at: 6, as: UInt32.self), epoch)
        XCTAssertEqual(p.bytes[26], 8)
        XCTAssertEqual(try PrivateBeacon.parse(p.bytes), p)
        // The key appears nowhere, nor the port in clear at a fixed place.
        XCTAssertNil(find(alice.publicKey.prefix(8), in: p.bytes))

        // Bob, a friend, recognises Alice.
        var rb = receiver(bob, friends: [alice])
        guard case .accepted(let s) = rb.receive(p.bytes, from: "10.0.0.1", now: now) else { return XCTFail() }
        XCTAssertEqual(s, BeaconSighting(publicKey: alice.publicKey, tcpPort: 40123, displayName: nil, isFriendBeacon: true))
        XCTAssertEqual(rb.receive(p.bytes, from: "10.0.0.1", now: now + 10), .dropped(.replayed))

        // Carol knows Alice's ID and calls her a friend, but Alice did not make the beacon for her.
        var rc = receiver(carol, friends: [alice, bob])
        XCTAssertEqual(rc.receive(p.bytes, from: "10.0.0.1", now: now), .dropped(.unrecognised))
        var rn = receiver(carol)
        XCTAssertEqual(rn.receive(p.bytes, from: "10.0.0.1", now: now), .dropped(.unrecognised))
        // Alice's own echo.
        var ra = receiver(alice, friends: [bob])
        ra.noteSent(p)
        XCTAssertEqual(ra.receive(p.bytes, from: "10.0.0.2", now: now), .dropped(.own))
    }

    func testReflectionFails() {
        // Bob re-sends Alice's beacon to Alice, as if it were his: Alice must not read it as Bob's.
        let epoch = BeaconFormat.epoch(atMilliseconds: now)
        let p = PrivateBeacon.makeAll(keyring: BeaconKeyring(identity: alice, friends: [bob.publicKey]),
                                      tcpPort: 7810, epoch: epoch)[0]
        var ra = receiver(alice, friends: [bob]) // a fresh receiver: no memory of having sent it
        XCTAssertEqual(ra.receive(p.bytes, from: "10.0.0.2", now: now), .dropped(.unrecognised))
        // And a beacon Bob made for Alice is recognised by Alice only, not by Bob himself.
        let q = PrivateBeacon.makeAll(keyring: BeaconKeyring(identity: bob, friends: [alice.publicKey]),
                                      tcpPort: 7810, epoch: epoch)[0]
        var rb = receiver(bob, friends: [alice])
        XCTAssertEqual(rb.receive(q.bytes, from: "10.0.0.2", now: now), .dropped(.unrecognised))
        if case .dropped(let why) = ra.receive(q.bytes, from: "10.0.0.2", now: now) { XCTFail("\(why)") }
    }

    func testPrivateTamperingTruncationAndEpochs() {
        let epoch = BeaconFormat.epoch(atMilliseconds: now)
        let a = BeaconKeyring(identity: alice, friends: [bob.publicKey])
        let p = PrivateBeacon.makeAll(keyring: a, tcpPort: 7810, epoch: epoch)[0]
        // Any change to the bytes the locators cover hides the beacon from Bob.
        for i in 0..<(27 + 16) {
            var m = p.bytes
            m[i] ^= 0x10
            var rb = receiver(bob, friends: [alice])
            switch rb.receive(m, from: "10.0.0.1", now: now) {
            case .accepted: XCTFail("change at byte \(i) went unnoticed")
            case .dropped: break
            }
        }
        for n in 0..<p.bytes.count {
            XCTAssertThrowsError(try PrivateBeacon.parse(Array(p.bytes.prefix(n))))
        }
        XCTAssertThrowsError(try PrivateBeacon.parse(p.bytes + [0]))
        var m = p.bytes
        m[26] = 9
        XCTAssertThrowsError(try PrivateBeacon.parse(m))

        let ms = BeaconFormat.epochMilliseconds
        for (delta, expected) in [(-2, BeaconVerdict.dropped(.stale)), (2, .dropped(.future))] {
            let q = PrivateBeacon.makeAll(keyring: a, tcpPort: 7810, epoch: UInt32(Int(epoch) + delta))[0]
            var rb = receiver(bob, friends: [alice])
            XCTAssertEqual(rb.receive(q.bytes, from: "10.0.0.1", now: now), expected, "epoch \(delta)")
        }
        for delta in [-1, 0, 1] {
            let q = PrivateBeacon.makeAll(keyring: a, tcpPort: 7810, epoch: UInt32(Int(epoch) + delta))[0]
            var rb = receiver(bob, friends: [alice])
            guard case .accepted = rb.receive(q.bytes, from: "10.0.0.1", now: now) else { return XCTFail("epoch \(delta)") }
            // Replayed at any later instant it is refused: as a replay while the epoch is
            // acceptable, as stale after.
            let later = now + ms
            let v = rb.receive(q.bytes, from: "10.0.0.9", now: later)
            XCTAssertTrue(v == .dropped(.replayed) || v == .dropped(.stale), "\(v)")
            XCTAssertEqual(rb.receive(q.bytes, from: "10.0.0.9", now: now + 3 * ms), .dropped(.stale))
        }
    }

    func testSlotPaddingAndManyFriends() {
        let epoch = BeaconFormat.epoch(atMilliseconds: now)
        let friends = (10..<60).map { fixedPair(UInt8($0)) }
        for (count, expected) in [(1, [8]), (8, [8]), (9, [16]), (24, [24]), (25, [24, 8]), (50, [24, 24, 8])] {
            let k = BeaconKeyring(identity: alice, friends: friends.prefix(count).map(\.publicKey))
            let beacons = PrivateBeacon.makeAll(keyring: k, tcpPort: 7810, epoch: epoch)
            XCTAssertEqual(beacons.map(\.slots.count), expected, "\(count) friends")
            XCTAssertTrue(beacons.allSatisfy { $0.bytes.count <= BeaconFormat.maximumLength })
        }
        XCTAssertEqual(PrivateBeacon.makeAll(keyring: BeaconKeyring(identity: alice, friends: []), tcpPort: 1, epoch: epoch).count, 0)
        // Each of 50 friends recognises exactly one of the three beacons.
        let k = BeaconKeyring(identity: alice, friends: friends.map(\.publicKey))
        let beacons = PrivateBeacon.makeAll(keyring: k, tcpPort: 7810, epoch: epoch)
        for f in friends {
            let theirs = BeaconKeyring(identity: f, friends: [alice.publicKey])
            XCTAssertEqual(beacons.filter { theirs.recognise($0)?.publicKey == alice.publicKey }.count, 1)
        }
        XCTAssertEqual(BeaconKeyring(identity: alice, friends: [bob.publicKey]).recognise(beacons[0])?.publicKey, nil)
    }

    func testPrivateBeaconsOfDifferentWindowsShareNothing() {
        let a = BeaconKeyring(identity: alice, friends: [bob.publicKey, carol.publicKey])
        let e = BeaconFormat.epoch(atMilliseconds: now)
        for _ in 0..<20 {
            let p = PrivateBeacon.makeAll(keyring: a, tcpPort: 40123, epoch: e)[0]
            let q = PrivateBeacon.makeAll(keyring: a, tcpPort: 40123, epoch: e + 1)[0]
            // Fixed fields: magic, version, kind [0, 6) and the slot count [26]. The epoch [6, 10) is
            // the time, the same for every sender. Everything else must look independent: no
            // 4-byte run of one beacon's variable part occurs in the other's.
            XCTAssertEqual(p.bytes[0..<6], q.bytes[0..<6])
            let vp = Array(p.bytes[10..<26]) + Array(p.bytes[27...])
            let vq = Array(q.bytes[10..<26]) + Array(q.bytes[27...])
            var windows = Set<[UInt8]>()
            for i in 0...(vp.count - 4) { windows.insert(Array(vp[i..<(i + 4)])) }
            for i in 0...(vq.count - 4) { XCTAssertFalse(windows.contains(Array(vq[i..<(i + 4)])), "shared 4 bytes at \(i)") }
            // Two beacons in the same window are just as unrelated.
            let r = PrivateBeacon.makeAll(keyring: a, tcpPort: 40123, epoch: e)[0]
            XCTAssertNotEqual(Array(r.bytes[27..<43]), Array(p.bytes[27..<43]))
        }
    }

    // MARK: rate limits and bounded memory

    func testTokenBucket() {
        var b = TokenBucket(capacity: 3, refillPerSecond: 2, now: 1000)
        XCTAssertEqual((0..<5).map { _ in b.tryTake(now: 1000) }, [true, true, true, false, false])
        XCTAssertFalse(b.tryTake(now: 1499))
        XCTAssertTrue(b.tryTake(now: 1500))
        XCTAssertFalse(b.tryTake(now: 1500))
        XCTAssertFalse(b.isFull(now: 2000))
        XCTAssertTrue(b.isFull(now: 3000))
        XCTAssertEqual((0..<4).map { _ in b.tryTake(now: 10_000) }, [true, true, true, false]) // capped at 3
        XCTAssertFalse(b.tryTake(now: 5000)) // time going back gains nothing
    }

    func testKeyedLimiterIsBoundedUnderManySources() {
        var l = KeyedRateLimiter<String>(capacity: 2, refillPerSecond: 1, maximumKeys: 1000)
        XCTAssertEqual(l.check("a", now: 0), .allowed)
        XCTAssertEqual(l.check("a", now: 0), .allowed)
        XCTAssertEqual(l.check("a", now: 0), .limited)
        XCTAssertEqual(l.check("a", now: 1000), .allowed)
        var counts: [KeyedRateLimiter<String>.Verdict: Int] = [:]
        for i in 0..<100_000 {
            let key = "10.\(i >> 16).\((i >> 8) & 255).\(i & 255)"
            counts[l.check(key, now: 1000 + UInt64(i / 1000)), default: 0] += 1
            XCTAssertLessThanOrEqual(l.trackedKeys, 1000)
        }
        XCTAssertEqual(counts[.allowed], 999)
        XCTAssertEqual(counts[.tooManyKeys], 100_000 - 999)
        // Once their buckets have refilled, old keys make room for new ones.
        XCTAssertEqual(l.check("new", now: 10_000), .allowed)
        XCTAssertLessThanOrEqual(l.trackedKeys, 1000)
    }

    func testReceiverIsBoundedUnder100kSources() {
        var config = BeaconReceiverConfiguration()
        config.maximumSources = 1024
        var r = receiver(bob, configuration: config)
        let b = open()
        var rng = SplitMix64(seed: 2)
        var verdicts: [String: Int] = [:]
        for i in 0..<100_000 {
            let ip = "10.\(rng.next() % 256).\(rng.next() % 256).\(rng.next() % 256)"
            let v = r.receive(b.bytes, from: ip, now: now + UInt64(i)) // 1 ms apart: 100 s in all
            switch v {
            case .accepted: verdicts["accepted", default: 0] += 1
            case .dropped(let why): verdicts[why.rawValue, default: 0] += 1
            }
        }
        XCTAssertLessThanOrEqual(r.trackedSources, 1024)
        XCTAssertLessThanOrEqual(r.rememberedBeacons, 1)
        XCTAssertEqual(verdicts["accepted"], 1)
        XCTAssertEqual(verdicts.values.reduce(0, +), 100_000)
        // The global limit held: at most burst + rate × time reached the signature check.
        XCTAssertLessThanOrEqual((verdicts["replayed"] ?? 0) + 1, 100 + 50 * 100 + 1)
        XCTAssertGreaterThan(verdicts["rate_limited"] ?? 0, 0)
    }

    func testPerSourceLimit() {
        var r = receiver(bob)
        var accepted = 0, limited = 0
        for i in 0..<30 {
            switch r.receive(open().bytes, from: "10.0.0.1", now: now + UInt64(i)) {
            case .accepted: accepted += 1
            case .dropped(let why): XCTAssertEqual(why, .rateLimited); limited += 1
            }
        }
        XCTAssertEqual(accepted, 10)
        XCTAssertEqual(limited, 20)
        // Another source is not affected.
        guard case .accepted = r.receive(open().bytes, from: "10.0.0.2", now: now + 30) else { return XCTFail() }
    }

    func testReplayMemoryRefusesWhenFull() {
        var m = BeaconReplayMemory(capacity: 2)
        let ids = (0..<3).map { _ in MessageID.random() }
        XCTAssertEqual(m.check(ids[0], expiresAt: 100, now: 0), .fresh)
        XCTAssertEqual(m.check(ids[1], expiresAt: 200, now: 0), .fresh)
        XCTAssertEqual(m.check(ids[2], expiresAt: 200, now: 0), .full)
        XCTAssertEqual(m.check(ids[0], expiresAt: 100, now: 100), .replayed)
        XCTAssertEqual(m.check(ids[2], expiresAt: 200, now: 101), .fresh)
        XCTAssertEqual(m.count, 2)
    }

    private func find(_ needle: ArraySlice<UInt8>, in haystack: [UInt8]) -> Int? {
        guard needle.count <= haystack.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i..<(i + needle.count)].elementsEqual(needle) {
            return i
        }
        return nil
    }
}

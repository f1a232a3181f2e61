import Foundation
import TandemKeys
import TandemProtocol
import TandemStore
import XCTest
@testable import TandemNode
@testable import NodeFocus

/// The focus service's pure parts: the key-frame codec clients send (hostile input), and the
/// judgement of stored focus settings at start (a damaged row is set aside, never fatal).
final class FocusServiceTests: XCTestCase {
    func testKeyFramesRoundTripAndAreSampledDeterministically() throws {
        let shape = try XCTUnwrap(SyntheticShapes.named("mug"))
        let frame = SyntheticShapes.view(of: shape, seed: 3, points: 8000)
        XCTAssertGreaterThan(frame.points.count, KeyFrameWire.maximumPoints)
        let bytes = KeyFrameWire.encode(frame)
        XCTAssertEqual(bytes, KeyFrameWire.encode(frame), "the same frame gives the same bytes")
        XCTAssertEqual(bytes.count, 9 + KeyFrameWire.maximumPoints * 12)
        let back = try KeyFrameWire.decode(bytes)
        XCTAssertEqual(back.points.count, KeyFrameWire.maximumPoints)
        XCTAssertTrue(back.points.allSatisfy { p in frame.points.contains(p) }, "a sample of the frame's own points")
        let small = PointFrame(points: [SIMD3(0, 0, 0.5), SIMD3(0.01, 0, 0.5)], trackingState: .limited)
        XCTAssertEqual(try KeyFrameWire.decode(KeyFrameWire.encode(small)), small)
        // A region of interest filters before sampling.
        let roi = RegionOfInterest(minimum: SIMD3(-1, -1, 0), maximum: SIMD3(0.005, 1, 0.5))
        XCTAssertEqual(try KeyFrameWire.decode(KeyFrameWire.encode(small, roi: roi)).points, [SIMD3(0, 0, 0.5)])
    }

    func testHostileKeyFramesAreRefusedWithAReason() {
        let good = KeyFrameWire.encode(PointFrame(points: [SIMD3(0, 0, 0.5)]))
        var cases: [[UInt8]] = [[], Array("TKF1".utf8), Array("TKF1".utf8) + [0, 0, 0, 0, 0], Array("TKF2".utf8) + [0, 1, 0, 0, 0] + [UInt8](repeating: 0, count: 12)]
        cases.append(Array(good.dropLast()))
        cases.append(good + [0])
        var badTracking = good; badTracking[4] = 9; cases.append(badTracking)
        var huge = good; huge[5] = 0xFF; huge[6] = 0xFF; huge[7] = 0xFF; huge[8] = 0xFF; cases.append(huge)
        var nan = good; nan[9...12] = [0x00, 0x00, 0xC0, 0x7F][...]; cases.append(nan)
        var far = good; far[9...12] = [0x00, 0x00, 0x80, 0x4B][...]; cases.append(far) // 1.67e7 m
        for c in cases {
            XCTAssertThrowsError(try KeyFrameWire.decode(c), "\(c.prefix(16))") { e in
                XCTAssertFalse("\(e)".isEmpty)
            }
        }
        XCTAssertNoThrow(try KeyFrameWire.decode(good))
    }

    func testStoredRowsAreJudgedAndBadOnesSetAsideEachOnItsOwn() throws {
        let modes = try FocusModes(keys: [FocusKey(id: "pen", name: "pen"), FocusKey(id: "card", name: "card")],
                                   modes: [FocusMode(name: "deep", mainKey: "pen", temporaryKeys: ["card"], blockedSites: ["example.com"],
                                                     temporaryItems: ["example.com"])])
        let tag = FocusKeyMaterialRecord(keyId: "pen", kind: "tag", salt: Data(count: 16), hash: Data(repeating: 0xAB, count: 32))
        let lock = FocusLockRows(lock: FocusLockRecord(activeMode: "deep", lockedMode: "deep", hold: "key"), spent: [FocusSpentKeyRecord(keyId: "card")])
        var stored = StoredFocusState(configuration: modes.rows, materials: [
            tag,
            FocusKeyMaterialRecord(keyId: "card", kind: "tag", salt: Data([0]), hash: Data([1])),    // damaged: short salt
            FocusKeyMaterialRecord(keyId: "ghost", kind: "tag", salt: Data(count: 16), hash: Data(count: 32)), // no such key
        ], lock: lock, challenges: [FocusChallengeRecord(challengeId: "abcd", mode: "deep"), FocusChallengeRecord(challengeId: "XYZ", mode: "deep")])
        XCTAssertEqual(modes.rows.modeItems.map(\.list), ["site", "temporary"])
        let (state, aside) = FocusService.judge(stored)
        XCTAssertEqual(state.modes, modes, "the configuration reads back from its rows")
        XCTAssertEqual(Set(state.materials.keys), ["pen"])
        XCTAssertEqual(state.challengeModes, ["abcd": "deep"])
        XCTAssertEqual(state.lock.locked?.mode, "deep")
        XCTAssertEqual(state.lock.locked?.spent, ["card"])
        XCTAssertEqual(state.lock.rows, lock, "the lock reads back from its rows")
        XCTAssertEqual(Set(aside.map(\.row)), [.material(keyId: "card"), .material(keyId: "ghost"), .challenge(id: "XYZ")])
        XCTAssertEqual(aside.first { $0.row == .material(keyId: "ghost") }?.reason, "no such key")

        // A mode that breaks a rule (a main key that does not exist) is set aside alone: the other
        // mode and the keys stay. The lock then names a mode that is gone and opens at validation.
        stored.configuration.modes[0].mainKey = "nobody"
        stored.configuration.modes.append(FocusModeRecord(name: "open", mainKey: "pen", temporaryDurationMs: 300_000))
        stored.configuration.modeItems.append(FocusModeItemRecord(mode: "gone", list: "site", position: 0, item: "x.example"))
        let (s2, q2) = FocusService.judge(stored)
        XCTAssertEqual(s2.modes.keys.map(\.id), ["card", "pen"])
        XCTAssertEqual(s2.modes.modes.map(\.name), ["open"])
        XCTAssertEqual(q2.filter { if case .mode = $0.row { return true } else { return false } }.map(\.row),
                       [.mode(name: "deep"), .mode(name: "gone")])
        XCTAssertTrue(q2.first { $0.row == .mode(name: "deep") }?.data.contains("nobody") ?? false, "a readable copy goes with it")
        let (opened, step) = FocusLock.validated(loaded: s2.lock, modes: s2.modes, nowMs: 1_800_000_000_000)
        XCTAssertFalse(opened.isLocked)
        XCTAssertTrue(step.events.contains(.unlocked(mode: "deep", reason: .modeRemoved)))

        // Keys that break a rule go alone too (an id with a space, a name taken), and so does a mode that uses one.
        let keys = [FocusKeyRecord(id: "a b", name: "a"), FocusKeyRecord(id: "c", name: "pen"), FocusKeyRecord(id: "pen", name: "pen")]
        let (s3, q3) = FocusService.judge(StoredFocusState(configuration: FocusConfigurationRows(
            keys: keys, modes: [FocusModeRecord(name: "m", mainKey: "a b", temporaryDurationMs: 300_000)])))
        XCTAssertEqual(s3.modes.keys.map(\.id), ["c"])
        XCTAssertEqual(Set(q3.map(\.row)), [.key(id: "a b"), .key(id: "pen"), .mode(name: "m")])

        // Garbage never traps.
        let (s4, q4) = FocusService.judge(StoredFocusState(
            configuration: FocusConfigurationRows(modes: [FocusModeRecord(name: "", mainKey: "\u{0}", temporaryDurationMs: .min)]),
            materials: [FocusKeyMaterialRecord(keyId: "x", kind: "object", sealed: Data(), frames: .max)],
            lock: FocusLockRows(lock: FocusLockRecord(lockedMode: "", hold: "until", untilMs: nil))))
        XCTAssertTrue(s4.lock.isLocked, "read leniently; validated opens it at the start")
        XCTAssertFalse(FocusLock.validated(loaded: s4.lock, modes: s4.modes, nowMs: 0).0.isLocked)
        XCTAssertEqual(q4.count, 2)
    }

    func testKeyMaterialRowsReadBackAndBrokenOnesDoNot() {
        let tag = FocusKeyMaterial.tag(salt: [UInt8](repeating: 1, count: 16), hash: [UInt8](repeating: 2, count: 32))
        let object = FocusKeyMaterial.object(sealed: [UInt8](repeating: 3, count: 41), frames: 9)
        XCTAssertEqual(FocusKeyMaterial(record: tag.record(keyId: "k")), tag)
        XCTAssertEqual(FocusKeyMaterial(record: object.record(keyId: "k")), object)
        for bad in [FocusKeyMaterialRecord(keyId: "k", kind: "tag", salt: Data(count: 15), hash: Data(count: 32)),
                    FocusKeyMaterialRecord(keyId: "k", kind: "tag", salt: Data(count: 16), hash: Data(count: 32), frames: 1),
                    FocusKeyMaterialRecord(keyId: "k", kind: "object", sealed: Data(count: 40), frames: 9),
                    FocusKeyMaterialRecord(keyId: "k", kind: "object", sealed: Data(count: 41), frames: 65),
                    FocusKeyMaterialRecord(keyId: "k", kind: "qr", salt: Data(count: 16), hash: Data(count: 32))] {
            XCTAssertNil(FocusKeyMaterial(record: bad), "\(bad)")
        }
    }
}

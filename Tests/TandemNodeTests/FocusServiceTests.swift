import Foundation
import TandemKeys
import TandemProtocol
import XCTest
@testable import TandemNode

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

    func testStoredSettingsAreJudgedAndBadOnesSetAside() throws {
        let modes = try FocusModes(keys: [FocusKey(id: "pen", name: "pen"), FocusKey(id: "card", name: "card")],
                                   modes: [FocusMode(name: "deep", mainKey: "pen", temporaryKeys: ["card"], blockedSites: ["example.com"])])
        let modesJSON = String(decoding: try JSONEncoder().encode(modes), as: UTF8.self)
        let tag = #"{"kind":"tag","salt":"000102030405060708090a0b0c0d0e0f","hash":"\#(String(repeating: "ab", count: 32))"}"#
        let lock = #"{"v":1,"activeMode":"deep","lockedMode":"deep","hold":"key","spent":["card"]}"#
        let rows: [(key: String, value: String)] = [
            ("focus.modes", modesJSON), ("focus.lock", lock), ("focus.key.pen", tag),
            ("focus.key.card", #"{"kind":"tag","salt":"00","hash":"11"}"#),      // damaged: short salt
            ("focus.key.ghost", tag),                                            // no such key
            ("focus.challenge.abcd", "deep"), ("focus.challenge.XYZ", "deep"),   // a bad id
        ]
        let (state, quarantined) = FocusService.judge(rows)
        XCTAssertEqual(state.modes, modes)
        XCTAssertEqual(Set(state.materials.keys), ["pen"])
        XCTAssertEqual(state.challengeModes, ["abcd": "deep"])
        XCTAssertEqual(state.lock.locked?.mode, "deep")
        XCTAssertEqual(Set(quarantined.map(\.0)), ["focus.key.card", "focus.key.ghost", "focus.challenge.XYZ"])

        // Modes that break a rule (a main key that does not exist) are set aside whole; the lock
        // then refers to a mode that is gone and opens at validation.
        let broken = modesJSON.replacingOccurrences(of: "\"mainKey\":\"pen\"", with: "\"mainKey\":\"nobody\"")
        let (s2, q2) = FocusService.judge([("focus.modes", broken), ("focus.lock", lock)])
        XCTAssertEqual(s2.modes, FocusModes())
        XCTAssertEqual(q2.map(\.0), ["focus.modes"])
        let (opened, step) = FocusLock.validated(loaded: s2.lock, modes: s2.modes, nowMs: 1_800_000_000_000)
        XCTAssertFalse(opened.isLocked)
        XCTAssertTrue(step.events.contains(.unlocked(mode: "deep", reason: .modeRemoved)))
        // Garbage never traps.
        let (s3, q3) = FocusService.judge([("focus.modes", "{"), ("focus.lock", "[]"), ("focus.key.x", "\u{0}")])
        XCTAssertFalse(s3.lock.isLocked)
        XCTAssertEqual(q3.count, 3)
    }
}

import Foundation
import XCTest
@testable import TandemKeys

/// Enrolment frames: 1,500 points (the suite must stay fast in debug builds).
func enrolled(_ name: String, frames: Int = 12, seed: UInt64 = 100) -> (ObjectEnrollment, ObjectTemplate?) {
    var e = ObjectEnrollment()
    var s = seed
    while !e.isComplete, s < seed + UInt64(frames) {
        _ = e.add(SyntheticShapes.view(of: shape(name), seed: s, points: 1_500))
        s += 1
    }
    return (e, try? e.finish(force: !e.isComplete))
}

enum Templates {
    nonisolated(unsafe) static var cache: [String: ObjectTemplate] = [:]
    static func get(_ name: String) -> ObjectTemplate {
        if let t = cache[name] { return t }
        let t = enrolled(name).1!
        cache[name] = t
        return t
    }
}

final class EnrollmentTests: XCTestCase {
    func testCompletesWithEightDiverseFrames() throws {
        var e = ObjectEnrollment()
        for s in 0..<UInt64(8) {
            let r = e.add(SyntheticShapes.view(of: shape("box-2-3-4"), seed: 200 + s, points: 1_500))
            XCTAssertTrue(r.accepted, r.guidance ?? "")
        }
        XCTAssertEqual(e.goodFrames, 8)
        XCTAssertTrue(e.isComplete, "viewpoints \(e.viewpoints)")
        XCTAssertEqual(e.warnings, [])
        let t = try e.finish(force: false)
        XCTAssertEqual(t.views.count, 8)
        XCTAssertGreaterThanOrEqual(t.views.filter(\.registered).count, 6)
        XCTAssertLessThanOrEqual(t.model.count, ObjectTemplate.maximumModelPoints)
        XCTAssertFalse(t.flags.contains(.forced))
    }

    func testSameViewpointEightTimesIsNotEnough() throws {
        var e = ObjectEnrollment()
        let pose = SyntheticPose.random(seed: 7)
        var last: EnrollmentFrameReport?
        for s in 0..<UInt64(8) {
            last = e.add(SyntheticShapes.view(of: shape("box-2-3-4"), pose: pose, seed: 300 + s, points: 1_500 + Int(s) * 100))
        }
        XCTAssertEqual(e.goodFrames, 8)
        XCTAssertEqual(e.viewpoints, 1)
        XCTAssertFalse(e.isComplete)
        XCTAssertEqual(last?.guidance, "same view as before: turn the object or move around it")
        XCTAssertThrowsError(try e.finish(force: false))
    }

    func testForcedFinishNeedsThreeGoodFrames() throws {
        var e = ObjectEnrollment()
        for s in 0..<UInt64(2) { _ = e.add(SyntheticShapes.view(of: shape("mug"), seed: s, points: 1_500)) }
        XCTAssertThrowsError(try e.finish(force: true))
        let bad = e.add(PointFrame(points: [SIMD3(0, 0, 1)]))
        XCTAssertFalse(bad.accepted)
        XCTAssertEqual(e.rejectedFrames, 1)
        _ = e.add(SyntheticShapes.view(of: shape("mug"), seed: 9, points: 1_500))
        let forced = try e.finish(force: true)
        XCTAssertTrue(forced.flags.contains(.forced))
        XCTAssertTrue(forced.warnings.contains { $0.contains("less reliable") })
    }

    func testFlatPlateWarning() {
        var e = ObjectEnrollment()
        for s in 0..<UInt64(3) { _ = e.add(SyntheticShapes.view(of: shape("tile"), seed: s, points: 1_500)) }
        XCTAssertTrue(e.warnings.contains { $0.hasPrefix("flat object") }, "\(e.warnings)")
    }

    func testCodableRoundTrip() throws {
        var e = ObjectEnrollment(roi: RegionOfInterest(minimum: SIMD3(-1, -1, 0), maximum: SIMD3(1, 1, 2)))
        for s in 0..<UInt64(3) { _ = e.add(SyntheticShapes.view(of: shape("mug"), seed: s, points: 1_500)) }
        let data = try JSONEncoder().encode(e)
        let back = try JSONDecoder().decode(ObjectEnrollment.self, from: data)
        XCTAssertEqual(back, e)
        // A tampered enrolment is refused, not trapped on.
        let bad = String(decoding: data, as: UTF8.self).replacingOccurrences(of: "\"quality\":", with: "\"quality\":7")
        XCTAssertThrowsError(try JSONDecoder().decode(ObjectEnrollment.self, from: Data(bad.utf8)))
    }
}

final class TemplateTests: XCTestCase {
    func testSerializationRoundTripAndValidation() throws {
        let t = Templates.get("mug")
        let bytes = t.serialized()
        XCTAssertEqual(try ObjectTemplate(serialized: bytes), t)
        // Every good frame is kept (version 7), 6 bytes a point: at most 12 × 2,000 points.
        XCTAssertTrue(t.views.allSatisfy { $0.frame != nil })
        XCTAssertLessThan(bytes.count, 70_000 + 12 * 2_000 * 6)
        XCTAssertEqual(t.normals.count, t.model.count)
        // A zero normal (the last 3 bytes) is refused.
        var zeroNormal = bytes
        for i in zeroNormal.count - 3..<zeroNormal.count { zeroNormal[i] = 0 }
        XCTAssertThrowsError(try ObjectTemplate(serialized: zeroNormal))
        let json = try JSONEncoder().encode(t)
        XCTAssertEqual(try JSONDecoder().decode(ObjectTemplate.self, from: json), t)
        // Every prefix and a sample of byte flips throw or decode; none traps.
        for n in stride(from: 0, to: bytes.count, by: 97) { XCTAssertThrowsError(try ObjectTemplate(serialized: Array(bytes.prefix(n)))) }
        XCTAssertThrowsError(try ObjectTemplate(serialized: bytes + [0]))
        var g = SplitMix64(seed: 3)
        for _ in 0..<300 {
            var b = bytes
            b[Int(g.next() % UInt64(min(b.count, 400)))] ^= UInt8(truncatingIfNeeded: g.next() | 1)
            _ = try? ObjectTemplate(serialized: b)
        }
        // The kept frames: each gives back its frame's analysis; hostile ones are refused.
        let e = enrolled("mug").0
        for (view, kept) in zip(e.views, t.views.map(\.frame)) {
            let back = ShapeAnalysis(voxelCloud: kept!.points)
            XCTAssertGreaterThan(zip(back.vector, view.vector).map { $0 * $1 }.reduce(0, +), 0.9999)
        }
        func withFrame(_ k: ObjectTemplate.KeptFrame) -> [UInt8] {
            var x = t
            x.views[0].frame = k
            return x.serialized()
        }
        let k = t.views[0].frame!
        XCTAssertEqual(try ObjectTemplate(serialized: withFrame(k)), t)
        XCTAssertThrowsError(try ObjectTemplate(serialized: withFrame(.init(centre: k.centre, step: 0, steps: k.steps))))
        XCTAssertThrowsError(try ObjectTemplate(serialized: withFrame(.init(centre: k.centre, step: .nan, steps: k.steps))))
        XCTAssertThrowsError(try ObjectTemplate(serialized: withFrame(.init(centre: SIMD3(5_000, 0, 0), step: k.step, steps: k.steps))))
        XCTAssertThrowsError(try ObjectTemplate(serialized: withFrame(.init(centre: k.centre, step: k.step, steps: Array(k.steps.prefix(8))))))
        XCTAssertThrowsError(try ObjectTemplate(serialized: withFrame(.init(centre: k.centre, step: k.step, steps: Array(repeating: k.steps[0], count: ShapeAnalysis.maximumVoxelPoints + 1)))))
        XCTAssertNil(ObjectTemplate.KeptFrame(Array(repeating: SIMD3<Float>(0, 0, 0.5), count: 8)))
        XCTAssertNil(ObjectTemplate.KeptFrame(Array(repeating: SIMD3<Float>(0, 0, 0.5), count: 40) + [SIMD3(.nan, 0, 0.5)]))
        for _ in 0..<300 {
            var b = bytes
            b[Int(g.next() % UInt64(b.count))] ^= UInt8(truncatingIfNeeded: g.next() | 1)
            _ = try? ObjectTemplate(serialized: b)
        }
        var wrongVersion = bytes
        wrongVersion[3] = 9
        XCTAssertThrowsError(try ObjectTemplate(serialized: wrongVersion))
    }

    /// Keys enrolled before the kept frames (version 6), before the cameras (version 4: no camera per view), before the deficit
    /// threshold (version 2: the bytes of version 3 without it) and before the outline's (version 3:
    /// without those two) still load; version 4 keeps its outline ceilings (judged), 2 and 3 verify
    /// without an outline test.
    func testOlderTemplatesStillLoad() throws {
        let framed = Templates.get("mug")
        XCTAssertLessThan(framed.maximumDeficit, 0.5)
        XCTAssertLessThan(framed.maximumOverhang, 0.1)
        XCTAssertLessThan(framed.maximumShortfall, 0.1)
        XCTAssertEqual(framed.serialized()[3], 7)
        // Version 7 keeps every good frame's cloud; version 6 is the same bytes without them, and
        // cannot carry one.
        XCTAssertEqual(try ObjectTemplate(serialized: framed.serialized()), framed)
        var v6framed = framed.serialized()
        v6framed[3] = 6
        XCTAssertThrowsError(try ObjectTemplate(serialized: v6framed))
        var t = framed
        t.views = framed.views.map { var v = $0; v.frame = nil; return v }
        var v6 = t.serialized()
        v6[3] = 6
        XCTAssertEqual(try ObjectTemplate(serialized: v6), t)
        // Version 5 keeps each registered view's camera; version 4 is the same bytes without them.
        XCTAssertTrue(t.views.allSatisfy { $0.registered == ($0.camera != nil) })
        XCTAssertEqual(try ObjectTemplate(serialized: t.serialized()), t)
        // Version 6 is version 5's bytes with the shortfall judged: a version 5 template keeps its
        // cameras and verifies as before (its shortfall ceiling, reported only then, reads as 1).
        var v5 = t.serialized()
        v5[3] = 5
        let back5 = try ObjectTemplate(serialized: v5)
        XCTAssertEqual(back5.maximumShortfall, 1)
        XCTAssertEqual(back5.maximumOverhang, t.maximumOverhang)
        XCTAssertEqual(back5.views, t.views)
        var plain = t
        plain.views = t.views.map { var v = $0; v.camera = nil; return v }
        var v4 = plain.serialized()
        v4[3] = 4
        let back4 = try ObjectTemplate(serialized: v4)
        XCTAssertEqual(back4.maximumOverhang, t.maximumOverhang)
        XCTAssertEqual(back4.maximumShortfall, 1)
        XCTAssertTrue(back4.views.allSatisfy { $0.camera == nil })
        XCTAssertEqual(back4.model, t.model)
        // A version 4 stream cannot carry a camera.
        var v4camera = t.serialized()
        v4camera[3] = 4
        XCTAssertThrowsError(try ObjectTemplate(serialized: v4camera))
        // magic 3, version 1, flags 1, frames 2, viewpoints 2, then τ, cell, fit, rms, coverage,
        // excess, deficit (33…36), overhang (37…40), shortfall (41…44).
        var v3 = v4
        v3[3] = 3
        v3.removeSubrange(37..<45)
        let back3 = try ObjectTemplate(serialized: v3)
        XCTAssertEqual(back3.maximumOverhang, 1)
        XCTAssertEqual(back3.maximumShortfall, 1)
        XCTAssertEqual(back3.maximumDeficit, t.maximumDeficit)
        XCTAssertEqual(back3.model, t.model)
        var v2 = v3
        v2[3] = 2
        v2.removeSubrange(33..<37)
        let back2 = try ObjectTemplate(serialized: v2)
        XCTAssertEqual(back2.maximumDeficit, 1)
        XCTAssertEqual(back2.maximumOverhang, 1)
        XCTAssertEqual(back2.maximumExcess, t.maximumExcess)
        XCTAssertEqual(back2.model, t.model)
        var cut = v4
        cut.removeSubrange(37..<45)
        XCTAssertThrowsError(try ObjectTemplate(serialized: cut), "a version 4 template without its outline ceilings")
        // Older templates still verify (the mug's own sweep opens the version 4 copy).
        var v = ObjectVerifier(template: back4)
        let pose = SyntheticPose.random(seed: 911)
        let frames = (0..<6).map { SyntheticShapes.view(of: shape("mug"), pose: pose.turned(degrees: Float($0) * 20), seed: 9_110 + UInt64($0), points: 1_500) }
        XCTAssertTrue(v.matches(frames).matched)
    }
}

final class VerificationTests: XCTestCase {
    /// A sweep: the camera moving around the object, 20° between frames; a person keeps presenting
    /// until three frames in a row pass, so a genuine sweep of 6 frames should match.
    func sweep(_ name: String, seed: UInt64, frames: Int = 6, points: Int = 1_500) -> [PointFrame] {
        let pose = SyntheticPose.random(seed: seed)
        return (0..<frames).map { SyntheticShapes.view(of: shape(name), pose: pose.turned(degrees: Float($0) * 20), seed: seed * 10 + UInt64($0), points: points) }
    }

    func testGenuineMatches() {
        for name in ["mug", "cube", "mug-no-handle"] {
            let template = Templates.get(name)
            var v = ObjectVerifier(template: template)
            let (matched, verdicts) = v.matches(sweep(name, seed: 901))
            XCTAssertTrue(matched, "\(name): \(verdicts)")
            XCTAssertEqual(verdicts.count, 6)
            for verdict in verdicts {
                XCTAssertGreaterThanOrEqual(verdict.score, 0.9)
                XCTAssertTrue((0...1).contains(verdict.fit))
                // A frame passes only with a pose inside every threshold of the template (the pose
                // judged may be a lower fit than the best when the best shows the wrong side).
                if verdict.passed {
                    XCTAssertGreaterThanOrEqual(verdict.fit, Double(template.minimumFit), "\(name) \(verdict)")
                    XCTAssertLessThanOrEqual(verdict.rms, Double(template.maximumRMS), "\(name) \(verdict)")
                    XCTAssertGreaterThanOrEqual(verdict.coverage, Double(template.minimumCoverage), "\(name) \(verdict)")
                    XCTAssertLessThanOrEqual(verdict.excess, Double(template.maximumExcess), "\(name) \(verdict)")
                }
            }
            // And the sweep is well aligned as a whole: the median frame within 4 mm RMS.
            let rmss = verdicts.map(\.rms).sorted()
            XCTAssertLessThan(rmss[rmss.count / 2], 0.004, "\(name): \(rmss)")
        }
    }

    /// The goal, not yet met with the current calibration margins (Protocol/keys.md, section 8:
    /// `tandem-bench keys` lists the hard pairs' acceptances). Run with TANDEM_KEYS_HARD_PAIRS=1.
    func testHardPairImpostorsAreRefused() throws {
        guard ProcessInfo.processInfo.environment["TANDEM_KEYS_HARD_PAIRS"] == "1" else {
            throw XCTSkip("hard pairs are not reliably refused yet (see Protocol/keys.md, section 8)")
        }
        for (template, impostor) in [("cube", "rounded-cube"), ("box-1-1-2", "box-1-1-2.3"), ("mug-no-handle", "mug")] {
            var v = ObjectVerifier(template: Templates.get(template))
            let (matched, verdicts) = v.matches(sweep(impostor, seed: 902, points: 3_000))
            XCTAssertFalse(matched, "\(impostor) opened \(template): \(verdicts)")
        }
    }

    /// What does hold today: an impostor that differs clearly (a rod against the mug) is refused.
    func testClearImpostorIsRefused() {
        var v = ObjectVerifier(template: Templates.get("mug"))
        let (matched, verdicts) = v.matches(sweep("rod", seed: 904))
        XCTAssertFalse(matched, "\(verdicts)")
        XCTAssertTrue(verdicts.allSatisfy { !$0.passed })
    }

    func testNeedsThreeConsecutivePasses() {
        var v = ObjectVerifier(template: Templates.get("mug"))
        let frames = sweep("mug", seed: 903, frames: 4)
        let verdicts = frames.map { v.present($0) }
        let passed = verdicts.map(\.passed)
        let bad = v.present(PointFrame(points: [SIMD3(0, 0, 1)]))
        XCTAssertFalse(bad.passed)
        XCTAssertNotNil(bad.guidance)
        XCTAssertEqual(v.consecutive, 0)
        // Matched only if three in a row passed before the bad frame, one of them decisive.
        var run = 0, decisive = false, expected = false
        for verdict in verdicts {
            if verdict.passed { run += 1; decisive = decisive || verdict.decisive } else { run = 0; decisive = false }
            if run >= 3, decisive { expected = true }
        }
        XCTAssertEqual(v.matched, expected)
        XCTAssertTrue(passed.contains(true))
    }
}

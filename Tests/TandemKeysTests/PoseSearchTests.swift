import XCTest
@testable import TandemKeys

/// Stage 2's pose search: where its hypotheses come from.
final class PoseSearchTests: XCTestCase {
    /// Angle (degrees) between two rotations.
    func angle(_ a: Mat3, _ b: Mat3) -> Double { (a * b.transposed).rotationAngle * 180 / .pi }

    /// A square section's first two principal axes can lie anywhere in its plane: whatever the turn
    /// between the view's and the target's, some hypothesis is within 22.5° of it (coarse ICP closes
    /// that; 45°, the worst case of 90° steps alone, it does not).
    func testSquareSectionTurnedAnyAngleHasAHypothesisWithin22Degrees() {
        let target = PrincipalAxes(centroid: .zero, eigenvalues: SIMD3(1, 0.97, 0.01), axes: .identity)
        for degrees in stride(from: 0.0, to: 360.0, by: 5.0) {
            let a = Float(degrees * .pi / 180)
            let turn = Mat3(r0: SIMD3(cos(a), -sin(a), 0), r1: SIMD3(sin(a), cos(a), 0), r2: SIMD3(0, 0, 1))
            // The source frame is the target's turned by `turn`; the true registration undoes it.
            let source = PrincipalAxes(centroid: .zero, eigenvalues: target.eigenvalues, axes: turn)
            let truth = turn.transposed
            let best = Registration.hypotheses(source: source, targets: [target]).map { angle($0.rotation, truth) }.min() ?? 180
            XCTAssertLessThanOrEqual(best, 22.6, "turned \(degrees)°")
        }
    }

    /// Enrolled from views that never look along a 1:1:2 box's long axis, stage 2 still fits
    /// frames of its end face alone: no enrolment view's principal frame leads the search there,
    /// the model's own view from that side does.
    func testEndFaceAloneIsFoundFromTheModelsOwnViews() throws {
        let box = shape("box-1-1-2")
        var e = ObjectEnrollment()
        var seed: UInt64 = 300
        while e.goodFrames < 10, seed < 600 {
            seed += 1
            let pose = SyntheticPose.random(seed: seed)
            // The long axis (object z) at least 60° from the line of sight.
            guard abs(pose.rotation.apply(SIMD3(0, 0, 1)).z) < 0.5 else { continue }
            _ = e.add(SyntheticShapes.view(of: box, pose: pose, seed: seed, points: 6_000))
        }
        let template = try e.finish(force: true)
        // The end face (object +z) straight towards the camera (−z), turned by 0–4°.
        let endOn = SyntheticPose(rotation: Mat3(r0: SIMD3(1, 0, 0), r1: SIMD3(0, -1, 0), r2: SIMD3(0, 0, -1)), position: SIMD3(0.01, 0, 0.5))
        let frames = (0..<3).map { k in SyntheticShapes.view(of: box, pose: endOn.turned(degrees: Float(k) * 2), seed: 900 + UInt64(k), points: 6_000) }
        for frame in frames {
            let a = ShapeAnalysis(frame, roi: nil)
            XCTAssertLessThan(a.extents.z, 0.02, "the frame shows one face")
        }
        // Stage 2 (stage 1 is the descriptors' business: no enrolment view looked like this).
        let verifier = ObjectVerifier(template: template)
        let verdicts = frames.map { verifier.evaluate($0, ShapeAnalysis($0, roi: nil)) }
        XCTAssertTrue(verdicts.allSatisfy(\.stage2Passed), "\(verdicts.map { ($0.fit, $0.coverage, $0.deficit, $0.excess, $0.overhang, $0.shortfall) }) outline ceilings \(template.maximumOverhang) \(template.maximumShortfall)")
        // The first search alone (the enrolment views' frames) puts the face on a long side.
        let first = ObjectVerifier(template: template, virtualTargets: 0)
        let firstVerdicts = frames.map { first.evaluate($0, ShapeAnalysis($0, roi: nil)) }
        XCTAssertFalse(firstVerdicts.contains(where: \.stage2Passed), "\(firstVerdicts.map { ($0.fit, $0.coverage, $0.deficit) })")
    }
}

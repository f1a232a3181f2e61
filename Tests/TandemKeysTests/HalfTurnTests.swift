import Foundation
import XCTest
@testable import TandemKeys

/// Issue 35, seed 17's 8 × 12 × 18 cm box: the enrolment's registration folds every frame onto one
/// corner of the box (each frame shows a corner, and any of the box's half turns fits it), so the
/// model has three faces; a live frame that shows a corner of the other handedness then finds a face
/// the model lacks. `ObjectTemplate.halfTurnCompleted` adds the half turns' images to such a model.
final class HalfTurnTests: XCTestCase {
    /// Along each of the model's box axes, the smaller end face's share of the larger's (normals
    /// within 26° of the axis).
    func endFaces(_ model: [SIMD3<Float>], _ normals: [SIMD3<Float>]) -> [Double] {
        KeyCloseness.extents(model, normals: normals).spans.map { s in
            var plus = 0, minus = 0
            for n in normals {
                let c = dot3(n, s.axis)
                if c > 0.9 { plus += 1 } else if c < -0.9 { minus += 1 }
            }
            return Double(min(plus, minus)) / Double(max(plus, minus, 1))
        }
    }

    /// The enrolment's views without the camera's outliers and the poses `ObjectTemplate.build`
    /// registers them at (the contradicted views dropped), with its τ and cell.
    private func registered(_ e: ObjectEnrollment) -> (clean: [EnrolledView], poses: [RigidTransform?], tau: Float, cell: Float) {
        let (tau, cell) = ObjectTemplate.scales(e.views)
        let clean = e.views.map { v in
            var c = v
            c.cloud = ShapeAnalysis.surface(v.cloud, extents: v.extents)
            return c
        }
        var poses = ObjectTemplate.register(e.views, tau: tau, cell: cell)
        for l in ObjectTemplate.leaveOneOut(clean, poses, tau: tau, cell: cell) where l.fit < ObjectTemplate.contradictedFit { poses[l.view] = nil }
        return (clean, poses, tau, cell)
    }

    /// The folded model (registered as before) has one end face per axis (5–9 % of the other end);
    /// completed, both ends of every axis, and the genuine sweeps the folded model refused (sweeps
    /// 0, 1 and 2: excess 0.11–0.17 on the frames showing the other corner) match.
    func testAModelFoldedOntoOneCornerOfABoxIsCompletedByItsHalfTurns() throws {
        let e = benchEnrolment(seed: 17, "box-2-3-4.5")
        let (clean, poses, _, cell) = registered(e)
        let folded = ObjectTemplate.orientedModel(clean, poses, cell: cell)
        for share in endFaces(folded.points, folded.normals) { XCTAssertLessThan(share, 0.1, "\(endFaces(folded.points, folded.normals))") }
        let t = try e.finish(force: !e.isComplete)
        XCTAssertTrue(t.model != folded.points, "the model is the folded one")
        for share in endFaces(t.model, t.normals) { XCTAssertGreaterThan(share, 0.5, "\(endFaces(t.model, t.normals))") }
        let spans = KeyCloseness.extents(t.model, normals: t.normals).spans.map(\.length)
        XCTAssertEqual(spans[0], 0.18, accuracy: 0.01, "\(spans)")
        XCTAssertEqual(spans[1], 0.12, accuracy: 0.01, "\(spans)")
        XCTAssertEqual(spans[2], 0.08, accuracy: 0.01, "\(spans)")
        for sweep in 0..<3 {
            var verifier = ObjectVerifier(template: t)
            for frame in benchSweep(seed: 17, "box-2-3-4.5", sweep: sweep) { _ = verifier.present(frame) }
            XCTAssertTrue(verifier.matched, "sweep \(sweep)")
        }
    }

    /// Models the rule leaves as they were, byte for byte: seed 17's cube, folded onto one corner
    /// too (one-sided along every axis, its half turns' surface 0.1–0.2 % in free space), but a
    /// square section's quarter turns reach a corner of either handedness (no three different
    /// sides: fails without that test); seed 17's l-shape, 21 × 14 × 5 cm, one-sided along its
    /// third axis only, whose half turns would put 5–94 % of their surface where the cameras saw
    /// empty space; seed 17's box-2-3-4, whose model (frames a quarter turn off) measures
    /// 16 × 12 × 12 cm; seed 2's can-tall, whose model (14.2 × 7.0 × 6.0 cm, out of round) has
    /// three different sides and is one-sided along every axis, but whose half turns put 2.5–37 %
    /// (per turn) of their surface where the cameras saw empty space (fails without the free-space
    /// test); seed
    /// 23's box-2-3-4, whose model has both ends along its long axis (76 %), so corners of either
    /// handedness (fails without the one-sided test: its half turns are 0.2–0.5 % in free space).
    func testModelsThatLackNothingAreBuiltAsBefore() throws {
        for (seed, name) in [(17, "cube"), (17, "l-shape"), (17, "box-2-3-4"), (2, "can-tall"), (23, "box-2-3-4")] as [(UInt64, String)] {
            let (clean, poses, tau, cell) = registered(benchEnrolment(seed: seed, name))
            let built = ObjectTemplate.halfTurnCompleted(clean, poses, tau: tau, cell: cell)
            let before = ObjectTemplate.orientedModel(clean, poses, cell: cell)
            XCTAssertTrue(built.points == before.points, "seed \(seed) \(name)")
            XCTAssertTrue(built.normals == before.normals, "seed \(seed) \(name)")
        }
    }
}

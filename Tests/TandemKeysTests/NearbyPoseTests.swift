import Foundation
import XCTest
@testable import TandemKeys

/// Issue 35: a smaller object opening a larger key; genuine frames refused on a pose a little off.
/// The shortfall (how far the model's outline reaches past the frame's silhouette) and the excess
/// (the frame's points off the model, in patches) are judged at their least value near the pose
/// found (`Registration.leastShortfall`, `leastExcess`): a pose a few millimetres or degrees off is
/// forgiven; a shorter object, or one with a part the model lacks, is not.
final class NearbyPoseTests: XCTestCase {
    let tau: Float = 0.004, cell: Float = 0.003

    /// The object's true surface as a model (points with outward normals, object coordinates).
    func model(_ name: String) -> (tree: KDTree, normals: [SIMD3<Float>]) {
        var g = SplitMix64(seed: 77)
        let surface = shape(name).sample(4_000, &g)
        let tree = KDTree(surface.map(\.0))
        return (tree, tree.order.map { surface[Int($0)].1 })
    }

    /// Views with the object's long axis (object z) across the line of sight, and the true pose of
    /// each (camera → object coordinates).
    func views(_ name: String, count: Int) -> [(cloud: [SIMD3<Float>], truth: RigidTransform, axis: SIMD3<Float>)] {
        var out: [(cloud: [SIMD3<Float>], truth: RigidTransform, axis: SIMD3<Float>)] = []
        var seed: UInt64 = 7_000
        while out.count < count, seed < 7_200 {
            seed += 1
            let pose = SyntheticPose.random(seed: seed)
            guard abs(pose.rotation.apply(SIMD3(0, 0, 1)).z) < 0.5 else { continue }
            let frame = SyntheticShapes.view(of: shape(name), pose: pose, seed: seed, points: 3_000, outliers: 0)
            let back = pose.rotation.transposed
            // The long axis as the camera sees it, across the line of sight.
            let axis = pose.rotation.apply(SIMD3(0, 0, 1))
            out.append((frame.points, RigidTransform(rotation: back, translation: -back.apply(pose.position)), normalized3(SIMD3(axis.x, axis.y, 0))))
        }
        return out
    }

    func fits(_ cloud: [SIMD3<Float>], _ m: (tree: KDTree, normals: [SIMD3<Float>])) -> (Double, Double, StageTwoMeasures) -> Bool {
        { fit, rms, _ in fit >= 0.6 && rms <= 0.003 }
    }

    /// The same object at a pose 8 mm (2τ) off along its long axis and turned 2°: the outline
    /// falls short of the frame's by more than at the true pose (on some views by 1.5 mm or more),
    /// and the search near it finds a pose within 1.5 mm of the true one's.
    func testTheSameObjectAFewDegreesOffIsForgiven() {
        for name in ["box-1-1-2", "can-tall"] {
            let m = model(name)
            var offBy: [Double] = []
            defer { XCTAssertGreaterThan(offBy.max() ?? 0, 0.0015, "\(name): a pose 8 mm and 2° off falls short by more than the true one") }
            for (cloud, truth, axis) in views(name, count: 3) {
                let viewTree = KDTree(cloud)
                let fine = Registration.subsample(cloud, Registration.finePoints)
                let atTruth = Registration.measure(model: m.tree, normals: m.normals, view: cloud, t: truth, tau: tau, cell: cell, viewTree: viewTree)
                XCTAssertLessThan(atTruth.shortfall, 0.004, "\(name): the true pose")
                var c = SIMD3<Float>.zero
                for p in cloud { c += p }
                c /= Float(cloud.count)
                let r = rodrigues(SIMD3<Float>(0, 1, 0) * (2 * .pi / 180))
                let off = truth.composed(after: RigidTransform(rotation: r, translation: c - r.apply(c) + 0.008 * axis))
                let atOff = Registration.measure(model: m.tree, normals: m.normals, view: cloud, t: off, tau: tau, cell: cell, viewTree: viewTree)
                offBy.append(atOff.shortfall - atTruth.shortfall)
                let near = Registration.leastShortfall(view: cloud, fine: fine, viewTree: viewTree, model: m.tree, normals: m.normals, from: off,
                                                       measured: atOff, tau: tau, cell: cell, enough: atTruth.shortfall + 0.0005, steps: 3, fits: fits(cloud, m))
                XCTAssertLessThanOrEqual(near.measures.shortfall, atTruth.shortfall + 0.0015,
                                         "\(name): found near the pose: \(atOff.shortfall) → \(near.measures.shortfall), truth \(atTruth.shortfall)")
            }
        }
    }

    /// A shorter object centred in the model: a 1:1:2 box 3 cm shorter than the 1:1:2.3 model
    /// (1.5 cm at each end) falls short by more than 8 mm at every pose near it; a can 1.5 cm
    /// shorter than the tall can's model by more than the tall can's own frames at their true pose.
    func testAShorterObjectFallsShortAtEveryNearbyPose() {
        for (object, key, least) in [("box-1-1-2", "box-1-1-2.3", 0.008), ("can", "can-tall", 0.0)] {
            let m = model(key)
            let own = views(key, count: 3).map { Registration.measure(model: m.tree, normals: m.normals, view: $0.cloud, t: $0.truth, tau: tau, cell: cell).shortfall }
            for (cloud, truth, _) in views(object, count: 3) {
                let viewTree = KDTree(cloud)
                let fine = Registration.subsample(cloud, Registration.finePoints)
                let measured = Registration.measure(model: m.tree, normals: m.normals, view: cloud, t: truth, tau: tau, cell: cell, viewTree: viewTree)
                let near = Registration.leastShortfall(view: cloud, fine: fine, viewTree: viewTree, model: m.tree, normals: m.normals, from: truth,
                                                       measured: measured, tau: tau, cell: cell, enough: 0, steps: 4, fits: fits(cloud, m))
                XCTAssertGreaterThan(near.measures.shortfall, max(least, (own.max() ?? 0) + 0.001),
                                     "\(object) against \(key): searched from \(measured.shortfall); the key's own \(own)")
            }
        }
    }

    func fitsAll(_ fit: Double, _ rms: Double) -> Bool { fit >= 0.6 && rms <= 0.003 }

    func offset(_ cloud: [SIMD3<Float>], _ truth: RigidTransform, degrees: Float, slide: SIMD3<Float>) -> RigidTransform {
        var c = SIMD3<Float>.zero
        for p in cloud { c += p }
        c /= Float(cloud.count)
        let r = rodrigues(SIMD3<Float>(0, 1, 0) * (degrees * .pi / 180))
        return truth.composed(after: RigidTransform(rotation: r, translation: c - r.apply(c) + slide))
    }

    /// The same object at a pose turned 6°: a patch of the frame stands off the model (excess ≥ 0.02
    /// on some view), and the search near that pose finds one with the true pose's excess (within
    /// 0.005).
    func testTheSameObjectAFewDegreesOffIsForgivenItsExcess() {
        let name = "l-shape"
        let m = model(name)
        var offBy: [Double] = []
        for (cloud, truth, _) in views(name, count: 3) {
            let viewTree = KDTree(cloud)
            let fine = Registration.subsample(cloud, Registration.finePoints)
            let atTruth = Registration.excess(cloud, truth, m.tree, m.normals, cell: cell, tau: tau, viewTree: viewTree)
            do {
                let off = offset(cloud, truth, degrees: 6, slide: .zero)
                let atOff = Registration.excess(cloud, off, m.tree, m.normals, cell: cell, tau: tau, viewTree: viewTree)
                offBy.append(atOff - atTruth)
                let near = Registration.leastExcess(view: cloud, fine: fine, viewTree: viewTree, model: m.tree, normals: m.normals, from: off,
                                                    excess: atOff, tau: tau, cell: cell, enough: atTruth + 0.002, fits: fitsAll)
                XCTAssertLessThanOrEqual(near.excess, atTruth + 0.005, "\(name): \(atOff) → \(near.excess), truth \(atTruth)")
                // The excess given is the pose's own.
                XCTAssertEqual(near.excess, Registration.excess(cloud, near.pose, m.tree, m.normals, cell: cell, tau: tau, viewTree: viewTree))
            }
        }
        XCTAssertGreaterThan(offBy.max() ?? 0, 0.02, "\(name): a pose a few degrees off puts a patch off the model")
    }

    /// A part the model lacks stays off at every pose near the true one: a mug's handle against the
    /// model of the mug without one, a teapot's spout against the teapot without one — excess over
    /// 0.04 (the ceilings' floor is 0.025) on every view that shows it.
    func testAPartTheModelLacksStaysOffAtEveryNearbyPose() {
        for (object, key) in [("mug", "mug-no-handle"), ("teapot", "teapot-no-spout")] {
            let m = model(key)
            var shown = 0
            for (cloud, truth, _) in views(object, count: 6) {
                let viewTree = KDTree(cloud)
                let fine = Registration.subsample(cloud, Registration.finePoints)
                let atTruth = Registration.excess(cloud, truth, m.tree, m.normals, cell: cell, tau: tau, viewTree: viewTree)
                guard atTruth > 0.04 else { continue }
                shown += 1
                let near = Registration.leastExcess(view: cloud, fine: fine, viewTree: viewTree, model: m.tree, normals: m.normals, from: truth,
                                                    excess: atTruth, tau: tau, cell: cell, enough: 0, steps: 4, fits: fitsAll)
                XCTAssertGreaterThan(near.excess, 0.04, "\(object) against \(key): searched from \(atTruth)")
            }
            XCTAssertGreaterThanOrEqual(shown, 4, "\(object): views that show the part")
        }
    }

    /// Through the verifier, the bench's frames: seed 5's snowman sweeps 2 and 3, whose frames 1 and
    /// 2 stood a patch off the model at the pose found (excess 0.035–0.036 against a ceiling of
    /// 0.025) and refused the sweeps, match; seed 17's cone sweep 3 (frame 2: 0.046 against 0.038)
    /// too. The excess and the pose's other measures are still judged: every passing frame's are
    /// within the template's ceilings.
    func testTheBenchsSweepsRefusedOnAPatchOffTheModelMatch() throws {
        for (seed, name, sweeps) in [(UInt64(5), "snowman", [2, 3]), (17, "cone", [3])] {
            let e = benchEnrolment(seed: seed, name)
            let t = try e.finish(force: !e.isComplete)
            for sweep in sweeps {
                var verifier = ObjectVerifier(template: t)
                var verdicts: [FrameVerdict] = []
                for frame in benchSweep(seed: seed, name, sweep: sweep) { verdicts.append(verifier.present(frame)) }
                XCTAssertTrue(verifier.matched, "seed \(seed) \(name) sweep \(sweep): \(verdicts.map { ($0.passed, $0.excess) })")
                for v in verdicts where v.passed {
                    XCTAssertLessThanOrEqual(v.excess, Double(t.maximumExcess))
                    XCTAssertGreaterThanOrEqual(v.coverage, Double(t.minimumCoverage))
                }
            }
        }
    }
}

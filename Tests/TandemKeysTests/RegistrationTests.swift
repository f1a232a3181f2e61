import Foundation
import XCTest
@testable import TandemKeys

final class RegistrationTests: XCTestCase {
    /// Enrolment registers its frames into one model: each frame, placed by the pose registration
    /// found, must lie on the object's true surface (every frame placed by its true pose): judged
    /// up to the object's symmetries, 75 % of its points within 4 mm (noise σ = 1.5 mm per axis).
    /// TANDEM_KEYS_REGISTRATION=all checks (and prints) the whole catalogue.
    func testEnrolmentFramesLieOnTheTrueSurface() throws {
        let all = ProcessInfo.processInfo.environment["TANDEM_KEYS_REGISTRATION"] == "all"
        let names = all ? SyntheticShapes.catalogue.map(\.name) : ["mug", "mug-no-handle", "snowman", "box-1-1-2", "donut"]
        for name in names {
            let o = try XCTUnwrap(SyntheticShapes.catalogue.firstIndex { $0.name == name })
            var g = SplitMix64(seed: UInt64(o))
            func points() -> Int { 3_000 + Int(g.next() % 12_001) }
            let s = shape(name)
            var views: [EnrolledView] = [], poses: [SyntheticPose] = []
            for k in 0..<8 {
                let seed = 1_000_003 &+ UInt64(o * 100 + k)
                let pose = SyntheticPose.random(seed: seed)
                let frame = SyntheticShapes.view(of: s, pose: pose, seed: seed, points: points())
                let a = ShapeAnalysis(frame, roi: nil)
                let check = FrameCheck.assess(frame, a)
                guard check.good else { continue }
                views.append(EnrolledView(a, quality: check.quality)); poses.append(pose)
            }
            let (tau, cell) = ObjectTemplate.scales(views)
            let est = ObjectTemplate.register(views, tau: tau, cell: cell)
            let seed = try XCTUnwrap(est.indices.first(where: { est[$0] == .identity }), "\(name): no seed view")
            XCTAssertGreaterThanOrEqual(est.compactMap { $0 }.count, views.count - 1, "\(name): views left out of the model")
            var line: [String] = []
            func gt(_ i: Int) -> RigidTransform {
                let gr = poses[seed].rotation * poses[i].rotation.transposed
                return RigidTransform(rotation: gr, translation: poses[seed].position - gr.apply(poses[i].position))
            }
            // The true surface (every view placed by its true pose), to judge registrations up to symmetry.
            var truth: [SIMD3<Float>] = []
            for i in views.indices { truth += views[i].cloud.map(gt(i).apply) }
            let truthTree = KDTree(ShapeAnalysis.voxelDownsample(truth, voxel: 0.002))
            for i in views.indices {
                guard let e = est[i] else { line.append("  -  "); continue }
                var d = views[i].cloud.map { truthTree.nearestDistanceSquared(e.apply($0)).squareRoot() }
                d.sort()
                line.append(String(format: "%5.1f", d[d.count * 3 / 4] * 1000))
                if !all { XCTAssertLessThan(d[d.count * 3 / 4], 0.004, "\(name): view \(i) registered off the surface") }
            }
            if all { print(String(format: "registration %-14@ τ %.1f mm: ", name, tau * 1000) + line.joined(separator: " ")) }
        }
    }
}

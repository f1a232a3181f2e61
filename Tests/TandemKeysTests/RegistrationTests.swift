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

    /// `align` spreads its hypotheses over the cores; what it returns must be exactly what one
    /// thread taking them in order finds (the early stop at `untilFit` included).
    func testParallelAlignmentEqualsTheOneThreadReference() throws {
        func reference(_ source: [SIMD3<Float>], axes: PrincipalAxes, to tree: KDTree, targets: [PrincipalAxes], tau: Float,
                       normals: [SIMD3<Float>], untilFit: Double) -> (best: Alignment, refined: [Alignment]) {
            let coarse = Registration.subsample(source, Registration.coarsePoints)
            let fine = Registration.subsample(source, Registration.finePoints)
            var scored: [(Double, RigidTransform)] = []
            for h in Registration.hypotheses(source: axes, targets: targets) {
                let t = Registration.icp(coarse, tree, from: h, tau: 2 * tau, iterations: Registration.coarseIterations)
                scored.append((Registration.evaluate(coarse, tree, t, tau: 2 * tau).fit, t))
            }
            scored.sort { $0.0 > $1.0 }
            var best = Alignment(transform: .identity, fit: 0, rms: .infinity)
            var refined: [Alignment] = []
            for (k, (_, t0)) in scored.prefix(12).enumerated() {
                if k >= Registration.refinedHypotheses, best.fit >= untilFit { break }
                let t = Registration.icpPlane(fine, tree, normals: normals, from: t0, tau: tau, iterations: Registration.fineIterations)
                let (fit, rms) = Registration.evaluate(fine, tree, t, tau: tau, normals: normals, cell: 0.003, oriented: true)
                refined.append(Alignment(transform: t, fit: fit, rms: rms))
                if fit > best.fit || (fit == best.fit && rms < best.rms) { best = refined.last! }
            }
            return (best, refined)
        }
        /// Each object's model (one view) and its tree and normals, with `count` other views of it.
        func scenes(_ names: [String], modelSeed: UInt64, viewSeed: UInt64, count: Int)
            -> [(name: String, model: ShapeAnalysis, tree: KDTree, normals: [SIMD3<Float>], views: [ShapeAnalysis])] {
            names.enumerated().map { n, name in
                let s = shape(name), m = modelSeed + UInt64(n)
                let model = ShapeAnalysis(SyntheticShapes.view(of: s, pose: .random(seed: m), seed: m, points: 6_000), roi: nil)
                let tree = KDTree(model.cloud)
                let views = (0..<count).map { k -> ShapeAnalysis in
                    let seed = viewSeed + UInt64(10 * n + k)
                    return ShapeAnalysis(SyntheticShapes.view(of: s, pose: .random(seed: seed), seed: seed, points: 4_000), roi: nil)
                }
                return (name, model, tree, tree.normals(), views)
            }
        }
        var compared = 0
        for (name, model, tree, normals, views) in scenes(["mug", "box-1-1-2", "stairs", "egg"], modelSeed: 70, viewSeed: 900, count: 4) {
            for (k, view) in views.enumerated() {
                // untilFit 0 stops after the first three; 1.1 refines all; and each best fit reached
                // after the fourth, fifth, … candidate stops one at a time exactly there.
                let all = reference(view.cloud, axes: view.axes, to: tree, targets: [model.axes], tau: 0.006,
                                    normals: normals, untilFit: 1.1).refined
                var stops = [0.0, 1.1]
                var running = 0.0
                for (j, r) in all.enumerated() {
                    running = max(running, r.fit)
                    if j >= Registration.refinedHypotheses - 1 { stops.append(running) }
                }
                for untilFit in stops {
                    let a = Registration.align(view.cloud, axes: view.axes, to: tree, targets: [model.axes], tau: 0.006,
                                               normals: normals, oriented: true, cell: 0.003, untilFit: untilFit)
                    let r = reference(view.cloud, axes: view.axes, to: tree, targets: [model.axes], tau: 0.006,
                                      normals: normals, untilFit: untilFit).best
                    XCTAssertEqual(a.transform, r.transform, "\(name) view \(k) untilFit \(untilFit)")
                    XCTAssertEqual(a.fit, r.fit)
                    XCTAssertEqual(a.rms, r.rms)
                    compared += 1
                }
            }
        }
        XCTAssertGreaterThan(compared, 48)
        // With a judge: the refined alignments judged best first from the third on, one at a time,
        // until one is accepted; the first accepted is the answer (else the best fit).
        var judgedCompared = 0, acceptedSome = 0, clearlyTaken = 0, clearlyPassed = 0
        for (name, model, tree, normals, views) in scenes(["box-1-1-2", "mug"], modelSeed: 170, viewSeed: 1900, count: 3) {
            for (k, view) in views.enumerated() {
                let all = reference(view.cloud, axes: view.axes, to: tree, targets: [model.axes], tau: 0.006,
                                    normals: normals, untilFit: 1.1).refined
                // Judges that accept rms at most each refined alignment's (a fit floor of 0 and 2)
                // and one that accepts nothing.
                for limit in all.map(\.rms) + [-1] {
                    let judge: @Sendable (Alignment) -> Bool = { $0.rms <= limit }
                    var expected: Alignment?
                    var pending: [Alignment] = []
                    var best = Alignment(transform: .identity, fit: 0, rms: .infinity)
                    for (j, a) in all.enumerated() {
                        if a.fit > best.fit || (a.fit == best.fit && a.rms < best.rms) { best = a }
                        pending.append(a)
                        guard j >= Registration.refinedHypotheses - 1 else { continue }
                        pending.sort { $0.fit > $1.fit || ($0.fit == $1.fit && $0.rms < $1.rms) }
                        while expected == nil, !pending.isEmpty {
                            let c = pending.removeFirst()
                            if judge(c) { expected = c }
                        }
                        if expected != nil { break }
                    }
                    let a = Registration.align(view.cloud, axes: view.axes, to: tree, targets: [model.axes], tau: 0.006,
                                               normals: normals, oriented: true, cell: 0.003, accept: judge)
                    let r = expected ?? best
                    XCTAssertEqual(a.transform, r.transform, "\(name) view \(k) judge rms ≤ \(limit)")
                    XCTAssertEqual(a.fit, r.fit)
                    // With a clear judge as well (stricter: rms at most each refined alignment's, less
                    // 0.1 mm, and none): the better fit of the best two judged by it first; when it
                    // does not take it, the answer of the judge alone.
                    for clearLimit in all.map({ $0.rms - 0.000_1 }) + [-1] {
                        let clearly: @Sendable (Alignment) -> Bool = { $0.rms <= clearLimit && $0.rms <= limit }
                        let first = all.prefix(Registration.quickRefined).sorted { $0.fit > $1.fit || ($0.fit == $1.fit && $0.rms < $1.rms) }
                        let q = Registration.align(view.cloud, axes: view.axes, to: tree, targets: [model.axes], tau: 0.006,
                                                   normals: normals, oriented: true, cell: 0.003, accept: judge, acceptClearly: clearly)
                        let e = first.first.flatMap { clearly($0) ? $0 : nil } ?? r
                        XCTAssertEqual(q.transform, e.transform, "\(name) view \(k) judge rms ≤ \(limit), clearly ≤ \(clearLimit)")
                        XCTAssertEqual(q.fit, e.fit)
                        if first.first.map(clearly) == true { clearlyTaken += 1 } else { clearlyPassed += 1 }
                    }
                    judgedCompared += 1
                    if expected != nil { acceptedSome += 1 }
                }
            }
        }
        XCTAssertGreaterThan(judgedCompared, 12)
        XCTAssertGreaterThan(acceptedSome, 6)
        XCTAssertGreaterThan(clearlyTaken, 6)
        XCTAssertGreaterThan(clearlyPassed, 6)
        let squares = Registration.parallelMap(Array(0..<1_000)) { $0 * $0 }
        XCTAssertEqual(squares, (0..<1_000).map { $0 * $0 })
    }
}

import XCTest
@testable import TandemKeys

/// The grid gives the k-d tree's answers (issue 35: the same nearest points, sooner), so the
/// verifier's verdicts cannot move with it.
final class NearestGridTests: XCTestCase {
    func testTheGridAnswersAsTheTreeDoes() throws {
        // A mug's surface points (a handle, a hollow: cells near several parts).
        let frame = SyntheticShapes.view(of: shape("mug"), seed: 3, points: 4_000)
        let plain = KDTree(frame.points)
        let spacing: Float = 0.002, tau: Float = 0.004
        let tree = plain.withNearestGrid(edge: 1.5 * spacing, reach: 5 * tau)
        let grid = try XCTUnwrap(tree.grid)
        XCTAssertGreaterThan(grid.memberCount, 0)
        var g = SplitMix64(seed: 35)
        var lo = plain.points[0], hi = plain.points[0]
        for p in plain.points { lo = pointwiseMin(lo, p); hi = pointwiseMax(hi, p) }
        var inLists = 0, total = 0
        var hint = -1
        for k in 0..<20_000 {
            let q: SIMD3<Float>
            switch k % 4 {
            case 0:
                // Near the surface (noise of a few millimetres), as ICP asks.
                let p = plain.points[Int(g.next() % UInt64(plain.points.count))]
                q = p + SIMD3(Float(g.uniform(-0.008, 0.008)), Float(g.uniform(-0.008, 0.008)), Float(g.uniform(-0.008, 0.008)))
            case 1:
                // Anywhere in the box and a little beyond (inside the mug, far from it).
                q = SIMD3(Float(g.uniform(Double(lo.x) - 0.05, Double(hi.x) + 0.05)), Float(g.uniform(Double(lo.y) - 0.05, Double(hi.y) + 0.05)),
                          Float(g.uniform(Double(lo.z) - 0.05, Double(hi.z) + 0.05)))
            case 2:
                // Exactly on a model point, and at a cell's edge.
                q = plain.points[Int(g.next() % UInt64(plain.points.count))]
            default:
                let p = plain.points[Int(g.next() % UInt64(plain.points.count))]
                q = p + SIMD3(Float(g.uniform(-0.02, 0.02)), 0, 0)
            }
            let a = plain.nearestIndex(q, hint: hint), b = tree.nearestIndex(q, hint: hint)
            XCTAssertEqual(a.distanceSquared, b.distanceSquared, "query \(k) at \(q)")
            if a.index != b.index {
                // Only a tie may name another point, at exactly the same distance.
                XCTAssertEqual(distanceSquared(plain.points[b.index], q), a.distanceSquared, "query \(k)")
            }
            if grid.cell(q) != nil { inLists += 1 }
            total += 1
            hint = k % 3 == 0 ? -1 : a.index
        }
        XCTAssertGreaterThan(inLists, total / 2)
        // Hostile input: not finite, or far away: the tree's answer (no trap, no wrong cell).
        for q in [SIMD3<Float>(.nan, 0, 0), SIMD3<Float>(Float.infinity, 0, 0), SIMD3<Float>(0, -Float.infinity, 1), SIMD3(1e30, 1e30, 1e30), SIMD3(-3, 2, 9)] {
            XCTAssertNil(grid.cell(q))
            let a = plain.nearestIndex(q), b = tree.nearestIndex(q)
            XCTAssertEqual(a.index, b.index)
            XCTAssertEqual(a.distanceSquared.isNaN, b.distanceSquared.isNaN)
            if !a.distanceSquared.isNaN { XCTAssertEqual(a.distanceSquared, b.distanceSquared) }
        }
    }

    /// The tree skips nodes by their boxes and `proximity` stops at the first point within reach:
    /// every answer is still a full scan's (nearest distance, the k nearest distances in order, the
    /// points within a radius, within τ / within 2τ / neither).
    func testTheTreeAnswersAsAFullScanDoes() {
        let frame = SyntheticShapes.view(of: shape("mug"), seed: 7, points: 3_000)
        let tree = KDTree(frame.points)
        let points = tree.points
        var g = SplitMix64(seed: 12)
        var lo = points[0], hi = points[0]
        for p in points { lo = pointwiseMin(lo, p); hi = pointwiseMax(hi, p) }
        let near: Float = 0.004 * 0.004, far: Float = 4 * near
        var found: [(index: Int, distanceSquared: Float)] = []
        var within: [Int32] = []
        var kinds = [0, 0, 0]
        for k in 0..<800 {
            let q: SIMD3<Float>
            if k % 2 == 0 {
                let p = points[Int(g.next() % UInt64(points.count))]
                q = p + SIMD3(Float(g.uniform(-0.012, 0.012)), Float(g.uniform(-0.012, 0.012)), Float(g.uniform(-0.012, 0.012)))
            } else {
                q = SIMD3(Float(g.uniform(Double(lo.x) - 0.03, Double(hi.x) + 0.03)), Float(g.uniform(Double(lo.y) - 0.03, Double(hi.y) + 0.03)),
                          Float(g.uniform(Double(lo.z) - 0.03, Double(hi.z) + 0.03)))
            }
            let all = points.map { distanceSquared($0, q) }
            let sorted = all.sorted()
            XCTAssertEqual(tree.nearestIndex(q).distanceSquared, sorted[0], "query \(k)")
            XCTAssertEqual(tree.nearestIndex(q, hint: Int(g.next() % UInt64(points.count))).distanceSquared, sorted[0], "query \(k) with a hint")
            tree.nearestIndices(q, k: 7, into: &found)
            XCTAssertEqual(found.map(\.distanceSquared), Array(sorted.prefix(7)), "query \(k)")
            tree.indices(within: far, of: q, into: &within)
            XCTAssertEqual(Set(within.map(Int.init)), Set(all.indices.filter { all[$0] <= far }), "query \(k)")
            let expected = sorted[0] <= near ? 0 : (sorted[0] <= far ? 1 : 2)
            XCTAssertEqual(tree.proximity(q, near: near, far: far), expected, "query \(k)")
            kinds[expected] += 1
        }
        // Every answer of `proximity` was asked for.
        XCTAssertTrue(kinds.allSatisfy { $0 > 40 }, "\(kinds)")
    }

    func testAVerifierGivesTheSameVerdictsWithTheGrid() {
        // The plain tree and the grid's tree in the same alignment: the same pose, fit and RMS.
        let model = SyntheticShapes.view(of: shape("box-2-3-4"), seed: 11, points: 4_000).points
        let plain = KDTree(model)
        let tree = plain.withNearestGrid(edge: 0.003, reach: 0.02)
        let normals = plain.normals()
        let view = ShapeAnalysis(points: SyntheticShapes.view(of: shape("box-2-3-4"), seed: 12, points: 4_000).points)
        let target = ShapeAnalysis(points: model)
        let a = Registration.align(view.cloud, axes: view.axes, to: plain, targets: [target.axes], tau: 0.004, normals: normals, cell: 0.002)
        let b = Registration.align(view.cloud, axes: view.axes, to: tree, targets: [target.axes], tau: 0.004, normals: normals, cell: 0.002)
        XCTAssertEqual(a.transform, b.transform)
        XCTAssertEqual(a.fit, b.fit)
        XCTAssertEqual(a.rms, b.rms)
        XCTAssertGreaterThan(a.fit, 0.5)
    }
}

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

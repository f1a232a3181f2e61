/// A static 3-D k-d tree for nearest-neighbour and k-nearest queries (ICP correspondences, local
/// surface variation). Written here rather than wrapping nanoflann: nanoflann is C++, and SwiftPM's
/// C++ interoperability, once enabled for one target, must be enabled for every target that
/// depends on it (the node, the CLI, the bench, the fuzzer, their tests).
struct KDTree: Sendable {
    /// The points, reordered so that every node covers a contiguous range.
    let points: [SIMD3<Float>]
    /// For each reordered point, its index in the input.
    let order: [Int32]
    private let nodes: [Node]
    /// Exact nearest-point lookups without descending the tree, near the points
    /// (`withNearestGrid`); nil: the tree answers every query.
    private(set) var grid: NearestGrid?

    private struct Node: Sendable {
        var lo: Int32, hi: Int32
        /// -1 for a leaf.
        var axis: Int32
        var split: Float
        var left: Int32, right: Int32
        /// The smallest box holding the node's points.
        var boxLo: SIMD3<Float>, boxHi: SIMD3<Float>

        /// A lower bound of the squared distance from `q` to every point of the node, as
        /// `distanceSquared` computes it (each axis's offset is at most the point's, and the sum is
        /// taken the same way: rounding cannot make it larger than a point's distance).
        @inline(__always) func boxDistanceSquared(_ q: SIMD3<Float>) -> Float {
            let below = pointwiseMax(boxLo - q, .zero), above = pointwiseMax(q - boxHi, .zero)
            let d = below + above
            return (d * d).sum()
        }
    }

    static let leafSize = 8

    init(_ input: [SIMD3<Float>]) {
        var pts = input
        var ord = [Int32](unsafeUninitializedCapacity: input.count) { b, n in
            for i in 0..<input.count { b[i] = Int32(i) }
            n = input.count
        }
        var nodes: [Node] = []
        nodes.reserveCapacity(2 * (input.count / KDTree.leafSize + 1))
        pts.withUnsafeMutableBufferPointer { p in
            ord.withUnsafeMutableBufferPointer { o in
                // In place: each node partitions its range around the median (quickselect), no allocation.
                func build(_ lo: Int, _ hi: Int) -> Int32 {
                    let index = Int32(nodes.count)
                    var mn = p[lo], mx = p[lo]
                    for i in lo..<hi { mn = pointwiseMin(mn, p[i]); mx = pointwiseMax(mx, p[i]) }
                    nodes.append(Node(lo: Int32(lo), hi: Int32(hi), axis: -1, split: 0, left: -1, right: -1, boxLo: mn, boxHi: mx))
                    if hi - lo <= KDTree.leafSize { return index }
                    let spread = mx - mn
                    let axis = spread.x >= spread.y && spread.x >= spread.z ? 0 : (spread.y >= spread.z ? 1 : 2)
                    let mid = (lo + hi) / 2
                    KDTree.select(p, o, lo, hi - 1, mid, axis)
                    let split = p[mid][axis]
                    let l = build(lo, mid)
                    let r = build(mid, hi)
                    nodes[Int(index)].axis = Int32(axis)
                    nodes[Int(index)].split = split
                    nodes[Int(index)].left = l
                    nodes[Int(index)].right = r
                    return index
                }
                if p.count > 0 { _ = build(0, p.count) }
            }
        }
        self.points = pts
        self.order = ord
        self.nodes = nodes
        self.grid = nil
    }

    /// This tree, answering `nearestIndex` from a `NearestGrid` (cells of about `edge`, lists for
    /// the cells within `reach` of the points) where it can: the same answers, sooner. Building it
    /// costs 0.1–0.4 s for a template's model (4,000 points): for a tree that is kept and asked
    /// many times (a verifier's model).
    func withNearestGrid(edge: Float, reach: Float) -> KDTree {
        var t = self
        t.grid = NearestGrid(self, edge: edge, reach: reach)
        return t
    }

    /// Hoare quickselect: afterwards p[k] has the k-th smallest coordinate on `axis` in lo...hi,
    /// smaller-or-equal before it, greater-or-equal after it.
    private static func select(_ p: UnsafeMutableBufferPointer<SIMD3<Float>>, _ o: UnsafeMutableBufferPointer<Int32>,
                               _ lo0: Int, _ hi0: Int, _ k: Int, _ axis: Int) {
        var lo = lo0, hi = hi0
        while hi > lo {
            let pivot = p[(lo + hi) / 2][axis]
            var i = lo, j = hi
            while i <= j {
                while p[i][axis] < pivot { i += 1 }
                while p[j][axis] > pivot { j -= 1 }
                if i <= j { p.swapAt(i, j); o.swapAt(i, j); i += 1; j -= 1 }
            }
            if k <= j { hi = j } else if k >= i { lo = i } else { return }
        }
    }

    var isEmpty: Bool { points.isEmpty }

    /// Squared distance to the nearest point (infinity for an empty tree).
    func nearestDistanceSquared(_ q: SIMD3<Float>) -> Float {
        nearest(q).distanceSquared
    }

    /// The nearest point and its squared distance.
    func nearest(_ q: SIMD3<Float>) -> (point: SIMD3<Float>, distanceSquared: Float) {
        let (i, d) = nearestIndex(q)
        return (i < 0 ? q : points[i], d)
    }

    /// Index (in `points`, reordered: `order` maps it to the input) of the nearest point, -1 if empty.
    /// `hint`: a point likely to be near (the last answer for a point that moved a little, as in an
    /// ICP step); its distance bounds the search from the start, so most of the tree is never
    /// visited. The answer is the nearest point either way (of several at the same distance, the
    /// hint if it is one of them).
    func nearestIndex(_ q: SIMD3<Float>, hint given: Int = -1) -> (index: Int, distanceSquared: Float) {
        guard !nodes.isEmpty else { return (-1, .infinity) }
        var hint = given
        if let grid {
            var bound = -1
            if let found = points.withUnsafeBufferPointer({ grid.nearest(q, in: $0, hint: hint, bound: &bound) }) { return found }
            // Far from the points: the point nearest the cell's centre bounds the search, unless the
            // caller's hint is as near (it stays the answer of a tie).
            if points.indices.contains(bound),
               !points.indices.contains(hint) || distanceSquared(points[bound], q) < distanceSquared(points[hint], q) {
                hint = bound
            }
        }
        var best = Float.infinity
        var bestPoint = -1
        if points.indices.contains(hint) {
            best = distanceSquared(points[hint], q)
            bestPoint = hint
        }
        points.withUnsafeBufferPointer { pts in
            nodes.withUnsafeBufferPointer { nodes in
                withUnsafeTemporaryAllocation(of: (Int32, Float).self, capacity: 64) { stack in
                    var top = 0
                    stack[0] = (0, 0); top = 1
                    while top > 0 {
                        top -= 1
                        let (n, bound) = stack[top]
                        if bound >= best { continue }
                        var node = nodes[Int(n)]
                        // The node's box: no nearer point inside it (the same answer, fewer nodes).
                        if node.boxDistanceSquared(q) >= best { continue }
                        // Descend to the leaf, pushing the far sides.
                        while node.axis >= 0 {
                            let diff = q[Int(node.axis)] - node.split
                            let (near, far) = diff < 0 ? (node.left, node.right) : (node.right, node.left)
                            if top < 64 { stack[top] = (far, diff * diff); top += 1 }
                            node = nodes[Int(near)]
                        }
                        for i in Int(node.lo)..<Int(node.hi) {
                            let d = distanceSquared(pts[i], q)
                            if d < best { best = d; bestPoint = i }
                        }
                    }
                }
            }
        }
        return (bestPoint, best)
    }

    /// Whether a point lies within squared distance `near` of `q` (0), else within `far` (1), else
    /// none does (2) — what `nearestDistanceSquared(q) <= near` and `<= far` say, without finding
    /// the nearest point: the search ends at the first point within `near`, and never looks past
    /// `far` (issue 35: coverage asks this of every visible model point).
    func proximity(_ q: SIMD3<Float>, near: Float, far: Float) -> Int {
        guard !nodes.isEmpty else { return 2 }
        var result = 2
        // Points beyond this are of no interest: past `far` at first, past `near` once one within
        // `far` is known.
        var limit = max(near, far)
        points.withUnsafeBufferPointer { pts in
            nodes.withUnsafeBufferPointer { nodes in
                withUnsafeTemporaryAllocation(of: (Int32, Float).self, capacity: 64) { stack in
                    var top = 1
                    stack[0] = (0, 0)
                    search: while top > 0 {
                        top -= 1
                        let (n, bound) = stack[top]
                        if bound > limit { continue }
                        var node = nodes[Int(n)]
                        if node.boxDistanceSquared(q) > limit { continue }
                        while node.axis >= 0 {
                            let diff = q[Int(node.axis)] - node.split
                            let (nearSide, farSide) = diff < 0 ? (node.left, node.right) : (node.right, node.left)
                            if top < 64 { stack[top] = (farSide, diff * diff); top += 1 }
                            node = nodes[Int(nearSide)]
                        }
                        for i in Int(node.lo)..<Int(node.hi) {
                            let d = distanceSquared(pts[i], q)
                            if d <= near { result = 0; break search }
                            if d <= far { result = 1; limit = near }
                        }
                    }
                }
            }
        }
        return result
    }

    /// Every point within squared distance `radiusSquared` of `q` (indices in the tree's order, in
    /// no particular order).
    func indices(within radiusSquared: Float, of q: SIMD3<Float>, into result: inout [Int32]) {
        result.removeAll(keepingCapacity: true)
        guard !nodes.isEmpty else { return }
        points.withUnsafeBufferPointer { pts in
            nodes.withUnsafeBufferPointer { nodes in
                withUnsafeTemporaryAllocation(of: (Int32, Float).self, capacity: 64) { stack in
                    var top = 1
                    stack[0] = (0, 0)
                    while top > 0 {
                        top -= 1
                        let (n, bound) = stack[top]
                        if bound > radiusSquared { continue }
                        var node = nodes[Int(n)]
                        if node.boxDistanceSquared(q) > radiusSquared { continue }
                        while node.axis >= 0 {
                            let diff = q[Int(node.axis)] - node.split
                            let (near, far) = diff < 0 ? (node.left, node.right) : (node.right, node.left)
                            if top < 64 { stack[top] = (far, diff * diff); top += 1 }
                            node = nodes[Int(near)]
                        }
                        for i in Int(node.lo)..<Int(node.hi) where distanceSquared(pts[i], q) <= radiusSquared {
                            result.append(Int32(i))
                        }
                    }
                }
            }
        }
    }

    /// Unit normals of the surface at each reordered point (smallest principal axis of its k nearest).
    func normals(k: Int = 10) -> [SIMD3<Float>] {
        var out = [SIMD3<Float>](repeating: SIMD3(0, 0, 1), count: points.count)
        var neighbours: [SIMD3<Float>] = []
        for i in points.indices {
            nearest(points[i], k: k, into: &neighbours)
            guard neighbours.count >= 3 else { continue }
            out[i] = neighbours.withUnsafeBufferPointer { ShapeAnalysis.normal($0) }
        }
        return out
    }

    /// The k nearest points, nearest first (fewer if the tree is smaller).
    func nearest(_ q: SIMD3<Float>, k: Int, into result: inout [SIMD3<Float>]) {
        result.removeAll(keepingCapacity: true)
        searchNearest(q, k: k) { [points] i, _ in result.append(points[i]) }
    }

    /// The k nearest points' indices (in the tree's order) and squared distances, nearest first.
    func nearestIndices(_ q: SIMD3<Float>, k: Int, into result: inout [(index: Int, distanceSquared: Float)]) {
        result.removeAll(keepingCapacity: true)
        searchNearest(q, k: k) { i, d2 in result.append((i, d2)) }
    }

    /// The k-nearest search both share: `emit` gets each found index and squared distance, nearest first.
    @inline(__always) private func searchNearest(_ q: SIMD3<Float>, k: Int, _ emit: (Int, Float) -> Void) {
        guard !nodes.isEmpty, k > 0 else { return }
        points.withUnsafeBufferPointer { pts in
            nodes.withUnsafeBufferPointer { nodes in
                withUnsafeTemporaryAllocation(of: Float.self, capacity: k) { dists in
                    withUnsafeTemporaryAllocation(of: Int32.self, capacity: k) { found in
                        withUnsafeTemporaryAllocation(of: (Int32, Float).self, capacity: 64) { stack in
                            var count = 0
                            var top = 1
                            stack[0] = (0, 0)
                            while top > 0 {
                                top -= 1
                                let (n, bound) = stack[top]
                                if count == k, bound >= dists[k - 1] { continue }
                                var node = nodes[Int(n)]
                                if count == k, node.boxDistanceSquared(q) >= dists[k - 1] { continue }
                                while node.axis >= 0 {
                                    let diff = q[Int(node.axis)] - node.split
                                    let (near, far) = diff < 0 ? (node.left, node.right) : (node.right, node.left)
                                    if top < 64 { stack[top] = (far, diff * diff); top += 1 }
                                    node = nodes[Int(near)]
                                }
                                for i in Int(node.lo)..<Int(node.hi) {
                                    let d = distanceSquared(pts[i], q)
                                    if count < k || d < dists[k - 1] {
                                        var j = min(count, k - 1)
                                        while j > 0, dists[j - 1] > d { dists[j] = dists[j - 1]; found[j] = found[j - 1]; j -= 1 }
                                        dists[j] = d; found[j] = Int32(i)
                                        if count < k { count += 1 }
                                    }
                                }
                            }
                            for j in 0..<count { emit(Int(found[j]), dists[j]) }
                        }
                    }
                }
            }
        }
    }
}

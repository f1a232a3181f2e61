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

    private struct Node: Sendable {
        var lo: Int32, hi: Int32
        /// -1 for a leaf.
        var axis: Int32
        var split: Float
        var left: Int32, right: Int32
    }

    static let leafSize = 8

    init(_ input: [SIMD3<Float>]) {
        var pts = input
        var ord = (0..<Int32(input.count)).map { $0 }
        var nodes: [Node] = []
        nodes.reserveCapacity(2 * (input.count / KDTree.leafSize + 1))
        func build(_ lo: Int, _ hi: Int) -> Int32 {
            let index = Int32(nodes.count)
            nodes.append(Node(lo: Int32(lo), hi: Int32(hi), axis: -1, split: 0, left: -1, right: -1))
            if hi - lo <= KDTree.leafSize { return index }
            var mn = pts[lo], mx = pts[lo]
            for i in lo..<hi { mn = pointwiseMin(mn, pts[i]); mx = pointwiseMax(mx, pts[i]) }
            let spread = mx - mn
            let axis = spread.x >= spread.y && spread.x >= spread.z ? 0 : (spread.y >= spread.z ? 1 : 2)
            var pairs = (lo..<hi).map { (pts[$0], ord[$0]) }
            pairs.sort { $0.0[axis] < $1.0[axis] }
            for (k, pair) in pairs.enumerated() { pts[lo + k] = pair.0; ord[lo + k] = pair.1 }
            let mid = (lo + hi) / 2
            let split = pts[mid][axis]
            let l = build(lo, mid)
            let r = build(mid, hi)
            nodes[Int(index)].axis = Int32(axis)
            nodes[Int(index)].split = split
            nodes[Int(index)].left = l
            nodes[Int(index)].right = r
            return index
        }
        if !pts.isEmpty { _ = build(0, pts.count) }
        self.points = pts
        self.order = ord
        self.nodes = nodes
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
    func nearestIndex(_ q: SIMD3<Float>) -> (index: Int, distanceSquared: Float) {
        guard !nodes.isEmpty else { return (-1, .infinity) }
        var best = Float.infinity
        var bestPoint = -1
        points.withUnsafeBufferPointer { pts in
            nodes.withUnsafeBufferPointer { nodes in
                func visit(_ n: Int) {
                    let node = nodes[n]
                    if node.axis < 0 {
                        for i in Int(node.lo)..<Int(node.hi) {
                            let d = distanceSquared(pts[i], q)
                            if d < best { best = d; bestPoint = i }
                        }
                        return
                    }
                    let diff = q[Int(node.axis)] - node.split
                    let (near, far) = diff < 0 ? (node.left, node.right) : (node.right, node.left)
                    visit(Int(near))
                    if diff * diff < best { visit(Int(far)) }
                }
                visit(0)
            }
        }
        return (bestPoint, best)
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

    /// The k nearest points' squared distances and the points, nearest first (fewer if the tree is smaller).
    func nearest(_ q: SIMD3<Float>, k: Int, into result: inout [SIMD3<Float>]) {
        result.removeAll(keepingCapacity: true)
        guard !nodes.isEmpty, k > 0 else { return }
        var dists = [Float](repeating: .infinity, count: k)
        var found = [SIMD3<Float>](repeating: .zero, count: k)
        var count = 0
        points.withUnsafeBufferPointer { pts in
            nodes.withUnsafeBufferPointer { nodes in
                func visit(_ n: Int) {
                    let node = nodes[n]
                    if node.axis < 0 {
                        for i in Int(node.lo)..<Int(node.hi) {
                            let d = distanceSquared(pts[i], q)
                            if count < k || d < dists[k - 1] {
                                var j = min(count, k - 1)
                                while j > 0, dists[j - 1] > d { dists[j] = dists[j - 1]; found[j] = found[j - 1]; j -= 1 }
                                dists[j] = d; found[j] = pts[i]
                                if count < k { count += 1 }
                            }
                        }
                        return
                    }
                    let diff = q[Int(node.axis)] - node.split
                    let (near, far) = diff < 0 ? (node.left, node.right) : (node.right, node.left)
                    visit(Int(near))
                    if count < k || diff * diff < dists[k - 1] { visit(Int(far)) }
                }
                visit(0)
            }
        }
        result.append(contentsOf: found[0..<count])
    }
}

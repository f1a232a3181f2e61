/// Exact nearest-point lookups in O(1) near a fixed point set (a template's model): a voxel grid
/// over the points' box, each cell holding every point that can be the nearest one to some place
/// in the cell. A query scans its cell's short list instead of descending the k-d tree; the answer
/// (index and squared distance) is the tree's, computed the same way (issue 35: 63 % of an object
/// key's unlock time was the tree's nearest-point queries of ICP). Far from the points (a cell
/// whose centre is more than `reach` from every point, or outside the grid) the tree answers.
///
/// Why a cell's list is complete: with c the cell's centre, h its half-diagonal and d the distance
/// from c to its nearest point, any q in the cell has a point within d + h (that one), so its
/// nearest point p is within d + h of q and within d + 2h of c. The list holds every point within
/// d + 2h of c (plus a slack for rounding), so it holds p. A list is sorted by its points'
/// distance from c, so a scan stops where no later point can be nearer the query than the best
/// found (|q − p| ≥ |p − c| − |q − c|); the minimum is the full scan's.
/// A struct: the nearest-point query reads its arrays without retaining an object.
struct NearestGrid: Sendable {
    private let origin: SIMD3<Float>
    private let inverseEdge: Float
    private let dims: SIMD3<Int32>
    /// Per cell, where its list starts in `members` (the list ends where the next cell's starts);
    /// an empty list means "ask the tree".
    private let starts: [Int32]
    /// Per list entry, its point's index (the low 16 bits) and its distance from the cell's centre
    /// in units of `quantum`, rounded down (the high 16 bits): a lower bound. Each list is sorted
    /// by it, nearest the centre first, so a scan stops at the first entry that cannot be nearer
    /// the query than the best so far. (One array: two read side by side cost a retain per query.)
    private let members: [UInt32]
    private let quantum: Float
    private let cellEdge: Float
    /// Per cell, the point nearest its centre (-1: none), a bound for the tree when it answers.
    private let nearestToCentre: [Int32]

    /// At most this many cells: a larger box gets larger cells.
    static let maximumCells = 1_500_000
    /// At most this many list entries (32 MB): a model whose lists would hold more (a damaged
    /// template, points scattered far apart) gets no grid, and the tree answers.
    static let maximumMembers = 8_000_000

    /// A grid over `tree`'s points (its order), cells of about `edge`, lists for the cells within
    /// `reach` of the points.
    init?(_ tree: KDTree, edge: Float, reach: Float) {
        let points = tree.points
        guard points.count >= 16, points.count <= 65_536, edge.isFinite, edge > 0, reach.isFinite, reach >= 0 else { return nil }
        var lo = points[0], hi = points[0]
        for p in points { lo = pointwiseMin(lo, p); hi = pointwiseMax(hi, p) }
        lo -= SIMD3(repeating: reach)
        hi += SIMD3(repeating: reach)
        let size = hi - lo
        guard size.x.isFinite, size.y.isFinite, size.z.isFinite else { return nil }
        var cellEdge = edge
        var n = SIMD3<Int32>(1, 1, 1)
        while true {
            let c = (size / cellEdge).rounded(.up)
            n = SIMD3(Int32(max(c.x, 1)), Int32(max(c.y, 1)), Int32(max(c.z, 1)))
            if Int(n.x) * Int(n.y) * Int(n.z) <= Self.maximumCells { break }
            cellEdge *= 1.25
        }
        let count = Int(n.x) * Int(n.y) * Int(n.z)
        let half = cellEdge * Float(3).squareRoot() / 2
        let slack = 0.01 * cellEdge
        var starts = [Int32](repeating: 0, count: count + 1)
        var members: [UInt32] = []
        var nearest = [Int32](repeating: -1, count: count)
        var found: [Int32] = []
        var sorted: [(radius: Float, index: Int32)] = []
        // A list's farthest entry is within reach + 2h + slack of its centre: 65,535 quanta.
        let quantum = (reach + 2 * half + 2 * slack) / 65_535
        // Cells that may lie within `reach` of a point: those within `reach` of one along every
        // axis (the others need no nearest-point search: they get no list).
        var near = [Bool](repeating: false, count: count)
        let nx = Int(n.x), ny = Int(n.y), nz = Int(n.z)
        for p in points {
            let a = (p - lo - SIMD3(repeating: reach)) / cellEdge - 0.5, b = (p - lo + SIMD3(repeating: reach)) / cellEdge - 0.5
            let x0 = max(Int(a.x.rounded(.up)), 0), x1 = min(Int(b.x.rounded(.down)), nx - 1)
            let y0 = max(Int(a.y.rounded(.up)), 0), y1 = min(Int(b.y.rounded(.down)), ny - 1)
            let z0 = max(Int(a.z.rounded(.up)), 0), z1 = min(Int(b.z.rounded(.down)), nz - 1)
            guard x0 <= x1, y0 <= y1, z0 <= z1 else { continue }
            for z in z0...z1 { for y in y0...y1 {
                let row = (z * ny + y) * nx
                for x in x0...x1 { near[row + x] = true }
            } }
        }
        var hint = -1
        var cell = 0
        for z in 0..<Int(n.z) {
            for y in 0..<Int(n.y) {
                for x in 0..<Int(n.x) {
                    guard near[cell] else {
                        cell += 1
                        starts[cell] = Int32(members.count)
                        continue
                    }
                    let centre = lo + (SIMD3(Float(x), Float(y), Float(z)) + 0.5) * cellEdge
                    // The neighbouring cell's nearest point bounds the search (at most one edge off).
                    let (k, d2) = tree.nearestIndex(centre, hint: hint)
                    hint = k
                    nearest[cell] = Int32(k)
                    let d = d2.squareRoot()
                    if k >= 0, d <= reach {
                        let r = d + 2 * half + slack
                        tree.indices(within: r * r, of: centre, into: &found)
                        sorted.removeAll(keepingCapacity: true)
                        for i in found { sorted.append((distanceSquared(points[Int(i)], centre).squareRoot(), i)) }
                        sorted.sort { $0.radius < $1.radius || ($0.radius == $1.radius && $0.index < $1.index) }
                        for e in sorted {
                            let radius = UInt32(min((e.radius / quantum).rounded(.down), 65_535))
                            members.append(UInt32(UInt16(truncatingIfNeeded: e.index)) | radius << 16)
                        }
                    }
                    cell += 1
                    guard members.count <= Self.maximumMembers else { return nil }
                    starts[cell] = Int32(members.count)
                }
            }
        }
        origin = lo
        inverseEdge = 1 / cellEdge
        dims = n
        self.starts = starts
        self.members = members
        self.quantum = quantum
        self.cellEdge = cellEdge
        nearestToCentre = nearest
    }

    /// The cell holding `q`, or nil outside the grid (or for a point that is not finite).
    @inline(__always) func cell(_ q: SIMD3<Float>) -> Int? {
        cellAndCentre(q)?.cell
    }

    /// The cell holding `q` and its centre (as the lists were made around it).
    @inline(__always) private func cellAndCentre(_ q: SIMD3<Float>) -> (cell: Int, centre: SIMD3<Float>)? {
        let f = (q - origin) * inverseEdge
        // Comparisons first: a NaN fails them, and only in-range values are converted.
        guard f.x >= 0, f.y >= 0, f.z >= 0, f.x < Float(dims.x), f.y < Float(dims.y), f.z < Float(dims.z) else { return nil }
        let x = min(Int(f.x), Int(dims.x) - 1), y = min(Int(f.y), Int(dims.y) - 1), z = min(Int(f.z), Int(dims.z) - 1)
        return ((z * Int(dims.y) + y) * Int(dims.x) + x, origin + (SIMD3(Float(x), Float(y), Float(z)) + 0.5) * cellEdge)
    }

    /// The nearest point's index and squared distance (the tree's answer): nil when the tree must
    /// answer; then `bound` is a point to start its search from (-1: none).
    @inline(__always) func nearest(_ q: SIMD3<Float>, in points: UnsafeBufferPointer<SIMD3<Float>>, hint: Int,
                                   bound: inout Int) -> (index: Int, distanceSquared: Float)? {
        guard let (c, centre) = cellAndCentre(q) else { return nil }
        let s = Int(starts[c]), e = Int(starts[c + 1])
        guard e > s else {
            bound = Int(nearestToCentre[c])
            return nil
        }
        // Entries nearest the centre first: once an entry's distance from the centre (a lower
        // bound, rounded down) exceeds the query's distance from the centre plus the best distance
        // so far (and a margin for rounding), neither it nor any later entry can be nearer — the
        // triangle inequality — and the scan stops. The minimum is the full scan's.
        let fromCentre = distanceSquared(q, centre).squareRoot()
        let margin = 1e-4 * cellEdge
        var best = Float.infinity, bestPoint = -1
        var stop = Float.infinity
        // The hint (ICP's last correspondence, usually the answer) bounds the scan from the start:
        // an entry is taken only when strictly nearer, so on a tie the hint stays (as the tree
        // answers) and otherwise the first of the nearest in list order (as a scan from nothing).
        if hint >= 0, hint < points.count {
            best = distanceSquared(points[hint], q)
            bestPoint = hint
            stop = fromCentre + best.squareRoot() + margin
        }
        let quantum = self.quantum
        members.withUnsafeBufferPointer { m in
            for j in s..<e {
                let entry = m[j]
                if Float(entry >> 16) * quantum > stop { break }
                let i = Int(entry & 0xFFFF)
                let d = distanceSquared(points[i], q)
                if d < best {
                    best = d; bestPoint = i
                    stop = fromCentre + d.squareRoot() + margin
                }
            }
        }
        return (bestPoint, best)
    }

    /// Entries in the cells' lists (for tests and figures).
    var memberCount: Int { members.count }
    var cellCount: Int { starts.count - 1 }
}

/// What one frame says about the object's shape: a density-normalised cloud (voxel centroids), its
/// principal axes and robust extents (metres), and the feature vector. Computed once per frame and
/// shared by the frame check, enrolment and verification.
///
/// Normalisation (Protocol/keys.md): points outside the region of interest are dropped; the cloud
/// is reduced to one point per voxel (edge = longest robust extent / 32, at least 2 mm) so that the
/// camera's density does not matter; lengths in the histograms are divided by the cloud's RMS radius
/// so that they do not depend on scale; the absolute extents are kept in their own block (scale
/// distinguishes a 20 cm box from a 23 cm one); each histogram block is scaled to unit length and
/// weighted; the whole vector is then scaled to unit length (stage 1 compares by cosine).
struct ShapeAnalysis: Sendable {
    /// Points inside the region of interest.
    var pointCount: Int
    /// One point per occupied voxel, at most `maximumVoxelPoints`, in the camera's frame.
    var cloud: [SIMD3<Float>]
    var axes: PrincipalAxes
    /// Robust extents (4th–96th percentile: a few % of outliers do not count) along the principal axes, longest first, metres.
    var extents: SIMD3<Float>
    var vector: [Float]
    /// k-d tree of `cloud` (built for the features, reused by stage 2).
    var tree: KDTree

    static let maximumVoxelPoints = 2_000
    static let voxelDivisions: Float = 32
    static let minimumVoxel: Float = 0.002
    static let d2Pairs = 4_096
    static let d2Bins = 16
    static let radialBins = 12
    static let variationBins = 8
    static let variationQueries = 512
    static let neighbours = 10
    static let dimension = 3 + 4 + d2Bins + radialBins + variationBins
    /// Block weights: scale, ratios, D2, radial, surface variation.
    static let weights: (Float, Float, Float, Float, Float) = (0.8, 1.0, 1.0, 1.0, 1.0)

    init(_ frame: PointFrame, roi: RegionOfInterest?) {
        let points = roi.map { $0.filter(frame.points) } ?? frame.points
        self.init(points: points)
    }

    /// The analysis of a frame whose density-normalised cloud is all that was kept (an enrolment
    /// frame in a template, `ObjectTemplate.View.frame`): the same steps after the voxels.
    init(voxelCloud cloud: [SIMD3<Float>]) {
        pointCount = cloud.count
        self.cloud = cloud
        axes = cloud.withUnsafeBufferPointer { PrincipalAxes($0) }
        extents = Self.robustExtents(cloud, axes)
        let tree = KDTree(cloud)
        self.tree = tree
        vector = Self.features(cloud, tree: tree, axes: axes, extents: extents)
    }

    init(points: [SIMD3<Float>]) {
        guard points.count >= 8 else {
            self.init(tooFew: points)
            return
        }
        let rawAxes = points.withUnsafeBufferPointer { PrincipalAxes($0) }
        let rawExtents = Self.robustExtents(points, rawAxes)
        let voxel = max(rawExtents.x / Self.voxelDivisions, Self.minimumVoxel)
        var cloud = Self.voxelDownsample(points, voxel: voxel)
        if cloud.count > Self.maximumVoxelPoints {
            let step = Double(cloud.count) / Double(Self.maximumVoxelPoints)
            cloud = (0..<Self.maximumVoxelPoints).map { cloud[Int(Double($0) * step)] }
        }
        self.init(voxelCloud: cloud)
        pointCount = points.count
    }

    /// Fewer than 8 points: nothing to analyse (the frame check refuses such a frame).
    private init(tooFew points: [SIMD3<Float>]) {
        pointCount = points.count
        cloud = points
        axes = PrincipalAxes(centroid: .zero, eigenvalues: .zero, axes: .identity)
        extents = .zero
        vector = [Float](repeating: 0, count: Self.dimension)
        tree = KDTree(points)
    }

    /// The cloud without the camera's scattered outliers, for stage 2's fit measures. Voxel
    /// centroids average many surface points but an outlier keeps a voxel to itself, so a fifth of a
    /// large object's cloud can be outliers; one near the surface passes a plain isolation test. A
    /// point is kept when its 7 nearest neighbours lie within 3 voxels and it is within one voxel
    /// (at least 2 mm) of their plane (0.6 voxel dropped a mug's rim with its outliers).
    static func surface(_ cloud: [SIMD3<Float>], tree: KDTree? = nil, extents: SIMD3<Float>) -> [SIMD3<Float>] {
        guard cloud.count > 32 else { return cloud }
        let voxel = max(extents.x / voxelDivisions, minimumVoxel)
        let tree = tree ?? KDTree(cloud)
        let far = 9 * voxel * voxel, offPlane = max(voxel, 0.002)
        // Each point is kept or not by its own neighbours alone: the cloud is cut in runs filtered
        // side by side and put back together in order (the same points, in the same order).
        let runs = cloud.count >= 512 ? Registration.parallelWidth : 1
        let kept = Registration.parallelMap(Array(0..<runs)) { @Sendable r -> [SIMD3<Float>] in
            var neighbours: [SIMD3<Float>] = []
            neighbours.reserveCapacity(8)
            return cloud[cloud.count * r / runs..<cloud.count * (r + 1) / runs].filter { p in
                tree.nearest(p, k: 8, into: &neighbours)
                guard neighbours.count == 8, distanceSquared(neighbours[7], p) <= far else { return false }
                // The neighbours without the point itself (the nearest, at distance 0).
                return neighbours.withUnsafeBufferPointer { all in
                    let others = UnsafeBufferPointer(rebasing: all.dropFirst())
                    var c = SIMD3<Float>.zero
                    for q in others { c += q }
                    c /= Float(others.count)
                    return abs(dot3(p - c, normal(others))) <= offPlane
                }
            }
        }.flatMap { $0 }
        return kept.count >= max(16, cloud.count / 2) ? kept : cloud
    }

    /// 4th–96th percentile spans along the three axes, sorted longest first.
    static func robustExtents(_ points: [SIMD3<Float>], _ pa: PrincipalAxes) -> SIMD3<Float> {
        let n = points.count
        guard n >= 2 else { return .zero }
        let take = min(n, 2_048)
        let step = Double(n) / Double(take)
        var spans: [Float] = []
        let columns = [pa.axes.column0, pa.axes.column1, pa.axes.column2]
        var projected = [Float](repeating: 0, count: take)
        for axis in columns {
            for i in 0..<take { projected[i] = dot3(points[Int(Double(i) * step)] - pa.centroid, axis) }
            // The 4th and 96th percentiles by selection (the values a sort puts there).
            let k0 = Int(Float(take - 1) * 0.04), k1 = Int(Float(take - 1) * 0.96)
            let hi = orderStatistic(&projected, k1), lo = k0 < k1 ? orderStatistic(&projected, k0, below: k1) : hi
            spans.append(hi - lo)
        }
        spans.sort(by: >)
        return SIMD3(spans[0], spans[1], spans[2])
    }

    /// One point (the centroid of its points) per occupied voxel; open addressing, linear in n.
    static func voxelDownsample(_ points: [SIMD3<Float>], voxel: Float) -> [SIMD3<Float>] {
        var capacity = 16
        while capacity < points.count * 2 { capacity <<= 1 }
        let mask = capacity - 1
        var keys = [Int64](repeating: .min, count: capacity)
        var sums = [SIMD3<Float>](repeating: .zero, count: capacity)
        var counts = [Float](repeating: 0, count: capacity)
        var lo = points[0]
        for p in points { lo = pointwiseMin(lo, p) }
        let inv = 1 / voxel
        points.withUnsafeBufferPointer { pts in
            for p in pts {
                let c = (p - lo) * inv
                // Coordinates are within ±1 km and the voxel ≥ 2 mm: each index fits in 21 bits.
                let ix = Int64(min(c.x, 2_000_000)), iy = Int64(min(c.y, 2_000_000)), iz = Int64(min(c.z, 2_000_000))
                let key = (ix << 42) | (iy << 21) | iz
                var h = Int(truncatingIfNeeded: (UInt64(bitPattern: key) &* 0x9E37_79B9_7F4A_7C15) >> 20) & mask
                while keys[h] != .min, keys[h] != key { h = (h + 1) & mask }
                keys[h] = key
                sums[h] += p
                counts[h] += 1
            }
        }
        var out: [SIMD3<Float>] = []
        out.reserveCapacity(points.count / 2)
        for i in 0..<capacity where counts[i] > 0 { out.append(sums[i] / counts[i]) }
        return out
    }

    /// Voxel centroids as `voxelDownsample`, with a normal per point: a voxel's points are kept
    /// apart by the side their normals face (the dominant axis and its sign), each group giving its
    /// centroid and the sum of its normals.
    static func voxelDownsample(_ points: [SIMD3<Float>], normals: [SIMD3<Float>], voxel: Float) -> ([SIMD3<Float>], [SIMD3<Float>]) {
        precondition(points.count == normals.count)
        guard !points.isEmpty else { return ([], []) }
        struct Group: Hashable { var voxel: Int64; var side: Int64 }
        var groups: [Group: Int] = [:]
        groups.reserveCapacity(points.count)
        var sums: [SIMD3<Float>] = [], normalSums: [SIMD3<Float>] = [], counts: [Float] = []
        var lo = points[0]
        for p in points { lo = pointwiseMin(lo, p) }
        let inv = 1 / voxel
        for (p, n) in zip(points, normals) {
            let c = (p - lo) * inv
            let ix = Int64(min(c.x, 2_000_000)), iy = Int64(min(c.y, 2_000_000)), iz = Int64(min(c.z, 2_000_000))
            let a = SIMD3<Float>(abs(n.x), abs(n.y), abs(n.z))
            let axis: Int64 = a.x >= a.y && a.x >= a.z ? 0 : (a.y >= a.z ? 1 : 2)
            let side: Int64 = n[Int(axis)] < 0 ? 1 : 0
            let key = (ix << 42) | (iy << 21) | iz
            let grouped = Group(voxel: key, side: axis * 2 + side)
            if let g = groups[grouped] {
                sums[g] += p; normalSums[g] += n; counts[g] += 1
            } else {
                groups[grouped] = sums.count
                sums.append(p); normalSums.append(n); counts.append(1)
            }
        }
        return (zip(sums, counts).map { $0 / $1 }, normalSums)
    }

    static func features(_ cloud: [SIMD3<Float>], tree: KDTree, axes pa: PrincipalAxes, extents e: SIMD3<Float>) -> [Float] {
        let n = cloud.count
        var v = [Float]()
        v.reserveCapacity(dimension)
        let (ws, wr, wd, wq, wv) = weights
        // Scale: absolute extents, 60 cm ↦ 1.
        for x in [e.x, e.y, e.z] { v.append(ws * min(x / 0.6, 1.5)) }
        // Proportions.
        let l = pa.eigenvalues
        let e1 = max(e.x, 1e-6), l1 = max(l.x, 1e-12)
        v.append(wr * e.y / e1); v.append(wr * e.z / e1)
        v.append(wr * (l.y / l1).squareRoot()); v.append(wr * (l.z / l1).squareRoot())
        var rms: Float = 0
        for p in cloud { rms += distanceSquared(p, pa.centroid) }
        rms = max((rms / Float(max(n, 1))).squareRoot(), 1e-6)
        // D2: distances between fixed pseudo-random pairs, / RMS radius, over [0, 3.2).
        var d2 = [Float](repeating: 0, count: d2Bins)
        var rng = SplitMix64(seed: 0x7A4D_2D2D)
        cloud.withUnsafeBufferPointer { c in
            for _ in 0..<d2Pairs {
                let a = Int(rng.next() % UInt64(n)), b = Int(rng.next() % UInt64(n))
                let d = length3(c[a] - c[b]) / rms
                d2[min(Int(d / 3.2 * Float(d2Bins)), d2Bins - 1)] += 1
            }
        }
        append(block: d2, weight: wd, to: &v)
        // Distance from the centroid, / RMS radius, over [0, 2.4).
        var radial = [Float](repeating: 0, count: radialBins)
        for p in cloud {
            let d = length3(p - pa.centroid) / rms
            radial[min(Int(d / 2.4 * Float(radialBins)), radialBins - 1)] += 1
        }
        append(block: radial, weight: wq, to: &v)
        // Local surface variation λ3 / (λ1 + λ2 + λ3) of the k nearest voxels, over [0, 1/3].
        var variation = [Float](repeating: 0, count: variationBins)
        var neighbours: [SIMD3<Float>] = []
        neighbours.reserveCapacity(neighbours_k(n))
        let queries = min(n, variationQueries)
        let step = Double(n) / Double(max(queries, 1))
        for i in 0..<queries {
            tree.nearest(cloud[Int(Double(i) * step)], k: neighbours_k(n), into: &neighbours)
            let s = neighbours.withUnsafeBufferPointer { surfaceVariation($0) }
            variation[min(Int(s * 3 * Float(variationBins)), variationBins - 1)] += 1
        }
        append(block: variation, weight: wv, to: &v)
        // Unit length.
        var norm: Float = 0
        for x in v { norm += x * x }
        norm = norm.squareRoot()
        if norm > 0 { for i in v.indices { v[i] /= norm } }
        return v
    }

    private static func neighbours_k(_ n: Int) -> Int { min(neighbours, n) }

    private static func append(block: [Float], weight: Float, to v: inout [Float]) {
        var norm: Float = 0
        for x in block { norm += x * x }
        norm = norm.squareRoot()
        for x in block { v.append(norm > 0 ? weight * x / norm : 0) }
    }

    /// Unit normal of a neighbourhood: the eigenvector of the smallest covariance eigenvalue, from
    /// the closed-form eigenvalue and the largest cross product of two rows of (C − λI).
    static func normal(_ p: UnsafeBufferPointer<SIMD3<Float>>) -> SIMD3<Float> {
        var c = SIMD3<Float>.zero
        for q in p { c += q }
        c /= Float(p.count)
        var xx: Float = 0, xy: Float = 0, xz: Float = 0, yy: Float = 0, yz: Float = 0, zz: Float = 0
        for q in p {
            let d = q - c
            xx += d.x * d.x; xy += d.x * d.y; xz += d.x * d.z; yy += d.y * d.y; yz += d.y * d.z; zz += d.z * d.z
        }
        let lambda = Float(surfaceVariation(p)) * (xx + yy + zz)
        let r0 = SIMD3(xx - lambda, xy, xz), r1 = SIMD3(xy, yy - lambda, yz), r2 = SIMD3(xz, yz, zz - lambda)
        // The longest of the three cross products (the first of equals), without an array per call.
        var best = cross3(r0, r1)
        let c1 = cross3(r0, r2), c2 = cross3(r1, r2)
        if dot3(best, best) < dot3(c1, c1) { best = c1 }
        if dot3(best, best) < dot3(c2, c2) { best = c2 }
        return dot3(best, best) > 0 ? normalized3(best) : SIMD3(0, 0, 1)
    }

    /// Smallest covariance eigenvalue over their sum, from the closed form of a 3×3 symmetric matrix.
    static func surfaceVariation(_ p: UnsafeBufferPointer<SIMD3<Float>>) -> Float {
        guard p.count >= 3 else { return 0 }
        var c = SIMD3<Float>.zero
        for q in p { c += q }
        c /= Float(p.count)
        var xx: Float = 0, xy: Float = 0, xz: Float = 0, yy: Float = 0, yz: Float = 0, zz: Float = 0
        for q in p {
            let d = q - c
            xx += d.x * d.x; xy += d.x * d.y; xz += d.x * d.z; yy += d.y * d.y; yz += d.y * d.z; zz += d.z * d.z
        }
        let trace = xx + yy + zz
        guard trace > 0 else { return 0 }
        // Eigenvalues of a symmetric 3×3 (Smith 1961).
        let m = trace / 3
        let a = Double(xx - m), b = Double(yy - m), cc = Double(zz - m)
        let p1 = Double(xy * xy + xz * xz + yz * yz)
        let p2 = a * a + b * b + cc * cc + 2 * p1
        let pp = (p2 / 6).squareRoot()
        guard pp > 1e-20 else { return 1.0 / 3 }
        let det = a * (b * cc - Double(yz * yz)) - Double(xy) * (Double(xy) * cc - Double(yz * xz)) + Double(xz) * (Double(xy * yz) - b * Double(xz))
        let r = max(-1, min(1, det / (2 * pp * pp * pp)))
        let phi = _acos(r) / 3
        let smallest = Double(m) + 2 * pp * _cos(phi + 2 * .pi / 3)
        return Float(max(0, smallest) / Double(trace))
    }
}

/// Cosine similarity of two feature vectors (both unit length when made by ShapeAnalysis).
func cosine(_ a: [Float], _ b: [Float]) -> Double {
    guard a.count == b.count else { return 0 }
    var d: Float = 0, na: Float = 0, nb: Float = 0
    for i in a.indices { d += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i] }
    guard na > 0, nb > 0 else { return 0 }
    return Double(d / (na * nb).squareRoot())
}

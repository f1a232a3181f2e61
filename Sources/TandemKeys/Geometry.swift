/// Small dense linear algebra for 3-D point sets: a 3×3 matrix, rigid transforms, PCA, and the
/// closed-form rigid alignment of point pairs (Horn's quaternion method, with a Jacobi eigensolver).

/// Deterministic 64-bit generator (SplitMix64): shapes, views and feature sampling use it so that
/// every figure is reproducible.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    public mutating func unit() -> Double { Double(next() >> 11) * 0x1.0p-53 }
    public mutating func uniform(_ a: Double, _ b: Double) -> Double { a + (b - a) * unit() }
    /// Standard normal (Box–Muller).
    public mutating func gaussian() -> Double {
        let u = max(unit(), 1e-300), v = unit()
        return (-2 * _log(u)).squareRoot() * _cos(2 * .pi * v)
    }
}

/// A 3×3 matrix of Float, stored by rows.
struct Mat3: Equatable, Sendable {
    var r0, r1, r2: SIMD3<Float>

    static let identity = Mat3(r0: SIMD3(1, 0, 0), r1: SIMD3(0, 1, 0), r2: SIMD3(0, 0, 1))

    /// The matrix whose columns are a, b, c.
    init(columns a: SIMD3<Float>, _ b: SIMD3<Float>, _ c: SIMD3<Float>) {
        r0 = SIMD3(a.x, b.x, c.x); r1 = SIMD3(a.y, b.y, c.y); r2 = SIMD3(a.z, b.z, c.z)
    }

    init(r0: SIMD3<Float>, r1: SIMD3<Float>, r2: SIMD3<Float>) { self.r0 = r0; self.r1 = r1; self.r2 = r2 }

    @inline(__always) func apply(_ p: SIMD3<Float>) -> SIMD3<Float> {
        SIMD3((r0 * p).sum(), (r1 * p).sum(), (r2 * p).sum())
    }

    var transposed: Mat3 { Mat3(columns: r0, r1, r2) }
    var column0: SIMD3<Float> { SIMD3(r0.x, r1.x, r2.x) }
    var column1: SIMD3<Float> { SIMD3(r0.y, r1.y, r2.y) }
    var column2: SIMD3<Float> { SIMD3(r0.z, r1.z, r2.z) }

    static func * (a: Mat3, b: Mat3) -> Mat3 {
        let bt = b.transposed
        return Mat3(r0: SIMD3((a.r0 * bt.r0).sum(), (a.r0 * bt.r1).sum(), (a.r0 * bt.r2).sum()),
                    r1: SIMD3((a.r1 * bt.r0).sum(), (a.r1 * bt.r1).sum(), (a.r1 * bt.r2).sum()),
                    r2: SIMD3((a.r2 * bt.r0).sum(), (a.r2 * bt.r1).sum(), (a.r2 * bt.r2).sum()))
    }

    /// Rotation angle (radians) of a rotation matrix.
    var rotationAngle: Double {
        let trace = Double(r0.x + r1.y + r2.z)
        return _acos(min(1, max(-1, (trace - 1) / 2)))
    }
}

/// x ↦ R·x + t.
struct RigidTransform: Equatable, Sendable {
    var rotation: Mat3
    var translation: SIMD3<Float>

    static let identity = RigidTransform(rotation: .identity, translation: .zero)

    @inline(__always) func apply(_ p: SIMD3<Float>) -> SIMD3<Float> { rotation.apply(p) + translation }

    /// self after other: x ↦ self(other(x)).
    func composed(after other: RigidTransform) -> RigidTransform {
        RigidTransform(rotation: rotation * other.rotation, translation: rotation.apply(other.translation) + translation)
    }

    var inverse: RigidTransform {
        let rt = rotation.transposed
        return RigidTransform(rotation: rt, translation: -rt.apply(translation))
    }
}

@inline(__always) func dot3(_ a: SIMD3<Float>, _ b: SIMD3<Float>) -> Float { (a * b).sum() }
@inline(__always) func cross3(_ a: SIMD3<Float>, _ b: SIMD3<Float>) -> SIMD3<Float> {
    SIMD3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x)
}
@inline(__always) func length3(_ a: SIMD3<Float>) -> Float { (a * a).sum().squareRoot() }
@inline(__always) func distanceSquared(_ a: SIMD3<Float>, _ b: SIMD3<Float>) -> Float { let d = a - b; return (d * d).sum() }
func normalized3(_ a: SIMD3<Float>) -> SIMD3<Float> { let l = length3(a); return l > 0 ? a / l : SIMD3(0, 0, 1) }

/// Eigen-decomposition of a symmetric n×n matrix (row-major, n ≤ 4) by cyclic Jacobi rotations.
/// Eigenvalues descending; `vectors[k]` is the unit eigenvector of `values[k]`.
func symmetricEigen(_ matrix: [Double], n: Int) -> (values: [Double], vectors: [[Double]]) {
    var a = matrix
    var v = [Double](repeating: 0, count: n * n)
    for i in 0..<n { v[i * n + i] = 1 }
    for _ in 0..<50 {
        var off = 0.0
        for i in 0..<n { for j in (i + 1)..<n where j < n { off += a[i * n + j] * a[i * n + j] } }
        if off < 1e-30 { break }
        for p in 0..<n {
            for q in (p + 1)..<n where q < n {
                let apq = a[p * n + q]
                if abs(apq) < 1e-300 { continue }
                let theta = (a[q * n + q] - a[p * n + p]) / (2 * apq)
                let t = (theta >= 0 ? 1.0 : -1.0) / (abs(theta) + (theta * theta + 1).squareRoot())
                let c = 1 / (t * t + 1).squareRoot(), s = t * c
                for k in 0..<n {
                    let akp = a[k * n + p], akq = a[k * n + q]
                    a[k * n + p] = c * akp - s * akq
                    a[k * n + q] = s * akp + c * akq
                }
                for k in 0..<n {
                    let apk = a[p * n + k], aqk = a[q * n + k]
                    a[p * n + k] = c * apk - s * aqk
                    a[q * n + k] = s * apk + c * aqk
                }
                for k in 0..<n {
                    let vkp = v[k * n + p], vkq = v[k * n + q]
                    v[k * n + p] = c * vkp - s * vkq
                    v[k * n + q] = s * vkp + c * vkq
                }
            }
        }
    }
    let order = (0..<n).sorted { a[$0 * n + $0] > a[$1 * n + $1] }
    return (order.map { a[$0 * n + $0] }, order.map { k in (0..<n).map { v[$0 * n + k] } })
}

/// Principal axes of a point set: centroid, eigenvalues of the covariance (descending) and the
/// axes as a right-handed rotation whose columns are the axes.
struct PrincipalAxes: Equatable, Sendable {
    var centroid: SIMD3<Float>
    var eigenvalues: SIMD3<Float>
    var axes: Mat3

    init(centroid: SIMD3<Float>, eigenvalues: SIMD3<Float>, axes: Mat3) {
        self.centroid = centroid; self.eigenvalues = eigenvalues; self.axes = axes
    }

    init(_ points: UnsafeBufferPointer<SIMD3<Float>>) {
        let n = max(points.count, 1)
        var sum = SIMD3<Double>.zero
        for p in points { sum += SIMD3<Double>(Double(p.x), Double(p.y), Double(p.z)) }
        let c = sum / Double(n)
        var xx = 0.0, xy = 0.0, xz = 0.0, yy = 0.0, yz = 0.0, zz = 0.0
        for p in points {
            let dx = Double(p.x) - c.x, dy = Double(p.y) - c.y, dz = Double(p.z) - c.z
            xx += dx * dx; xy += dx * dy; xz += dx * dz; yy += dy * dy; yz += dy * dz; zz += dz * dz
        }
        let m = [xx, xy, xz, xy, yy, yz, xz, yz, zz].map { $0 / Double(n) }
        let (values, vectors) = symmetricEigen(m, n: 3)
        let a0 = normalized3(SIMD3(Float(vectors[0][0]), Float(vectors[0][1]), Float(vectors[0][2])))
        var a1 = SIMD3(Float(vectors[1][0]), Float(vectors[1][1]), Float(vectors[1][2]))
        a1 = normalized3(a1 - dot3(a1, a0) * a0)
        let a2 = cross3(a0, a1)
        centroid = SIMD3(Float(c.x), Float(c.y), Float(c.z))
        eigenvalues = SIMD3(Float(max(values[0], 0)), Float(max(values[1], 0)), Float(max(values[2], 0)))
        axes = Mat3(columns: a0, a1, a2)
    }
}

/// The rigid transform minimising Σ‖R·src_i + t − dst_i‖² (Horn 1987, unit quaternions).
func horn(_ src: UnsafeBufferPointer<SIMD3<Float>>, _ dst: UnsafeBufferPointer<SIMD3<Float>>) -> RigidTransform {
    let n = min(src.count, dst.count)
    guard n >= 3 else { return .identity }
    var cs = SIMD3<Double>.zero, cd = SIMD3<Double>.zero
    for i in 0..<n {
        cs += SIMD3<Double>(Double(src[i].x), Double(src[i].y), Double(src[i].z))
        cd += SIMD3<Double>(Double(dst[i].x), Double(dst[i].y), Double(dst[i].z))
    }
    cs /= Double(n); cd /= Double(n)
    var s = [Double](repeating: 0, count: 9)
    for i in 0..<n {
        let a = SIMD3<Double>(Double(src[i].x), Double(src[i].y), Double(src[i].z)) - cs
        let b = SIMD3<Double>(Double(dst[i].x), Double(dst[i].y), Double(dst[i].z)) - cd
        s[0] += a.x * b.x; s[1] += a.x * b.y; s[2] += a.x * b.z
        s[3] += a.y * b.x; s[4] += a.y * b.y; s[5] += a.y * b.z
        s[6] += a.z * b.x; s[7] += a.z * b.y; s[8] += a.z * b.z
    }
    let (sxx, sxy, sxz, syx, syy, syz, szx, szy, szz) = (s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8])
    let m: [Double] = [
        sxx + syy + szz, syz - szy, szx - sxz, sxy - syx,
        syz - szy, sxx - syy - szz, sxy + syx, szx + sxz,
        szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy,
        sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz,
    ]
    let q = symmetricEigen(m, n: 4).vectors[0]
    let (w, x, y, z) = (q[0], q[1], q[2], q[3])
    let r = Mat3(
        r0: SIMD3(Float(w * w + x * x - y * y - z * z), Float(2 * (x * y - w * z)), Float(2 * (x * z + w * y))),
        r1: SIMD3(Float(2 * (x * y + w * z)), Float(w * w - x * x + y * y - z * z), Float(2 * (y * z - w * x))),
        r2: SIMD3(Float(2 * (x * z - w * y)), Float(2 * (y * z + w * x)), Float(w * w - x * x - y * y + z * z)))
    let csf = SIMD3<Float>(Float(cs.x), Float(cs.y), Float(cs.z)), cdf = SIMD3<Float>(Float(cd.x), Float(cd.y), Float(cd.z))
    return RigidTransform(rotation: r, translation: cdf - r.apply(csf))
}

#if canImport(Glibc)
import Glibc
@inline(__always) func _log(_ x: Double) -> Double { Glibc.log(x) }
@inline(__always) func _cos(_ x: Double) -> Double { Glibc.cos(x) }
@inline(__always) func _sin(_ x: Double) -> Double { Glibc.sin(x) }
@inline(__always) func _acos(_ x: Double) -> Double { Glibc.acos(x) }
@inline(__always) func _atan2(_ y: Double, _ x: Double) -> Double { Glibc.atan2(y, x) }
#else
import Foundation
@inline(__always) func _log(_ x: Double) -> Double { Foundation.log(x) }
@inline(__always) func _cos(_ x: Double) -> Double { Foundation.cos(x) }
@inline(__always) func _sin(_ x: Double) -> Double { Foundation.sin(x) }
@inline(__always) func _acos(_ x: Double) -> Double { Foundation.acos(x) }
@inline(__always) func _atan2(_ y: Double, _ x: Double) -> Double { Foundation.atan2(y, x) }
#endif

/// The small rigid motion minimising Σ((p_i + ω×p_i + t − q_i)·n_i)² (point-to-plane, linearised;
/// Chen & Medioni 1991), as a proper rotation (Rodrigues of ω) and t. A lightly damped 6×6 solve, so
/// that a direction the surface does not constrain (sliding along a plane) stays put.
func pointToPlaneStep(_ src: UnsafeBufferPointer<SIMD3<Float>>, _ dst: UnsafeBufferPointer<SIMD3<Float>>,
                      _ normals: UnsafeBufferPointer<SIMD3<Float>>) -> RigidTransform {
    let n = min(src.count, dst.count, normals.count)
    guard n >= 6 else { return .identity }
    // Centred on the source's centroid: better conditioned rotations.
    var c = SIMD3<Float>.zero
    for i in 0..<n { c += src[i] }
    c /= Float(n)
    var ata = [Double](repeating: 0, count: 36), atb = [Double](repeating: 0, count: 6)
    // Each point's row in a buffer of the stack (an array per point was most of this step's time);
    // the sums in the same order as before.
    ata.withUnsafeMutableBufferPointer { m in
        atb.withUnsafeMutableBufferPointer { v in
            withUnsafeTemporaryAllocation(of: Double.self, capacity: 6) { a in
                for i in 0..<n {
                    let p = src[i] - c, nn = normals[i]
                    let pn = cross3(p, nn)
                    a[0] = Double(pn.x); a[1] = Double(pn.y); a[2] = Double(pn.z)
                    a[3] = Double(nn.x); a[4] = Double(nn.y); a[5] = Double(nn.z)
                    let b = -Double(dot3(src[i] - dst[i], nn))
                    for r in 0..<6 {
                        v[r] += a[r] * b
                        for k in r..<6 { m[r * 6 + k] += a[r] * a[k] }
                    }
                }
            }
        }
    }
    for r in 0..<6 { for k in 0..<r { ata[r * 6 + k] = ata[k * 6 + r] } }
    var trace = 0.0
    for r in 0..<6 { trace += ata[r * 6 + r] }
    for r in 0..<6 { ata[r * 6 + r] += 1e-6 * trace / 6 + 1e-12 }
    guard let x = solve6(ata, atb) else { return .identity }
    let w = SIMD3<Float>(Float(x[0]), Float(x[1]), Float(x[2])), t = SIMD3<Float>(Float(x[3]), Float(x[4]), Float(x[5]))
    let r = rodrigues(w)
    // x ↦ R(x − c) + c + t.
    return RigidTransform(rotation: r, translation: c + t - r.apply(c))
}

/// The rotation by |w| radians about w.
func rodrigues(_ w: SIMD3<Float>) -> Mat3 {
    let theta = length3(w)
    guard theta > 1e-9 else { return .identity }
    let k = w / theta
    let s = Float(_sin(Double(theta))), c = Float(_cos(Double(theta))), v = 1 - c
    return Mat3(r0: SIMD3(c + k.x * k.x * v, k.x * k.y * v - k.z * s, k.x * k.z * v + k.y * s),
                r1: SIMD3(k.y * k.x * v + k.z * s, c + k.y * k.y * v, k.y * k.z * v - k.x * s),
                r2: SIMD3(k.z * k.x * v - k.y * s, k.z * k.y * v + k.x * s, c + k.z * k.z * v))
}

/// Solves the 6×6 system (row-major) by Gaussian elimination with partial pivoting; nil when singular.
func solve6(_ m: [Double], _ rhs: [Double]) -> [Double]? {
    var a = m, b = rhs
    for col in 0..<6 {
        var pivot = col
        for r in col + 1..<6 where abs(a[r * 6 + col]) > abs(a[pivot * 6 + col]) { pivot = r }
        guard abs(a[pivot * 6 + col]) > 1e-18 else { return nil }
        if pivot != col {
            for k in 0..<6 { a.swapAt(col * 6 + k, pivot * 6 + k) }
            b.swapAt(col, pivot)
        }
        for r in col + 1..<6 {
            let f = a[r * 6 + col] / a[col * 6 + col]
            guard f != 0 else { continue }
            for k in col..<6 { a[r * 6 + k] -= f * a[col * 6 + k] }
            b[r] -= f * b[col]
        }
    }
    var x = [Double](repeating: 0, count: 6)
    for r in stride(from: 5, through: 0, by: -1) {
        var s = b[r]
        for k in r + 1..<6 { s -= a[r * 6 + k] * x[k] }
        x[r] = s / a[r * 6 + r]
    }
    return x.allSatisfy(\.isFinite) ? x : nil
}

/// The `k`-th smallest of `v` (0-based), found by selection instead of a full sort: afterwards
/// `v[k]` holds it, nothing before it is larger and nothing after it smaller. The value is the
/// one a sort would put at `k`. For two order statistics, the larger first and then the smaller
/// on `v[..<k]` (which then holds the k smallest).
func orderStatistic(_ v: inout [Float], _ k: Int, below end: Int? = nil) -> Float {
    let n = end ?? v.count
    precondition(k >= 0 && k < n && n <= v.count)
    return v.withUnsafeMutableBufferPointer { p in
        var lo = 0, hi = n - 1
        while hi > lo {
            // Median of three as the pivot (a sorted or constant run does not make it quadratic).
            let mid = lo + (hi - lo) / 2
            let a = p[lo], b = p[mid], c = p[hi]
            let pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b))
            var i = lo, j = hi
            while i <= j {
                while p[i] < pivot { i += 1 }
                while p[j] > pivot { j -= 1 }
                if i <= j { p.swapAt(i, j); i += 1; j -= 1 }
            }
            if k <= j { hi = j } else if k >= i { lo = i } else { break }
        }
        return p[k]
    }
}

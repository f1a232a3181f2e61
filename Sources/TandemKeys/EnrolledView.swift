import Foundation

/// One good enrolment frame, reduced to what the template needs: its density-normalised cloud
/// (camera frame), principal axes and feature vector.
struct EnrolledView: Sendable, Equatable {
    var cloud: [SIMD3<Float>]
    var axes: PrincipalAxes
    var extents: SIMD3<Float>
    var vector: [Float]
    var quality: Double

    init(_ a: ShapeAnalysis, quality: Double) {
        cloud = a.cloud; axes = a.axes; extents = a.extents; vector = a.vector; self.quality = quality
    }
}

extension EnrolledView: Codable {
    private enum CodingKeys: String, CodingKey { case cloud, axes, extents, vector, quality }

    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let flat = try c.decode([Float].self, forKey: .cloud)
        let axes = try c.decode([Float].self, forKey: .axes)
        let extents = try c.decode([Float].self, forKey: .extents)
        vector = try c.decode([Float].self, forKey: .vector)
        quality = try c.decode(Double.self, forKey: .quality)
        guard flat.count % 3 == 0, flat.count / 3 <= ShapeAnalysis.maximumVoxelPoints, axes.count == 15, extents.count == 3,
              vector.count == ShapeAnalysis.dimension, (0...1).contains(quality),
              (flat + axes + extents + vector).allSatisfy({ $0.isFinite && abs($0) <= 1_000 }) else {
            throw DecodingError.dataCorruptedError(forKey: .cloud, in: c, debugDescription: "invalid enrolled view")
        }
        cloud = stride(from: 0, to: flat.count, by: 3).map { SIMD3(flat[$0], flat[$0 + 1], flat[$0 + 2]) }
        self.axes = PrincipalAxes(floats: axes)
        self.extents = SIMD3(extents[0], extents[1], extents[2])
    }

    func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(cloud.flatMap { [$0.x, $0.y, $0.z] }, forKey: .cloud)
        try c.encode(axes.floats, forKey: .axes)
        try c.encode([extents.x, extents.y, extents.z], forKey: .extents)
        try c.encode(vector, forKey: .vector)
        try c.encode(quality, forKey: .quality)
    }
}

extension PrincipalAxes {
    /// centroid (3), eigenvalues (3), axes by rows (9).
    var floats: [Float] {
        [centroid.x, centroid.y, centroid.z, eigenvalues.x, eigenvalues.y, eigenvalues.z,
         axes.r0.x, axes.r0.y, axes.r0.z, axes.r1.x, axes.r1.y, axes.r1.z, axes.r2.x, axes.r2.y, axes.r2.z]
    }

    init(floats f: [Float]) {
        self.init(centroid: SIMD3(f[0], f[1], f[2]), eigenvalues: SIMD3(f[3], f[4], f[5]),
                  axes: Mat3(r0: SIMD3(f[6], f[7], f[8]), r1: SIMD3(f[9], f[10], f[11]), r2: SIMD3(f[12], f[13], f[14])))
    }

    /// The same frame after a rigid transform.
    func transformed(_ t: RigidTransform) -> PrincipalAxes {
        PrincipalAxes(centroid: t.apply(centroid), eigenvalues: eigenvalues, axes: t.rotation * axes)
    }

    /// Angle (degrees) between two views' orientations, from the axes whose variance stands out
    /// (an axis whose variance is within 20 % of its neighbour's is ill-defined and ignored), sign-free.
    func orientationDifference(_ o: PrincipalAxes) -> Double? {
        func separated1(_ e: SIMD3<Float>) -> Bool { e.y < 0.8 * e.x }
        func separated3(_ e: SIMD3<Float>) -> Bool { e.z < 0.8 * e.y }
        func angle(_ a: SIMD3<Float>, _ b: SIMD3<Float>) -> Double { _acos(Double(min(1, abs(dot3(a, b))))) * 180 / .pi }
        var worst: Double?
        if separated1(eigenvalues), separated1(o.eigenvalues) { worst = max(worst ?? 0, angle(axes.column0, o.axes.column0)) }
        if separated3(eigenvalues), separated3(o.eigenvalues) { worst = max(worst ?? 0, angle(axes.column2, o.axes.column2)) }
        return worst
    }
}

import Foundation

/// What the enrolment cameras saw as empty: a point one of them looked through (in front of the
/// surface it saw there, or beside the object's silhouette) is free space; a point behind every
/// surface seen, or where no camera looked, is unknown — a gap of the model (the back of a ball
/// enrolled from the front, a box's end no frame saw) is not free, a place beside a mug where a
/// turned handle would be is.
///
/// Each camera (a registered enrolment frame's origin, model coordinates; `ObjectTemplate.View.camera`)
/// gets a z-buffer of the model points that face it, seen through a pinhole looking at the model's
/// centroid, one image cell = one model cell at the centroid's distance.
struct FreeSpace: Sendable {
    struct Camera: Sendable {
        var origin: SIMD3<Float>
        var u: SIMD3<Float>, v: SIMD3<Float>, w: SIMD3<Float>
        var angular: Float
        var lo: SIMD2<Int>, width: Int, height: Int
        /// Nearest depth per cell (infinity: the camera saw no surface there).
        var depth: [Float]
    }

    let cameras: [Camera]
    /// How far in front of a seen surface a point must be to be free (metres).
    let margin: Float

    /// The image around the silhouette a camera is taken to have seen empty, in cells.
    static let border = 6

    init(model: [SIMD3<Float>], normals: [SIMD3<Float>], cameras origins: [SIMD3<Float>], cell: Float, margin: Float) {
        self.margin = margin
        guard !model.isEmpty, normals.count == model.count, cell > 0 else { cameras = []; return }
        var centroid = SIMD3<Float>.zero
        for p in model { centroid += p }
        centroid /= Float(model.count)
        cameras = origins.compactMap { c in
            let toModel = centroid - c
            let distance = length3(toModel)
            guard distance > 4 * cell else { return nil }
            let w = toModel / distance
            let u = normalized3(abs(w.x) < 0.9 ? cross3(w, SIMD3(1, 0, 0)) : cross3(w, SIMD3(0, 1, 0))), v = cross3(w, u)
            let angular = cell / distance
            var seen: [(SIMD2<Int>, Float)] = []
            seen.reserveCapacity(model.count / 2)
            for (i, p) in model.enumerated() {
                let d = p - c
                // Facing the camera (a grazing face too: the camera saw its edge).
                guard dot3(normals[i], -d) >= 0 else { continue }
                let z = dot3(d, w)
                guard z > cell else { continue }
                seen.append((SIMD2(Int((dot3(d, u) / z / angular).rounded(.down)), Int((dot3(d, v) / z / angular).rounded(.down))), z))
            }
            guard !seen.isEmpty else { return nil }
            var lo = seen[0].0, hi = seen[0].0
            for (k, _) in seen { lo = pointwiseMin(lo, k); hi = pointwiseMax(hi, k) }
            lo &-= SIMD2(repeating: Self.border); hi &+= SIMD2(repeating: Self.border)
            let width = hi.x - lo.x + 1, height = hi.y - lo.y + 1
            guard width > 0, height > 0, width * height <= 1_000_000 else { return nil }
            var depth = [Float](repeating: .infinity, count: width * height)
            for (k, z) in seen {
                let i = (k.y - lo.y) * width + (k.x - lo.x)
                depth[i] = min(depth[i], z)
            }
            return Camera(origin: c, u: u, v: v, w: w, angular: angular, lo: lo, width: width, height: height, depth: depth)
        }
    }

    var isEmpty: Bool { cameras.isEmpty }

    /// Whether some camera looked through `q`: it projects into that camera's image (the silhouette
    /// and a border around it) where the nearest surface seen (over the cell and its 8 neighbours:
    /// the model is one point per cell, so its image has holes) lies more than `margin` behind it,
    /// or where no surface was seen at all.
    func isFree(_ q: SIMD3<Float>) -> Bool {
        for c in cameras {
            let d = q - c.origin
            let z = dot3(d, c.w)
            guard z > 0 else { continue }
            let x = Int((dot3(d, c.u) / z / c.angular).rounded(.down)) - c.lo.x
            let y = Int((dot3(d, c.v) / z / c.angular).rounded(.down)) - c.lo.y
            guard x >= 0, y >= 0, x < c.width, y < c.height else { continue }
            var nearest = Float.infinity
            for dy in -1...1 {
                let yy = y + dy
                guard yy >= 0, yy < c.height else { continue }
                for dx in -1...1 {
                    let xx = x + dx
                    guard xx >= 0, xx < c.width else { continue }
                    nearest = min(nearest, c.depth[yy * c.width + xx])
                }
            }
            if z < nearest - margin { return true }
        }
        return false
    }
}

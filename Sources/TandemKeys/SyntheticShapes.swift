import Foundation

/// Generated objects and depth-camera views of them, shared by the tests and `tandem-bench keys`:
/// surfaces sampled with their normals; a view keeps what faces the camera and is not hidden
/// (a z-buffer on a grid of 4 mrad cells), then adds Gaussian noise and outliers. Everything is
/// seeded (SplitMix64), so a seed gives the same frame on every machine.
public struct SyntheticShape: Sendable, Hashable {
    public let name: String
    let parts: [Part]

    struct Part: Sendable, Hashable {
        enum Kind: Sendable, Hashable {
            /// Half-extents of the inner box and the rounding radius (0: a plain box).
            case box(half: SIMD3<Float>, radius: Float)
            /// Side of a cylinder along z, centred on the origin.
            case tube(radius: Float, height: Float)
            /// An annulus in the z = 0 plane, normal +z.
            case ring(inner: Float, outer: Float)
            /// Lateral surface of a cone along z: base at −height/2, apex at +height/2.
            case cone(radius: Float, height: Float)
            case ellipsoid(radii: SIMD3<Float>)
            /// A torus around z; `arc`: the angle range kept (a mug's handle is half a torus).
            case torus(major: Float, minor: Float, arcFrom: Float, arcTo: Float)
        }
        var kind: Kind
        var rotation: Mat3 = .identity
        var offset: SIMD3<Float> = .zero
        var inward = false

        static func == (a: Part, b: Part) -> Bool { a.kind == b.kind && a.offset == b.offset && a.inward == b.inward }
        func hash(into h: inout Hasher) { h.combine(kind); h.combine(offset); h.combine(inward) }

        var area: Float {
            switch kind {
            case .box(let h, let r):
                let faces = 8 * (h.x * h.y + h.y * h.z + h.x * h.z)
                let edges = 2 * .pi * r * 2 * (h.x + h.y + h.z)
                return faces + edges + 4 * .pi * r * r
            case .tube(let r, let height): return 2 * .pi * r * height
            case .ring(let a, let b): return .pi * (b * b - a * a)
            case .cone(let r, let height): return .pi * r * (r * r + height * height).squareRoot()
            case .ellipsoid(let e):
                let p: Float = 1.6
                let m = (pow(e.x * e.y, p) + pow(e.y * e.z, p) + pow(e.x * e.z, p)) / 3
                return 4 * .pi * pow(m, 1 / p)
            case .torus(let major, let minor, let a, let b): return (b - a) * major * 2 * .pi * minor
            }
        }

        func sample(_ g: inout SplitMix64) -> (SIMD3<Float>, SIMD3<Float>) {
            var (p, n) = local(&g)
            if inward { n = -n }
            return (rotation.apply(p) + offset, rotation.apply(n))
        }

        private func local(_ g: inout SplitMix64) -> (SIMD3<Float>, SIMD3<Float>) {
            func u() -> Float { Float(g.unit()) }
            switch kind {
            case .box(let h, let r):
                let faces = [4 * h.y * h.z, 4 * h.y * h.z, 4 * h.x * h.z, 4 * h.x * h.z, 4 * h.x * h.y, 4 * h.x * h.y]
                let edgeAreas = [2 * h.x, 2 * h.y, 2 * h.z].map { $0 * .pi * r / 2 * 4 }
                let corners = 4 * .pi * r * r
                var pick = u() * (faces.reduce(0, +) + edgeAreas.reduce(0, +) + corners)
                for (i, a) in faces.enumerated() {
                    if pick < a {
                        let axis = i / 2, sign: Float = i % 2 == 0 ? 1 : -1
                        var p = SIMD3<Float>((2 * u() - 1) * h.x, (2 * u() - 1) * h.y, (2 * u() - 1) * h.z)
                        var n = SIMD3<Float>.zero
                        p[axis] = sign * (h[axis] + r); n[axis] = sign
                        return (p, n)
                    }
                    pick -= a
                }
                for (axis, a) in edgeAreas.enumerated() {
                    if pick < a {
                        let (j, k) = ((axis + 1) % 3, (axis + 2) % 3)
                        let sj: Float = u() < 0.5 ? 1 : -1, sk: Float = u() < 0.5 ? 1 : -1
                        let theta = u() * .pi / 2
                        var n = SIMD3<Float>.zero
                        n[j] = sj * Float(_cos(Double(theta))); n[k] = sk * Float(_sin(Double(theta)))
                        var p = SIMD3<Float>.zero
                        p[axis] = (2 * u() - 1) * h[axis]; p[j] = sj * h[j]; p[k] = sk * h[k]
                        return (p + r * n, n)
                    }
                    pick -= a
                }
                let d = SIMD3<Float>(Float(g.gaussian()), Float(g.gaussian()), Float(g.gaussian()))
                let n = normalized3(d)
                let corner = SIMD3<Float>(n.x < 0 ? -h.x : h.x, n.y < 0 ? -h.y : h.y, n.z < 0 ? -h.z : h.z)
                return (corner + r * n, n)
            case .tube(let r, let height):
                let phi = u() * 2 * .pi
                let n = SIMD3<Float>(Float(_cos(Double(phi))), Float(_sin(Double(phi))), 0)
                return (SIMD3(r * n.x, r * n.y, (u() - 0.5) * height), n)
            case .ring(let a, let b):
                let rr = (a * a + u() * (b * b - a * a)).squareRoot(), phi = Double(u()) * 2 * .pi
                return (SIMD3(rr * Float(_cos(phi)), rr * Float(_sin(phi)), 0), SIMD3(0, 0, 1))
            case .cone(let r, let height):
                let t = u().squareRoot(), phi = Double(u()) * 2 * .pi
                let c = Float(_cos(phi)), s = Float(_sin(phi))
                return (SIMD3(t * r * c, t * r * s, height / 2 - t * height), normalized3(SIMD3(height * c, height * s, r)))
            case .ellipsoid(let e):
                let d = normalized3(SIMD3(Float(g.gaussian()), Float(g.gaussian()), Float(g.gaussian())))
                return (d * e, normalized3(d / e))
            case .torus(let major, let minor, let a, let b):
                while true {
                    let theta = Double(u()) * 2 * .pi, phi = Double(a + u() * (b - a))
                    if u() * (major + minor) > major + minor * Float(_cos(theta)) { continue }
                    let n = SIMD3<Float>(Float(_cos(theta) * _cos(phi)), Float(_cos(theta) * _sin(phi)), Float(_sin(theta)))
                    let centre = SIMD3<Float>(major * Float(_cos(phi)), major * Float(_sin(phi)), 0)
                    return (centre + minor * n, n)
                }
            }
        }
    }

    func sample(_ count: Int, _ g: inout SplitMix64) -> [(SIMD3<Float>, SIMD3<Float>)] {
        let areas = parts.map(\.area)
        let total = areas.reduce(0, +)
        var out: [(SIMD3<Float>, SIMD3<Float>)] = []
        out.reserveCapacity(count)
        for _ in 0..<count {
            var pick = Float(g.unit()) * total
            var i = 0
            while i < parts.count - 1, pick >= areas[i] { pick -= areas[i]; i += 1 }
            out.append(parts[i].sample(&g))
        }
        return out
    }
}

/// Where the camera sees the object from: the object's rotation, then its position in the camera frame.
public struct SyntheticPose: Sendable, Equatable {
    var rotation: Mat3
    public var position: SIMD3<Float>

    /// A uniformly random rotation, 0.4–0.6 m in front of the camera (farther for large objects).
    public static func random(seed: UInt64, distance: Float = 0.5) -> SyntheticPose {
        var g = SplitMix64(seed: seed ^ 0x5EED_0F_F00D)
        let q = normalized4(SIMD4(Float(g.gaussian()), Float(g.gaussian()), Float(g.gaussian()), Float(g.gaussian())))
        let position = SIMD3<Float>(Float(g.uniform(-0.04, 0.04)), Float(g.uniform(-0.04, 0.04)), distance * Float(g.uniform(0.85, 1.15)))
        return SyntheticPose(rotation: rotationMatrix(q), position: position)
    }

    /// The same object turned by `degrees` about the camera's vertical axis (the camera moving around it).
    public func turned(degrees: Float, tilt: Float = 0) -> SyntheticPose {
        let a = Double(degrees) * .pi / 180, b = Double(tilt) * .pi / 180
        let yaw = Mat3(r0: SIMD3(Float(_cos(a)), 0, Float(_sin(a))), r1: SIMD3(0, 1, 0), r2: SIMD3(Float(-_sin(a)), 0, Float(_cos(a))))
        let pitch = Mat3(r0: SIMD3(1, 0, 0), r1: SIMD3(0, Float(_cos(b)), Float(-_sin(b))), r2: SIMD3(0, Float(_sin(b)), Float(_cos(b))))
        return SyntheticPose(rotation: pitch * yaw * rotation, position: position)
    }
}

func normalized4(_ q: SIMD4<Float>) -> SIMD4<Float> { let l = (q * q).sum().squareRoot(); return l > 0 ? q / l : SIMD4(1, 0, 0, 0) }

func rotationMatrix(_ q: SIMD4<Float>) -> Mat3 {
    let (w, x, y, z) = (q.x, q.y, q.z, q.w)
    return Mat3(r0: SIMD3(1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
                r1: SIMD3(2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
                r2: SIMD3(2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)))
}

public enum SyntheticShapes {
    typealias Part = SyntheticShape.Part

    static func box(_ x: Float, _ y: Float, _ z: Float, radius: Float = 0, at o: SIMD3<Float> = .zero) -> Part {
        Part(kind: .box(half: SIMD3(x / 2 - radius, y / 2 - radius, z / 2 - radius), radius: radius), offset: o)
    }

    /// A closed cylinder along z.
    static func cylinder(_ r: Float, _ h: Float, at o: SIMD3<Float> = .zero) -> [Part] {
        [Part(kind: .tube(radius: r, height: h), offset: o),
         Part(kind: .ring(inner: 0, outer: r), offset: o + SIMD3(0, 0, h / 2)),
         Part(kind: .ring(inner: 0, outer: r), rotation: flip, offset: o - SIMD3(0, 0, h / 2))]
    }

    static let flip = Mat3(r0: SIMD3(1, 0, 0), r1: SIMD3(0, -1, 0), r2: SIMD3(0, 0, -1))

    static func mug(handle: Bool) -> [Part] {
        let r: Float = 0.04, h: Float = 0.095, wall: Float = 0.005
        var parts: [Part] = [
            Part(kind: .tube(radius: r, height: h)),
            Part(kind: .tube(radius: r - wall, height: h - wall), offset: SIMD3(0, 0, wall / 2), inward: true),
            Part(kind: .ring(inner: r - wall, outer: r), offset: SIMD3(0, 0, h / 2)),
            Part(kind: .ring(inner: 0, outer: r - wall), offset: SIMD3(0, 0, -h / 2 + wall)),
            Part(kind: .ring(inner: 0, outer: r), rotation: flip, offset: SIMD3(0, 0, -h / 2)),
        ]
        if handle {
            // Half a torus in the x–z plane, sticking out at +x.
            let toY = Mat3(r0: SIMD3(1, 0, 0), r1: SIMD3(0, 0, -1), r2: SIMD3(0, 1, 0))
            parts.append(Part(kind: .torus(major: 0.03, minor: 0.006, arcFrom: -.pi / 2, arcTo: .pi / 2), rotation: toY, offset: SIMD3(r - 0.004, 0, 0)))
        }
        return parts
    }

    /// A teapot: a closed body, a handle at −x and, with `spout`, a spout leaning out at +x.
    static func teapot(spout: Bool) -> [Part] {
        let r: Float = 0.055, h: Float = 0.11
        let toY = Mat3(r0: SIMD3(1, 0, 0), r1: SIMD3(0, 0, -1), r2: SIMD3(0, 1, 0))
        // The handle: half a torus in the x–z plane turned to stick out at −x.
        let back = Mat3(r0: SIMD3(-1, 0, 0), r1: SIMD3(0, 1, 0), r2: SIMD3(0, 0, -1)) * toY
        var parts = cylinder(r, h) + [Part(kind: .torus(major: 0.032, minor: 0.006, arcFrom: -.pi / 2, arcTo: .pi / 2), rotation: back,
                                           offset: SIMD3(-(r - 0.004), 0, 0))]
        if spout {
            // A tube 8 cm long, 9 mm in radius, leaning 50° from the vertical towards +x.
            let a = Double(50) * .pi / 180
            let lean = Mat3(r0: SIMD3(Float(_cos(a)), 0, Float(_sin(a))), r1: SIMD3(0, 1, 0), r2: SIMD3(Float(-_sin(a)), 0, Float(_cos(a))))
            let axis = SIMD3<Float>(Float(_sin(a)), 0, Float(_cos(a)))
            parts.append(Part(kind: .tube(radius: 0.009, height: 0.08), rotation: lean, offset: SIMD3(r - 0.012, 0, -0.02) + 0.04 * axis))
        }
        return parts
    }

    /// A jar, open (its inside seen from above) or closed by a lid 3 mm wider and 1.8 cm high.
    static func jar(lid: Bool) -> [Part] {
        let r: Float = 0.04, h: Float = 0.11, wall: Float = 0.004
        var parts: [Part] = [Part(kind: .tube(radius: r, height: h)), Part(kind: .ring(inner: 0, outer: r), rotation: flip, offset: SIMD3(0, 0, -h / 2))]
        if lid {
            parts += cylinder(r + 0.003, 0.018, at: SIMD3(0, 0, h / 2 + 0.005))
        } else {
            parts += [Part(kind: .tube(radius: r - wall, height: h - wall), offset: SIMD3(0, 0, wall / 2), inward: true),
                      Part(kind: .ring(inner: r - wall, outer: r), offset: SIMD3(0, 0, h / 2)),
                      Part(kind: .ring(inner: 0, outer: r - wall), offset: SIMD3(0, 0, -h / 2 + wall))]
        }
        return parts
    }

    /// At least 20 objects; the hard pairs (`hardPairs`) differ by one part (a handle, a spout, a
    /// lid), a rounding, an aspect ratio within 15 %, or are near-spheres.
    public static let catalogue: [SyntheticShape] = [
        SyntheticShape(name: "box-1-1-2", parts: [box(0.10, 0.10, 0.20)]),
        SyntheticShape(name: "box-1-1-2.3", parts: [box(0.10, 0.10, 0.23)]),
        SyntheticShape(name: "box-2-3-4", parts: [box(0.08, 0.12, 0.16)]),
        SyntheticShape(name: "cube", parts: [box(0.10, 0.10, 0.10)]),
        SyntheticShape(name: "rounded-cube", parts: [box(0.10, 0.10, 0.10, radius: 0.025)]),
        SyntheticShape(name: "book", parts: [box(0.15, 0.21, 0.03)]),
        SyntheticShape(name: "tile", parts: [box(0.15, 0.15, 0.006)]),
        SyntheticShape(name: "can", parts: cylinder(0.033, 0.12)),
        SyntheticShape(name: "puck", parts: cylinder(0.06, 0.05)),
        SyntheticShape(name: "rod", parts: cylinder(0.015, 0.22)),
        SyntheticShape(name: "cone", parts: [Part(kind: .cone(radius: 0.05, height: 0.12)),
                                            Part(kind: .ring(inner: 0, outer: 0.05), rotation: flip, offset: SIMD3(0, 0, -0.06))]),
        SyntheticShape(name: "tennis-ball", parts: [Part(kind: .ellipsoid(radii: SIMD3(repeating: 0.033)))]),
        SyntheticShape(name: "egg", parts: [Part(kind: .ellipsoid(radii: SIMD3(0.022, 0.022, 0.029)))]),
        SyntheticShape(name: "ball-16", parts: [Part(kind: .ellipsoid(radii: SIMD3(repeating: 0.08)))]),
        SyntheticShape(name: "avocado", parts: [Part(kind: .ellipsoid(radii: SIMD3(0.035, 0.04, 0.06)))]),
        SyntheticShape(name: "ring", parts: [Part(kind: .torus(major: 0.05, minor: 0.012, arcFrom: 0, arcTo: 2 * .pi))]),
        SyntheticShape(name: "donut", parts: [Part(kind: .torus(major: 0.04, minor: 0.022, arcFrom: 0, arcTo: 2 * .pi))]),
        SyntheticShape(name: "mug", parts: mug(handle: true)),
        SyntheticShape(name: "mug-no-handle", parts: mug(handle: false)),
        SyntheticShape(name: "l-shape", parts: [box(0.16, 0.05, 0.05, at: SIMD3(0, 0, -0.025)), box(0.05, 0.05, 0.10, at: SIMD3(-0.055, 0, 0.05))]),
        SyntheticShape(name: "bottle", parts: cylinder(0.035, 0.16, at: SIMD3(0, 0, -0.03)) + cylinder(0.013, 0.06, at: SIMD3(0, 0, 0.08))),
        SyntheticShape(name: "lamp", parts: cylinder(0.06, 0.02, at: SIMD3(0, 0, -0.06)) + [Part(kind: .cone(radius: 0.04, height: 0.10), offset: SIMD3(0, 0, 0.0))]),
        SyntheticShape(name: "snowman", parts: [Part(kind: .ellipsoid(radii: SIMD3(repeating: 0.05)), offset: SIMD3(0, 0, -0.04)),
                                               Part(kind: .ellipsoid(radii: SIMD3(repeating: 0.033)), offset: SIMD3(0, 0, 0.06))]),
        SyntheticShape(name: "stairs", parts: [box(0.15, 0.08, 0.04, at: SIMD3(0, 0, -0.02)), box(0.10, 0.08, 0.04, at: SIMD3(0.025, 0, 0.02)),
                                              box(0.05, 0.08, 0.04, at: SIMD3(0.05, 0, 0.06))]),
        // The harder set (issue 35): one part more or less, aspect ratios within 15 %, near-spheres.
        SyntheticShape(name: "teapot", parts: teapot(spout: true)),
        SyntheticShape(name: "teapot-no-spout", parts: teapot(spout: false)),
        SyntheticShape(name: "jar", parts: jar(lid: true)),
        SyntheticShape(name: "jar-open", parts: jar(lid: false)),
        SyntheticShape(name: "can-tall", parts: cylinder(0.033, 0.135)),
        SyntheticShape(name: "box-2-3-4.5", parts: [box(0.08, 0.12, 0.18)]),
        SyntheticShape(name: "plum", parts: [Part(kind: .ellipsoid(radii: SIMD3(0.033, 0.033, 0.037)))]),
    ]

    /// Pairs meant to be hard to tell apart (an impostor for each of them must still be refused).
    public static let hardPairs: [(String, String)] = [
        ("rounded-cube", "cube"), ("box-1-1-2.3", "box-1-1-2"), ("mug-no-handle", "mug"), ("egg", "tennis-ball"),
        ("teapot-no-spout", "teapot"), ("jar-open", "jar"), ("can-tall", "can"), ("box-2-3-4.5", "box-2-3-4"), ("plum", "tennis-ball"),
    ]

    public static func named(_ name: String) -> SyntheticShape? { catalogue.first { $0.name == name } }

    /// A view from a random viewpoint (the pose and everything else follow from `seed`).
    public static func view(of shape: SyntheticShape, seed: UInt64, points: Int) -> PointFrame {
        view(of: shape, pose: .random(seed: seed), seed: seed, points: points)
    }

    /// A view of `shape` placed at `pose`: only the camera-facing, unoccluded surface, `points`
    /// points (fewer if the visible surface is small), Gaussian noise σ = `noise` metres on each
    /// axis, and a fraction `outliers` of points scattered in the box around the object.
    public static func view(of shape: SyntheticShape, pose: SyntheticPose, seed: UInt64, points: Int,
                            noise: Float = 0.0015, outliers: Double = 0.03) -> PointFrame {
        var g = SplitMix64(seed: seed &* 0x9E37_79B9_7F4A_7C15 &+ 17)
        let surface = shape.sample(max(points * 3, 12_000), &g)
        return view(surface: surface, pose: pose, points: points, noise: noise, outliers: outliers, &g)
    }

    /// A view of a sampled surface (points with outward normals, object coordinates); see above.
    static func view(surface: [(SIMD3<Float>, SIMD3<Float>)], pose: SyntheticPose, points: Int, noise: Float, outliers: Double,
                     _ g: inout SplitMix64) -> PointFrame {
        var candidates: [SIMD3<Float>] = []
        candidates.reserveCapacity(surface.count / 2)
        for (p, n) in surface {
            let q = pose.rotation.apply(p) + pose.position
            if dot3(pose.rotation.apply(n), -q) > 0 { candidates.append(q) }
        }
        // Z-buffer: a grid of 4 mrad cells; keep points within 4 mm of the nearest in their cell.
        let cell: Float = 0.004
        var lo = SIMD2<Float>(repeating: .infinity), hi = SIMD2<Float>(repeating: -.infinity)
        let projected = candidates.map { q -> SIMD2<Float> in
            let s = SIMD2(q.x / q.z, q.y / q.z) / cell
            lo = pointwiseMin(lo, s); hi = pointwiseMax(hi, s)
            return s
        }
        var visible: [SIMD3<Float>] = []
        if !candidates.isEmpty {
            let w = Int(hi.x - lo.x) + 1, h = Int(hi.y - lo.y) + 1
            var zbuffer = [Float](repeating: .infinity, count: w * h)
            func index(_ s: SIMD2<Float>) -> Int { min(Int(s.y - lo.y), h - 1) * w + min(Int(s.x - lo.x), w - 1) }
            for (i, q) in candidates.enumerated() { let k = index(projected[i]); zbuffer[k] = min(zbuffer[k], q.z) }
            for (i, q) in candidates.enumerated() where q.z <= zbuffer[index(projected[i])] + 0.004 { visible.append(q) }
        }
        if visible.count > points { visible = Array(visible.prefix(points)) }
        var out = visible.map { $0 + noise * SIMD3(Float(g.gaussian()), Float(g.gaussian()), Float(g.gaussian())) }
        if let first = visible.first, outliers > 0 {
            var mn = first, mx = first
            for p in visible { mn = pointwiseMin(mn, p); mx = pointwiseMax(mx, p) }
            mn -= SIMD3(repeating: 0.03); mx += SIMD3(repeating: 0.03)
            let count = Int(Double(out.count) * outliers)
            for _ in 0..<count {
                let i = Int(g.next() % UInt64(out.count))
                out[i] = SIMD3(Float(g.uniform(Double(mn.x), Double(mx.x))), Float(g.uniform(Double(mn.y), Double(mx.y))),
                               Float(g.uniform(Double(mn.z), Double(mx.z))))
            }
        }
        return PointFrame(points: out, trackingState: .normal)
    }
}

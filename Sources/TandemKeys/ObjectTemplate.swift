import Foundation

/// What enrolment leaves: every good frame's feature vector and principal frame, a metric model of
/// the object (the registered frames merged, ≤ 4,000 points, metres) and fit thresholds calibrated
/// on the object's own frames. `serialized()` gives compact bytes (the node encrypts them at rest);
/// `init(serialized:)` validates every field and throws on anything wrong, never traps.
public struct ObjectTemplate: Sendable, Equatable {
    public struct View: Sendable, Equatable {
        public internal(set) var vector: [Float]
        /// Principal frame in model coordinates (meaningful when `registered`).
        var axes: PrincipalAxes
        /// Whether the frame could be registered into the model.
        public internal(set) var registered: Bool
        /// Where the frame's camera was, in model coordinates (registered frames, from version 5):
        /// what it looked through is free space, what lay behind the surface it saw is unknown
        /// (`FreeSpace`). Nil in templates before version 5.
        var camera: SIMD3<Float>? = nil
        /// The enrolment frame's density-normalised cloud (camera coordinates, as `ShapeAnalysis`
        /// gave it, outliers kept), from version 7: what the object looked like from there, which
        /// `KeyCloseness` shows another key as a live frame held still. Nil before version 7.
        var frame: KeptFrame? = nil
    }

    /// An enrolment frame's cloud as the template keeps it: signed 16-bit steps around its centroid,
    /// the step its farthest point's distance / 32,767 (3 µm when that is 10 cm); `points` gives it back.
    struct KeptFrame: Sendable, Equatable {
        var centre: SIMD3<Float>
        var step: Float
        var steps: [SIMD3<Int16>]

        init?(_ cloud: [SIMD3<Float>]) {
            guard (ObjectTemplate.minimumFramePoints...ShapeAnalysis.maximumVoxelPoints).contains(cloud.count),
                  cloud.allSatisfy({ p in (0..<3).allSatisfy { p[$0].isFinite && abs(p[$0]) <= 1_000 } }) else { return nil }
            var c = SIMD3<Float>.zero
            for p in cloud { c += p }
            c /= Float(cloud.count)
            let reach = cloud.map { length3($0 - c) }.max() ?? 0
            let step = max(reach / ObjectTemplate.frameSteps, 1e-7)
            func q(_ x: Float) -> Int16 { Int16(max(-ObjectTemplate.frameSteps, min(ObjectTemplate.frameSteps, (x / step).rounded()))) }
            self.init(centre: c, step: step, steps: cloud.map { p in let d = p - c; return SIMD3(q(d.x), q(d.y), q(d.z)) })
        }

        init(centre: SIMD3<Float>, step: Float, steps: [SIMD3<Int16>]) { self.centre = centre; self.step = step; self.steps = steps }

        var points: [SIMD3<Float>] { steps.map { centre + SIMD3(Float($0.x), Float($0.y), Float($0.z)) * step } }
    }

    public internal(set) var views: [View]
    /// Model points (metres, model coordinates = the first good frame's camera frame).
    public internal(set) var model: [SIMD3<Float>]
    /// Unit outward normal of each model point (the mean of the normals the enrolment frames gave
    /// its points, each turned towards its own camera): stage 2's visibility test. Stored as 3
    /// signed bytes each (unit length within 1 %).
    public internal(set) var normals: [SIMD3<Float>]
    /// Inlier distance τ (metres) and the model's voxel edge.
    public internal(set) var inlierDistance: Float
    public internal(set) var cell: Float
    /// Calibrated thresholds: a live frame needs fit ≥ minimumFit, rms ≤ maximumRMS,
    /// coverage ≥ minimumCoverage, excess ≤ maximumExcess and deficit ≤ maximumDeficit.
    public internal(set) var minimumFit: Float
    public internal(set) var maximumRMS: Float
    public internal(set) var minimumCoverage: Float
    public internal(set) var maximumExcess: Float
    /// At most this deficit (`Registration.coverage`); 1 in templates from version 2, which had none.
    public internal(set) var maximumDeficit: Float
    /// At most this overhang and shortfall of the outline (metres, `Registration.measure`); 1 (no
    /// test) in templates from versions 2 and 3, which had none.
    public internal(set) var maximumOverhang: Float = 1
    public internal(set) var maximumShortfall: Float = 1
    public internal(set) var goodFrames: Int
    public internal(set) var viewpoints: Int
    public internal(set) var flags: Flags

    public struct Flags: OptionSet, Sendable, Equatable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// Finished early with `force`.
        public static let forced = Flags(rawValue: 1)
        public static let flat = Flags(rawValue: 2)
        public static let featureless = Flags(rawValue: 4)
        public static let fewViewpoints = Flags(rawValue: 8)
    }

    public var warnings: [String] { ObjectEnrollment.warningText(flags) }
    /// Enrolment frames kept (version 7; 0 before).
    public var keptFrames: Int { views.filter { $0.frame != nil }.count }

    public static let maximumViews = 32
    public static let maximumModelPoints = 4_000
    static let magic: [UInt8] = Array("TKT".utf8)
    static let version: UInt8 = 7
    /// A kept frame's points: signed 16-bit steps of the frame's own scale (its farthest point from
    /// its centroid / 32,767) around its centroid.
    static let frameSteps: Float = 32_767
    /// A kept frame holds at least this many points (fewer: not kept).
    static let minimumFramePoints = 32

    // MARK: serialization

    public func serialized() -> [UInt8] {
        var out = Self.magic + [Self.version, flags.rawValue]
        func u16(_ v: Int) { let x = UInt16(clamping: v); out.append(UInt8(x & 0xFF)); out.append(UInt8(x >> 8)) }
        func f(_ v: Float) { let b = v.bitPattern; for s in stride(from: 0, to: 32, by: 8) { out.append(UInt8((b >> UInt32(s)) & 0xFF)) } }
        u16(goodFrames); u16(viewpoints)
        for v in [inlierDistance, cell, minimumFit, maximumRMS, minimumCoverage, maximumExcess, maximumDeficit, maximumOverhang, maximumShortfall] { f(v) }
        u16(ShapeAnalysis.dimension); u16(views.count)
        for v in views {
            out.append((v.registered ? 1 : 0) | (v.camera != nil ? 2 : 0) | (v.frame != nil ? 4 : 0))
            v.vector.forEach(f)
            v.axes.floats.forEach(f)
            if let c = v.camera { f(c.x); f(c.y); f(c.z) }
            if let k = v.frame {
                f(k.centre.x); f(k.centre.y); f(k.centre.z); f(k.step)
                u16(k.steps.count)
                func i16(_ x: Int16) { let b = UInt16(bitPattern: x); out.append(UInt8(b & 0xFF)); out.append(UInt8(b >> 8)) }
                for p in k.steps { i16(p.x); i16(p.y); i16(p.z) }
            }
        }
        u16(model.count)
        for p in model { f(p.x); f(p.y); f(p.z) }
        func q(_ x: Float) -> UInt8 { UInt8(bitPattern: Int8(max(-127, min(127, (x * 127).rounded())))) }
        for n in normals { out.append(q(n.x)); out.append(q(n.y)); out.append(q(n.z)) }
        return out
    }

    public init(serialized bytes: [UInt8]) throws {
        var r = ByteReader(bytes)
        guard try r.bytes(3) == Self.magic else { throw KeyInputError(.badTemplate("not an object template")) }
        let version = try r.u8()
        // Version 2 lacks the deficit threshold, version 3 the outline's: their templates verify as
        // they did (no such test). Version 4 lacks the cameras (near-symmetries then fall back to
        // the model's hull) and its outline ceilings were calibrated against the visible outline
        // (tighter than the whole projection judged now: they stay valid ceilings).
        guard (2...Self.version).contains(version) else { throw KeyInputError(.badTemplate("version \(version) (this build reads 2 to \(Self.version))")) }
        flags = Flags(rawValue: try r.u8())
        goodFrames = try r.u16(); viewpoints = try r.u16()
        inlierDistance = try r.f32(); cell = try r.f32(); minimumFit = try r.f32(); maximumRMS = try r.f32(); minimumCoverage = try r.f32()
        maximumExcess = try r.f32()
        maximumDeficit = version == 2 ? 1 : try r.f32()
        maximumOverhang = version < 4 ? 1 : try r.f32()
        // Versions 4 and 5 stored a shortfall ceiling that was reported, not judged, and was
        // calibrated at the registration's pose alone: they verify as they did (no shortfall test).
        // From version 6 it is judged (against the least shortfall near the pose found).
        let storedShortfall = version < 4 ? 1 : try r.f32()
        maximumShortfall = version < 6 ? 1 : storedShortfall
        guard (0...1).contains(maximumExcess), (0...1).contains(maximumDeficit), (0...1).contains(maximumOverhang), (0...1).contains(maximumShortfall), (0.0005...0.05).contains(inlierDistance), (0.0005...0.1).contains(cell), (0...1).contains(minimumFit),
              (0.0001...0.1).contains(maximumRMS), (0...1).contains(minimumCoverage) else {
            throw KeyInputError(.badTemplate("thresholds out of range"))
        }
        let dimension = try r.u16()
        guard dimension == ShapeAnalysis.dimension else { throw KeyInputError(.badTemplate("feature dimension \(dimension), expected \(ShapeAnalysis.dimension)")) }
        let count = try r.u16()
        guard (1...Self.maximumViews).contains(count) else { throw KeyInputError(.badTemplate("\(count) views (1…\(Self.maximumViews))")) }
        views = []
        for _ in 0..<count {
            let flag = try r.u8()
            guard flag <= (version >= 7 ? 7 : version >= 5 ? 3 : 1) else { throw KeyInputError(.badTemplate("bad view flag")) }
            var vector: [Float] = []
            for _ in 0..<dimension { vector.append(try r.f32(limit: 10)) }
            var a: [Float] = []
            for _ in 0..<15 { a.append(try r.f32(limit: 100)) }
            var camera: SIMD3<Float>?
            if flag & 2 != 0 { camera = SIMD3(try r.f32(limit: 100), try r.f32(limit: 100), try r.f32(limit: 100)) }
            var frame: KeptFrame?
            if flag & 4 != 0 {
                let c = SIMD3(try r.f32(limit: 1_000), try r.f32(limit: 1_000), try r.f32(limit: 1_000))
                let step = try r.f32(limit: 1)
                guard step > 0 else { throw KeyInputError(.badTemplate("a kept frame's scale out of range")) }
                let n = try r.u16()
                guard (Self.minimumFramePoints...ShapeAnalysis.maximumVoxelPoints).contains(n) else {
                    throw KeyInputError(.badTemplate("a kept frame of \(n) points (\(Self.minimumFramePoints)…\(ShapeAnalysis.maximumVoxelPoints))"))
                }
                let raw = try r.bytes(6 * n)
                func i16(_ k: Int) -> Int16 { Int16(bitPattern: UInt16(raw[k]) | UInt16(raw[k + 1]) << 8) }
                frame = KeptFrame(centre: c, step: step, steps: (0..<n).map { k in SIMD3(i16(6 * k), i16(6 * k + 2), i16(6 * k + 4)) })
            }
            views.append(View(vector: vector, axes: PrincipalAxes(floats: a), registered: flag & 1 == 1, camera: camera, frame: frame))
        }
        guard views.contains(where: \.registered) else { throw KeyInputError(.badTemplate("no registered view")) }
        let points = try r.u16()
        guard (16...Self.maximumModelPoints).contains(points) else { throw KeyInputError(.badTemplate("\(points) model points (16…\(Self.maximumModelPoints))")) }
        model = []
        model.reserveCapacity(points)
        for _ in 0..<points { model.append(SIMD3(try r.f32(limit: 100), try r.f32(limit: 100), try r.f32(limit: 100))) }
        normals = []
        normals.reserveCapacity(points)
        for _ in 0..<points {
            let b = try r.bytes(3)
            let n = SIMD3<Float>(Float(Int8(bitPattern: b[0])), Float(Int8(bitPattern: b[1])), Float(Int8(bitPattern: b[2]))) / 127
            let l = length3(n)
            guard l > 0.9, l < 1.1 else { throw KeyInputError(.badTemplate("a model normal out of range")) }
            normals.append(n)
        }
        guard r.isAtEnd else { throw KeyInputError(.badTemplate("\(r.remaining) bytes after the model")) }
    }

    init(views: [View], model: [SIMD3<Float>], normals: [SIMD3<Float>], inlierDistance: Float, cell: Float, minimumFit: Float, maximumRMS: Float,
         minimumCoverage: Float, maximumExcess: Float, maximumDeficit: Float, maximumOverhang: Float = 1, maximumShortfall: Float = 1,
         goodFrames: Int, viewpoints: Int, flags: Flags) {
        self.maximumExcess = maximumExcess; self.maximumDeficit = maximumDeficit
        self.maximumOverhang = maximumOverhang; self.maximumShortfall = maximumShortfall
        self.views = views; self.model = model; self.normals = normals; self.inlierDistance = inlierDistance; self.cell = cell
        self.minimumFit = minimumFit; self.maximumRMS = maximumRMS; self.minimumCoverage = minimumCoverage
        self.goodFrames = goodFrames; self.viewpoints = viewpoints; self.flags = flags
    }
}

extension ObjectTemplate: Codable {
    public init(from decoder: Decoder) throws {
        let data = try decoder.singleValueContainer().decode(Data.self)
        try self.init(serialized: [UInt8](data))
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(Data(serialized()))
    }
}

struct ByteReader {
    let bytes: [UInt8]
    var offset = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
    var remaining: Int { bytes.count - offset }
    var isAtEnd: Bool { offset == bytes.count }

    mutating func bytes(_ n: Int) throws -> [UInt8] {
        guard n <= remaining else { throw KeyInputError(.badTemplate("truncated")) }
        defer { offset += n }
        return Array(bytes[offset..<offset + n])
    }
    mutating func u8() throws -> UInt8 { try bytes(1)[0] }
    mutating func u16() throws -> Int { let b = try bytes(2); return Int(b[0]) | Int(b[1]) << 8 }
    mutating func f32(limit: Float = 1_000) throws -> Float {
        let b = try bytes(4)
        let v = Float(bitPattern: UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24)
        guard v.isFinite, abs(v) <= limit else { throw KeyInputError(.badTemplate("a value out of range")) }
        return v
    }
}

// MARK: building

extension ObjectTemplate {
    /// Views proposed as registration targets / hypotheses: the registered views most like the frame.
    static let candidateViews = 4
    static let registrationFit = 0.5
    static let clearFit = 0.75
    /// A registered view whose leave-one-out fit is below this is dropped from the model (genuine
    /// views fit the others at 0.83–1.0; a view registered upside down at 0.05–0.6).
    static let contradictedFit = 0.7
    /// Calibration never asks more than this fit, nor an RMS below this (metres): sensor-noise floors.
    static let maximumFitThreshold = 0.78
    static let minimumRMSThreshold = 0.0015
    /// Likewise the coverage asked is never above 0.75 and the excess allowed never below 0.025: a
    /// genuine, well aligned frame (without the camera's outliers) shows coverage 0.8–1.0 and an
    /// excess of 0 in 9 frames of 10, at most ~0.026 in 98 of 100.
    static let maximumCoverageThreshold = 0.75
    static let minimumExcessThreshold = 0.025
    /// Added to 1.5 × the enrolment frames' deficit: a well-built model (every face seen twice) shows
    /// 0–0.01 on genuine frames; a handle missing from a mug's view, 0.02–0.07.
    static let deficitMargin = 0.04
    /// The outline's ceilings (metres): the enrolment frames' 2nd highest + this, at least the floor.
    /// Chosen on calibration seeds (`tandem-bench keys`, `tuned_on_seeds`).
    static let outlineMargin = 0.003
    static let outlineFloor = 0.003
    static let shortfallMargin = 0.004
    static let shortfallFloor = 0.005
    /// Leave-one-out models are thinned to this many points (calibration cost; the margin absorbs it).
    static let looModelPoints = 4_000

    /// Registers the views into one model and calibrates the thresholds (leave-one-out).
    static func build(_ views: [EnrolledView], goodFrames: Int, viewpoints: Int, flags: Flags) -> ObjectTemplate {
        let (tau, cell) = scales(views)
        let poses = register(views, tau: tau, cell: cell)
        // The model and the calibration see the views without the camera's outliers, as
        // verification sees live frames.
        let clean = views.map { v in
            var c = v
            c.cloud = ShapeAnalysis.surface(v.cloud, extents: v.extents)
            return c
        }
        var template = build(clean, poses: poses, tau: tau, cell: cell, goodFrames: goodFrames, viewpoints: viewpoints, flags: flags)
        // Each frame as verification would see it live (outliers and all), for `KeyCloseness`.
        for i in template.views.indices { template.views[i].frame = KeptFrame(views[i].cloud) }
        return template
    }

    /// Inlier distance τ and model voxel edge for these views.
    static func scales(_ views: [EnrolledView]) -> (tau: Float, cell: Float) {
        let diameter = views.map(\.extents.x).max() ?? 0.1
        return (min(max(0.02 * diameter, 0.004), 0.012), max(diameter / 48, 0.002))
    }

    /// Each view's pose (its camera frame → model coordinates), nil for a view that could not be registered.
    static func register(_ views: [EnrolledView], tau: Float, cell: Float) -> [RigidTransform?] {
        var poses: [RigidTransform?] = Array(repeating: nil, count: views.count)
        // Seed: the view of highest quality (the most points), then greedily the pending view that
        // fits the growing model best; a view that never fits well enough stays out of the model.
        let seed = views.indices.max { views[$0].quality < views[$1].quality || (views[$0].quality == views[$1].quality && views[$0].cloud.count < views[$1].cloud.count) } ?? 0
        poses[seed] = .identity
        // Pending views, most similar to a registered one first: a view that fits clearly (≥ 0.75) is
        // taken at once; otherwise, after a full pass, the best fitting one if it fits at all.
        while true {
            let pending = views.indices.filter { poses[$0] == nil }
            if pending.isEmpty { break }
            let registered = views.indices.filter { poses[$0] != nil }
            func similarity(_ i: Int) -> Double { registered.map { cosine(views[i].vector, views[$0].vector) }.max() ?? 0 }
            let tree = KDTree(assemble(views, poses, cell: cell))
            let normals = tree.normals()
            var best: (Int, Alignment)?
            for i in pending.sorted(by: { similarity($0) > similarity($1) }) {
                let targets = nearestViews(to: views[i].vector, among: registered, views).map { views[$0].axes.transformed(poses[$0]!) }
                let a = Registration.align(views[i].cloud, axes: views[i].axes, to: tree, targets: targets, tau: tau,
                                           normals: normals, cell: cell, refine: Registration.enrolmentRefinedHypotheses)
                if a.fit > (best?.1.fit ?? -1) { best = (i, a) }
                if a.fit >= clearFit { break }
            }
            guard let (i, a) = best, a.fit >= registrationFit else { break }
            poses[i] = a.transform
        }
        // Global refinement: each registered view once more against the model of the others.
        let ordered = views.indices.filter { poses[$0] != nil && $0 != seed }
        for i in ordered {
            var others = poses
            others[i] = nil
            let tree = KDTree(assemble(views, others, cell: cell))
            let fine = Registration.subsample(views[i].cloud, Registration.finePoints)
            poses[i] = Registration.icpPlane(fine, tree, normals: tree.normals(), from: poses[i]!, tau: tau, iterations: Registration.fineIterations)
        }
        return poses
    }

    static func build(_ views: [EnrolledView], poses registeredPoses: [RigidTransform?], tau: Float, cell: Float, goodFrames: Int, viewpoints: Int,
                      flags: Flags) -> ObjectTemplate {
        var poses = registeredPoses
        var loo = leaveOneOut(views, poses, tau: tau, cell: cell)
        // A view the others contradict was registered in a wrong pose (it fitted the growing model
        // in part, as a lamp's shade fits upside down): its points would be surface where the
        // object has none. It leaves the model and the calibration.
        let contradicted = loo.filter { $0.fit < contradictedFit }.map(\.view)
        if !contradicted.isEmpty, poses.compactMap({ $0 }).count - contradicted.count >= 3 {
            for i in contradicted { poses[i] = nil }
            loo = leaveOneOut(views, poses, tau: tau, cell: cell)
        }
        let (model, modelNormals) = halfTurnCompleted(views, poses, tau: tau, cell: cell)
        let fits = loo.map(\.fit), rmss = loo.map(\.rms), coverages = loo.map(\.coverage), excesses = loo.map(\.excess), deficits = loo.map(\.deficit)
        var minimumFit: Float = 0.6, maximumRMS = tau, minimumCoverage: Float = 0.5, maximumExcess: Float = 0.05, maximumDeficit: Float = 0.2
        var maximumOverhang: Float = 1, maximumShortfall: Float = 1
        if fits.count >= 3 {
            let robustLow = { (v: [Double]) in v.sorted()[v.count >= 6 ? 1 : 0] }
            let robustHigh = { (v: [Double]) in v.sorted(by: >)[v.count >= 6 ? 1 : 0] }
            // Floors from the sensor (σ ≈ 1.5 mm): a well aligned genuine frame has fit ≈ 0.85–0.95
            // whatever the frames said, and an RMS of at least ~0.7 mm (smooth round objects; 1.3–2.5 mm
            // on most): the RMS floor, 1.5 mm or 0.3τ, stays under the spread of a tennis ball's
            // own frames (≤ 1 mm × 1.5) yet refuses an egg seen as one (1.5–2.4 mm).
            minimumFit = Float(min(max(robustLow(fits) - 0.10, 0.35), maximumFitThreshold))
            maximumRMS = Float(min(max(robustHigh(rmss) * 1.5, 0.3 * Double(tau), minimumRMSThreshold), 2 * Double(tau)))
            minimumCoverage = Float(min(max(robustLow(coverages) - 0.12, 0.3), maximumCoverageThreshold))
            maximumExcess = Float(min(max(robustHigh(excesses) + 0.02, minimumExcessThreshold), 0.2))
            // A live frame from a new viewpoint shows up to ~1.5 times the deficit the enrolment's own
            // frames show against the others' model (where the model has a patch some frames lack).
            maximumDeficit = Float(min(robustHigh(deficits) * 1.5 + deficitMargin, 0.5))
            // The outline: what the object's own frames show against the others' model, with a
            // margin, never below the floor (the sensor's noise on a silhouette's ends).
            maximumOverhang = Float(min(max(robustHigh(loo.map(\.overhang)) + outlineMargin, outlineFloor), 0.2))
            maximumShortfall = Float(min(max(robustHigh(loo.map(\.shortfall)) + shortfallMargin, shortfallFloor), 0.2))
        }
        let templateViews = views.indices.map { i in
            // The camera sat at the view's origin: its pose's translation in model coordinates.
            View(vector: views[i].vector, axes: poses[i].map { views[i].axes.transformed($0) } ?? views[i].axes, registered: poses[i] != nil,
                 camera: poses[i]?.translation)
        }
        return ObjectTemplate(views: templateViews, model: model, normals: modelNormals, inlierDistance: tau, cell: cell, minimumFit: minimumFit,
                              maximumRMS: maximumRMS, minimumCoverage: minimumCoverage, maximumExcess: maximumExcess, maximumDeficit: maximumDeficit,
                              maximumOverhang: maximumOverhang, maximumShortfall: maximumShortfall, goodFrames: goodFrames, viewpoints: viewpoints, flags: flags)
    }

    /// Leave-one-out: each registered view against the model of the others, from the pose
    /// registration found, measured as verification measures a live frame. Empty below 3 views.
    static func leaveOneOut(_ views: [EnrolledView], _ poses: [RigidTransform?], tau: Float, cell: Float)
        -> [(view: Int, fit: Double, rms: Double, coverage: Double, excess: Double, deficit: Double, overhang: Double, shortfall: Double)] {
        let registered = views.indices.filter { poses[$0] != nil }
        guard registered.count >= 3 else { return [] }
        return registered.map { i in
            var others = poses
            others[i] = nil
            let (m, oriented) = orientedModel(views, others, cell: cell, limit: looModelPoints)
            let tree = KDTree(m)
            let normals = tree.order.map { oriented[Int($0)] }
            let fine = Registration.subsample(views[i].cloud, Registration.finePoints)
            let pose = Registration.icp(fine, tree, from: poses[i]!, tau: tau, iterations: Registration.fineIterations)
            let (fit, rms) = Registration.evaluate(fine, tree, pose, tau: tau, normals: normals, cell: cell, oriented: true)
            let excess = Registration.excess(views[i].cloud, pose, tree, normals, cell: cell, tau: tau)
            let seen = Registration.measure(model: tree, normals: normals, view: views[i].cloud, t: pose, tau: tau, cell: cell)
            // The shortfall as verification judges it: the least near this pose under which the frame
            // fits about as well (`Registration.leastShortfall`).
            var shortfall = seen.shortfall
            if shortfall > shortfallFloor {
                shortfall = Registration.leastShortfall(view: views[i].cloud, fine: fine, viewTree: KDTree(views[i].cloud), model: tree, normals: normals,
                                                        from: pose, measured: seen, tau: tau, cell: cell, enough: shortfallFloor) { f, r, m in
                    f >= fit - 0.05 && r <= max(rms * 1.25, minimumRMSThreshold) && m.coverage >= seen.coverage - 0.05
                        && m.deficit <= seen.deficit + 0.02 && m.overhang <= seen.overhang + 0.002
                }.measures.shortfall
            }
            return (i, fit, rms, seen.coverage, excess, seen.deficit, seen.overhang, shortfall)
        }
    }

    /// The registered views' clouds in model coordinates, one point per voxel, at most 4,000.
    static func assemble(_ views: [EnrolledView], _ poses: [RigidTransform?], cell: Float) -> [SIMD3<Float>] {
        var union: [SIMD3<Float>] = []
        for (i, v) in views.enumerated() { if let t = poses[i] { union.append(contentsOf: v.cloud.map(t.apply)) } }
        guard !union.isEmpty else { return [] }
        return Registration.subsample(removeStrays(ShapeAnalysis.voxelDownsample(union, voxel: cell), cell: cell), maximumModelPoints)
    }

    /// Drops the camera's outliers: every view brings ~3 % scattered points, each alone in its voxel
    /// while the surface's voxels are shared, so a merged model would be a fifth strays. A point is
    /// kept when its 4 nearest neighbours are within 3 cells.
    static func removeStrays(_ points: [SIMD3<Float>], cell: Float) -> [SIMD3<Float>] {
        let kept = nonStrays(points, cell: cell)
        return kept.count >= 16 ? kept.map { points[$0] } : points
    }

    /// The model with outward unit normals: every registered view's points with normals estimated
    /// in the view and turned towards its camera (a camera sees a surface's front), carried into model
    /// coordinates, merged one point per voxel *and side* (a voxel's points whose normals point
    /// different ways — a tile's faces, a mug's inner and outer wall — stay apart), each with the mean
    /// of its points' normals; strays dropped, at most `maximumModelPoints`. Normals as stored (3
    /// signed bytes), so that a template equals its serialized copy.
    static func orientedModel(_ views: [EnrolledView], _ poses: [RigidTransform?], cell: Float, limit: Int = maximumModelPoints)
        -> (points: [SIMD3<Float>], normals: [SIMD3<Float>]) {
        var points: [SIMD3<Float>] = [], normals: [SIMD3<Float>] = []
        for (i, v) in views.enumerated() {
            guard let t = poses[i], !v.cloud.isEmpty else { continue }
            let tree = KDTree(v.cloud)
            for (j, n) in tree.normals().enumerated() {
                let p = tree.points[j]
                // The camera is at the view's origin.
                points.append(t.apply(p))
                normals.append(t.rotation.apply(dot3(n, -p) >= 0 ? n : -n))
            }
        }
        guard !points.isEmpty else { return ([], []) }
        var (merged, mergedNormals) = ShapeAnalysis.voxelDownsample(points, normals: normals, voxel: cell)
        let kept = nonStrays(merged, cell: cell)
        if kept.count >= 16, kept.count < merged.count {
            merged = kept.map { merged[$0] }; mergedNormals = kept.map { mergedNormals[$0] }
        }
        if merged.count > limit {
            let step = Double(merged.count) / Double(limit)
            let picks = (0..<limit).map { Int(Double($0) * step) }
            merged = picks.map { merged[$0] }; mergedNormals = picks.map { mergedNormals[$0] }
        }
        return (merged, mergedNormals.map { n in
            let u = normalized3(n)
            return SIMD3((u.x * 127).rounded(), (u.y * 127).rounded(), (u.z * 127).rounded()) / 127
        })
    }

    /// A share of a half turn's new surface at most this large may lie where a camera saw empty
    /// space (`halfTurnCompleted`): what the seeing cameras' z-buffers put just in front of a face.
    static let halfTurnFree = 0.05
    /// Each side of the box at least this much longer than the next (`halfTurnCompleted`).
    static let halfTurnSides: Float = 1.15
    /// Along each axis, the end facing one way has less than this share of the other's surface.
    static let halfTurnOneSided = 0.3

    /// The oriented model (`orientedModel`), completed by the half turns about its box's axes (its
    /// smallest bounding box, `KeyCloseness.extents`, through the box's centre) when the box has
    /// three different sides (each `halfTurnSides` times the next), the model is one-sided along
    /// every axis (one end face missing: `halfTurnOneSided`) and the turns together put at most
    /// `halfTurnFree` of the surface they add where a camera saw empty space (`FreeSpace`: an
    /// object without these symmetries). A box's frames each show a corner; the
    /// registration is free to take any of the box's half turns for each, and when it folds every
    /// frame onto one corner (seed 17's 8 × 12 × 18 cm box: all 11 registered frames on the same
    /// three faces) the model has three faces and a live frame showing a corner of the other
    /// handedness finds one face missing (excess 0.11–0.17). Any other model is `orientedModel`'s,
    /// byte for byte.
    static func halfTurnCompleted(_ views: [EnrolledView], _ poses: [RigidTransform?], tau: Float, cell: Float)
        -> (points: [SIMD3<Float>], normals: [SIMD3<Float>]) {
        let full = orientedModel(views, poses, cell: cell, limit: .max)
        let model = thinned(full, maximumModelPoints)
        let cameras = poses.compactMap { $0?.translation }
        guard let completed = halfTurns(model.points, model.normals, full.points, full.normals, cameras: cameras, tau: tau, cell: cell)
        else { return model }
        return thinned(completed, maximumModelPoints)
    }

    /// At most `limit` of the points (and their normals), evenly by index, as `orientedModel` thins.
    static func thinned(_ m: (points: [SIMD3<Float>], normals: [SIMD3<Float>]), _ limit: Int) -> (points: [SIMD3<Float>], normals: [SIMD3<Float>]) {
        guard m.points.count > limit, limit > 0 else { return m }
        let step = Double(m.points.count) / Double(limit)
        let picks = (0..<limit).map { Int(Double($0) * step) }
        return (picks.map { m.points[$0] }, picks.map { m.normals[$0] })
    }

    /// `full` with its images under the half turns about the box axes of `model` (its thinned copy)
    /// through the box's centre, each image's points farther than 2 cells from the surface already
    /// there; nil unless the box has three different sides, the model is one-sided along each
    /// axis and the turns pass the free-space test (`halfTurnCompleted`).
    static func halfTurns(_ model: [SIMD3<Float>], _ normals: [SIMD3<Float>], _ fullPoints: [SIMD3<Float>], _ fullNormals: [SIMD3<Float>],
                          cameras: [SIMD3<Float>], tau: Float, cell: Float) -> (points: [SIMD3<Float>], normals: [SIMD3<Float>])? {
        guard model.count >= 16, normals.count == model.count, fullNormals.count == fullPoints.count, cameras.count >= 3 else { return nil }
        let box = KeyCloseness.extents(model, normals: normals)
        var centre = box.centroid
        for s in box.spans {
            var lo = Float.infinity, hi = -Float.infinity
            for p in model {
                let d = dot3(p - box.centroid, s.axis)
                lo = min(lo, d); hi = max(hi, d)
            }
            centre += (lo + hi) / 2 * s.axis
        }
        // Three different sides (a square or round section has quarter or finer turns that reach a
        // corner of either handedness, so its folded model lacks nothing).
        let lengths = box.spans.map(\.length)
        guard lengths[2] > 0, lengths[0] >= halfTurnSides * lengths[1], lengths[1] >= halfTurnSides * lengths[2] else { return nil }
        // One-sided: along every axis, the model's surface facing one way (an end face) is less
        // than `halfTurnOneSided` of the surface facing the other way.
        for s in box.spans {
            var plus = 0, minus = 0
            for n in normals {
                let c = dot3(n, s.axis)
                if c > 0.9 { plus += 1 } else if c < -0.9 { minus += 1 }
            }
            guard Double(min(plus, minus)) < halfTurnOneSided * Double(max(plus, minus)) else { return nil }
        }
        let free = FreeSpace(model: model, normals: normals, cameras: cameras, cell: cell, margin: 2 * tau)
        var points = fullPoints, pointNormals = fullNormals
        let near = 4 * cell * cell
        var seenEmpty = 0
        for s in box.spans {
            let turn = rodrigues(s.axis * .pi)
            let tree = KDTree(points)
            var added: [SIMD3<Float>] = [], addedNormals: [SIMD3<Float>] = []
            for (p, n) in zip(fullPoints, fullNormals) {
                let q = centre + turn.apply(p - centre)
                guard tree.nearestDistanceSquared(q) > near else { continue }
                added.append(q)
                addedNormals.append(turn.apply(n))
            }
            seenEmpty += added.reduce(0) { $0 + (free.isFree($1) ? 1 : 0) }
            points += added
            pointNormals += addedNormals.map { n in
                let u = normalized3(n)
                return SIMD3((u.x * 127).rounded(), (u.y * 127).rounded(), (u.z * 127).rounded()) / 127
            }
        }
        // The turns together (the third adds what the first two left: a few points).
        let added = points.count - fullPoints.count
        guard added > 0, Double(seenEmpty) <= halfTurnFree * Double(added) else { return nil }
        return (points, pointNormals)
    }

    /// Indices of the points that are not strays (see `removeStrays`).
    static func nonStrays(_ points: [SIMD3<Float>], cell: Float) -> [Int] {
        guard points.count > 32 else { return Array(points.indices) }
        let tree = KDTree(points)
        var neighbours: [SIMD3<Float>] = []
        neighbours.reserveCapacity(5)
        let limit = 9 * cell * cell
        return points.indices.filter { i in
            tree.nearest(points[i], k: 5, into: &neighbours)
            return neighbours.count == 5 && distanceSquared(neighbours[4], points[i]) <= limit
        }
    }

    static func nearestViews(to vector: [Float], among indices: [Int], _ views: [EnrolledView]) -> [Int] {
        Array(indices.sorted { cosine(vector, views[$0].vector) > cosine(vector, views[$1].vector) }.prefix(candidateViews))
    }
}

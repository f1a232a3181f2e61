import Foundation
import Synchronization

/// The verdict on one live frame.
public struct FrameVerdict: Sendable, Equatable, Codable {
    /// Stage 1: best cosine similarity of the frame's feature vector to the template's vectors.
    public var score: Double
    /// Stage 2: inlier fraction (0…1) of the frame's points after alignment to the model.
    public var fit: Double
    /// Stage 2: RMS distance (metres) of the closest 90 % of the frame's points to the model.
    public var rms: Double
    /// Stage 2: fraction of the model points the camera should see that the frame has.
    public var coverage: Double
    /// Stage 2: fraction of the frame's points off the model in clusters (a part the model lacks).
    public var excess: Double
    /// Stage 2: fraction of the visible model points farther than 2τ from the frame together with most
    /// of their neighbours (a part the frame lacks: a handle, 3 cm of box).
    public var deficit: Double
    /// Stage 2: metres by which the frame's silhouette is longer than the model's along some
    /// direction in the image (a can 1.5 cm taller), and the other way round (1.5 cm shorter).
    public var overhang: Double = 0
    public var shortfall: Double = 0
    /// Stage 2: how much shorter (`spanShort`) or longer (`spanLong`) the frame is than the model
    /// along the model's box axes, relative to the model's span (1st–99th percentile spans, in model
    /// coordinates with the pose found); shorter counts only along axes across the line of sight
    /// (at least `ObjectVerifier.spanAcross` off it), where a convex object's ends are both seen.
    public var spanShort: Double = 0
    public var spanLong: Double = 0
    public var quality: Double
    public var guidance: String?
    public var stage1Passed: Bool
    public var stage2Passed: Bool
    public var passed: Bool
    /// Whether the frame tells the object from its look-alikes: false when the frame fits, as well,
    /// a pose under a near-symmetry of the model (a spin about a mug's axis) that the model refuses
    /// (the handle would show, and the frame has none). A key matches only after a decisive frame.
    /// True for frames that were not asked (a key without near-symmetries, or once one was seen).
    public var decisive: Bool = true
}

/// Verifies live frames against one template. A frame passes when it is good, its score is at
/// least `minimumScore` (stage 1, the seeds' rule) and its alignment to the model fits within the
/// template's calibrated thresholds (stage 2). The key matches after `requiredConsecutive`
/// consecutive passing frames of which at least one is decisive (`FrameVerdict.decisive`: a mug
/// shown only from where its handle hides behind it is not told from a cup without one), and stays
/// matched.
public struct ObjectVerifier: Sendable {
    public static let requiredConsecutive = 3
    public static let minimumScore = 0.90
    /// At most this many local searches for a pose with less shortfall per frame (section 6).
    static let shortfallSearches = 2
    /// At most this many local searches for a pose with less excess per frame (section 6).
    static let excessSearches = 2

    public let template: ObjectTemplate
    public let roi: RegionOfInterest?
    private let tree: KDTree
    private let normals: [SIMD3<Float>]
    public private(set) var consecutive = 0
    public private(set) var matched = false
    /// Whether the current run of passing frames is decisive: one of its frames showed every
    /// near-symmetry's distinct part, or each part was shown by some frame of the run.
    public private(set) var decisiveInRun = false
    /// Which distinct parts (`nearSymmetries`) the current run's frames have shown.
    private var shownInRun: [Bool] = []

    public init(template: ObjectTemplate, roi: RegionOfInterest? = nil) {
        self.init(template: template, roi: roi, virtualTargets: Self.virtualTargets)
    }

    init(template: ObjectTemplate, roi: RegionOfInterest? = nil, virtualTargets: Int) {
        self.virtualTargets = virtualTargets
        self.template = template
        self.roi = roi.flatMap { $0.isValid ? $0 : nil }
        tree = KDTree(template.model)
        // The template's oriented normals, in the tree's order.
        normals = template.normals.count == template.model.count ? tree.order.map { template.normals[Int($0)] } : tree.normals()
    }

    /// The model as a camera would see it from 26 directions around it (the faces, edges and
    /// corners of a cube): each view's principal frame and feature vector. A live frame may show the
    /// object from where no enrolment frame looked straight (a box's end face alone): the most similar
    /// of these give the pose search targets the enrolment views cannot. Made when first needed
    /// (~22 ms; most genuine frames never need them), shared by copies of this verifier.
    private let virtual = Made<[(axes: PrincipalAxes, vector: [Float])]>()
    var virtualViews: [(axes: PrincipalAxes, vector: [Float])] {
        virtual.get { Self.virtualViews(tree.points, normals, cell: template.cell) }
    }
    /// The model's tree with a `NearestGrid` (cells of `gridEdge` model cells, lists within
    /// `gridReach` × τ of the model): the same nearest points as the tree, found in a cell's short
    /// list, for the frames' ICP and measures. Made when the first frame is verified (a 4,000-point
    /// mug model: ~115,000 cells, 1.3 million list entries of 4 bytes, 6 MB, 0.1–0.4 s), shared by copies
    /// of this verifier.
    private let grid = Made<KDTree>()
    var gridTree: KDTree {
        grid.get { tree.withNearestGrid(edge: Self.gridEdge * template.cell, reach: Self.gridReach * template.inlierDistance) }
    }
    /// Reach 5τ answers 97 % of a mug sweep's queries from the lists (3τ: 88 %, and the rest cost
    /// more than the lists saved); cells of 1.5 model cells: a third of the cells of 1, lists
    /// twice as long (CPU per sweep 45 ms against 41 ms, the grid made in a third of the time).
    static let gridEdge: Float = 1.5
    static let gridReach: Float = 5

    /// How many of them the second search takes (0: no second search).
    let virtualTargets: Int
    static let virtualTargets = 6

    /// The model's extents along the axes of its smallest bounding box (`KeyCloseness.extents`).
    private let boxSpans = Made<[(low: Float, high: Float, axis: SIMD3<Float>)]>()
    var modelSpans: [(low: Float, high: Float, axis: SIMD3<Float>)] {
        boxSpans.get {
            guard template.model.count >= 16, template.normals.count == template.model.count else { return [] }
            let e = KeyCloseness.extents(template.model, normals: template.normals)
            return e.spans.map { s in
                let (lo, hi) = Self.percentileSpan(template.model, s.axis)
                return (lo, hi, s.axis)
            }
        }
    }
    /// An axis counts for `spanShort` when it makes at least this angle with the line of sight
    /// (its cosine at most `spanAcross`).
    static let spanAcross: Float = 0.7

    /// The 1st and 99th percentiles of the points' projections on `axis`.
    static func percentileSpan(_ points: [SIMD3<Float>], _ axis: SIMD3<Float>) -> (Float, Float) {
        guard !points.isEmpty else { return (0, 0) }
        var d = points.map { dot3($0, axis) }
        // By selection: the values a sort puts there.
        let k0 = (d.count - 1) / 100, k1 = (d.count - 1) * 99 / 100
        let hi = orderStatistic(&d, k1)
        return (k0 < k1 ? orderStatistic(&d, k0, below: k1) : hi, hi)
    }

    /// `spanShort` and `spanLong` of the frame's cloud (camera coordinates) with pose `t`.
    func spans(_ cloud: [SIMD3<Float>], _ t: RigidTransform) -> (short: Double, long: Double) {
        let spans = modelSpans
        guard !spans.isEmpty, cloud.count >= 16 else { return (0, 0) }
        let moved = cloud.map { t.apply($0) }
        var centroid = SIMD3<Float>.zero
        for p in moved { centroid += p }
        centroid /= Float(moved.count)
        let sight = normalized3(centroid - t.translation)
        var short = 0.0, long = 0.0
        for s in spans {
            let length = s.high - s.low
            guard length > 0 else { continue }
            let (lo, hi) = Self.percentileSpan(moved, s.axis)
            long = max(long, Double((hi - lo - length) / length))
            if abs(dot3(sight, s.axis)) <= Self.spanAcross { short = max(short, Double((length - (hi - lo)) / length)) }
        }
        return (short, long)
    }

    /// Makes the model views and near-symmetries now (otherwise the first frame that needs them does).
    public func prepare() { _ = virtualViews; _ = nearSymmetries; _ = modelSpans; _ = gridTree }

    private let symmetries = Made<[[Int32]]>()
    /// The model's near-symmetries, each as the model points it does not carry onto the model (its
    /// *distinct part*): spins of the model about its principal axes and its normals' principal
    /// directions (through its centroid, by 45°, 90°, … 315°, refined by ICP) under which 85–98 % of
    /// the model's points land within 2τ of the model — a mug turned about its axis (all but the
    /// handle), a teapot. A point counts as carried off only when it lands outside the model's hull
    /// too (by 2τ): a part sticking out where the model has none. A point the turn carries into a
    /// gap of the model's own surface (a face no enrolment frame saw) or into a concavity is not
    /// off: the gaps of an enrolled cone, can or box are no part. A true symmetry (a can's spin, a box's half turn, ≥ 98 %) hides nothing and
    /// is left out, and so is a turn that carries much of the model off itself (< 85 %: a frame
    /// that fits both ways is then rare). Made when first needed, shared by copies of this verifier.
    var nearSymmetries: [[Int32]] {
        symmetries.get {
            Self.nearSymmetries(tree, normals, tau: template.inlierDistance, cell: template.cell,
                                cameras: template.views.compactMap { $0.registered ? $0.camera : nil })
        }
    }
    static let nearSymmetryShare = 0.85..<0.98
    /// At most this share of the model may land far from it deep inside its hull (2τ from the
    /// hull's skin) for a turn to be a near-symmetry.
    static let nearSymmetryMisfits = 0.04
    /// 64 directions spread over the sphere (a Fibonacci lattice): the model's hull is taken as the
    /// intersection of its supporting half-spaces along them.
    static let hullDirections: [SIMD3<Float>] = (0..<64).map { i in
        let z = 1 - (Double(i) + 0.5) * 2 / 64, r = (1 - z * z).squareRoot(), phi = Double(i) * 2.399_963_229_728_653
        return SIMD3(Float(r * _cos(phi)), Float(r * _sin(phi)), Float(z))
    }
    static let symmetryDegrees: [Float] = [45, 90, 135, 180, 225, 270, 315]
    /// A frame is decisive when, for every near-symmetry, at least this share of its distinct part
    /// (at least `decisivePoints` points) has a frame point within 2τ: the frame shows the part.
    static let decisiveShare = 0.25
    static let decisivePoints = 8

    static func nearSymmetries(_ tree: KDTree, _ normals: [SIMD3<Float>], tau: Float, cell: Float, cameras: [SIMD3<Float>] = []) -> [[Int32]] {
        let model = tree.points
        guard model.count >= 32, normals.count == model.count else { return [] }
        // With the enrolment cameras (templates from version 5), off means in space a camera saw
        // empty; without them, outside the model's hull.
        let free = FreeSpace(model: model, normals: normals, cameras: cameras, cell: cell, margin: 2 * tau)
        let pa = model.withUnsafeBufferPointer { PrincipalAxes($0) }
        let sample = Registration.subsample(model, Registration.finePoints)
        // Axes: the principal axes, and the eigenvectors of the normals' scatter Σ n nᵀ. A mug's body
        // has nearly equal variance along its axis and across it, so its principal axes can lie
        // anywhere in that plane; its walls' normals all lie across the axis, so the scatter's
        // smallest eigenvector is the axis itself.
        var scatter = [Double](repeating: 0, count: 9)
        for n in normals { for i in 0..<3 { for j in 0..<3 { scatter[i * 3 + j] += Double(n[i] * n[j]) } } }
        let normalAxes = symmetricEigen(scatter, n: 3).vectors.map { SIMD3<Float>(Float($0[0]), Float($0[1]), Float($0[2])) }
        var axes: [SIMD3<Float>] = []
        for a in [pa.axes.column0, pa.axes.column1, pa.axes.column2] + normalAxes.reversed() {
            let u = normalized3(a)
            if !axes.contains(where: { abs(dot3($0, u)) > 0.97 }) { axes.append(u) }
        }
        let far = 4 * tau * tau
        var found: [[Int32]] = []
        var seen: [RigidTransform] = []
        // The model's hull, outside: its support along `hullDirections`.
        let hull = hullDirections.map { d in model.reduce(-Float.infinity) { max($0, dot3(d, $1)) } }
        for axis in axes {
            for degrees in symmetryDegrees {
                let r = rodrigues(axis * (degrees * .pi / 180))
                let spin = RigidTransform(rotation: r, translation: pa.centroid - r.apply(pa.centroid))
                let t = Registration.icpPlane(sample, tree, normals: normals, from: spin, tau: tau, iterations: Registration.fineIterations)
                // ICP slid back to the model's own pose: no symmetry there.
                guard t.rotation.rotationAngle > 0.35 else { continue }
                if seen.contains(where: { ($0.rotation.transposed * t.rotation).rotationAngle < 0.35 }) { continue }
                seen.append(t)
                var off = [Bool](repeating: false, count: model.count)
                var misfits = 0
                for (i, p) in model.enumerated() {
                    let q = t.apply(p)
                    // Off the model, and outside its hull: a part sticking out where the model has
                    // none, not a gap in the model's own surface (a face no enrolment frame saw).
                    guard tree.nearest(q).distanceSquared > far else { continue }
                    if !free.isEmpty, free.isFree(q) { off[i] = true; continue }
                    var deep = true
                    for k in hull.indices {
                        let out = dot3(hullDirections[k], q) - hull[k]
                        if out > 2 * tau { off[i] = free.isEmpty; deep = false; break }
                        if out > -2 * tau { deep = false }
                    }
                    // Far from the model and deep inside its hull: neither surface nor a gap at the
                    // hull's skin — the turn does not carry the model onto itself there (a cube's
                    // face turned by 45°, a cone tipped over).
                    if deep, !off[i] { misfits += 1 }
                }
                guard Double(misfits) <= nearSymmetryMisfits * Double(model.count) else { continue }
                // A part, not the model's scattered noise: a point counts when most (≥ 4) of its 6
                // nearest model neighbours are off too.
                var distinct: [Int32] = []
                var near: [(index: Int, distanceSquared: Float)] = []
                near.reserveCapacity(7)
                for i in model.indices where off[i] {
                    tree.nearestIndices(model[i], k: 7, into: &near)
                    if near.filter({ $0.index != i && off[$0.index] }).count >= 4 { distinct.append(Int32(i)) }
                }
                let share = 1 - Double(distinct.count) / Double(model.count)
                guard nearSymmetryShare.contains(share) else { continue }
                found.append(distinct)
            }
        }
        return found
    }

    static func virtualViews(_ model: [SIMD3<Float>], _ normals: [SIMD3<Float>], cell: Float) -> [(axes: PrincipalAxes, vector: [Float])] {
        guard model.count >= 16, normals.count == model.count, cell > 0 else { return [] }
        var directions: [SIMD3<Float>] = []
        for x in -1...1 { for y in -1...1 { for z in -1...1 where x != 0 || y != 0 || z != 0 {
            directions.append(normalized3(SIMD3(Float(x), Float(y), Float(z))))
        } } }
        return directions.compactMap { d in
            // An orthographic camera far along d: facing points, the nearest per cell (within a cell).
            let u = normalized3(abs(d.x) < 0.9 ? cross3(d, SIMD3(1, 0, 0)) : cross3(d, SIMD3(0, 1, 0))), v = cross3(d, u)
            var nearest: [SIMD2<Int32>: Float] = [:]
            var facing: [(SIMD3<Float>, SIMD2<Int32>, Float)] = []
            for (i, p) in model.enumerated() where dot3(normals[i], d) >= 0.2 {
                let key = SIMD2(Int32((dot3(p, u) / cell).rounded(.down)), Int32((dot3(p, v) / cell).rounded(.down)))
                let depth = dot3(p, d)
                facing.append((p, key, depth))
                nearest[key] = max(nearest[key] ?? -.infinity, depth)
            }
            let visible = facing.filter { $0.2 >= (nearest[$0.1] ?? $0.2) - cell }.map(\.0)
            guard visible.count >= 32 else { return nil }
            let a = ShapeAnalysis(points: visible)
            return (a.axes, a.vector)
        }
    }

    public mutating func present(_ frame: PointFrame) -> FrameVerdict {
        var shown: [Bool] = []
        var v = evaluate(frame, ShapeAnalysis(frame, roi: roi), askDecisive: !decisiveInRun, shownParts: &shown)
        if v.passed {
            consecutive += 1
            if v.decisive {
                decisiveInRun = true
            } else if !decisiveInRun, !shown.isEmpty {
                // The parts lie on different sides of the object (seed 5's mug: 13 near-symmetries,
                // parts 7 cm apart), so no one frame shows them all; a run whose frames show each
                // part once is decisive too. An object without the part (a cup) shows it in none.
                shownInRun = Self.shown(run: shownInRun, frame: shown)
                if shownInRun.allSatisfy({ $0 }) { decisiveInRun = true }
            }
        } else {
            consecutive = 0
            decisiveInRun = false
            shownInRun = []
        }
        if consecutive >= Self.requiredConsecutive, decisiveInRun { matched = true }
        if v.passed, !v.decisive, !decisiveInRun, !matched {
            v.guidance = "recognised, but from here it could be a look-alike without a part this object has: turn it to show that part (a handle, a spout)"
        }
        return v
    }

    /// The parts a run has shown once a passing frame that shows `frame` joins it (`run` empty: the
    /// run starts).
    static func shown(run: [Bool], frame: [Bool]) -> [Bool] {
        run.count == frame.count ? zip(run, frame).map { $0 || $1 } : frame
    }

    /// Presents the frames in order; whether the key matched, and each frame's verdict.
    public mutating func matches(_ frames: [PointFrame]) -> (matched: Bool, verdicts: [FrameVerdict]) {
        let verdicts = frames.map { present($0) }
        return (matched, verdicts)
    }

    /// Stage 1 alone (for comparison figures).
    func score(_ a: ShapeAnalysis) -> Double {
        template.views.map { cosine($0.vector, a.vector) }.max() ?? 0
    }

    func evaluate(_ frame: PointFrame, _ a: ShapeAnalysis, askDecisive: Bool = false) -> FrameVerdict {
        var shown: [Bool] = []
        return evaluate(frame, a, askDecisive: askDecisive, shownParts: &shown)
    }

    /// `shownParts`: when asked for decisiveness and the frame passed, whether it shows each
    /// near-symmetry's distinct part.
    func evaluate(_ frame: PointFrame, _ a: ShapeAnalysis, askDecisive: Bool, shownParts: inout [Bool]) -> FrameVerdict {
        evaluate(FrameCheck.assess(frame, a), a, askDecisive: askDecisive, shownParts: &shownParts)
    }

    /// Another object's enrolment frame (`ObjectTemplate.View.frame`), judged as this key judges a
    /// live frame (it passed its frame check at that enrolment): whether it passes and shows every
    /// part this key waits for. Such a frame, held still before the camera, opens the key.
    func opensHeldStill(_ frame: ShapeAnalysis) -> Bool {
        let e = frame.extents
        let check = FrameQualityReport(good: true, quality: 1, guidance: nil, points: frame.pointCount, extents: [Double(e.x), Double(e.y), Double(e.z)])
        var shown: [Bool] = []
        let v = evaluate(check, frame, askDecisive: true, shownParts: &shown)
        return v.passed && v.decisive
    }

    private func evaluate(_ check: FrameQualityReport, _ a: ShapeAnalysis, askDecisive: Bool, shownParts: inout [Bool]) -> FrameVerdict {
        var v = FrameVerdict(score: 0, fit: 0, rms: 0, coverage: 0, excess: 0, deficit: 0, quality: check.quality, guidance: check.guidance,
                             stage1Passed: false, stage2Passed: false, passed: false)
        guard check.good else { return v }
        let scores = template.views.map { cosine($0.vector, a.vector) }
        v.score = scores.max() ?? 0
        v.stage1Passed = v.score >= Self.minimumScore
        // Stage 2: hypotheses from the registered views most like this frame.
        let candidates = template.views.indices.filter { template.views[$0].registered }
            .sorted { scores[$0] > scores[$1] }.prefix(ObjectTemplate.candidateViews)
        // The pose taken is the best that passes every stage-2 measure, not only the best fit: on a
        // model with near-symmetries a frame can fit two poses equally well, of which only one also
        // shows what the model shows from there.
        let (enrolled, tree, normals) = (self.template, self.gridTree, self.normals)
        let cloud = ShapeAnalysis.surface(a.cloud, tree: a.tree, extents: a.extents)
        let viewTree = KDTree(cloud)
        let accepted = AcceptedMeasures()
        @Sendable func measures(_ c: Alignment, searching: Bool) -> (StageTwoMeasures, excess: Double)? {
            guard c.fit >= Double(enrolled.minimumFit), c.rms <= Double(enrolled.maximumRMS) else { return nil }
            // A pose judged clearly first and then again (`judgeClearly`, `judge`) is measured once.
            // The excess first (the measures are not taken when it is over the ceiling).
            let measured = accepted.measured(c.transform) { () -> (StageTwoMeasures?, excess: Double) in
                let excess = Registration.excess(cloud, c.transform, tree, normals, cell: enrolled.cell, tau: enrolled.inlierDistance, viewTree: viewTree)
                guard excess <= Double(enrolled.maximumExcess) else { return (nil, excess) }
                let m = Registration.measure(model: tree, normals: normals, view: cloud, t: c.transform,
                                             tau: enrolled.inlierDistance, cell: enrolled.cell, viewTree: viewTree)
                return (enrolled.admitsBesideTheShortfall(m) ? m : nil, excess)
            }
            var excess = measured.excess
            if excess > Double(enrolled.maximumExcess) {
                // The least excess near this pose (`Registration.leastExcess`), when every other
                // measure passes here: a pose a few degrees or millimetres off puts a patch of a
                // round body past the model's surface; a part the model lacks (a handle) stays off
                // at any pose near. At most `excessSearches` per frame.
                guard searching, accepted.takeExcessSearch() else { return nil }
                let here = Registration.measure(model: tree, normals: normals, view: cloud, t: c.transform,
                                                tau: enrolled.inlierDistance, cell: enrolled.cell, viewTree: viewTree)
                guard enrolled.admits(here) else { return nil }
                let near = Registration.leastExcess(view: cloud, fine: Registration.subsample(cloud, Registration.finePoints), viewTree: viewTree,
                                                    model: tree, normals: normals, from: c.transform, excess: excess, tau: enrolled.inlierDistance,
                                                    cell: enrolled.cell, enough: Double(enrolled.maximumExcess)) { fit, rms in
                    fit >= Double(enrolled.minimumFit) && rms <= Double(enrolled.maximumRMS)
                }
                guard near.excess <= Double(enrolled.maximumExcess) else { return nil }
                let there = Registration.measure(model: tree, normals: normals, view: cloud, t: near.pose,
                                                 tau: enrolled.inlierDistance, cell: enrolled.cell, viewTree: viewTree)
                guard enrolled.admits(there) else { return nil }
                return (there, near.excess)
            }
            guard var m = measured.0 else { return nil }
            if m.shortfall > Double(enrolled.maximumShortfall) {
                // The least shortfall near this pose (`Registration.leastShortfall`): a pose a few
                // degrees off leaves a band of the outline past the frame that a smaller object
                // leaves at any pose. At most `shortfallSearches` per frame (an impostor's every
                // hypothesis would ask).
                guard searching, accepted.takeShortfallSearch() else { return nil }
                let near = Registration.leastShortfall(view: cloud, fine: Registration.subsample(cloud, Registration.finePoints), viewTree: viewTree,
                                                       model: tree, normals: normals, from: c.transform, measured: m, tau: enrolled.inlierDistance,
                                                       cell: enrolled.cell, enough: Double(enrolled.maximumShortfall)) { fit, rms, m in
                    fit >= Double(enrolled.minimumFit) && rms <= Double(enrolled.maximumRMS) && enrolled.admitsBesideTheShortfall(m)
                }
                guard near.measures.shortfall <= Double(enrolled.maximumShortfall) else { return nil }
                excess = Registration.excess(cloud, near.pose, tree, normals, cell: enrolled.cell, tau: enrolled.inlierDistance, viewTree: viewTree)
                guard excess <= Double(enrolled.maximumExcess) else { return nil }
                m = near.measures
            }
            return (m, excess)
        }
        @Sendable func judge(_ c: Alignment) -> Bool {
            guard let m = measures(c, searching: true) else { return false }
            accepted.set(c.transform, m.0, excess: m.excess)
            return true
        }
        // A pose that passes clearly: every measure at the pose found, without the local search for
        // less shortfall. The best two hypotheses, refined side by side, are judged by it first
        // (`Registration.align`, `acceptClearly`): most frames of the enrolled object pass there,
        // and the third refinement (a second round on two cores) is not waited for.
        // While the run asks for a decisive frame, a pose passes clearly only when it also shows
        // every near-symmetry's part: the full search's order may pick another passing pose (a
        // better fit among more refined) that shows it where this one does not.
        let symmetries = askDecisive ? nearSymmetries : []
        @Sendable func judgeClearly(_ c: Alignment) -> Bool {
            guard let m = measures(c, searching: false) else { return false }
            if !symmetries.isEmpty {
                guard Self.shownParts(symmetries, tree, viewTree, c.transform, tau: enrolled.inlierDistance).allSatisfy({ $0 }) else { return false }
            }
            accepted.set(c.transform, m.0, excess: m.excess)
            return true
        }
        // Without the 45° turns of a square or round section: they double this search's coarse
        // stage, the most of a frame's time, and the second search has them.
        var alignment = Registration.align(cloud, axes: a.axes, to: tree, targets: candidates.map { template.views[$0].axes },
                                           tau: template.inlierDistance, normals: normals, oriented: true, cell: template.cell,
                                           turned45: false, firstPass: true, accept: judge, acceptClearly: judgeClearly)
        // None passed: the frame may show the object from where no enrolment frame looked (a box's
        // end face alone, a tile edge-on), so the enrolment views' frames put it on the wrong part,
        // or a square section sits turned between two of the 90° steps. Search again from the
        // model's own views most like the frame, with the 45° turns.
        if virtualTargets > 0, accepted.measures(for: alignment.transform) == nil {
            let virtualViews = self.virtualViews
            let similar = virtualViews.indices.map { (cosine(virtualViews[$0].vector, a.vector), $0) }.sorted { $0.0 > $1.0 }
            let second = Registration.align(cloud, axes: a.axes, to: tree, targets: similar.prefix(virtualTargets).map { virtualViews[$0.1].axes },
                                            tau: template.inlierDistance, normals: normals, oriented: true, cell: template.cell,
                                            firstPass: true, accept: judge)
            if accepted.measures(for: second.transform) != nil || second.fit > alignment.fit { alignment = second }
        }
        v.fit = alignment.fit
        v.rms = alignment.rms
        let m: StageTwoMeasures
        if let got = accepted.measures(for: alignment.transform) {
            m = got.0
            v.excess = got.excess
        } else {
            m = Registration.measure(model: tree, normals: normals, view: cloud,
                                     t: alignment.transform, tau: template.inlierDistance, cell: template.cell, viewTree: viewTree)
            v.excess = Registration.excess(cloud, alignment.transform, tree, normals, cell: template.cell, tau: template.inlierDistance, viewTree: viewTree)
        }
        (v.coverage, v.deficit, v.overhang, v.shortfall) = (m.coverage, m.deficit, m.overhang, m.shortfall)
        (v.spanShort, v.spanLong) = spans(cloud, alignment.transform)
        v.stage2Passed = v.fit >= Double(template.minimumFit) && v.rms <= Double(template.maximumRMS)
            && v.excess <= Double(template.maximumExcess) && template.admits(m)
        v.passed = v.stage1Passed && v.stage2Passed
        if v.passed, askDecisive {
            // Decisive when, for every near-symmetry, the frame shows enough of the part it does not
            // carry onto the model (the handle): a frame without it fits this object posed with the
            // part out of sight as well as an object that has none.
            shownParts = Self.shownParts(nearSymmetries, tree, viewTree, alignment.transform, tau: template.inlierDistance)
            v.decisive = shownParts.allSatisfy { $0 }
        }
        if !v.stage1Passed {
            v.guidance = "not the enrolled object (shape score \(rounded(v.score)), need \(Self.minimumScore))"
        } else if !v.stage2Passed {
            v.guidance = "does not fit the enrolled object (fit \(rounded(v.fit)) need \(rounded(Double(template.minimumFit))), coverage \(rounded(v.coverage)) need \(rounded(Double(template.minimumCoverage))), excess \(rounded(v.excess)) at most \(rounded(Double(template.maximumExcess))), deficit \(rounded(v.deficit)) at most \(rounded(Double(template.maximumDeficit))))"
        }
        return v
    }

    private func rounded(_ x: Double) -> Double { (x * 100).rounded() / 100 }

    /// Whether the frame (its tree) with pose `t` shows each near-symmetry's distinct part: at least
    /// `decisiveShare` of its points (and `decisivePoints`) have a frame point within 2τ.
    static func shownParts(_ symmetries: [[Int32]], _ tree: KDTree, _ viewTree: KDTree, _ t: RigidTransform, tau: Float) -> [Bool] {
        let back = t.inverse
        let reach = 4 * tau * tau
        return symmetries.map { distinct in
            var shown = 0
            // Whether some frame point is within 2τ: no nearest point is needed (the same answers).
            for i in distinct where viewTree.proximity(back.apply(tree.points[Int(i)]), near: reach, far: reach) == 0 { shown += 1 }
            return shown >= max(decisivePoints, Int((decisiveShare * Double(distinct.count)).rounded(.up)))
        }
    }
}

/// A value made once, when first needed, and shared by copies of the verifier (which are copied
/// across threads): the model views, the near-symmetries, the distinct parts.
private final class Made<Value: Sendable>: Sendable {
    private let value = Mutex<Value?>(nil)

    func get(_ make: () -> Value) -> Value {
        value.withLock { stored in
            if let stored { return stored }
            let made = make()
            stored = made
            return made
        }
    }
}

/// The measures of the pose the stage-2 judge accepted, so the verdict does not measure them twice.
/// `Registration.align` calls its judge on the calling thread, one alignment at a time.
private final class AcceptedMeasures: @unchecked Sendable {
    private var pose: RigidTransform?
    private var values = (StageTwoMeasures.empty, excess: 0.0)

    func set(_ t: RigidTransform, _ m: StageTwoMeasures, excess: Double) {
        pose = t
        values = (m, excess)
    }

    func measures(for t: RigidTransform) -> (StageTwoMeasures, excess: Double)? { pose == t ? values : nil }

    /// The excess at pose `t` and, when it is under the ceiling, the other measures (nil: they
    /// fail), before any local search; made by `make` the first time this pose is asked about.
    private var known: [(RigidTransform, (StageTwoMeasures?, excess: Double))] = []
    func measured(_ t: RigidTransform, _ make: () -> (StageTwoMeasures?, excess: Double)) -> (StageTwoMeasures?, excess: Double) {
        if let k = known.first(where: { $0.0 == t }) { return k.1 }
        let made = make()
        known.append((t, made))
        return made
    }

    /// Local searches for a pose with less shortfall (`ObjectVerifier.shortfallSearches` per frame).
    private var searches = 0
    func takeShortfallSearch() -> Bool {
        guard searches < ObjectVerifier.shortfallSearches else { return false }
        searches += 1
        return true
    }

    /// Local searches for a pose with less excess (`ObjectVerifier.excessSearches` per frame).
    private var excessSearches = 0
    func takeExcessSearch() -> Bool {
        guard excessSearches < ObjectVerifier.excessSearches else { return false }
        excessSearches += 1
        return true
    }
}

extension ObjectTemplate {
    /// The stage-2 floors and ceilings these measures must meet: coverage, deficit, the overhang
    /// (against the model's whole projection) and the shortfall (how far the model's well-seen
    /// outline reaches past the frame's silhouette; Protocol/keys.md, section 6). Judged inside the
    /// pose search, so a pose whose outline does not fit is passed over for the next. The shortfall
    /// is judged at the least value near the pose (`Registration.leastShortfall`, in `evaluate`):
    /// at the pose found alone it refused the slightly turned end face of `PoseSearchTests` (the
    /// search's best pose there is a few millimetres off). Templates before version 6 read the
    /// shortfall ceiling as 1 (not judged).
    func admits(_ m: StageTwoMeasures) -> Bool {
        admitsBesideTheShortfall(m) && m.shortfall <= Double(maximumShortfall)
    }

    func admitsBesideTheShortfall(_ m: StageTwoMeasures) -> Bool {
        m.coverage >= Double(minimumCoverage) && m.deficit <= Double(maximumDeficit) && m.overhang <= Double(maximumOverhang)
    }

    /// Whether the outline is within the template's ceilings.
    func outlineFits(_ m: StageTwoMeasures) -> Bool {
        m.overhang <= Double(maximumOverhang) && m.shortfall <= Double(maximumShortfall)
    }
}

extension ObjectVerifier {
    /// The points of each distinct part (`distinctParts`): what the bench reports per key.
    public var distinctPartSizes: [Int] { nearSymmetries.map(\.count) }
}

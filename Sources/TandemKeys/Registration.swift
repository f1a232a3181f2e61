import Foundation
import TandemThreads

/// Rigid registration of a partial view to a model: coarse global hypotheses from principal axes
/// (the four sign choices of a right-handed frame, and the swap of two axes whose variances are
/// close), each refined by a few ICP iterations on a small subsample; the best few are then refined
/// by full ICP and the best kept. ICP is point-to-plane when the model's
/// normals are known (a damped linearised 6×6 solve per step), else point-to-point (closed-form
/// Horn steps); k-d tree correspondences, pairs farther than max(2τ, 2 × mean distance) rejected;
/// alignments are scored by inlier fraction.
struct Alignment: Sendable {
    var transform: RigidTransform
    /// Fraction of the view's points within τ of the model after alignment.
    var fit: Double
    /// RMS distance (metres) of the closest 90 % of the view's points to the model.
    var rms: Double
}

enum Registration {
    static let coarsePoints = 120
    static let finePoints = 300
    static let coarseIterations = 4
    static let fineIterations = 20
    static let refinedHypotheses = 3
    /// At verification (`align`'s `firstPass`), every hypothesis first gets `firstPassIterations`
    /// ICP iterations on `firstPassPoints` points (every other one of the coarse sample), and only
    /// the best `firstPassKept` by that fit go on to the coarse stage (issue 35: the coarse stage
    /// was a third of a frame's time, and of its ~40 hypotheses at most 12 are ever refined).
    static let firstPassPoints = 60
    static let firstPassIterations = 2
    static let firstPassKept = 12
    static let enrolmentRefinedHypotheses = 8
    /// A model point whose outward normal makes a cosine below this with the direction to the camera
    /// faces away (`evaluate`, `oriented`): a frame point whose `facingCandidates` nearest model
    /// points all do is an outlier however near. −0.6, not −0.3: with noise, a visible point near a
    /// rim or an edge often has a nearest model point whose normal leans past the perpendicular.
    static let facingAway: Float = -0.6
    /// Model points considered for the nearest one that faces the camera.
    static let facingCandidates = 4

    /// Squared point-to-plane distance plus what of the tangential offset exceeds half the spacing.
    @inline(__always) static func hybrid(_ q: SIMD3<Float>, _ k: Int, _ d2: Float, _ tree: KDTree, _ normals: [SIMD3<Float>], _ cell: Float) -> Float {
        let plane = dot3(q - tree.points[k], normals[k])
        let tangential = max(0, (max(0, d2 - plane * plane)).squareRoot() - cell / 2)
        return plane * plane + tangential * tangential
    }

    /// Transforms taking the source's principal frame onto each target frame (all 4 proper sign
    /// choices; also with the first two axes swapped when their variances are within 25 %, and then,
    /// with `turned45`, also turned by 45° about the third: a square or round section's first two
    /// axes can lie anywhere in its plane, and coarse ICP closes ±22.5°, not ±45°).
    static func hypotheses(source s: PrincipalAxes, targets: [PrincipalAxes], turned45: Bool = true) -> [RigidTransform] {
        let signs: [SIMD3<Float>] = [SIMD3(1, 1, 1), SIMD3(-1, -1, 1), SIMD3(-1, 1, -1), SIMD3(1, -1, -1)]
        let sourceT = s.axes.transposed
        var out: [RigidTransform] = []
        for t in targets {
            var frames = [t.axes]
            let ambiguous12 = s.eigenvalues.y > 0.75 * s.eigenvalues.x || t.eigenvalues.y > 0.75 * t.eigenvalues.x
            let ambiguous23 = s.eigenvalues.z > 0.75 * s.eigenvalues.y || t.eigenvalues.z > 0.75 * t.eigenvalues.y
            if ambiguous12 {
                frames.append(Mat3(columns: t.axes.column1, t.axes.column0, -t.axes.column2))
                if turned45 {
                    let h = Float(0.5).squareRoot()
                    let c0 = (t.axes.column0 + t.axes.column1) * h, c1 = (t.axes.column1 - t.axes.column0) * h
                    frames.append(Mat3(columns: c0, c1, t.axes.column2))
                    frames.append(Mat3(columns: c1, c0, -t.axes.column2))
                }
            }
            if ambiguous23 { frames.append(Mat3(columns: -t.axes.column0, t.axes.column2, t.axes.column1)) }
            for f in frames {
                for sign in signs {
                    let target = Mat3(columns: f.column0 * sign.x, f.column1 * sign.y, f.column2 * sign.z)
                    let r = target * sourceT
                    out.append(RigidTransform(rotation: r, translation: t.centroid - r.apply(s.centroid)))
                }
            }
        }
        return out
    }

    static func subsample(_ points: [SIMD3<Float>], _ count: Int) -> [SIMD3<Float>] {
        guard points.count > count, count > 0 else { return points }
        let step = Double(points.count) / Double(count)
        return (0..<count).map { points[Int(Double($0) * step)] }
    }

    /// Point-to-point ICP: each step the closed-form rigid transform of the kept pairs (Horn).
    static func icp(_ source: [SIMD3<Float>], _ tree: KDTree, from initial: RigidTransform, tau: Float, iterations: Int) -> RigidTransform {
        var nearest: [Int] = []
        return icp(source, tree, from: initial, tau: tau, iterations: iterations, nearest: &nearest)
    }

    /// `nearest`: each source point's last correspondence (a hint for measuring the result).
    static func icp(_ source: [SIMD3<Float>], _ tree: KDTree, from initial: RigidTransform, tau: Float, iterations: Int,
                    nearest: inout [Int]) -> RigidTransform {
        iterate(source, tree, from: initial, tau: tau, iterations: iterations, minimumPairs: 6, nearest: &nearest) { moved, model in
            let targets = model.map { tree.points[$0] }
            return moved.withUnsafeBufferPointer { pa in targets.withUnsafeBufferPointer { pb in horn(pa, pb) } }
        }
    }

    /// ICP minimising point-to-plane distances (the tree's `normals`, in its order): converges where
    /// point-to-point ICP stalls on surfaces sliding over each other (faces of a box, steps).
    static func icpPlane(_ source: [SIMD3<Float>], _ tree: KDTree, normals: [SIMD3<Float>], from initial: RigidTransform, tau: Float,
                         iterations: Int) -> RigidTransform {
        var nearest: [Int] = []
        return iterate(source, tree, from: initial, tau: tau, iterations: iterations, minimumPairs: 12, nearest: &nearest) { moved, model in
            let targets = model.map { tree.points[$0] }, n = model.map { normals[$0] }
            return moved.withUnsafeBufferPointer { pa in
                targets.withUnsafeBufferPointer { pb in n.withUnsafeBufferPointer { pn in pointToPlaneStep(pa, pb, pn) } }
            }
        }
    }

    /// The ICP loop both kinds share: correspondences from the tree, pairs farther than
    /// max(2τ, 2 × mean distance) dropped, `step` (moved source points, their model points' indices)
    /// composed on, until it barely moves or fewer than `minimumPairs` pairs are left.
    private static func iterate(_ source: [SIMD3<Float>], _ tree: KDTree, from initial: RigidTransform, tau: Float, iterations: Int,
                                minimumPairs: Int, nearest index: inout [Int], step: ([SIMD3<Float>], [Int]) -> RigidTransform) -> RigidTransform {
        var t = initial
        var a: [SIMD3<Float>] = [], k: [Int] = []
        var moved = [SIMD3<Float>](repeating: .zero, count: source.count)
        index = [Int](repeating: -1, count: source.count)
        var dist = [Float](repeating: 0, count: source.count)
        a.reserveCapacity(source.count); k.reserveCapacity(source.count)
        for _ in 0..<iterations {
            var sum: Float = 0
            for i in source.indices {
                let q = t.apply(source[i])
                // The last step's nearest point bounds the search (the point moved only a little).
                let (j, d2) = tree.nearestIndex(q, hint: index[i])
                moved[i] = q; index[i] = j
                dist[i] = d2.squareRoot()
                sum += dist[i]
            }
            let cutoff = max(2 * tau, 2 * sum / Float(max(source.count, 1)))
            a.removeAll(keepingCapacity: true); k.removeAll(keepingCapacity: true)
            for i in source.indices where dist[i] <= cutoff && index[i] >= 0 { a.append(moved[i]); k.append(index[i]) }
            guard a.count >= minimumPairs else { break }
            let s = step(a, k)
            t = s.composed(after: t)
            if s.rotation.rotationAngle < 1e-4, length3(s.translation) < 1e-5 { break }
        }
        return t
    }

    /// Fit and RMS. With `normals` (of the tree's points), the distance is the point-to-plane one
    /// plus whatever of the tangential offset exceeds half the model's point spacing `cell`: the
    /// spacing of the model's points is forgiven, a part beyond the model's edge is not.
    /// With `oriented` normals (pointing out of the object), a point is measured against the nearest
    /// of its `facingCandidates` nearest model points that does not face away from the camera (at
    /// `t.translation` in model coordinates); when all of them do, it is an outlier, however near:
    /// the camera cannot see a back face (a tile's front seen as its back, a shell inside out). A
    /// thin wall's other face, or a face enrolled from both sides, lies as near and is passed over.
    /// `hints`: per source point, a model point likely near (the last ICP correspondences): the
    /// same answer, found sooner.
    /// `fitOnly`: the RMS is not wanted (it comes back NaN), and the distances are not sorted for it.
    static func evaluate(_ source: [SIMD3<Float>], _ tree: KDTree, _ t: RigidTransform, tau: Float,
                         normals: [SIMD3<Float>]? = nil, cell: Float = 0, oriented: Bool = false, hints: [Int] = [],
                         fitOnly: Bool = false) -> (fit: Double, rms: Double) {
        guard !source.isEmpty else { return (0, .infinity) }
        var d = [Float](repeating: 0, count: source.count)
        var inliers = 0
        let eye = t.translation
        var candidates: [(index: Int, distanceSquared: Float)] = []
        candidates.reserveCapacity(facingCandidates)
        for i in source.indices {
            let q = t.apply(source[i])
            if let normals, oriented {
                // The nearest model point that does not face away from the camera: a thin wall's
                // other face, or the same plane seen from the other side, lies as near.
                tree.nearestIndices(q, k: facingCandidates, into: &candidates)
                let toEye = eye - q
                let limit = facingAway * length3(toEye)
                if let facing = candidates.first(where: { dot3(normals[$0.index], toEye) >= limit }) {
                    d[i] = hybrid(q, facing.index, facing.distanceSquared, tree, normals, cell)
                } else if let nearest = candidates.first {
                    d[i] = max(hybrid(q, nearest.index, nearest.distanceSquared, tree, normals, cell), 4.01 * tau * tau)
                } else {
                    d[i] = .infinity
                }
            } else {
                let (k, d2) = tree.nearestIndex(q, hint: normals == nil && hints.count == source.count ? hints[i] : -1)
                d[i] = k >= 0 ? (normals.map { hybrid(q, k, d2, tree, $0, cell) } ?? d2) : .infinity
            }
            if d[i] <= tau * tau { inliers += 1 }
        }
        // The coarse stage reads the fit alone: no sort for the RMS.
        if fitOnly { return (Double(inliers) / Double(source.count), .nan) }
        d.sort()
        let keep = max(1, source.count * 9 / 10)
        var s: Double = 0
        for i in 0..<keep { s += Double(d[i]) }
        return (Double(inliers) / Double(source.count), (s / Double(keep)).squareRoot())
    }

    /// The best alignment of `source` (a view's cloud, its principal axes) to the model in `tree`,
    /// trying the hypotheses built from `targets` (principal frames of enrolment views, model coordinates).
    /// `accept`, when given, judges refined alignments (on the calling thread, one at a time, best fit
    /// first from the `refine`-th refinement on); the first it accepts is the answer and ends the search.
    static func align(_ source: [SIMD3<Float>], axes: PrincipalAxes, to tree: KDTree, targets: [PrincipalAxes], tau: Float,
                      normals: [SIMD3<Float>]? = nil, oriented: Bool = false, cell: Float = 0, refine: Int = refinedHypotheses,
                      untilFit: Double = 0, maximumRefined: Int = 12, turned45: Bool = true, firstPass: Bool = false,
                      accept: (@Sendable (Alignment) -> Bool)? = nil,
                      acceptClearly: (@Sendable (Alignment) -> Bool)? = nil) -> Alignment {
        let coarse = subsample(source, coarsePoints)
        let fine = subsample(source, finePoints)
        var starts = hypotheses(source: axes, targets: targets, turned45: turned45)
        if firstPass, starts.count > firstPassKept {
            // A cheaper first look at every hypothesis; the best `firstPassKept` go on, in their
            // order, and get exactly the coarse stage they got before.
            let first = subsample(source, firstPassPoints)
            let quick = parallelMap(starts) { @Sendable h -> Double in
                var nearest: [Int] = []
                let t = icp(first, tree, from: h, tau: 2 * tau, iterations: firstPassIterations, nearest: &nearest)
                return evaluate(first, tree, t, tau: 2 * tau, hints: nearest, fitOnly: true).fit
            }
            let ranked = starts.indices.sorted { quick[$0] > quick[$1] || (quick[$0] == quick[$1] && $0 < $1) }
            starts = ranked.prefix(firstPassKept).sorted().map { starts[$0] }
        }
        // The hypotheses are independent: each core takes some (`parallelMap` keeps their order, so
        // the result is the one a single thread finds).
        var scored = parallelMap(starts) { @Sendable h -> (Double, RigidTransform) in
            var nearest: [Int] = []
            let t = icp(coarse, tree, from: h, tau: 2 * tau, iterations: coarseIterations, nearest: &nearest)
            return (evaluate(coarse, tree, t, tau: 2 * tau, hints: nearest, fitOnly: true).fit, t)
        }
        scored.sort { $0.0 > $1.0 }
        @Sendable func refined(_ t0: RigidTransform) -> Alignment {
            let t = normals.map { icpPlane(fine, tree, normals: $0, from: t0, tau: tau, iterations: fineIterations) }
                ?? icp(fine, tree, from: t0, tau: tau, iterations: fineIterations)
            let (fit, rms) = evaluate(fine, tree, t, tau: tau, normals: normals, cell: cell, oriented: oriented)
            return Alignment(transform: t, fit: fit, rms: rms)
        }
        func better(_ a: Alignment, than b: Alignment) -> Bool { a.fit > b.fit || (a.fit == b.fit && a.rms < b.rms) }
        var best = Alignment(transform: .identity, fit: 0, rms: .infinity)
        // With `accept`: the refined alignments not judged yet; judged best first, one at a time,
        // from the `refine`-th on, until one is accepted (a frame that fits well needs one judgement).
        var unjudged: [Alignment] = []
        var accepted: Alignment?
        func judge() {
            guard let accept else { return }
            unjudged.sort { better($0, than: $1) }
            while accepted == nil, !unjudged.isEmpty {
                let a = unjudged.removeFirst()
                if accept(a) { accepted = a }
            }
        }
        func done() -> Bool { accept == nil ? best.fit >= untilFit : accepted != nil }
        // The best `refine` hypotheses; more (up to `maximumRefined`) while not done. Refined a
        // core's worth at a time and taken in order, stopping where one at a time would have
        // stopped (a batch may refine one more than needed; its result is dropped).
        // (Fewer ICP steps per candidate on a thinner sample, then the winner in full, was 14 % faster
        // and rejected 5 more of 144 genuine sweeps: not taken.)
        let candidates = Array(scored.prefix(max(refine, maximumRefined)))
        // With `acceptClearly` (a stricter judge: a pose that passes without help): the best
        // `quickRefined` are refined first, in one batch, and the better fit of them is judged by
        // it; when it accepts, that is the answer. Otherwise the search goes on exactly as without
        // it, their refinements kept (the same hypotheses, refined the same way). Only the better
        // one: when it fails and a worse one passes, the frame is ambiguous (a mug's handle put on
        // the wrong side), and the full search's order decides, as before.
        var early: [Alignment] = []
        if let acceptClearly, accept != nil {
            early = parallelMap(Array(candidates.prefix(quickRefined)), { refined($0.1) })
            if let a = early.min(by: { better($0, than: $1) }), acceptClearly(a) { return a }
        }
        var k = 0
        refining: while k < candidates.count {
            let width = k < refine ? refine - k : parallelWidth
            let batch = candidates[k..<min(k + max(width, 1), candidates.count)]
            let known = early.count > k ? Array(early[k..<min(early.count, k + batch.count)]) : []
            for a in known + parallelMap(Array(batch.dropFirst(known.count)), { refined($0.1) }) {
                if better(a, than: best) { best = a }
                unjudged.append(a)
                k += 1
                if k >= refine {
                    judge()
                    if done() { break refining }
                }
            }
        }
        // With `accept`: the alignment it accepted, else the best there is.
        return accepted ?? best
    }

    /// Refined before the first judgement by `acceptClearly` (`align`): one batch on two cores.
    /// Fixed, not the machine's cores: the answer must not depend on the machine.
    static let quickRefined = 2

    /// Threads one alignment uses (the machine's cores, at most 4).
    static let parallelWidth = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))

    /// `transform` of every element, on up to `parallelWidth` threads, in the elements' order: the
    /// caller and threads of `WorkerPool.shared` (fork-join; see `WorkerPool.map`).
    static func parallelMap<T: Sendable, R: Sendable>(_ items: [T], _ transform: @escaping @Sendable (T) -> R) -> [R] {
        guard items.count > 1, parallelWidth > 1 else { return items.map(transform) }
        return WorkerPool.shared.map(items, width: parallelWidth, transform)
    }

    /// Squared hybrid distance of a point (model coordinates) to the model (see `evaluate`).
    @inline(__always) static func distance2(_ q: SIMD3<Float>, _ tree: KDTree, _ normals: [SIMD3<Float>], _ cell: Float) -> Float {
        let (k, d2) = tree.nearestIndex(q)
        return k >= 0 ? hybrid(q, k, d2, tree, normals, cell) : .infinity
    }

    /// The fraction of the view's points that are off the model (> 2τ) together with most of their
    /// neighbours: a part the model lacks (a handle, 3 cm more box, a sharp corner where the model is
    /// rounded). Scattered outliers of the camera do not count: their neighbours are on the surface.
    static func excess(_ view: [SIMD3<Float>], _ t: RigidTransform, _ tree: KDTree, _ normals: [SIMD3<Float>], cell: Float, tau: Float,
                       viewTree given: KDTree? = nil) -> Double {
        guard !view.isEmpty else { return 1 }
        let limit = 4 * tau * tau
        let viewTree = given ?? KDTree(view)
        // The view's points in the tree's order (the same points as `view`'s): whether each is off
        // the model is asked once, not again for each point it is a neighbour of. Each point's
        // verdict depends on it and its neighbours alone: the points are cut in `parallelWidth`
        // runs done side by side (the sum is the same whatever the cut).
        let points = viewTree.points
        let runs = points.count >= 256 ? parallelWidth : 1
        let off = parallelMap(Array(0..<runs)) { @Sendable r -> [Bool] in
            (points.count * r / runs..<points.count * (r + 1) / runs).map { distance2(t.apply(points[$0]), tree, normals, cell) > limit }
        }.flatMap { $0 }
        let counts = parallelMap(Array(0..<runs)) { @Sendable r -> Int in
            var neighbours: [(index: Int, distanceSquared: Float)] = []
            neighbours.reserveCapacity(7)
            var clustered = 0
            for i in (points.count * r / runs)..<(points.count * (r + 1) / runs) where off[i] {
                viewTree.nearestIndices(points[i], k: 7, into: &neighbours)
                var n = 0
                for q in neighbours.dropFirst() where off[q.index] { n += 1 }
                if n >= 4 { clustered += 1 }
            }
            return clustered
        }
        return Double(counts.reduce(0, +)) / Double(view.count)
    }

    /// Of the model points the camera would see with the view aligned by `t` (view → model), the
    /// fraction with a view point within τ (`coverage`): a model part the view lacks (a handle, 3 cm
    /// more box) lowers it. Visibility: a z-buffer over the model seen from the camera, cell = `cell`
    /// metres. `view` is in the camera's frame; `normals` are the model's, in the tree's order.
    ///
    /// `deficit`, the mirror of `excess`: the fraction of those visible model points with no view
    /// point within 2τ while at least 4 of their 6 nearest model neighbours have none either — surface
    /// the model has and the view clearly lacks, in a patch. Coverage's misses are mostly within 1–2τ
    /// (the model's and the frame's noise); a missing handle or 3 cm of box is a patch far from both.
    static func coverage(model tree: KDTree, normals: [SIMD3<Float>], view: [SIMD3<Float>], t: RigidTransform, tau: Float, cell: Float,
                         viewTree given: KDTree? = nil) -> (coverage: Double, deficit: Double) {
        let m = measure(model: tree, normals: normals, view: view, t: t, tau: tau, cell: cell, viewTree: given)
        return (m.coverage, m.deficit)
    }

    /// What `coverage` measures, and the outline, in metres at the object's depth, seen from the
    /// camera with the pose `t`. `overhang` is the most by which the frame's span (1st–99th
    /// percentile of its points' projections along four image directions: the frame's two principal
    /// directions there and their diagonals) exceeds the full extent of the whole model's
    /// projection: a can 1.5 cm taller than the model, whatever ICP slid where. `shortfall` is how
    /// far the model's well-seen outline (the points coverage counts) reaches past the frame's
    /// silhouette (`silhouetteShortfall`): a can 1.5 cm shorter. The distance measures cannot see
    /// either (each end is off by half of it, within 2τ).
    static func measure(model tree: KDTree, normals: [SIMD3<Float>], view: [SIMD3<Float>], t: RigidTransform, tau: Float, cell: Float,
                        viewTree given: KDTree? = nil) -> StageTwoMeasures {
        let model = tree.points
        guard !model.isEmpty, !view.isEmpty else { return .empty }
        let inverse = t.inverse
        let camera = model.map { inverse.apply($0) }
        var lo = SIMD2<Float>(repeating: .infinity), hi = SIMD2<Float>(repeating: -.infinity)
        var depth: Float = 0
        for p in camera { depth += p.z }
        depth = max(depth / Float(camera.count), 0.05)
        let angular = cell / depth
        var projected = [SIMD2<Float>](repeating: .zero, count: camera.count)
        for (i, p) in camera.enumerated() {
            let z = max(p.z, 0.01)
            let q = SIMD2(p.x / z, p.y / z) / angular
            projected[i] = q
            lo = pointwiseMin(lo, q); hi = pointwiseMax(hi, q)
        }
        let w = min(Int(hi.x - lo.x) + 1, 400), h = min(Int(hi.y - lo.y) + 1, 400)
        guard w > 0, h > 0 else { return .empty }
        var zbuffer = [Float](repeating: .infinity, count: w * h)
        func index(_ q: SIMD2<Float>) -> Int {
            let x = min(max(Int(q.x - lo.x), 0), w - 1), y = min(max(Int(q.y - lo.y), 0), h - 1)
            return y * w + x
        }
        for i in camera.indices { let k = index(projected[i]); zbuffer[k] = min(zbuffer[k], camera[i].z) }
        let viewTree = given ?? KDTree(view)
        let tolerance = cell
        // Visible model points with no view point within 2τ.
        var far = [Bool](repeating: false, count: model.count)
        var visible = 0, matched = 0
        // Within τ (not 2τ): a slack of 2τ lets a smaller object's view cover a bigger model's rim
        // (an egg's view covered 0.9 of a tennis ball's).
        let limit = tau * tau
        // Facing the camera (oriented normals; the camera is at t's translation in model coordinates) and not hidden.
        let eye = t.translation
        let oriented = normals.count == model.count
        // The shortfall's outline: the points coverage counts, facing the camera by more than a
        // graze (cosine ≥ 0.2) and not hidden. A near-grazing side is a sliver whose width swings
        // with a few degrees of pose error, most where the model has a gap the frame fills (an end
        // face no enrolment frame saw; `PoseSearchTests`).
        var seenOutline: [SIMD2<Float>] = []
        seenOutline.reserveCapacity(camera.count / 2)
        for i in camera.indices where camera[i].z <= zbuffer[index(projected[i])] + tolerance {
            if oriented {
                let toEye = eye - model[i]
                if dot3(normals[i], toEye) < 0.2 * length3(toEye) { continue }
            }
            seenOutline.append(projected[i])
            visible += 1
            // Within τ, within 2τ or neither: no nearest point is needed (the same answers).
            let proximity = viewTree.proximity(camera[i], near: limit, far: 4 * limit)
            if proximity == 0 { matched += 1 }
            far[i] = proximity == 2
        }
        guard visible > 0 else { return .empty }
        var neighbours: [(index: Int, distanceSquared: Float)] = []
        var patch = 0
        for i in model.indices where far[i] {
            tree.nearestIndices(model[i], k: 7, into: &neighbours)
            var n = 0
            for m in neighbours where m.index != i && far[m.index] { n += 1 }
            if n >= 4 { patch += 1 }
        }
        var frame: [SIMD2<Float>] = []
        frame.reserveCapacity(view.count)
        for p in view {
            let z = max(p.z, 0.01)
            frame.append(SIMD2(p.x / z, p.y / z) / angular)
        }
        // Overhang against the whole model's projection (every point, seen or hidden): the object's
        // visible surface cannot project outside the object's own projection, and a gap in the
        // model (a face no enrolment frame saw) does not shrink it — the faces around the gap reach
        // its edge.
        // Its full extent, not percentiles: seen end-on, a deep object's whole projection crowds
        // inside its near face (perspective), so its percentiles fall short of the silhouette.
        let overhang = outlineMismatch(frame: frame, model: projected, modelExtremes: true).overhang
        // The shortfall is a silhouette's: how far the visible outline reaches past the frame's
        // points, whatever the points' density (an end face seen alone is its own silhouette).
        let shortfall = silhouetteShortfall(frame: frame, model: seenOutline)
        // The projections' unit is one model cell at the object's depth.
        return StageTwoMeasures(coverage: Double(matched) / Double(visible), deficit: Double(patch) / Double(visible),
                                overhang: Double(overhang * cell), shortfall: Double(shortfall * cell))
    }

    /// Points of each outline taken for the spans (an even subsample of more).
    static let outlinePoints = 1_500

    /// The most by which the frame's span exceeds the model's, and the model's the frame's, along the
    /// frame's principal directions and their diagonals (1st–99th percentiles), in the points' unit.
    /// With `modelExtremes`, the model's spans are its full extents (a model without outliers).
    static func outlineMismatch(frame: [SIMD2<Float>], model: [SIMD2<Float>], modelExtremes: Bool = false) -> (overhang: Float, shortfall: Float) {
        guard frame.count >= 16, model.count >= 16 else { return (0, 0) }
        let f = thinned(frame, outlinePoints), m = modelExtremes ? model : thinned(model, outlinePoints)
        var c = SIMD2<Float>.zero
        for p in f { c += p }
        c /= Float(f.count)
        var xx: Float = 0, xy: Float = 0, yy: Float = 0
        for p in f { let d = p - c; xx += d.x * d.x; xy += d.x * d.y; yy += d.y * d.y }
        let angle = 0.5 * Float(atan2(Double(2 * xy), Double(xx - yy)))
        var overhang: Float = 0, shortfall: Float = 0
        var a: [Float] = [], b: [Float] = []
        a.reserveCapacity(f.count); b.reserveCapacity(m.count)
        for k in 0..<4 {
            let phi = Double(angle) + Double(k) * .pi / 4
            let u = SIMD2(Float(_cos(phi)), Float(_sin(phi)))
            a.removeAll(keepingCapacity: true); b.removeAll(keepingCapacity: true)
            for p in f { a.append((p * u).sum()) }
            for p in m { b.append((p * u).sum()) }
            let spanF = span(&a), spanM = modelExtremes ? (b.max() ?? 0) - (b.min() ?? 0) : span(&b)
            overhang = max(overhang, spanF - spanM)
            shortfall = max(shortfall, spanM - spanF)
        }
        return (overhang, shortfall)
    }

    /// How far the model's visible outline reaches past the frame's silhouette, in the points'
    /// unit: the 98th percentile of its points' distances to the nearest frame point (a model part
    /// the frame lacks is far from every frame point; inside the silhouette a point is within the
    /// frame's spacing). Unlike percentile spans it does not depend on where the points crowd: a
    /// uniform end face against a model seen mostly at its rim is 0.
    static func silhouetteShortfall(frame: [SIMD2<Float>], model: [SIMD2<Float>]) -> Float {
        guard frame.count >= 16, model.count >= 16 else { return 0 }
        let tree = KDTree(thinned(frame, 4 * outlinePoints).map { SIMD3($0.x, $0.y, 0) })
        // The outline's points come in the model's (k-d tree) order, each near the one before: its
        // answer bounds the next search from the start (the same distances).
        var hint = -1
        var d = thinned(model, outlinePoints).map { p -> Float in
            let (k, d2) = tree.nearestIndex(SIMD3(p.x, p.y, 0), hint: hint)
            hint = k
            return d2
        }
        return orderStatistic(&d, Int(Double(d.count - 1) * 0.98)).squareRoot()
    }

    private static func thinned<T>(_ v: [T], _ count: Int) -> [T] {
        guard v.count > count else { return v }
        let step = Double(v.count) / Double(count)
        return (0..<count).map { v[Int(Double($0) * step)] }
    }

    /// 1st–99th percentile span (reorders `v`; the percentiles by selection, the values a sort
    /// puts there).
    private static func span(_ v: inout [Float]) -> Float {
        let lo = Int(Double(v.count - 1) * 0.01), hi = Int(Double(v.count - 1) * 0.99)
        let top = orderStatistic(&v, hi)
        return top - (lo < hi ? orderStatistic(&v, lo, below: hi) : top)
    }
}

/// Stage 2's measures of a pose that need the model seen from the camera (`Registration.measure`).
struct StageTwoMeasures: Sendable, Equatable {
    var coverage: Double
    var deficit: Double
    /// Metres by which the frame's silhouette is longer than the model's along some direction.
    var overhang: Double
    /// Metres by which the model's silhouette is longer than the frame's along some direction.
    var shortfall: Double

    static let empty = StageTwoMeasures(coverage: 0, deficit: 1, overhang: 1, shortfall: 1)
}

import Foundation

/// The shortfall at the best pose near the one found (issue 35: a smaller object opening a larger
/// key). The pose search ends a few degrees or millimetres off the truth on frames that constrain it
/// little — a 1:1:2 box's end face seen alone, which the model knows only from grazing views — and
/// there a band of the model's outline lies past the frame's silhouette although the object is the
/// same. A smaller object (a can 1.5 cm shorter, an egg in a tennis ball's place) leaves a band that
/// no small turn or slide of the pose takes away. So the shortfall judged is the least one among the
/// poses near the found one under which the frame still fits the model as well as asked (fit, RMS,
/// coverage, deficit, overhang): a greedy descent over small turns and slides in the camera's frame.
extension Registration {
    /// Moves taken one after another at most (each the best of `nearbyMoves`).
    static let shortfallSteps = 2

    /// Small moves of a pose, in the camera's frame: turns of 2° about the camera's three axes
    /// through the frame's centroid, and slides of ½τ and τ across the line of sight. Not along it:
    /// a model moved away projects smaller, which is what the shortfall measures. (Turns of 4° as
    /// well, and three steps, changed no shortfall of the test templates' cans, boxes, egg and end
    /// face: the slides do the work.)
    static func nearbyMoves(centroid c: SIMD3<Float>, tau: Float) -> [RigidTransform] {
        var moves: [RigidTransform] = []
        let axes: [SIMD3<Float>] = [SIMD3(1, 0, 0), SIMD3(0, 1, 0), SIMD3(0, 0, 1)]
        for axis in axes {
            for degrees: Float in [-2, 2] {
                let r = rodrigues(axis * (degrees * .pi / 180))
                moves.append(RigidTransform(rotation: r, translation: c - r.apply(c)))
            }
        }
        for axis in axes.prefix(2) {
            for step: Float in [-1, -0.5, 0.5, 1] {
                moves.append(RigidTransform(rotation: .identity, translation: axis * (step * tau)))
            }
        }
        return moves
    }

    /// Descends from `t` (view → model) over `nearbyMoves`, at most `steps` times, to the pose with
    /// the least shortfall under which `fits(fit, rms, measures)` holds; stops as soon as the
    /// shortfall is at most `enough`. Returns that pose and its measures (`t`'s own when no move helps).
    static func leastShortfall(view: [SIMD3<Float>], fine: [SIMD3<Float>], viewTree: KDTree, model tree: KDTree, normals: [SIMD3<Float>],
                               from t: RigidTransform, measured: StageTwoMeasures, tau: Float, cell: Float, enough: Double, steps: Int = shortfallSteps,
                               fits: (Double, Double, StageTwoMeasures) -> Bool) -> (pose: RigidTransform, measures: StageTwoMeasures) {
        guard !view.isEmpty else { return (t, measured) }
        var c = SIMD3<Float>.zero
        for p in view { c += p }
        c /= Float(view.count)
        let moves = nearbyMoves(centroid: c, tau: tau)
        var best = (pose: t, measures: measured)
        for _ in 0..<steps {
            guard best.measures.shortfall > enough else { break }
            var improved = false
            let from = best.pose
            for move in moves {
                let candidate = from.composed(after: move)
                let (fit, rms) = evaluate(fine, tree, candidate, tau: tau, normals: normals, cell: cell, oriented: true)
                let m = measure(model: tree, normals: normals, view: view, t: candidate, tau: tau, cell: cell, viewTree: viewTree)
                guard m.shortfall < best.measures.shortfall, fits(fit, rms, m) else { continue }
                best = (candidate, m)
                improved = true
            }
            if !improved { break }
        }
        return best
    }
}

import Foundation

/// The shortfall and the excess at the best pose near the one found (issue 35). The pose search
/// ends a few degrees or millimetres off the truth on frames that constrain it little — a 1:1:2
/// box's end face seen alone, which the model knows only from grazing views; a snowman's or a
/// cone's frame that slides along the round body — and there a band of the model's outline lies
/// past the frame's silhouette (shortfall), or a patch of the frame stands more than 2τ off the
/// model (excess), although the object is the same. A smaller object (a can 1.5 cm shorter, an egg
/// in a tennis ball's place) leaves a band, and an object with a part the model lacks (a handle, a
/// spout) a patch, that no small turn or slide of the pose takes away. So each is judged at its
/// least value among the poses near the found one under which the frame still fits the model as
/// well as asked: a greedy descent over small turns and slides in the camera's frame.
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

    /// Descends from `t` (view → model) over `nearbyMoves` of the view's centroid, at most `steps`
    /// times, each time to the move with the least value; `judge` gives a pose's value and what
    /// was measured there, or nil when the frame does not fit there as asked. Stops as soon as the
    /// value is at most `enough`; returns `start` when no move lowers it.
    static func descend<Measured>(view: [SIMD3<Float>], from t: RigidTransform, start: (value: Double, measured: Measured), tau: Float,
                                  enough: Double, steps: Int, judge: (RigidTransform) -> (value: Double, measured: Measured)?)
        -> (pose: RigidTransform, value: Double, measured: Measured) {
        var best = (pose: t, value: start.value, measured: start.measured)
        guard !view.isEmpty else { return best }
        var c = SIMD3<Float>.zero
        for p in view { c += p }
        c /= Float(view.count)
        let moves = nearbyMoves(centroid: c, tau: tau)
        for _ in 0..<steps {
            guard best.value > enough else { break }
            var improved = false
            let from = best.pose
            for move in moves {
                let candidate = from.composed(after: move)
                guard let got = judge(candidate), got.value < best.value else { continue }
                best = (candidate, got.value, got.measured)
                improved = true
            }
            if !improved { break }
        }
        return best
    }

    /// The pose near `t` with the least shortfall under which `fits(fit, rms, measures)` holds;
    /// stops as soon as the shortfall is at most `enough`. That pose and its measures (`t`'s own
    /// when no move helps).
    static func leastShortfall(view: [SIMD3<Float>], fine: [SIMD3<Float>], viewTree: KDTree, model tree: KDTree, normals: [SIMD3<Float>],
                               from t: RigidTransform, measured: StageTwoMeasures, tau: Float, cell: Float, enough: Double, steps: Int = shortfallSteps,
                               fits: (Double, Double, StageTwoMeasures) -> Bool) -> (pose: RigidTransform, measures: StageTwoMeasures) {
        let found = descend(view: view, from: t, start: (measured.shortfall, measured), tau: tau, enough: enough, steps: steps) { candidate in
            let (fit, rms) = evaluate(fine, tree, candidate, tau: tau, normals: normals, cell: cell, oriented: true)
            let m = measure(model: tree, normals: normals, view: view, t: candidate, tau: tau, cell: cell, viewTree: viewTree)
            return fits(fit, rms, m) ? (m.shortfall, m) : nil
        }
        return (found.pose, found.measured)
    }

    /// The pose near `t` with the least excess under which `fits(fit, rms)` holds; stops as soon as
    /// the excess is at most `enough`. That pose and its excess (`t`'s own when no move helps). The
    /// other measures are the caller's to judge at that pose: a descent that also asked them at
    /// every move would wander further for an impostor (section 8, session 17).
    static func leastExcess(view: [SIMD3<Float>], fine: [SIMD3<Float>], viewTree: KDTree, model tree: KDTree, normals: [SIMD3<Float>],
                            from t: RigidTransform, excess: Double, tau: Float, cell: Float, enough: Double, steps: Int = shortfallSteps,
                            fits: (Double, Double) -> Bool) -> (pose: RigidTransform, excess: Double) {
        let found = descend(view: view, from: t, start: (excess, ()), tau: tau, enough: enough, steps: steps) { candidate in
            let (fit, rms) = evaluate(fine, tree, candidate, tau: tau, normals: normals, cell: cell, oriented: true)
            guard fits(fit, rms) else { return nil }
            return (Registration.excess(view, candidate, tree, normals, cell: cell, tau: tau, viewTree: viewTree), ())
        }
        return (found.pose, found.value)
    }
}

import Foundation

/// A measurement for keys of the same shape but for one part (issue 35: a mug and the same mug
/// without its handle, a jar with its lid and without, a teapot with and without its spout): how
/// much of each model lies apart from the other. Used by `tandem-bench keys --part-shares`; no
/// enrolment rule uses it (a rule on it was tried in session 15 and failed its bar: Protocol/keys.md,
/// section 8, "session 15, the part test").
///
/// The two models are registered to each other, each way, as enrolment registers a frame, and the
/// registration that leaves less of them farther than `partReach` × τ (τ the larger of the two
/// keys') from the other is kept; for each model, the share of its points farther than each of the
/// reaches asked for from the other model.
extension KeyCloseness {
    /// The reach (in τ) by which the registration is chosen: a model point lies within half a cell
    /// of its surface and the cell is about τ; identical shapes (plum / tennis ball) leave 0–1.5 %
    /// of their models beyond 2τ.
    static let partReach: Float = 2

    /// The shares of each model's points farther than each of `reaches` (in τ) from the other
    /// model, after the registration that leaves the least apart at `partReach` (see the
    /// extension); nil for models too small to register.
    public static func partProfile(_ a: ObjectTemplate, _ b: ObjectTemplate, reaches: [Float]) -> (a: [Float], b: [Float])? {
        guard a.model.count >= 16, b.model.count >= 16, a.normals.count == a.model.count, b.normals.count == b.model.count else { return nil }
        let tau = max(a.inlierDistance, b.inlierDistance)
        let treeA = KDTree(a.model), treeB = KDTree(b.model)
        /// The shares (source's, target's) with `source` registered onto `target`; the first at `partReach`.
        func shares(_ source: ObjectTemplate, onto target: ObjectTemplate, _ targetTree: KDTree) -> ([Float], [Float]) {
            let normals = targetTree.order.map { target.normals[Int($0)] }
            let sa = source.model.withUnsafeBufferPointer { PrincipalAxes($0) }
            let ta = target.model.withUnsafeBufferPointer { PrincipalAxes($0) }
            let t = Registration.align(source.model, axes: sa, to: targetTree, targets: [ta], tau: target.inlierDistance,
                                       normals: normals, cell: target.cell).transform
            let moved = source.model.map { t.apply($0) }
            let movedTree = KDTree(moved)
            let sourceDistances = moved.map { targetTree.nearestDistanceSquared($0) }
            let targetDistances = target.model.map { movedTree.nearestDistanceSquared($0) }
            func apart(_ d: [Float], _ reach: Float) -> Float {
                let r2 = reach * tau * reach * tau
                return Float(d.filter { $0 > r2 }.count) / Float(max(d.count, 1))
            }
            let all = [partReach] + reaches
            return (all.map { apart(sourceDistances, $0) }, all.map { apart(targetDistances, $0) })
        }
        let (aOnto, bOfA) = shares(a, onto: b, treeB)
        let (bOnto, aOfB) = shares(b, onto: a, treeA)
        let (sa, sb) = aOnto[0] + bOfA[0] <= bOnto[0] + aOfB[0] ? (aOnto, bOfA) : (aOfB, bOnto)
        return (Array(sa.dropFirst()), Array(sb.dropFirst()))
    }
}

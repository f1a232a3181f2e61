import Foundation

/// At enrolment: is this key too close to another key, or to a common look-alike, to be told apart?
/// (issue 35: a mug key that a cup without a handle opens should say so when it is made, not be
/// found out later.)
///
/// What is tried is what verification does with a live object: 3-frame sweeps (the camera turning
/// 40° between frames, noise and outliers as `SyntheticShapes` gives them) of the other object,
/// presented to this key's verifier.
/// - Another key: its model (the merged enrolment frames) stands for its object, and the other way
///   round; the two are close when either opens the other in one of `keySweeps` sweeps.
/// - Another key of the same shape stretched by 5–16 % along one axis, the others within 4 % or half
///   that stretch (`stretch(_:_:)`, a geometric test): the sweeps of the models do not show what the objects' sweeps do.
/// - Another key's object held still (templates from version 7 keep their enrolment frames): each
///   kept frame of either object is judged by the other key as a live frame (`heldStill(_:opens:)`);
///   one that passes and shows every part the key waits for opens it when held still before the
///   camera, so the keys are close when any does. This is what the model sweeps miss: a jar shows its
///   lid from few viewpoints, and from the others opens the key of a jar without one (seed 11: 7 of
///   its 12 frames), while the sweeps of its merged model, with holes where no frame looked and
///   edges blurred by the registration, opened it in none.
/// - Common look-alikes: plain solids of this key's size (its model's extents along its principal
///   axes): a box, an ellipsoid, and the cylinders whose axis is one extent and whose diameter is
///   another. A key one of them opens in one of `lookAlikeSweeps` sweeps is close to it: a plain box
///   key is close to any box of its size, an egg to an ellipsoid of its size; a mug whose handle
///   tells it apart (its verifier waits for a decisive frame) is not close to a cup.
public enum KeyCloseness {
    public struct Finding: Sendable, Equatable {
        /// The other key's name, or the look-alike's description.
        public var other: String
        public var isKey: Bool
        /// Sweeps of the other object that opened this key (and, for a key, the reverse), of `sweeps`.
        public var matched: Int
        public var sweeps: Int
        /// When the keys are stretched twins (`stretch(_:_:)`): how much longer one is along one axis.
        public var stretch: Float? = nil
        /// Held still (`heldStill(_:opens:)`): the other object's enrolment frames that open this
        /// key, of those its template keeps, and this object's that open the other key.
        public var theirsOpenMine: (opened: Int, of: Int) = (0, 0)
        public var mineOpenTheirs: (opened: Int, of: Int) = (0, 0)
        var heldStillOpens: Bool { theirsOpenMine.opened > 0 || mineOpenTheirs.opened > 0 }

        public static func == (a: Finding, b: Finding) -> Bool {
            a.other == b.other && a.isKey == b.isKey && a.matched == b.matched && a.sweeps == b.sweeps && a.stretch == b.stretch
                && a.theirsOpenMine == b.theirsOpenMine && a.mineOpenTheirs == b.mineOpenTheirs
        }

        public var warning: String {
            if heldStillOpens {
                var how: [String] = []
                if theirsOpenMine.opened > 0 { how.append("held still, KEY \(other)'s object opens this key from \(theirsOpenMine.opened) of the \(theirsOpenMine.of) views it was enrolled from") }
                if mineOpenTheirs.opened > 0 { how.append("held still, this object opens KEY \(other) from \(mineOpenTheirs.opened) of the \(mineOpenTheirs.of) views it was enrolled from") }
                return "this key is close to KEY \(other): " + how.joined(separator: "; ") + "; use objects that differ more"
            }
            if let stretch, matched == 0 {
                return String(format: "this key is close to KEY %@: the same shape, %.0f %% longer or shorter along one axis, which the checks do not reliably tell apart; use objects that differ more",
                              other, Double(stretch) * 100)
            }
            return isKey ? "this key is close to KEY \(other): one object opened the other's key in \(matched) of \(sweeps) trial sweeps; use objects that differ more"
                : "this key is close to \(other): such an object opened it in \(matched) of \(sweeps) trial sweeps"
        }
    }

    static let keySweeps = 4
    static let lookAlikeSweeps = 2
    static let framePoints = 6_000

    /// Keys among `others` that are too close to `template` (see the type).
    public static func closeKeys(_ template: ObjectTemplate, others: [(name: String, template: ObjectTemplate)], seed: UInt64 = 1) -> [Finding] {
        let mine = ObjectVerifier(template: template)
        let myModel = surface(template)
        let myFrames = keptAnalyses(template)
        return others.compactMap { other in
            let theirs = ObjectVerifier(template: other.template)
            let theirModel = surface(other.template)
            var matched = 0
            for s in 0..<keySweeps {
                let base = seed &* 0x2545_F491_4F6C_DD1D &+ UInt64(s) &* 7_919
                if opens(mine, sweep(theirModel, seed: base)) { matched += 1 }
                if opens(theirs, sweep(myModel, seed: base &+ 1)) { matched += 1 }
            }
            let twins = stretch(template, other.template)
            let finding = Finding(other: other.name, isKey: true, matched: matched, sweeps: 2 * keySweeps, stretch: twins,
                                  theirsOpenMine: heldStill(keptAnalyses(other.template), opens: mine), mineOpenTheirs: heldStill(myFrames, opens: theirs))
            return matched > 0 || twins != nil || finding.heldStillOpens ? finding : nil
        }
    }

    /// Common look-alikes of `template`'s size that open it (see the type).
    public static func lookAlikes(_ template: ObjectTemplate, seed: UInt64 = 1) -> [Finding] {
        let verifier = ObjectVerifier(template: template)
        var found: [Finding] = []
        for (name, shape) in plainSolids(template) {
            var g = SplitMix64(seed: seed ^ 0x100C_A11E)
            let sampled = shape.sample(framePoints * 3, &g)
            var matched = 0
            for s in 0..<lookAlikeSweeps where opens(verifier, sweep(sampled, seed: seed &+ UInt64(s) &* 104_729)) { matched += 1 }
            if matched > 0 { found.append(Finding(other: name, isKey: false, matched: matched, sweeps: lookAlikeSweeps)) }
        }
        return found
    }

    /// How many of the enrolment frames `template` keeps (version 7) open `verifier`'s key, each
    /// judged as a live frame held still before the camera (`ObjectVerifier.opensHeldStill`): a
    /// frame that passes and shows every part the key waits for, repeated, opens it. These are the
    /// object's own frames, so they show what a sweep of its merged model cannot (the model has
    /// holes where no frame looked, and its edges are blurred by the registration).
    static func heldStill(_ template: ObjectTemplate, opens verifier: ObjectVerifier) -> (opened: Int, of: Int) {
        heldStill(keptAnalyses(template), opens: verifier)
    }

    static func heldStill(_ frames: [ShapeAnalysis], opens verifier: ObjectVerifier) -> (opened: Int, of: Int) {
        (frames.filter { verifier.opensHeldStill($0) }.count, frames.count)
    }

    /// The analyses of the frames `template` keeps (made once per template, not once per other key).
    static func keptAnalyses(_ template: ObjectTemplate) -> [ShapeAnalysis] {
        template.views.compactMap { $0.frame.map { ShapeAnalysis(voxelCloud: $0.points) } }
    }

    /// Whether `sweep` opens a fresh copy of `verifier` (stops at the first frame that fails: the
    /// match needs them all).
    static func opens(_ verifier: ObjectVerifier, _ sweep: [PointFrame]) -> Bool {
        var v = verifier
        for frame in sweep {
            _ = v.present(frame)
            if v.matched { return true }
            if v.consecutive == 0 { return false }
        }
        return v.matched
    }

    /// Three frames of `surface` from a random viewpoint, the camera turning 40° between them.
    static func sweep(_ surface: [(SIMD3<Float>, SIMD3<Float>)], seed: UInt64) -> [PointFrame] {
        let pose = SyntheticPose.random(seed: seed)
        return (0..<3).map { k in
            var g = SplitMix64(seed: seed &+ UInt64(k) &* 0x9E37_79B9_7F4A_7C15)
            return SyntheticShapes.view(surface: surface, pose: pose.turned(degrees: Float(k) * 40), points: framePoints,
                                        noise: 0.0015, outliers: 0.03, &g)
        }
    }

    /// A template's model as a sampled surface: each model point spread over its cell in the plane
    /// of its normal, centred on the model's centroid.
    static func surface(_ t: ObjectTemplate) -> [(SIMD3<Float>, SIMD3<Float>)] {
        guard !t.model.isEmpty else { return [] }
        var c = SIMD3<Float>.zero
        for p in t.model { c += p }
        c /= Float(t.model.count)
        var g = SplitMix64(seed: 0x5EED_CE11)
        var out: [(SIMD3<Float>, SIMD3<Float>)] = []
        let copies = max(1, framePoints * 3 / t.model.count)
        out.reserveCapacity(t.model.count * copies)
        for (p, n) in zip(t.model, t.normals) {
            let u = normalized3(abs(n.x) < 0.9 ? cross3(n, SIMD3(1, 0, 0)) : cross3(n, SIMD3(0, 1, 0))), v = cross3(n, u)
            for _ in 0..<copies {
                let a = Float(g.uniform(-0.5, 0.5)) * t.cell, b = Float(g.uniform(-0.5, 0.5)) * t.cell
                out.append((p - c + a * u + b * v, n))
            }
        }
        return out
    }

    /// Plain solids of the template's size: a box, an ellipsoid, the cylinders (without the ones
    /// within 5 % of another).
    static func plainSolids(_ t: ObjectTemplate) -> [(String, SyntheticShape)] {
        guard t.model.count >= 16 else { return [] }
        let pa = t.model.withUnsafeBufferPointer { PrincipalAxes($0) }
        // The model has no outliers: its full spans (2nd–98th percentile would cut a handle's tip).
        var e = SIMD3<Float>.zero
        for (k, axis) in [pa.axes.column0, pa.axes.column1, pa.axes.column2].enumerated() {
            let d = t.model.map { dot3($0 - pa.centroid, axis) }
            e[k] = (d.max() ?? 0) - (d.min() ?? 0)
        }
        let sorted = [e.x, e.y, e.z].sorted(by: >)
        func cm(_ x: Float) -> String { String(format: "%.1f", x * 100) }
        typealias Part = SyntheticShape.Part
        var solids: [(String, SyntheticShape)] = [
            ("a plain box of \(cm(sorted[0])) × \(cm(sorted[1])) × \(cm(sorted[2])) cm",
             SyntheticShape(name: "look-alike box", parts: [SyntheticShapes.box(sorted[0], sorted[1], sorted[2])])),
            ("a plain ellipsoid of \(cm(sorted[0])) × \(cm(sorted[1])) × \(cm(sorted[2])) cm",
             SyntheticShape(name: "look-alike ellipsoid", parts: [Part(kind: .ellipsoid(radii: SIMD3(sorted[0], sorted[1], sorted[2]) / 2))])),
        ]
        var cylinders: [(d: Float, h: Float)] = []
        for h in 0..<3 { for d in 0..<3 where d != h {
            let c = (d: sorted[d], h: sorted[h])
            if cylinders.contains(where: { abs($0.d - c.d) <= 0.05 * $0.d && abs($0.h - c.h) <= 0.05 * $0.h }) { continue }
            cylinders.append(c)
        } }
        for c in cylinders {
            solids.append(("a plain cylinder of Ø \(cm(c.d)) cm × \(cm(c.h)) cm",
                           SyntheticShape(name: "look-alike cylinder", parts: SyntheticShapes.cylinder(c.d / 2, c.h))))
        }
        return solids
    }
}

import ArgumentParser
import Foundation
import TandemKeys
import TandemNet
import TandemThreads

/// `tandem-bench keys`: object keys (issue 14) on generated objects (TandemKeys.SyntheticShapes).
///
/// - Feature extraction of a 10,000-point frame (goal ≤ 5 ms at p50), with the same-run cost of
///   reading that frame from binary and ascii PLY.
/// - Recognition: each object is enrolled from its own views (3k–15k points, random viewpoints);
///   each object then gets `--sweeps` fresh 3-frame sweeps (the camera moving 40° around it between
///   frames). Genuine trials: an object's sweeps against its own template; impostor trials: its
///   sweeps against every other template. Two-stage rule (goals: FRR ≤ 5 %, FAR ≤ 1 %), and stage 1
///   alone for comparison. Accepted impostors and the nearest misses are listed. The catalogue holds
///   hard pairs (issue 35: one part more or less — a handle, a spout, a lid —, aspect ratios within
///   15 %, near-spheres); `pairs` gives each pair's FRR of both objects and FAR both ways.
/// - The thresholds were tuned on seeds `tunedSeeds`; a figure to report comes from another seed.
/// - Verification of a 3-frame sweep (goal ≤ 50 ms at p50).
struct KeysBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Object keys: feature extraction (goal ≤ 5 ms), FRR ≤ 5 % / FAR ≤ 1 % on generated objects, 3-frame verification ≤ 50 ms.")

    @Option(help: "Objects from the catalogue (default: all of them).") var objects: Int = 0
    @Option(help: "Enrolment frames offered per object, in one command (8 diverse ones complete it; all good ones up to 12 are used).") var enrolFrames: Int = 12
    @Option(help: "3-frame sweeps per object.") var sweeps: Int = 4
    @Option(help: "Feature-extraction repetitions.") var featureRuns: Int = 200
    @Option(help: "Seed of the run.") var seed: UInt64 = 1
    @Option(help: "Impostor trials: all (every sweep against every other template) or hard (the hard pairs only, both ways; FAR is then over those).")
    var impostors: String = "all"
    @Option(help: "Frames a sweep goes on for while the key asks to turn the object to show its part (its run passed, none decisive), the camera turning on by 40°; 0: 3 frames only.")
    var guidedFrames: Int = 3
    @Flag(help: "Indent the JSON.") var pretty = false
    @Flag(help: "Enrol every object, print the shares of each model of every pair of keys farther than 1, 2, 3, 4, 6 τ from the other (`KeyCloseness.partProfile`), and stop (no sweeps).")
    var partShares = false

    static let featureGoalMs = 5.0
    static let verifyGoalMs = 50.0
    static let frrGoal = 0.05
    static let farGoal = 0.01
    /// Seeds the matcher's margins were tuned on (issue 35; the outline's margins and floors, the
    /// near-symmetries' free-space and misfit rules, on seeds 1 and 2); report on others (5, 11).
    static let tunedSeeds: [UInt64] = [1, 2]

    func validate() throws {
        guard objects == 0 || (2...SyntheticShapes.catalogue.count).contains(objects) else {
            throw ValidationError("--objects must be 0 (all) or between 2 and \(SyntheticShapes.catalogue.count)")
        }
        guard (8...12).contains(enrolFrames) else { throw ValidationError("--enrol-frames must be between 8 and 12") }
        guard (1...50).contains(sweeps) else { throw ValidationError("--sweeps must be between 1 and 50") }
        guard (10...100_000).contains(featureRuns) else { throw ValidationError("--feature-runs must be between 10 and 100000") }
        guard (0...6).contains(guidedFrames) else { throw ValidationError("--guided-frames must be between 0 and 6") }
        guard ["all", "hard"].contains(impostors) else { throw ValidationError("--impostors must be all or hard") }
    }

    func run() throws {
        warnIfDebug()
        let started = environment()
        let clock = ContinuousClock()
        func ms(_ d: Duration) -> Double { Double(d.components.seconds) * 1e3 + Double(d.components.attoseconds) / 1e15 }
        func percentile(_ v: [Double], _ p: Double) -> Double {
            let s = v.sorted()
            return s.isEmpty ? 0 : s[min(s.count - 1, Int(Double(s.count - 1) * p + 0.5))]
        }

        // Feature extraction and parsing of one 10,000-point frame.
        let mug = SyntheticShapes.named("mug")!
        // The visible surface holds fewer points than were sampled: ask for more, keep 10,000.
        var frame = SyntheticShapes.view(of: mug, seed: seed, points: 16_000)
        frame.points = Array(frame.points.prefix(10_000))
        let binary = PLYWriter.binary(frame), ascii = PLYWriter.ascii(frame)
        var featureMs: [Double] = [], binaryMs: [Double] = [], asciiMs: [Double] = []
        for _ in 0..<featureRuns {
            var t = clock.now
            _ = FrameCheck.assess(frame)
            featureMs.append(ms(clock.now - t))
            t = clock.now
            _ = try PointCloudReader.read(binary)
            binaryMs.append(ms(clock.now - t))
            if asciiMs.count < 50 {
                t = clock.now
                _ = try PointCloudReader.read(ascii)
                asciiMs.append(ms(clock.now - t))
            }
        }
        let featureP50 = percentile(featureMs, 0.5)
        say(String(format: "keys: features of %d points p50 %.2f ms p99 %.2f ms (goal ≤ %.0f); parse binary %.2f ms, ascii %.2f ms",
                   frame.points.count, featureP50, percentile(featureMs, 0.99), Self.featureGoalMs, percentile(binaryMs, 0.5), percentile(asciiMs, 0.5)))

        // Enrolment.
        let shapes = objects == 0 ? SyntheticShapes.catalogue : Array(SyntheticShapes.catalogue.prefix(objects))
        var g = SplitMix64(seed: seed)
        func points() -> Int { 3_000 + Int(g.next() % 12_001) }
        var verifiers: [ObjectVerifier] = []
        var enrolMs: [Double] = []
        var modelViewsMs: [Double] = []
        var enrolment: [[String: Any]] = []
        for (o, shape) in shapes.enumerated() {
            var e = ObjectEnrollment()
            var offered = 0
            // All offered frames in one command, as `tandem key enroll K --object f1 … fN` does: the
            // enrolment takes every good one (up to 12) and finishes after the last.
            while offered < enrolFrames, e.goodFrames < ObjectEnrollment.maximumFrames {
                _ = e.add(SyntheticShapes.view(of: shape, seed: seed &* 1_000_003 &+ UInt64(o * 100 + offered), points: points()))
                offered += 1
            }
            let t = clock.now
            let template = try e.finish(force: !e.isComplete)
            enrolMs.append(ms(clock.now - t))
            let verifier = ObjectVerifier(template: template)
            let v0 = clock.now
            verifier.prepare()
            modelViewsMs.append(ms(clock.now - v0))
            verifiers.append(verifier)
            enrolment.append(["object": shape.name, "frames_offered": offered, "good_frames": e.goodFrames, "viewpoints": e.viewpoints,
                              "registered": template.views.filter(\.registered).count, "model_points": template.model.count,
                              "bytes": template.serialized().count, "min_fit": template.minimumFit, "max_rms_mm": template.maximumRMS * 1000,
                              "min_coverage": template.minimumCoverage, "max_excess": template.maximumExcess, "max_deficit": template.maximumDeficit,
                              "max_overhang_mm": template.maximumOverhang * 1000, "max_shortfall_mm": template.maximumShortfall * 1000,
                              "distinct_parts": verifier.distinctPartSizes, "warnings": template.warnings])
            say("keys: enrolled \(shape.name): \(e.goodFrames) frames, \(e.viewpoints) viewpoints, \(template.views.filter(\.registered).count) registered\(e.isComplete ? "" : " (forced)")"
                + String(format: "; fit ≥ %.2f, rms ≤ %.2f mm, coverage ≥ %.2f, excess ≤ %.3f, τ %.1f mm, deficit ≤ %.3f, outline ±%.1f/%.1f mm; distinct parts %@", template.minimumFit, template.maximumRMS * 1000,
                         template.minimumCoverage, template.maximumExcess, template.inlierDistance * 1000, template.maximumDeficit,
                         template.maximumOverhang * 1000, template.maximumShortfall * 1000, verifier.distinctPartSizes.description))
        }

        if partShares {
            // Every pair of keys: each model's share apart from the other (the part test), the
            // pairs nearest to sharing everything first.
            struct PartRow {
                static let reaches: [Float] = [1, 2, 3, 4, 6]
                let a: String, b: String, hard: Bool, ms: Double
                let profileA: [Float], profileB: [Float]
                /// Beyond 2τ (the profiles' second reach).
                var shareA: Float { profileA[1] }
                var shareB: Float { profileB[1] }
                var json: [String: Any] {
                    ["a": a, "b": b, "share_a": Double(shareA), "share_b": Double(shareB), "larger": Double(max(shareA, shareB)),
                     "hard_pair": hard, "ms": ms, "reaches_tau": Self.reaches.map { Int($0) },
                     "profile_a": profileA.map { Double($0) }, "profile_b": profileB.map { Double($0) }]
                }
            }
            var rows: [PartRow] = []
            for i in 0..<shapes.count { for j in (i + 1)..<shapes.count {
                let t = clock.now
                guard let p = KeyCloseness.partProfile(verifiers[i].template, verifiers[j].template, reaches: PartRow.reaches) else { continue }
                let (a, b) = (shapes[i].name, shapes[j].name)
                let hard = SyntheticShapes.hardPairs.contains { ($0.0 == a && $0.1 == b) || ($0.1 == a && $0.0 == b) }
                rows.append(PartRow(a: a, b: b, hard: hard, ms: ms(clock.now - t), profileA: p.a, profileB: p.b))
            } }
            rows.sort { max($0.shareA, $0.shareB) < max($1.shareA, $1.shareB) }
            func line(_ v: [Float]) -> String { v.map { String(format: "%.3f", $0) }.joined(separator: " ") }
            for r in rows {
                say(String(format: "keys: part %@ / %@: own shares %.3f, %.3f%@ (%.0f ms); beyond 1 2 3 4 6 τ: %@ | %@", r.a, r.b,
                           r.shareA, r.shareB, r.hard ? " HARD PAIR" : "", r.ms, line(r.profileA), line(r.profileB)))
            }
            let data = (try? JSONSerialization.data(withJSONObject: ["benchmark": "keys-part-shares", "seed": seed, "pairs": rows.map(\.json)] as [String: Any],
                                                    options: [.sortedKeys])) ?? Data("{}".utf8)
            output(String(decoding: data, as: UTF8.self))
            return
        }

        // Sweeps.
        var sweepsOf: [[[PointFrame]]] = []
        for (o, shape) in shapes.enumerated() {
            sweepsOf.append((0..<sweeps).map { s in
                let base = seed &* 7_919 &+ UInt64(o * 1_000 + s * 10) &+ 500_000
                let pose = SyntheticPose.random(seed: base)
                return (0..<3).map { k in SyntheticShapes.view(of: shape, pose: pose.turned(degrees: Float(k) * 40), seed: base &+ UInt64(k), points: points()) }
            })
        }
        // The frames a person told "turn it to show the part" goes on with (their sizes from another
        // generator: the first three frames are those of a run without them).
        var extra = SplitMix64(seed: seed ^ 0x6_0D_ED)
        for (o, shape) in shapes.enumerated() {
            for s in 0..<sweeps {
                let base = seed &* 7_919 &+ UInt64(o * 1_000 + s * 10) &+ 500_000
                let pose = SyntheticPose.random(seed: base)
                for k in 3..<(3 + guidedFrames) {
                    let n = 3_000 + Int(extra.next() % 12_001)
                    sweepsOf[o][s].append(SyntheticShapes.view(of: shape, pose: pose.turned(degrees: Float(k) * 40), seed: base &+ UInt64(k), points: n))
                }
            }
        }
        /// A sweep as a person presents it: 3 frames; then, while the key has not matched and asks
        /// to turn the object to show its part (the run passed, none decisive), the next frames.
        /// Whether it matched, and whether it had after the first 3 frames.
        @Sendable func present(_ base: ObjectVerifier, _ sweep: [PointFrame]) -> (matched: Bool, verdicts: [FrameVerdict], strict: Bool) {
            var v = base
            var verdicts: [FrameVerdict] = []
            var strict = false
            for (k, frame) in sweep.enumerated() {
                if k >= 3 {
                    guard !v.matched, verdicts.last?.passed == true, !v.decisiveInRun else { break }
                }
                verdicts.append(v.present(frame))
                if k == 2 { strict = v.matched }
            }
            return (v.matched, verdicts, strict)
        }
        var genuine = 0, genuineRejected = 0, impostor = 0, impostorAccepted = 0
        // The same trials cut at 3 frames (no guided frames).
        var strictRejected = 0, strictAccepted = 0
        var stage1Genuine = 0, stage1Impostor = 0
        var verifyMs: [Double] = []
        var accepted: [[String: Any]] = []
        var misses: [(Double, [String: Any])] = []
        var rejectedGenuine: [[String: Any]] = []
        var hardPairs: [String: Any] = [:]
        /// Why a frame failed: "good" (frame check), "s1" (stage 1), then the stage-2 measures.
        func reasons(_ v: FrameVerdict, _ t: ObjectTemplate) -> [String] {
            var r: [String] = []
            if v.quality == 0 { return ["check"] }
            if !v.stage1Passed { r.append("s1") }
            if v.fit < Double(t.minimumFit) { r.append("fit") }
            if v.rms > Double(t.maximumRMS) { r.append("rms") }
            if v.coverage < Double(t.minimumCoverage) { r.append("cov") }
            if v.excess > Double(t.maximumExcess) { r.append("exc") }
            if v.deficit > Double(t.maximumDeficit) { r.append("def") }
            if v.overhang > Double(t.maximumOverhang) { r.append("overhang") }
            if v.shortfall > Double(t.maximumShortfall) { r.append("shortfall") }
            return r
        }
        var perObject: [String: (sweeps: Int, rejected: Int, frames: Int, reasons: [String: Int])] = [:]
        // Every template against every sweep, on every core (the verdicts do not depend on timing);
        // then the genuine sweeps once more, one at a time, for the verification time.
        let trials = verifiers.count * sweepsOf.count
        let (allSweeps, allVerifiers) = (sweepsOf, verifiers)
        // KEYS_GENUINE_ONLY: only each object's sweeps against its own template (a quick FRR; the
        // impostor figures are then meaningless).
        let genuineOnly = ProcessInfo.processInfo.environment["KEYS_GENUINE_ONLY"] != nil
        let names = shapes.map(\.name)
        @Sendable func hardPair(_ a: Int, _ b: Int) -> Bool {
            SyntheticShapes.hardPairs.contains { ($0.0 == names[a] && $0.1 == names[b]) || ($0.1 == names[a] && $0.0 == names[b]) }
        }
        let hardOnly = impostors == "hard"
        let perTrial = WorkerPool.shared.map(Array(0..<trials), width: WorkerPool.onlineCores) { k -> ([(Bool, [FrameVerdict])], [Bool]) in
            let (t, o) = k.quotientAndRemainder(dividingBy: allSweeps.count)
            if genuineOnly || hardOnly, t != o, genuineOnly || !hardPair(t, o) {
                return (allSweeps[o].map { _ in (false, []) }, allSweeps[o].map { _ in false })
            }
            let out = allSweeps[o].map { present(allVerifiers[t], $0) }
            return (out.map { ($0.matched, $0.verdicts) }, out.map(\.strict))
        }
        let verdictsOf = perTrial.map(\.0)
        let strictOf = perTrial.map(\.1)
        // KEYS_DUMP=FILE: every frame's measures as TSV (for studying the thresholds).
        if let path = ProcessInfo.processInfo.environment["KEYS_DUMP"] {
            var tsv = "template\tobject\tsweep\tframe\tscore\tfit\trms\tcoverage\texcess\tquality\tdeficit\toverhang\tshortfall\tpassed\tdecisive\tspan_short\tspan_long\n"
            for t in verifiers.indices { for o in sweepsOf.indices { for (s, r) in verdictsOf[t * sweepsOf.count + o].enumerated() {
                for (f, v) in r.1.enumerated() {
                    tsv += "\(shapes[t].name)\t\(shapes[o].name)\t\(s)\t\(f)\t\(v.score)\t\(v.fit)\t\(v.rms)\t\(v.coverage)\t\(v.excess)\t\(v.quality)\t\(v.deficit)\t\(v.overhang)\t\(v.shortfall)\t\(v.passed)\t\(v.decisive)\t\(v.spanShort)\t\(v.spanLong)\n"
                }
            } } }
            try tsv.write(toFile: path, atomically: true, encoding: .utf8)
        }
        for (t, base) in verifiers.enumerated() {
            for sweep in sweepsOf[t] {
                var v = base
                let start = clock.now
                _ = v.matches(Array(sweep.prefix(3)))
                verifyMs.append(ms(clock.now - start))
            }
        }
        for (t, base) in verifiers.enumerated() {
            for (o, list) in sweepsOf.enumerated() {
                for s in list.indices {
                    let (matched, verdicts) = verdictsOf[t * sweepsOf.count + o][s]
                    let strict = strictOf[t * sweepsOf.count + o][s]
                    let stage1 = verdicts.allSatisfy(\.stage1Passed)
                    let summary: [String: Any] = ["template": shapes[t].name, "object": shapes[o].name, "sweep": s,
                                                  "frames": verdicts.map { ["score": $0.score, "fit": $0.fit, "rms_mm": $0.rms * 1000, "coverage": $0.coverage,
                                                                            "excess": $0.excess, "deficit": $0.deficit, "overhang_mm": $0.overhang * 1000, "shortfall_mm": $0.shortfall * 1000, "span_long": $0.spanLong, "passed": $0.passed, "decisive": $0.decisive,
                                                                            "failed": reasons($0, base.template)] as [String: Any] }]
                    if o == t {
                        var entry = perObject[shapes[t].name] ?? (0, 0, 0, [:])
                        entry.sweeps += 1
                        if !matched { entry.rejected += 1 }
                        // Every frame passed, none told the object from a look-alike without a part.
                        if !matched, verdicts.allSatisfy(\.passed) { entry.reasons["indecisive sweep", default: 0] += 1 }
                        for verdict in verdicts where !verdict.passed {
                            entry.frames += 1
                            for r in reasons(verdict, base.template) { entry.reasons[r, default: 0] += 1 }
                        }
                        perObject[shapes[t].name] = entry
                        if ProcessInfo.processInfo.environment["KEYS_VERBOSE"] != nil {
                            let tp = base.template
                            say("keys:   \(shapes[t].name) sweep \(s) thresholds fit \(tp.minimumFit) rms \(tp.maximumRMS * 1000) cov \(tp.minimumCoverage) exc \(tp.maximumExcess): "
                                + verdicts.map { String(format: "[s %.3f f %.2f r %.2f c %.2f e %.3f]", $0.score, $0.fit, $0.rms * 1000, $0.coverage, $0.excess) }.joined(separator: " "))
                        }
                        genuine += 1
                        if !strict { strictRejected += 1 }
                        if !matched { genuineRejected += 1; rejectedGenuine.append(summary) }
                        if !stage1 { stage1Genuine += 1 }
                    } else if !genuineOnly, !hardOnly || hardPair(t, o) {
                        impostor += 1
                        if strict { strictAccepted += 1 }
                        if matched { impostorAccepted += 1; accepted.append(summary) }
                        if stage1 { stage1Impostor += 1 }
                        let passedFrames = verdicts.filter(\.passed).count
                        let closeness = Double(passedFrames) + (verdicts.map(\.fit).min() ?? 0)
                        if !matched { misses.append((closeness, summary)) }
                        if SyntheticShapes.hardPairs.contains(where: { ($0.0 == shapes[t].name && $0.1 == shapes[o].name) || ($0.1 == shapes[t].name && $0.0 == shapes[o].name) }) {
                            let key = "\(shapes[o].name) vs template \(shapes[t].name)"
                            var entry = hardPairs[key] as? [String: Int] ?? ["sweeps": 0, "accepted": 0, "frames_passed": 0]
                            entry["sweeps"]! += 1
                            entry["accepted"]! += matched ? 1 : 0
                            entry["frames_passed"]! += passedFrames
                            hardPairs[key] = entry
                        }
                    }
                }
            }
            say("keys: template \(t + 1)/\(verifiers.count) (\(shapes[t].name)) done; so far FRR \(genuineRejected)/\(genuine), FAR \(impostorAccepted)/\(impostor)")
        }
        // Per hard pair: FRR of each object (its own sweeps against its own template) and FAR both ways.
        var pairs: [[String: Any]] = []
        // The enrolment's "this key is close to …" (`KeyCloseness.closeKeys`, the second key
        // enrolled against the first): FAR is also given over the pairs it does not warn about.
        var unwarnedTrials = 0, unwarnedAccepted = 0
        var warnedPairs: [String] = []
        var closeMs: [Double] = []
        var heldOpened = 0, heldFrames = 0
        for (a, b) in SyntheticShapes.hardPairs {
            guard let i = shapes.firstIndex(where: { $0.name == a }), let j = shapes.firstIndex(where: { $0.name == b }) else { continue }
            func rate(template t: Int, object o: Int, matched: Bool) -> [String: Any] {
                let list = verdictsOf[t * sweepsOf.count + o]
                let n = list.filter { $0.0 == matched }.count
                return ["sweeps": list.count, matched ? "accepted" : "rejected": n, "rate": Double(n) / Double(max(list.count, 1))]
            }
            var entry: [String: Any] = ["pair": "\(a) / \(b)",
                                        "frr_\(a)": rate(template: i, object: i, matched: false), "frr_\(b)": rate(template: j, object: j, matched: false)]
            if !genuineOnly {
                entry["far_\(a)_opens_\(b)"] = rate(template: j, object: i, matched: true)
                entry["far_\(b)_opens_\(a)"] = rate(template: i, object: j, matched: true)
            }
            let c0 = clock.now
            let warnings = KeyCloseness.closeKeys(verifiers[j].template, others: [(name: a, template: verifiers[i].template)])
            closeMs.append(ms(clock.now - c0))
            entry["close_warning"] = warnings.first?.warning ?? ""
            // Held still (the closeness check's own trial): each object's enrolment frames that
            // open the other's key; nil finding = none did.
            let held: ((opened: Int, of: Int), (opened: Int, of: Int)) = (warnings.first?.theirsOpenMine ?? (0, verifiers[i].template.keptFrames),
                                                                         warnings.first?.mineOpenTheirs ?? (0, verifiers[j].template.keptFrames))
            entry["held_still_\(a)_opens_\(b)"] = ["frames": held.0.of, "opened": held.0.opened]
            entry["held_still_\(b)_opens_\(a)"] = ["frames": held.1.of, "opened": held.1.opened]
            heldOpened += held.0.opened + held.1.opened
            heldFrames += held.0.of + held.1.of
            if warnings.isEmpty {
                unwarnedTrials += verdictsOf[j * sweepsOf.count + i].count + verdictsOf[i * sweepsOf.count + j].count
                unwarnedAccepted += verdictsOf[j * sweepsOf.count + i].filter(\.0).count + verdictsOf[i * sweepsOf.count + j].filter(\.0).count
            } else {
                warnedPairs.append("\(a) / \(b)")
            }
            pairs.append(entry)
            say("keys: pair \(a) / \(b): FRR \(a) \(perObject[a]?.rejected ?? 0)/\(sweeps), \(b) \(perObject[b]?.rejected ?? 0)/\(sweeps)"
                + (genuineOnly ? "" : "; \(a) opens \(b) \(verdictsOf[j * sweepsOf.count + i].filter(\.0).count)/\(sweeps), \(b) opens \(a) \(verdictsOf[i * sweepsOf.count + j].filter(\.0).count)/\(sweeps)"))
        }
        if !genuineOnly {
            say("keys: hard pairs the enrolment warns about (\(warnedPairs.joined(separator: ", "))); FAR over the others \(unwarnedAccepted)/\(unwarnedTrials)")
            say(String(format: "keys: closeness check per hard pair p50 %.0f ms, max %.0f ms", percentile(closeMs, 0.5), closeMs.max() ?? 0))
            say("keys: held still (each hard pair's enrolment frames before the other key): \(heldOpened) of \(heldFrames) frames open it")
        }
        for shape in shapes {
            guard let e = perObject[shape.name] else { continue }
            say("keys: genuine \(shape.name): \(e.rejected)/\(e.sweeps) sweeps rejected, \(e.frames) frames failed: \(e.reasons.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        }
        let frr = Double(genuineRejected) / Double(max(genuine, 1)), far = Double(impostorAccepted) / Double(max(impostor, 1))
        let frr1 = Double(stage1Genuine) / Double(max(genuine, 1)), far1 = Double(stage1Impostor) / Double(max(impostor, 1))
        let verifyP50 = percentile(verifyMs, 0.5)
        let met = !genuineOnly && !hardOnly && featureP50 <= Self.featureGoalMs && verifyP50 <= Self.verifyGoalMs && frr <= Self.frrGoal && far <= Self.farGoal
        say(String(format: "keys: the second search's model views, made once per verifier: p50 %.1f ms, max %.1f ms", percentile(modelViewsMs, 0.5), modelViewsMs.max() ?? 0))
        say(String(format: "keys: %d objects; two-stage FRR %.1f %% (%d/%d, goal ≤ 5), FAR %.2f %% (%d/%d, goal ≤ 1); stage 1 alone FRR %.1f %%, FAR %.1f %%; verify 3 frames p50 %.1f ms p99 %.1f ms: %@",
                   shapes.count, 100 * frr, genuineRejected, genuine, 100 * far, impostorAccepted, impostor, 100 * frr1, 100 * far1,
                   verifyP50, percentile(verifyMs, 0.99), met ? "OK" : "MISSED"))
        let frr3 = Double(strictRejected) / Double(max(genuine, 1)), far3 = Double(strictAccepted) / Double(max(impostor, 1))
        say(String(format: "keys: cut at 3 frames (no guided frames): FRR %.1f %% (%d/%d), FAR %.2f %% (%d/%d); impostors: %@; seed %llu %@",
                   100 * frr3, strictRejected, genuine, 100 * far3, strictAccepted, impostor, impostors, seed,
                   Self.tunedSeeds.contains(seed) ? "is a calibration seed (margins chosen on it): not a figure to report" : "was not used in tuning"))
        for a in accepted { say("keys: ACCEPTED impostor \(a["object"]!) against template \(a["template"]!)") }
        var object: [String: Any] = [
            "benchmark": "keys", "seed": seed, "met": met,
            "features": ["points": frame.points.count, "p50_ms": featureP50, "p99_ms": percentile(featureMs, 0.99), "goal_ms": Self.featureGoalMs,
                         "parse_binary_p50_ms": percentile(binaryMs, 0.5), "parse_ascii_p50_ms": percentile(asciiMs, 0.5),
                         "binary_bytes": binary.count, "ascii_bytes": ascii.count, "runs": featureRuns] as [String: Any],
            "recognition": ["objects": shapes.count, "sweeps_per_object": sweeps, "genuine_trials": genuine, "impostor_trials": impostor,
                            "frr": frr, "far": far, "frr_goal": Self.frrGoal, "far_goal": Self.farGoal,
                            "stage1_only_frr": frr1, "stage1_only_far": far1,
                            "accepted_impostors": accepted, "rejected_genuine": rejectedGenuine,
                            "nearest_misses": misses.sorted { $0.0 > $1.0 }.prefix(8).map(\.1), "hard_pairs": hardPairs, "pairs": pairs,
                            "warned_pairs": warnedPairs, "unwarned_pair_trials": unwarnedTrials, "unwarned_pair_accepted": unwarnedAccepted,
                            "held_still_frames": heldFrames, "held_still_opened": heldOpened,
                            "tuned_on_seeds": Self.tunedSeeds.map { Int($0) }, "seed_unseen_in_tuning": !Self.tunedSeeds.contains(seed),
                            "impostors": impostors, "guided_frames": guidedFrames,
                            "frr_3_frames": frr3, "far_3_frames": far3] as [String: Any],
            "verify_3_frames": ["p50_ms": verifyP50, "p99_ms": percentile(verifyMs, 0.99), "goal_ms": Self.verifyGoalMs] as [String: Any],
            "enrolment": ["finish_p50_ms": percentile(enrolMs, 0.5), "finish_max_ms": enrolMs.max() ?? 0, "objects": enrolment] as [String: Any],
            "verifier_model_views_p50_ms": percentile(modelViewsMs, 0.5),
            "close_check_ms": ["p50": percentile(closeMs, 0.5), "max": closeMs.max() ?? 0, "pairs": closeMs.count] as [String: Any],
        ]
        object["environment"] = started.merging(["load_average_end": loadAverage()]) { a, _ in a }
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: options)) ?? Data("{}".utf8)
        output(String(decoding: data, as: UTF8.self))
    }
}

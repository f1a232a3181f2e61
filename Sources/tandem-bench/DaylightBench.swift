import ArgumentParser
import Foundation
import TandemDaylight
import TandemMedia
import TandemNet

/// `tandem-bench daylight`: the daylight check (issue 35).
///
/// - Speed: a 12-megapixel JPEG (4000 × 3000, a generated clear-sky scene with a phone's grain,
///   quality 90, about as many bytes as a phone's) judged from
///   the file — decode with shrink-on-load, scores, verdict, EXIF — `--runs` times; goal p50 ≤ 150 ms.
/// - `--report DIR`: judges every photo of a labelled set (Tests/daylight/daylight_set.py writes one,
///   with DIR/labels.json mapping file to class) and reports accuracy, false accepts and false
///   rejects per class against the goals (false accepts ≤ 2 % overall and none for night and indoor
///   photos; false rejects ≤ 10 % for clear and overcast days). `--scores` adds every photo's
///   scores (what the thresholds were chosen from).
struct DaylightBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daylight",
        abstract: "Daylight check: a 12 MP JPEG judged (goal p50 ≤ 150 ms); --report DIR: accuracy per class on a labelled set.")

    @Option(help: "Judgements of the 12 MP photo.") var runs: Int = 30
    @Option(help: "Judge this photo instead of the generated 12 MP one.") var photo: String?
    @Option(help: "A labelled set's directory (labels.json inside): report accuracy per class instead of speed.") var report: String?
    @Flag(help: "With --report: every photo's verdict and scores too.") var scores = false
    @Flag(help: "Indent the JSON.") var pretty = false

    static let goalMs = 150.0
    static let daylightClasses: Set<String> = ["clear", "overcast"]
    static let zeroFalseAccept: Set<String> = ["night", "indoor_warm", "indoor_cold"]

    private func emit(_ object: [String: Any]) {
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: options)) ?? Data("{}".utf8)
        output(String(decoding: data, as: UTF8.self))
    }

    func validate() throws {
        guard (1...1000).contains(runs) else { throw ValidationError("--runs must be between 1 and 1000") }
    }

    func run() throws {
        if let report { return try runReport(report) }
        warnIfDebug()
        let env = environment()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-daylight-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path: String
        if let photo {
            path = photo
        } else {
            let pixels = DaylightScenes.render(.clear, seed: 7, width: 4000, height: 3000, noise: 0.02)
            let bytes = try PhotoProcessor.jpeg(of: pixels, quality: 90)
            let url = directory.appendingPathComponent("sky-12mp.jpg")
            try Data(bytes).write(to: url)
            path = url.path
        }
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        let clock = ContinuousClock()
        var times: [Double] = []
        var last: DaylightReport?
        _ = try DaylightJudge.judge(photoAt: path)   // warm-up: libvips starts, the file is cached
        for _ in 0..<runs {
            let t = clock.now
            last = try DaylightJudge.judge(photoAt: path)
            let d = clock.now - t
            times.append(Double(d.components.seconds) * 1e3 + Double(d.components.attoseconds) / 1e15)
        }
        let sorted = times.sorted()
        func pct(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p + 0.5))] }
        let p50 = pct(0.5), p99 = pct(0.99)
        say(String(format: "daylight: %@ (%d bytes) judged %d times: p50 %.1f ms, p99 %.1f ms, min %.1f ms (goal p50 ≤ %.0f ms); verdict %@",
                   path, size, runs, p50, p99, sorted.first ?? 0, Self.goalMs, last?.verdict.rawValue ?? "?"))
        var object = env
        object["benchmark"] = "daylight"
        object["photo_bytes"] = size
        object["photo"] = photo == nil ? "generated 4000x3000 clear sky with grain, JPEG quality 90" : path
        object["runs"] = runs
        object["p50_ms"] = (p50 * 100).rounded() / 100
        object["p99_ms"] = (p99 * 100).rounded() / 100
        object["min_ms"] = ((sorted.first ?? 0) * 100).rounded() / 100
        object["goal_p50_ms"] = Self.goalMs
        object["goal_met"] = p50 <= Self.goalMs
        object["verdict"] = last?.verdict.rawValue ?? NSNull()
        emit(object)
    }

    private func runReport(_ dir: String) throws {
        let labelsURL = URL(fileURLWithPath: dir).appendingPathComponent("labels.json")
        guard let data = try? Data(contentsOf: labelsURL),
              let labels = (try? JSONSerialization.jsonObject(with: data)) as? [String: String] else {
            throw ValidationError("\(labelsURL.path) is missing or not an object of file name → class")
        }
        var perClass: [String: [String: Int]] = [:]
        var photos: [[String: Any]] = []
        for (file, label) in labels.sorted(by: { $0.key < $1.key }) {
            let path = URL(fileURLWithPath: dir).appendingPathComponent(file).path
            let verdict: String
            var entry: [String: Any] = ["file": file, "class": label]
            do {
                let r = try DaylightJudge.judge(photoAt: path)
                verdict = r.verdict.rawValue
                entry["reason"] = r.reason
                entry["scores"] = r.scores
            } catch {
                verdict = "error"
                entry["reason"] = "\(error)"
            }
            entry["verdict"] = verdict
            if scores { photos.append(entry) }
            perClass[label, default: [:]][verdict, default: 0] += 1
        }
        var classes: [String: Any] = [:]
        var negatives = 0, falseAccepts = 0, correct = 0, total = 0
        var goalsMet = true
        for (label, counts) in perClass.sorted(by: { $0.key < $1.key }) {
            let n = counts.values.reduce(0, +)
            let accepted = counts["daylight", default: 0]
            let expectDaylight = Self.daylightClasses.contains(label)
            let right = expectDaylight ? accepted : n - accepted
            correct += right
            total += n
            var row: [String: Any] = ["photos": n, "daylight": accepted, "not_daylight": counts["not_daylight", default: 0],
                                      "ambiguous": counts["ambiguous", default: 0], "errors": counts["error", default: 0],
                                      "accuracy": Double(right) / Double(max(n, 1))]
            if expectDaylight {
                let rate = Double(n - accepted) / Double(max(n, 1))
                row["false_rejects"] = n - accepted
                row["false_reject_rate"] = rate
                if rate > 0.10 { goalsMet = false }
            } else {
                negatives += n
                falseAccepts += accepted
                row["false_accepts"] = accepted
                row["false_accept_rate"] = Double(accepted) / Double(max(n, 1))
                if Self.zeroFalseAccept.contains(label), accepted > 0 { goalsMet = false }
            }
            classes[label] = row
            let padded = label.count < 12 ? label + String(repeating: " ", count: 12 - label.count) : label
            say(String(format: "%@ %4d photos  accuracy %5.1f %%  daylight %4d  not_daylight %4d  ambiguous %4d%@",
                       padded, n, 100 * Double(right) / Double(max(n, 1)), accepted, counts["not_daylight", default: 0],
                       counts["ambiguous", default: 0], counts["error"].map { "  errors \($0)" } ?? ""))
        }
        let farOverall = Double(falseAccepts) / Double(max(negatives, 1))
        if farOverall > 0.02 { goalsMet = false }
        say(String(format: "overall accuracy %.1f %%, false accepts %d of %d (%.2f %%), goals %@",
                   100 * Double(correct) / Double(max(total, 1)), falseAccepts, negatives, 100 * farOverall, goalsMet ? "met" : "NOT met"))
        var object: [String: Any] = ["benchmark": "daylight-report", "set": dir, "classes": classes,
                                     "accuracy": Double(correct) / Double(max(total, 1)),
                                     "false_accepts": falseAccepts, "false_accept_rate": farOverall, "goals_met": goalsMet]
        if scores { object["photos"] = photos }
        emit(object)
    }
}

import ArgumentParser
import Foundation
import TandemNet
import TandemProtocol

/// `tandem-bench sun`: the NOAA sun times (issue 35) for a million place-days — civil dawn,
/// sunrise, sunset, civil dusk and solar noon in UTC for each (goal ≤ 1 s). Places: random
/// latitudes in ±66° and longitudes, one day each over a year. The same run also times the local
/// form (`SolarCalculator.day`, each event on its local date with the tz database) for 20,000
/// place-days, which is what `tandem sun` and bedtime use once per night.
///
/// The million is timed `--repeat` times and the best run counts (wall clock), with the CPU time
/// of the timing thread beside it: on a shared machine the wall clock measures the load as much as
/// the code (`cpu_seconds` is what the code costs; `goal_met_cpu` judges that).
struct SunBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sun", abstract: "Sun times for 1,000,000 place-days (goal ≤ 1 s).")

    @Option(help: "Place-days.") var count: Int = 1_000_000
    @Option(help: "Seed of the run.") var seed: UInt64 = 1
    @Option(help: "Timed runs of the place-days (the best counts).") var `repeat`: Int = 3
    @Flag(help: "Indent the JSON.") var pretty = false

    static let goalSeconds = 1.0

    func validate() throws {
        guard (1_000...100_000_000).contains(count) else { throw ValidationError("--count must be between 1000 and 100000000") }
        guard (1...20).contains(`repeat`) else { throw ValidationError("--repeat must be between 1 and 20") }
    }

    func run() throws {
        warnIfDebug()
        var report = environment()
        var state = seed == 0 ? 1 : seed
        func next() -> Double {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Double(state >> 11) / Double(1 << 53)
        }
        var lats = [Double](), lons = [Double](), days = [Int]()
        lats.reserveCapacity(count); lons.reserveCapacity(count); days.reserveCapacity(count)
        let firstDay = LocalDate(year: 2026, month: 1, day: 1)!.daysSinceEpoch
        for _ in 0..<count {
            lats.append(next() * 132 - 66)
            lons.append(next() * 360 - 180)
            days.append(firstDay + Int(next() * 365))
        }
        let clock = ContinuousClock()
        func threadCPUSeconds() -> Double {
            var ts = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
            return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
        }
        var checksum = 0.0
        var polar = 0
        var seconds = Double.infinity, cpuSeconds = Double.infinity
        var runs: [Double] = []
        for _ in 0..<`repeat` {
            checksum = 0
            polar = 0
            let start = clock.now, cpuStart = threadCPUSeconds()
            for i in 0..<count {
                let e = SolarCalculator.utcEvents(daysSinceEpoch: days[i], latitude: lats[i], longitude: lons[i])
                for c in [e.civilDawn, e.sunrise, e.sunset, e.civilDusk] {
                    if case .at(let m) = c { checksum += m } else { polar += 1 }
                }
            }
            let elapsed = clock.now - start
            let wall = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            runs.append((wall * 1000).rounded() / 1000)
            seconds = min(seconds, wall)
            cpuSeconds = min(cpuSeconds, threadCPUSeconds() - cpuStart)
        }

        // The local form, with the tz database, on a sample.
        let zones = ["Europe/Oslo", "America/New_York", "Australia/Sydney", "Asia/Kolkata", "America/Santiago"].compactMap(TimeZone.init(identifier:))
        let localCount = min(count, 20_000)
        let localStart = clock.now
        for i in 0..<localCount {
            let d = SolarCalculator.day(LocalDate(daysSinceEpoch: days[i]), latitude: lats[i], longitude: lons[i], timeZone: zones[i % zones.count])
            if let s = d.sunrise { checksum += s.timeIntervalSince1970 }
        }
        let localElapsed = clock.now - localStart
        let localSeconds = Double(localElapsed.components.seconds) + Double(localElapsed.components.attoseconds) / 1e18

        report["bench"] = "sun"
        report["place_days"] = count
        report["seconds"] = (seconds * 1000).rounded() / 1000
        report["place_days_per_second"] = Int(Double(count) / seconds)
        report["goal_seconds"] = Self.goalSeconds
        report["goal_met"] = seconds <= Self.goalSeconds
        report["cpu_seconds"] = (cpuSeconds * 1000).rounded() / 1000
        report["goal_met_cpu"] = cpuSeconds <= Self.goalSeconds
        report["runs_seconds"] = runs
        report["events_without_crossing"] = polar
        report["local_place_days"] = localCount
        report["local_us_per_place_day"] = (localSeconds / Double(localCount) * 1e6 * 100).rounded() / 100
        report["checksum"] = checksum.truncatingRemainder(dividingBy: 1e6)
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = (try? JSONSerialization.data(withJSONObject: report, options: options)) ?? Data("{}".utf8)
        output(String(decoding: data, as: UTF8.self))
    }
}

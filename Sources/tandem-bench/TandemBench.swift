import ArgumentParser
import Foundation
import TandemNet
import TandemNode

/// `tandem-bench`: release-build benchmarks of the node's three hot paths, each against a floor
/// measured in the same process in the same run. JSON on stdout, a summary on stderr.
@main
struct TandemBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tandem-bench",
        abstract: "Benchmark handshakes, signed frames and box-stream bulk transfer over loopback.",
        discussion: """
        Every figure comes with a floor measured in this process during the same run (raw libsodium
        speed on one core), the ratio to it, and the target ratio. The peer is a child process
        (this executable, hidden `serve` subcommand) on 127.0.0.1. Build with `-c release`.
        """,
        subcommands: [All.self, Handshakes.self, Frames.self, Bulk.self, FriendsBench.self, MessagesBench.self, MessageFilesBench.self, DiscoveryBench.self, CountdownBench.self, RelayBench.self, AbuseBench.self, IsolationBench.self, VaultBench.self, BackupBench.self, KeysBench.self, DaylightBench.self, UnlockBench.self, SunBench.self, WebBench.self, Serve.self, VaultImportChild.self, AbuseChild.self, IsolationChild.self, MessageFilesChild.self, MessagesChild.self],
        defaultSubcommand: All.self
    )
}

/// Options every benchmark takes.
struct BenchOptions: ParsableArguments {
    @Option(help: "Seconds on the link per benchmark (split over the rounds).")
    var seconds: Double = 6

    @Option(help: "Seconds of floor measurement per benchmark (split over the rounds).")
    var floorSeconds: Double = 2.1

    @Option(help: "Rounds: each measures a floor slice, then a link slice.")
    var rounds: Int = 7

    @Flag(help: "Print JSON (the default; accepted for symmetry with `tandem`).")
    var json = false

    @Flag(help: "Indent the JSON.")
    var pretty = false

    func validate() throws {
        guard (0.1...60).contains(seconds) else { throw ValidationError("--seconds must be between 0.1 and 60") }
        guard (0.1...30).contains(floorSeconds) else { throw ValidationError("--floor-seconds must be between 0.1 and 30") }
        guard (1...50).contains(rounds) else { throw ValidationError("--rounds must be between 1 and 50") }
    }

    var settings: BenchSettings {
        var s = BenchSettings()
        s.seconds = seconds
        s.floorSeconds = floorSeconds
        s.rounds = rounds
        // Enough for the slowest benchmark (two link phases per round) with a wide margin.
        s.childTimeout = Int(seconds * 3 + floorSeconds * 2) + 60
        return s
    }

    func emit(_ object: [String: Any]) {
        var options: JSONSerialization.WritingOptions = [.sortedKeys, .withoutEscapingSlashes]
        if pretty { options.insert(.prettyPrinted) }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: options)) ?? Data("{}".utf8)
        output(String(decoding: data, as: UTF8.self))
    }

    /// One figure's summary on stderr, and the figure with this run's environment as the JSON.
    func report(_ figure: Figure) {
        say(figure.summary)
        emit(figure.json.merging(["environment": environment()]) { a, _ in a })
    }
}

func say(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// Header fields every report carries.
func environment() -> [String: Any] {
    ["cores": ProcessInfo.processInfo.activeProcessorCount, "load_average": loadAverage(),
     "build": isReleaseBuild ? "release" : "debug"]
}

#if DEBUG
let isReleaseBuild = false
#else
let isReleaseBuild = true
#endif

func warnIfDebug() {
    if !isReleaseBuild { say("tandem-bench: warning: debug build, figures are meaningless (use -c release)") }
}

struct Handshakes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Handshakes/s between two processes vs the libsodium work of one handshake (target ≥ 50 %).")
    @OptionGroup var options: BenchOptions

    func run() async throws {
        warnIfDebug()
        options.report(try await HandshakeBenchmark.run(options.settings))
    }
}

struct Frames: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Signed frames/s over a real link vs raw Ed25519 verify (target ≥ 70 %).")
    @OptionGroup var options: BenchOptions

    func run() async throws {
        warnIfDebug()
        options.report(try await FramesBenchmark.run(options.settings))
    }
}

struct Bulk: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Box-stream MB/s between two processes vs raw crypto_secretbox on 4 KiB blocks (target ≥ 60 %).")
    @OptionGroup var options: BenchOptions

    func run() async throws {
        warnIfDebug()
        options.report(try await BulkBenchmark.run(options.settings))
    }
}

struct All: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run handshakes, frames, bulk and a short isolation run; one JSON object with all four.")
    @OptionGroup var options: BenchOptions
    @Option(help: "Frames per phase of the isolation run (0: leave it out).") var isolationFrames = 3000

    func validate() throws {
        guard isolationFrames == 0 || (100...50_000).contains(isolationFrames) else {
            throw ValidationError("--isolation-frames must be 0 or between 100 and 50000")
        }
    }

    func run() async throws {
        warnIfDebug()
        let settings = options.settings
        let started = environment()
        let figures = [
            try await HandshakeBenchmark.run(settings),
            try await FramesBenchmark.run(settings),
            try await BulkBenchmark.run(settings),
        ]
        for f in figures { say(f.summary) }
        var object: [String: Any] = [:]
        for f in figures { object[f.name] = f.json }
        var met = figures.allSatisfy(\.met)
        if isolationFrames > 0 {
            // About 2 × frames / 1,000 s plus a few seconds of set-up at the default rate.
            var s = IsolationBenchmark.Settings()
            s.frames = isolationFrames
            let isolation = try await IsolationBenchmark.run(s)
            say(isolation.summary)
            object["isolation"] = isolation.json
            met = met && isolation.met
        }
        object["all_met"] = met
        object["environment"] = started.merging(["load_average_end": loadAverage()]) { a, _ in a }
        options.emit(object)
    }
}

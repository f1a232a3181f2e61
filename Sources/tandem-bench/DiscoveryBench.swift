import ArgumentParser
import Foundation

/// `tandem-bench discovery`: on a two-host LAN in network namespaces (made and removed here), the
/// time from starting a node until the other host has seen its beacon; the same run's floor is
/// the time to start and finish `tandem --version` in a namespace (process start-up alone).
struct DiscoveryBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "discovery",
        abstract: "Start → first beacon seen by a peer, on a namespace LAN (needs root and iproute2).")

    @Option(help: "Starts to measure.") var rounds: Int = 20
    @Option(help: ArgumentHelp("The tandem binary (default: next to tandem-bench).", valueName: "path")) var tandem: String?

    func validate() throws {
        guard (3...500).contains(rounds) else { throw ValidationError("--rounds must be between 3 and 500") }
    }

    func run() async throws {
        guard getuid() == 0 else { throw ValidationError("network namespaces need root") }
        let binary = tandem ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("tandem").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw ValidationError("no tandem binary at \(binary) (build it: swift build -c release --product tandem)")
        }
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let (ns1, ns2) = ("tdbA\(tag)", "tdbB\(tag)")
        let tmp = FileManager.default.temporaryDirectory.appendingPathComponent("tandem-bench-disc-\(tag)")
        defer {
            _ = try? sh("ip", "netns", "del", ns1)
            _ = try? sh("ip", "netns", "del", ns2)
            try? FileManager.default.removeItem(at: tmp)
        }
        // Two hosts joined by one veth pair, created straight inside their namespaces.
        try sh("ip", "netns", "add", ns1)
        try sh("ip", "netns", "add", ns2)
        try sh("ip", "-n", ns1, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", ns2)
        for (ns, ip) in [(ns1, "10.78.0.1"), (ns2, "10.78.0.2")] {
            try sh("ip", "-n", ns, "link", "set", "lo", "up")
            try sh("ip", "-n", ns, "addr", "add", "\(ip)/24", "brd", "10.78.0.255", "dev", "eth0")
            try sh("ip", "-n", ns, "link", "set", "eth0", "up")
        }
        let dirA = tmp.appendingPathComponent("a").path, dirB = tmp.appendingPathComponent("b").path
        try sh(binary, "init", "--data-dir", dirA)
        try sh(binary, "init", "--data-dir", dirB)

        // The observer: prints a JSON line for every beacon it accepts.
        let observer = Process()
        observer.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        observer.arguments = ["netns", "exec", ns2, binary, "dev", "discover", "--data-dir", dirB, "--private-only",
                              "--seconds", String(rounds * 10 + 30), "--interval-ms", "60000"]
        let lines = LineCollector()
        observer.standardOutput = lines.pipe
        observer.standardError = FileHandle.nullDevice
        try observer.run()
        defer { observer.terminate() }
        try await Task.sleep(for: .milliseconds(500))

        var latencies: [Double] = [], floors: [Double] = []
        for _ in 0..<rounds {
            // Floor: start-up of the same binary in the same namespace.
            let f0 = Date()
            try sh("ip", "netns", "exec", ns1, binary, "--version")
            floors.append(Date().timeIntervalSince(f0) * 1000)

            let mark = lines.count
            let node = Process()
            node.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
            node.arguments = ["netns", "exec", ns1, binary, "dev", "discover", "--data-dir", dirA, "--discoverable",
                              "--seconds", "3", "--interval-ms", "60000", "--tcp-port", "7810"]
            node.standardOutput = FileHandle.nullDevice
            node.standardError = FileHandle.nullDevice
            let t0 = Date()
            try node.run()
            guard let seenAt = await lines.firstTime(after: mark, containing: "\"host\":\"10.78.0.1\"", timeout: 5) else {
                node.terminate()
                throw TandemBenchError("no beacon seen within 5 s")
            }
            latencies.append(seenAt.timeIntervalSince(t0) * 1000)
            node.terminate()
            node.waitUntilExit()
        }
        let l = Percentiles(latencies), fl = Percentiles(floors)
        let report: [String: Any] = [
            "benchmark": "discovery",
            "rounds": rounds,
            "start_to_seen_ms": l.json,
            "floor_process_start_ms": fl.json,
            "goal_p99_ms": 1000,
            "meets_goal": l.p99 <= 1000,
            "beacon_after_start_p50_ms": l.p50 - fl.p50,
        ]
        let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted])
        print(String(decoding: data, as: UTF8.self))
        FileHandle.standardError.write(Data(String(format: "discovery: start→seen p50 %.0f ms, p99 %.0f ms (process start floor p50 %.0f ms)\n",
                                                   l.p50, l.p99, fl.p50).utf8))
    }
}

struct TandemBenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

@discardableResult
func sh(_ args: String...) throws -> String {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: args[0].hasPrefix("/") ? args[0] : "/usr/sbin/\(args[0])")
    p.arguments = Array(args.dropFirst())
    let out = Pipe()
    p.standardOutput = out
    p.standardError = out
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    guard p.terminationStatus == 0 else {
        throw TandemBenchError("\(args.joined(separator: " ")) failed: \(String(decoding: data, as: UTF8.self))")
    }
    return String(decoding: data, as: UTF8.self)
}

/// Collects a child's stdout lines with the time each arrived.
final class LineCollector: @unchecked Sendable {
    let pipe = Pipe()
    private let lock = NSLock()
    private var lines: [(Date, String)] = []
    private var partial = ""

    init() {
        pipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let data = h.availableData
            guard let self, !data.isEmpty else { return }
            let now = Date()
            self.lock.lock()
            self.partial += String(decoding: data, as: UTF8.self)
            while let nl = self.partial.firstIndex(of: "\n") {
                self.lines.append((now, String(self.partial[..<nl])))
                self.partial = String(self.partial[self.partial.index(after: nl)...])
            }
            self.lock.unlock()
        }
    }

    var count: Int { lock.withLock { lines.count } }

    func firstTime(after index: Int, containing needle: String, timeout: Double) async -> Date? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let hit = lock.withLock { lines.dropFirst(index).first { $0.1.contains(needle) }?.0 }
            if let hit { return hit }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return nil
    }
}

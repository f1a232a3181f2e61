import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Part three of `tandem demo`: Erin's bedtime. Her node is a real `tandem node` process whose
/// wall clock libfaketime sets (a night in Oslo in December, then the morning after); everything
/// else runs on the machine's own clock. The mode locks at bed time, a photo at 05:00 is refused
/// with the hour of sunrise, a night photo after sunrise is refused by the daylight check, a photo
/// of the sky taken two minutes ago opens it, and the day's timeline tells the story.
enum BedtimeDemoScenario {
    static func run(photos: String?, say: @escaping @Sendable (String) -> Void) async throws {
        say("")
        say("Part three: Erin's bedtime. Her node's clock is set by libfaketime (a December night in Oslo, then")
        say("the morning after); nothing else on this machine changes its clock.")
        guard let faketime = libfaketime() else {
            say("22. Skipped: libfaketime is not installed (`apt-get install faketime`, which `make demo` does).")
            return
        }
        guard let photos = photoDirectory(photos) else {
            say("22. Skipped: the demo's photos (Deploy/demo/sky.jpg, night.jpg) are not here; run it from the")
            say("    repository (`make demo`) or name their folder with --photos.")
            return
        }
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tandem-bedtime-demo-\(getpid())")
        try? FileManager.default.removeItem(at: root)  // a leftover of an earlier run with the same pid
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }  // a temporary directory
        let erin = ErinNode(root: root, faketime: faketime)
        defer { erin.stop() }

        try erin.cli(["init"])
        try erin.start(at: "2026-12-01 22:59:50")  // Oslo time
        try erin.cli(["name", "Erin"])
        try erin.cli(["mode", "create", "night", "--block-site", "news.example"])
        let set = try erin.json(["bedtime", "set", "--mode", "night", "--bed", "23:00", "--wake", "07:00", "--city", "Oslo"])
        say("22. At 22:59 Erin sets her bedtime (`tandem bedtime set --mode night --bed 23:00 --wake 07:00 --city Oslo`):")
        say("    mode night blocks news.example from 23:00 until she is up after sunrise (time zone \(set["time_zone"] as? String ?? "?")).")
        erin.stop()
        try erin.start(at: "2026-12-01 23:00:05")
        let night = try erin.json(["bedtime", "show"])
        say("    Her laptop sleeps across 23:00; when her node runs again at 23:00:05 it locks at once: locked \(night["locked"] as? Bool == true ? "yes" : "NO?!"),")
        say("    and her hosts file holds \(erin.blocked() ? "the news.example block" : "NO block?!").")

        erin.stop()
        try erin.start(at: "2026-12-02 05:00:00")
        let early = try erin.refused(["unlock", "--daylight", photos.appendingPathComponent("sky.jpg").path])
        say("23. 05:00, still dark. She tries a photo of the sky anyway (`tandem unlock --daylight sky.jpg`):")
        say("    refused — “\(early)”")

        erin.stop()
        try erin.start(at: "2026-12-02 09:30:00")
        let dark = try erin.refused(["unlock", "--daylight", photos.appendingPathComponent("night.jpg").path])
        say("24. 09:30, after sunrise. A photo of a dark scene is judged on the node and refused:")
        say("    “\(dark)”")
        let opened = try erin.json(["unlock", "--daylight", photos.appendingPathComponent("sky.jpg").path])
        say("    She goes out and photographs the sky (taken 09:28): the daylight check passes and the mode opens until")
        say("    the next bedtime: locked \(opened["locked"] as? Bool == false ? "no" : "STILL?!"), news.example \(erin.blocked() ? "STILL blocked?!" : "reachable again").")
        let health = try erin.json(["health"])
        say("    Leaving by daylight costs nothing: health \(health["health"] as? Int ?? -1) of 100.")
        say("25. The day as `tandem timeline --date 2026-12-02` tells it:")
        for line in try erin.cli(["timeline", "--date", "2026-12-02"]).split(separator: "\n").prefix(12) {
            say("    \(line)")
        }
        erin.stop()
        say("26. Erin's node stops and its temporary data directory is removed. Done.")
    }

    static func libfaketime() -> String? {
        for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"] {
            let path = dir + "/faketime/libfaketime.so.1"
            if FileManager.default.fileExists(atPath: path) { return path }
        }
        return nil
    }

    /// `--photos`, else Deploy/demo under the working directory, else the installed copy.
    static func photoDirectory(_ given: String?) -> URL? {
        let exe = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        let candidates: [String] = [given, FileManager.default.currentDirectoryPath + "/Deploy/demo",
                          exe.deletingLastPathComponent().appendingPathComponent("share/tandem/demo").path].compactMap { $0 }
        return candidates.map { URL(fileURLWithPath: $0) }
            .first { FileManager.default.fileExists(atPath: $0.appendingPathComponent("sky.jpg").path) }
    }
}

/// Erin's node: `tandem node` under libfaketime, and the CLI against it.
final class ErinNode {
    let dataDir: URL
    let hosts: URL
    let faketime: String
    var process: Process?
    let exe = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()

    init(root: URL, faketime: String) {
        self.dataDir = root.appendingPathComponent("erin")
        self.hosts = root.appendingPathComponent("erin-hosts")
        self.faketime = faketime
        try? "127.0.0.1\tlocalhost\n".write(to: hosts, atomically: true, encoding: .utf8)  // checked by blocked()
    }

    /// Starts the node with its wall clock at `instant` (Oslo time) and waits until its control socket answers.
    func start(at instant: String) throws {
        let p = Process()
        p.executableURL = exe
        p.arguments = ["node", "--data-dir", dataDir.path, "--listen", "127.0.0.1:0", "--no-discovery",
                       "--hosts-file", hosts.path, "--web", "off"]
        var env = ProcessInfo.processInfo.environment
        env["LD_PRELOAD"] = faketime
        env["FAKETIME"] = "@\(instant)"
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        env["TANDEM_NO_LOCK_KEEPER"] = "1"  // the demo's lock ends with the demo
        env["TZ"] = "Europe/Oslo"  // Erin's machine is in Oslo; libfaketime reads `instant` in this zone too
        p.environment = env
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        process = p
        for _ in 0..<200 {
            if (try? cli(["status"])) != nil { return }  // not up yet: try again
            guard p.isRunning else { throw DemoFailure("Erin's node stopped at its start (exit \(p.terminationStatus))") }
            usleep(100_000)
        }
        throw DemoFailure("Erin's node did not answer on its control socket within 20 s")
    }

    func stop() {
        guard let p = process else { return }
        process = nil
        if p.isRunning {
            p.terminate()
            p.waitUntilExit()
        }
        for name in ["faketime_shm_\(p.processIdentifier)", "sem.faketime_sem_\(p.processIdentifier)"] {
            try? FileManager.default.removeItem(atPath: "/dev/shm/" + name)  // libfaketime's own; absent is fine
        }
    }

    /// Runs `tandem ARGS --data-dir DIR`; its standard output, or a failure with its error line.
    @discardableResult
    func cli(_ args: [String]) throws -> String {
        let (status, out, err) = try call(args)
        guard status == 0 else { throw DemoFailure("tandem \(args.joined(separator: " ")): \(err.trimmingCharacters(in: .whitespacesAndNewlines))") }
        return out
    }

    func json(_ args: [String]) throws -> [String: Any] {
        let out = try cli(args + ["--json"])
        guard let o = try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any] else {
            throw DemoFailure("tandem \(args.joined(separator: " ")) printed no JSON object")
        }
        return o
    }

    /// A command that must be refused: its one error line, without the "tandem: " prefix.
    func refused(_ args: [String]) throws -> String {
        let (status, out, err) = try call(args)
        guard status != 0 else { throw DemoFailure("tandem \(args.joined(separator: " ")) was not refused: \(out)") }
        var line = err.split(separator: "\n").first.map(String.init) ?? ""
        for prefix in ["tandem: ", "error: "] where line.hasPrefix(prefix) { line = String(line.dropFirst(prefix.count)) }
        return line
    }

    func call(_ args: [String]) throws -> (Int32, String, String) {
        let p = Process()
        p.executableURL = exe
        p.arguments = args + ["--data-dir", dataDir.path]
        var env = ProcessInfo.processInfo.environment
        env["TZ"] = "Europe/Oslo"  // Erin reads her times in Oslo's
        p.environment = env
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        let o = out.fileHandleForReading.readDataToEndOfFile(), e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }

    func blocked() -> Bool {
        ((try? String(contentsOf: hosts, encoding: .utf8)) ?? "").contains("news.example")  // unreadable: not blocked
    }
}

struct DemoFailure: Error, CustomStringConvertible {
    let description: String
    init(_ text: String) { description = text }
}

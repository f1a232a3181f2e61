import Foundation
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The second process of a benchmark: this executable run as `tandem-bench serve --mode …`.
/// Its first stdout line is a JSON object with `port` and `public_key`; later lines are stats.
/// It exits when its stdin closes (the parent went away) or after its own timeout.
final class ChildProcess {
    let process = Process()
    private let stdinPipe = Pipe()
    private let stdoutPipe = Pipe()
    private var lines = PipeLines()
    private(set) var port = 0
    private(set) var publicKey: [UInt8] = []
    /// The child's stdin, for benches that send it requests.
    var stdinHandle: FileHandle { stdinPipe.fileHandleForWriting }

    convenience init(mode: ServeMode, timeoutSeconds: Int) throws {
        try self.init(arguments: ["serve", "--mode", mode.rawValue, "--timeout", String(timeoutSeconds)],
                      timeoutSeconds: timeoutSeconds)
    }

    /// This executable with `arguments` (a hidden subcommand that announces itself the same way).
    /// `idlePriority` starts it under `chrt --idle 0` (SCHED_IDLE, every thread): it then only
    /// gets CPU time nobody else wants, which is how a benchmark stands in for a process that
    /// would run on another machine.
    init(arguments: [String], timeoutSeconds: Int, idlePriority: Bool = false) throws {
        if idlePriority {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/chrt")
            process.arguments = ["--idle", "0", ChildProcess.ownExecutable()] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: ChildProcess.ownExecutable())
            process.arguments = arguments
        }
        process.standardInput = stdinPipe
        process.standardOutput = stdoutPipe
        process.standardError = FileHandle.standardError
        try process.run()
        guard let hello = readLine(timeoutSeconds: 30),
              let object = try? JSONSerialization.jsonObject(with: Data(hello.utf8)) as? [String: Any],
              let port = object["port"] as? Int,
              let keyHex = object["public_key"] as? String else {
            stop()
            throw BenchError("the child process did not announce its port")
        }
        self.port = port
        self.publicKey = parseHex(keyHex) ?? []
    }

    /// The path of this executable, so the child is the same build.
    static func ownExecutable() -> String {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        if n > 0 { return String(decoding: buf[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        return CommandLine.arguments[0]
    }

    /// The next stdout line of the child, or nil on timeout or end of file.
    func readLine(timeoutSeconds: Double) -> String? {
        lines.next(from: stdoutPipe.fileHandleForReading.fileDescriptor, timeoutSeconds: timeoutSeconds)
    }

    /// The child's counters now (it answers a newline on its stdin with one JSON line).
    func stats(timeoutSeconds: Double = 30) throws -> ChildStats {
        stdinPipe.fileHandleForWriting.write(Data("\n".utf8))
        guard let line = readLine(timeoutSeconds: timeoutSeconds),
              let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw BenchError("the child process did not report its counters")
        }
        return ChildStats(object)
    }

    /// Closes the child's stdin (it exits) and waits for it, at most a few seconds.
    func stop() {
        try? stdinPipe.fileHandleForWriting.close()
        let deadline = monotonicNanos() + 5_000_000_000
        while process.isRunning, monotonicNanos() < deadline { usleep(10_000) }
        if process.isRunning { process.terminate() }
    }
}

/// One stats line of the child.
struct ChildStats {
    let raw: [String: Any]
    init(_ raw: [String: Any]) { self.raw = raw }

    var framesAccepted: Int { raw["frames_accepted"] as? Int ?? 0 }
    var framesRejected: [String: Any] { raw["frames_rejected"] as? [String: Any] ?? [:] }
    var handshakesSucceeded: Int { raw["handshakes_succeeded"] as? Int ?? 0 }
    var bulkBytesReceived: Int { raw["bulk_bytes_received"] as? Int ?? 0 }
    var cpuSeconds: Double { raw["cpu_seconds"] as? Double ?? 0 }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

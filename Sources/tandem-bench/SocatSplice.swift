import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `socat` as a plain TCP splice on 127.0.0.1: it listens on a free port and, for each connection,
/// forks a child that connects to `targetPort` and copies bytes both ways. The limit any relay can
/// reach for `tandem-bench relay`: no registration, no token, no framing, just two sockets.
final class SocatSplice: @unchecked Sendable {
    let process = Process()
    let port: Int
    let commandLine: String

    /// `block`: socat's transfer block (`-b`, bytes read and written per system call).
    init(binary: String, targetPort: Int, block: Int) throws {
        port = try CountdownBench.freeTCPPort()
        // nodelay on both sockets, as the relays set it.
        let arguments = ["-b", String(block), "TCP4-LISTEN:\(port),bind=127.0.0.1,reuseaddr,fork,nodelay",
                         "TCP4:127.0.0.1:\(targetPort),nodelay"]
        commandLine = ([binary] + arguments).joined(separator: " ")
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.standardError
        try process.run()
        // Ready when the port is listening (a probe connection would reach the target as a peer).
        let deadline = monotonicNanos() + 10_000_000_000
        while !Self.listening(port) {
            guard process.isRunning, monotonicNanos() < deadline else {
                stop()
                throw BenchError("socat did not listen on 127.0.0.1:\(port) within 10 s (\(commandLine))")
            }
            usleep(10_000)
        }
    }

    var pid: Int32 { process.processIdentifier }

    /// The forked children (one per spliced connection) of the listener.
    var children: [Int32] {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        return text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// CPU seconds of the listener and its live children (the splicing happens in the children).
    var cpuSeconds: Double { ([pid] + children).map(BenchNode.cpuSeconds).reduce(0, +) }

    /// Whether 127.0.0.1:`port` is in LISTEN state (/proc/net/tcp).
    static func listening(_ port: Int) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return false }
        let local = String(format: "0100007F:%04X", port)
        return text.split(separator: "\n").contains { line in
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            return f.count > 3 && f[1] == local && f[3] == "0A"
        }
    }

    /// SIGTERM to the children, then (once it has reaped them, or after a second) the listener;
    /// SIGKILL after 5 s.
    func stop() {
        guard process.isRunning else { return }
        for child in children { kill(child, SIGTERM) }
        let reaped = monotonicNanos() + 1_000_000_000
        while !children.isEmpty, monotonicNanos() < reaped { usleep(5_000) }
        kill(pid, SIGTERM)
        let deadline = monotonicNanos() + 5_000_000_000
        while process.isRunning, monotonicNanos() < deadline { usleep(5_000) }
        if process.isRunning {
            for child in children { kill(child, SIGKILL) }
            kill(pid, SIGKILL)
            process.waitUntilExit()
        }
    }
}

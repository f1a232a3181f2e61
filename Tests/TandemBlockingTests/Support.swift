import Foundation
import XCTest
#if canImport(Glibc)
import Glibc
#endif
@testable import TandemBlocking

/// A fresh directory under the temporary directory, removed by `cleanUp`.
final class TempDir {
    let path: String

    init(_ label: String = "blocking") {
        let base = (NSTemporaryDirectory() as NSString).appendingPathComponent("tandem-\(label)-\(UInt32.random(in: 0...UInt32.max))")
        try! FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        path = base
    }

    func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    func write(_ name: String, _ text: String, mode: mode_t = 0o644) -> String {
        let p = file(name)
        try! FileManager.default.createDirectory(atPath: (p as NSString).deletingLastPathComponent,
                                                 withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: p, contents: Data(text.utf8))
        chmod(p, mode)
        return p
    }

    func cleanUp() {
        _ = try? FileManager.default.removeItem(atPath: path)
    }
}

/// Collects callback values from other threads.
final class Collector<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []

    func add(_ item: T) { lock.withLock { items.append(item) } }
    var all: [T] { lock.withLock { items } }

    /// Waits until `predicate` holds for the collected items, up to `seconds`.
    @discardableResult
    func wait(seconds: Double, until predicate: ([T]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if predicate(all) { return true }
            usleep(20_000)
        }
        return predicate(all)
    }
}

/// A child process of the test, reaped by `waitExit`/`kill`.
struct Child {
    let pid: pid_t

    static func spawn(_ path: String, _ arguments: [String] = []) -> Child {
        switch Spawned.spawn(path: path, arguments: arguments, environment: ["PATH=/usr/bin:/bin"],
                             newProcessGroup: true, captureOutput: false) {
        case .success(let s): return Child(pid: s.pid)
        case .failure(let f): fatalError("spawn \(path): \(f.message)")
        }
    }

    /// The wait status once it exited (reaped), or nil if it is still running after `seconds`.
    func waitExit(seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            var status: Int32 = 0
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { return status }
            if r < 0 { return -1 }
            usleep(10_000)
        } while Date() < deadline
        return nil
    }

    var isRunning: Bool {
        guard let st = Proc.stat(pid) else { return false }
        return !st.isGone
    }

    /// Kills and reaps it (cleanup).
    func kill() {
        _ = Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
    }
}

func termSignal(_ status: Int32) -> Int32? { (status & 0x7f) != 0 && (status & 0x7f) != 0x7f ? status & 0x7f : nil }

/// A copy of a system binary under a distinctive name (so the guard matches only it).
func copyBinary(_ source: String, to dir: TempDir, name: String) -> String {
    let dest = dir.file(name)
    let real = URL(fileURLWithPath: source).resolvingSymlinksInPath().path  // /bin/sh is a link to dash
    try! FileManager.default.copyItem(atPath: real, toPath: dest)
    chmod(dest, 0o755)
    return dest
}

func uniqueName(_ prefix: String) -> String {
    "\(prefix)-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
}

/// Children of this process that are zombies (exited, not reaped).
func zombieChildren() -> [Int32] {
    let me = getpid()
    return (Proc.pids() ?? []).filter { pid in
        guard let st = Proc.stat(pid) else { return false }
        return st.ppid == me && st.isGone
    }
}

/// A deterministic generator for property tests.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

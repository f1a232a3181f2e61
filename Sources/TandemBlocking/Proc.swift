#if canImport(Glibc)
import Glibc
#endif

/// Small readers of `/proc` and the clock, shared by the app guard, hooks and the probe.
enum Proc {
    /// Up to `limit` bytes of a (usually virtual) file, or nil when it cannot be opened or read.
    static func read(_ path: String, limit: Int = 4096) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { return nil }
        defer { close(fd) }
        var out = [UInt8](repeating: 0, count: limit)
        var filled = 0
        while filled < limit {
            let n = out.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + filled, limit - filled) }
            if n < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if n == 0 { break }
            filled += n
        }
        out.removeSubrange(filled...)
        return out
    }

    /// The target of a symlink (e.g. `/proc/PID/exe`), or nil.
    static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Fields of `/proc/PID/stat` the guard needs.
    struct Stat: Equatable {
        var comm: String
        var state: UInt8
        var ppid: Int32
        var flags: UInt64
        var startTime: UInt64

        static let kernelThreadFlag: UInt64 = 0x0020_0000  // PF_KTHREAD
        var isKernelThread: Bool { flags & Stat.kernelThreadFlag != 0 }
        var isGone: Bool { state == UInt8(ascii: "Z") || state == UInt8(ascii: "X") || state == UInt8(ascii: "x") }
    }

    /// `/proc/PID/stat` parsed: `pid (comm) state ppid pgrp session tty tpgid flags ... starttime`.
    /// The comm may hold spaces and parentheses, so the fields start after the last `)`.
    static func stat(_ pid: Int32) -> Stat? {
        guard let bytes = read("/proc/\(pid)/stat", limit: 2048) else { return nil }
        return parseStat(bytes)
    }

    static func parseStat(_ bytes: [UInt8]) -> Stat? {
        guard let open = bytes.firstIndex(of: UInt8(ascii: "(")),
              let close = bytes.lastIndex(of: UInt8(ascii: ")")), close > open else { return nil }
        let comm = String(decoding: bytes[(open + 1)..<close], as: UTF8.self)
        let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "))
        // fields[0] = state (field 3), so field N is fields[N - 3].
        guard fields.count >= 20, fields[0].count == 1,
              let ppid = Int32(String(decoding: fields[1], as: UTF8.self)),
              let flags = UInt64(String(decoding: fields[6], as: UTF8.self)),
              let start = UInt64(String(decoding: fields[19], as: UTF8.self).trimmingNewline())
        else { return nil }
        return Stat(comm: comm, state: fields[0].first!, ppid: ppid, flags: flags, startTime: start)
    }

    /// `/proc/PID/comm` without its newline.
    static func comm(_ pid: Int32) -> String? {
        guard let bytes = read("/proc/\(pid)/comm", limit: 64) else { return nil }
        return String(decoding: bytes, as: UTF8.self).trimmingNewline()
    }

    /// `argv[0]` from `/proc/PID/cmdline` (empty for kernel threads and zombies).
    static func argv0(_ pid: Int32) -> String? {
        guard let bytes = read("/proc/\(pid)/cmdline", limit: 4096), !bytes.isEmpty else { return nil }
        let first = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        return first.isEmpty ? nil : String(decoding: first, as: UTF8.self)
    }

    /// The executable's path (`/proc/PID/exe`), without the " (deleted)" the kernel appends when
    /// the file was replaced or removed after the start.
    static func exe(_ pid: Int32) -> String? {
        guard var path = readLink("/proc/\(pid)/exe") else { return nil }
        if path.hasSuffix(" (deleted)") { path.removeLast(" (deleted)".count) }
        return path
    }

    /// The real uid of a process (the first number of the `Uid:` line of `/proc/PID/status`).
    static func realUid(_ pid: Int32) -> uid_t? {
        guard let bytes = read("/proc/\(pid)/status", limit: 16 << 10) else { return nil }
        return parseRealUid(bytes)
    }

    /// `Uid:\treal\teffective\tsaved\tfs` → real; nil without a well-formed `Uid:` line.
    static func parseRealUid(_ status: [UInt8]) -> uid_t? {
        for line in status.split(separator: 10) where line.starts(with: Array("Uid:".utf8)) {
            let fields = line.dropFirst(4).split(whereSeparator: { $0 == 9 || $0 == 32 })
            guard fields.count == 4 else { return nil }
            return uid_t(String(decoding: fields[0], as: UTF8.self))
        }
        return nil
    }

    /// The numeric entries of `/proc` (thread-group leaders), at most `limit`.
    static func pids(limit: Int = 1 << 20) -> [Int32]? {
        guard let dir = opendir("/proc") else { return nil }
        defer { closedir(dir) }
        var out: [Int32] = []
        while out.count < limit, let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw -> Int32? in
                var value: Int32 = 0
                var any = false
                for byte in raw {
                    if byte == 0 { break }
                    guard byte >= 48 && byte <= 57 else { return nil }
                    let (m, o1) = value.multipliedReportingOverflow(by: 10)
                    let (a, o2) = m.addingReportingOverflow(Int32(byte - 48))
                    if o1 || o2 { return nil }
                    value = a
                    any = true
                }
                return any ? value : nil
            }
            if let pid = name { out.append(pid) }
        }
        return out
    }

    static func basename(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    /// Milliseconds on the monotonic clock.
    static func monotonicMs() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// The effective capability set of this process (`CapEff` in `/proc/self/status`).
    static func effectiveCapabilities() -> UInt64? {
        guard let bytes = read("/proc/self/status", limit: 16 << 10) else { return nil }
        for line in bytes.split(separator: 10) where line.starts(with: Array("CapEff:".utf8)) {
            let hex = String(decoding: line.dropFirst(7), as: UTF8.self).trimming(" \t")
            return UInt64(hex, radix: 16)
        }
        return nil
    }
}

extension String {
    func trimmingNewline() -> String {
        var s = self
        while s.hasSuffix("\n") { s.removeLast() }
        return s
    }

    func trimming(_ set: String) -> String {
        var s = Substring(self)
        while let c = s.first, set.contains(c) { s.removeFirst() }
        while let c = s.last, set.contains(c) { s.removeLast() }
        return String(s)
    }
}

#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The moments hooks run at.
public enum HookTransition: String, CaseIterable, Sendable {
    case locked
    case unlocked
    case tempUnlocked = "temp_unlocked"
    case relocked
}

/// What a hook is told, as environment variables (lists space-separated).
public struct HookEnvironment: Sendable, Equatable {
    /// `TANDEM_BLOCKED_SITES`: the sites blocked now (without the temporary items).
    public var blockedSites: [String]
    /// `TANDEM_BLOCKED_APPS`: the apps blocked now (without the temporary items).
    public var blockedApps: [String]
    /// `TANDEM_TEMP_ITEMS`: the items open during a temporary unlock.
    public var tempItems: [String]
    /// `TANDEM_UNTIL_MS`: when the temporary unlock or the timed lock ends (Unix ms), empty if never.
    public var untilMs: Int64?
    /// `TANDEM_REASON`: why (e.g. "key", "timer", "challenge"); free text.
    public var reason: String

    public init(blockedSites: [String] = [], blockedApps: [String] = [], tempItems: [String] = [],
                untilMs: Int64? = nil, reason: String = "") {
        self.blockedSites = blockedSites
        self.blockedApps = blockedApps
        self.tempItems = tempItems
        self.untilMs = untilMs
        self.reason = reason
    }

    var variables: [String: String] {
        [
            "TANDEM_BLOCKED_SITES": blockedSites.joined(separator: " "),
            "TANDEM_BLOCKED_APPS": blockedApps.joined(separator: " "),
            "TANDEM_TEMP_ITEMS": tempItems.joined(separator: " "),
            "TANDEM_UNTIL_MS": untilMs.map(String.init) ?? "",
            "TANDEM_REASON": reason,
        ]
    }
}

/// How one hook ran.
public struct HookResult: Sendable, Equatable, CustomStringConvertible {
    public let path: String
    /// The exit status when it exited normally.
    public let exitCode: Int32?
    /// The signal that ended it (SIGTERM/SIGKILL after a timeout, or any other).
    public let signal: Int32?
    /// It ran past the timeout and was stopped (its whole process group).
    public let timedOut: Bool
    /// The first `HookRunner.outputCap` bytes of each stream (a note says how much more there was).
    public let stdout: String
    public let stderr: String
    public let durationMs: Int
    /// Why it did not run or finish normally, when not an exit status: "not executable", a spawn
    /// failure, too many hooks, an exit status lost.
    public let error: String?
    /// Not run because someone other than the node's user or root could have written it (or its
    /// directory); `error` says who and what.
    public let skipped: Bool

    /// Anything but exit status 0 within the timeout.
    public var failed: Bool { error != nil || timedOut || signal != nil || exitCode != 0 }

    /// One line for the log.
    public var description: String {
        var outcome: String
        if skipped, let error {
            return BlockingError.oneLine("hook \(path) skipped: \(error)")
        } else if let error {
            outcome = error
        } else if timedOut {
            outcome = "timed out after \(durationMs) ms (process group stopped)"
        } else if let signal {
            outcome = "killed by signal \(signal) after \(durationMs) ms"
        } else {
            outcome = "exit \(exitCode.map(String.init) ?? "?") in \(durationMs) ms"
        }
        let lastErr = stderr.split(whereSeparator: \.isNewline).last.map { "; stderr: \($0.prefix(200))" } ?? ""
        return BlockingError.oneLine("hook \(path) \(failed ? "failed: " : "")\(outcome)\(failed ? lastErr : "")")
    }

    init(path: String, exitCode: Int32? = nil, signal: Int32? = nil, timedOut: Bool = false, stdout: String = "",
         stderr: String = "", durationMs: Int = 0, skipped: Bool = false, error: String? = nil) {
        self.path = path
        self.exitCode = exitCode
        self.signal = signal
        self.timedOut = timedOut
        self.stdout = stdout
        self.stderr = stderr
        self.durationMs = durationMs
        self.error = error
        self.skipped = skipped
    }
}

/// Runs the executables for a mode's transition.
///
/// Layout, run in this order:
///
///     DIR/all/TRANSITION          DIR/all/TRANSITION.d/*      (every mode)
///     DIR/MODE/TRANSITION         DIR/MODE/TRANSITION.d/*     (this mode)
///
/// TRANSITION is `locked`, `unlocked`, `temp_unlocked` or `relocked`; files in a `.d` directory
/// run in byte order of their names; names starting with `.` or ending with `~` are skipped, and
/// so are subdirectories. A file that is not executable is reported as a failed result, not
/// skipped. A hook is not run (a failed result with `skipped` set, for one log line) unless it
/// and every directory from `directory` down to it are owned by the node's user or root and are
/// not writable by group or others. A mode whose name cannot be a directory name (empty, `.`,
/// `..`, with `/`) has only the `all` hooks. At most `maxHooks` run per call.
///
/// Environment: `TANDEM_MODE`, `TANDEM_TRANSITION`, `TANDEM_BLOCKED_SITES`, `TANDEM_BLOCKED_APPS`,
/// `TANDEM_TEMP_ITEMS`, `TANDEM_UNTIL_MS`, `TANDEM_REASON`; from the node's own environment only
/// `PATH` (a default when unset), `HOME`, `USER`, `LOGNAME`, `LANG`, and the desktop session's
/// `XDG_RUNTIME_DIR`, `DBUS_SESSION_BUS_ADDRESS`, `DISPLAY`, `WAYLAND_DISPLAY` (for notifications).
/// stdin is /dev/null; the working directory is the node's.
///
/// Each hook runs in its own process group. Past `timeoutMs` the group gets SIGTERM, and SIGKILL
/// 1 s later; the hook is always reaped. Output past `outputCap` bytes per stream is read and
/// dropped. Once the hook has exited, output is awaited 200 ms more (a background child it left
/// holding the pipe is not waited for, and not killed).
///
/// `run` blocks: call it off the node's core queue.
public struct HookRunner: Sendable {
    public let directory: String
    public let timeoutMs: Int
    public static let outputCap = 16 << 10
    public static let maxHooks = 64
    static let killAfterMs: Int64 = 1000
    static let outputGraceMs: Int64 = 200

    /// `timeoutMs` is kept within 10 ms ... 1 hour.
    public init(directory: String, timeoutMs: Int = 10_000) {
        self.directory = directory
        self.timeoutMs = min(3_600_000, max(10, timeoutMs))
    }

    // MARK: - Finding hooks

    public func hooks(mode: String, transition: HookTransition) -> [String] {
        var out: [String] = []
        var dirs = ["all"]
        if let own = HookRunner.directoryName(mode), own != "all" { dirs.append(own) }
        for dir in dirs {
            let base = "\(directory)/\(dir)/\(transition.rawValue)"
            if isFile(base) == true { out.append(base) }
            let dotD = base + ".d"
            if isFile(dotD) == false, let names = HookRunner.listNames(dotD, limit: HookRunner.maxHooks + 1) {
                for name in names where !name.hasPrefix(".") && !name.hasSuffix("~") {
                    let path = "\(dotD)/\(name)"
                    if isFile(path) == true { out.append(path) }
                }
            }
            if out.count > HookRunner.maxHooks { break }
        }
        return out
    }

    /// `hooks(mode:transition:)` with the transition's name; an unknown name has no hooks.
    public func hooks(mode: String, transition: String) -> [String] {
        guard let t = HookTransition(rawValue: transition) else { return [] }
        return hooks(mode: mode, transition: t)
    }

    /// The mode's directory name, or nil when the name cannot be one.
    static func directoryName(_ mode: String) -> String? {
        guard !mode.isEmpty, mode != ".", mode != "..", !mode.contains("/"), !mode.utf8.contains(0),
              mode.utf8.count <= 255 else { return nil }
        return mode
    }

    /// true: exists and is not a directory; false: a directory; nil: absent.
    private func isFile(_ path: String) -> Bool? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return (st.st_mode & S_IFMT) != S_IFDIR
    }

    static func listNames(_ path: String, limit: Int) -> [String]? {
        guard let dir = opendir(path) else { return nil }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        var scanned = 0
        while let entry = readdir(dir), scanned < 10_000 {
            scanned += 1
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if name == Array(".".utf8) || name == Array("..".utf8) { continue }
            names.append(name)
        }
        names.sort { $0.lexicographicallyPrecedes($1) }
        return names.prefix(limit).map { String(decoding: $0, as: UTF8.self) }
    }

    // MARK: - Running

    public func run(mode: String, transition: HookTransition, environment: HookEnvironment) -> [HookResult] {
        run(mode: mode, transition: transition, variables: environment.variables)
    }

    /// With the `TANDEM_*` variables given as a dictionary (names must be `[A-Za-z_][A-Za-z0-9_]*`;
    /// others are dropped). `TANDEM_MODE` and `TANDEM_TRANSITION` are always set by the runner.
    public func run(mode: String, transition: HookTransition, environment: [String: String]) -> [HookResult] {
        run(mode: mode, transition: transition, variables: environment)
    }

    /// With the transition's name; an unknown name gives one failed result saying so.
    public func run(mode: String, transition: String, environment: HookEnvironment) -> [HookResult] {
        guard let t = HookTransition(rawValue: transition) else {
            return [HookResult(path: directory, error: "unknown hook transition '\(transition.prefix(40))' "
                               + "(expected locked, unlocked, temp_unlocked or relocked)")]
        }
        return run(mode: mode, transition: t, variables: environment.variables)
    }

    private func run(mode: String, transition: HookTransition, variables: [String: String]) -> [HookResult] {
        let paths = hooks(mode: mode, transition: transition)
        guard !paths.isEmpty else { return [] }
        let env = HookRunner.environment(mode: mode, transition: transition, variables: variables)
        var results = paths.prefix(HookRunner.maxHooks).map { runOne($0, environment: env) }
        if paths.count > HookRunner.maxHooks {
            results.append(HookResult(path: directory, error: "more than \(HookRunner.maxHooks) hooks for \(transition.rawValue); the rest were not run"))
        }
        return results
    }

    // MARK: - Event hooks (not tied to a mode)

    /// The hooks for an event such as `on-message`: `DIR/on-message` and the files in
    /// `DIR/on-message.d/` (sorted), as for transitions.
    public func eventHooks(_ event: String) -> [String] {
        guard event.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }), !event.isEmpty else { return [] }
        var out: [String] = []
        let base = "\(directory)/\(event)"
        if isFile(base) == true { out.append(base) }
        let dotD = base + ".d"
        if isFile(dotD) == false, let names = HookRunner.listNames(dotD, limit: HookRunner.maxHooks + 1) {
            for name in names where !name.hasPrefix(".") && !name.hasSuffix("~") {
                let path = "\(dotD)/\(name)"
                if isFile(path) == true { out.append(path) }
            }
        }
        return Array(out.prefix(HookRunner.maxHooks))
    }

    /// Runs the hooks of `event` one after the other, each with `TANDEM_EVENT` and `variables`
    /// (names `[A-Za-z_][A-Za-z0-9_]*`, values cut at 64 KiB) plus PATH and the session variables,
    /// each bounded by the timeout. Blocking: run it on a thread pool.
    public func runEvent(_ event: String, variables: [String: String]) -> [HookResult] {
        let paths = eventHooks(event)
        guard !paths.isEmpty else { return [] }
        var env: [String: String] = [:]
        for (key, value) in variables.prefix(64) where HookRunner.isVariableName(key) {
            env[key] = value.utf8.count > 65536 ? String(decoding: value.utf8.prefix(65536), as: UTF8.self) : value
        }
        env["TANDEM_EVENT"] = event
        env["PATH"] = getenv("PATH").map { String(cString: $0) } ?? "/usr/local/bin:/usr/bin:/bin"
        for key in HookRunner.passedThrough {
            if let value = getenv(key) { env[key] = String(cString: value) }
        }
        let list = env.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return paths.map { runOne($0, environment: list) }
    }

    static let passedThrough = ["HOME", "USER", "LOGNAME", "LANG", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS",
                                "DISPLAY", "WAYLAND_DISPLAY"]

    static func environment(mode: String, transition: HookTransition, variables: [String: String]) -> [String] {
        var env: [String: String] = [:]
        for (key, value) in variables.prefix(64) where isVariableName(key) {
            env[key] = String(value.utf8.count > 65536 ? String(decoding: value.utf8.prefix(65536), as: UTF8.self) : value)
        }
        env["TANDEM_MODE"] = mode
        env["TANDEM_TRANSITION"] = transition.rawValue
        for key in ["TANDEM_BLOCKED_SITES", "TANDEM_BLOCKED_APPS", "TANDEM_TEMP_ITEMS", "TANDEM_UNTIL_MS", "TANDEM_REASON"]
        where env[key] == nil {
            env[key] = ""
        }
        env["PATH"] = getenv("PATH").map { String(cString: $0) } ?? "/usr/local/bin:/usr/bin:/bin"
        for key in passedThrough {
            if let value = getenv(key) { env[key] = String(cString: value) }
        }
        return env.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
    }

    static func isVariableName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard let first = bytes.first, bytes.count <= 128,
              first == UInt8(ascii: "_") || (first | 0x20 >= UInt8(ascii: "a") && first | 0x20 <= UInt8(ascii: "z"))
        else { return false }
        return bytes.allSatisfy {
            $0 == UInt8(ascii: "_") || ($0 | 0x20 >= UInt8(ascii: "a") && $0 | 0x20 <= UInt8(ascii: "z"))
                || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9"))
        }
    }

    // MARK: - Who may have written a hook

    /// Why `path` must not run, or nil when it and every directory from `directory` down to it are
    /// owned by the node's user (the effective uid) or root and writable by neither group nor others.
    /// Anyone else who can write there could make the node run their code.
    func unsafeReason(_ path: String, file: stat, user: uid_t = geteuid()) -> String? {
        if let reason = HookRunner.unsafeReason(path, uid: file.st_uid, mode: file.st_mode, user: user) { return reason }
        var dirs = [directory]
        if path.hasPrefix(directory + "/") {
            for component in path.dropFirst(directory.count + 1).split(separator: "/").dropLast() {
                dirs.append(dirs[dirs.count - 1] + "/" + component)
            }
        }
        for dir in dirs {
            var st = stat()
            guard stat(dir, &st) == 0 else { return "its directory \(dir) cannot be read: \(BlockingError.errorText(errno))" }
            if let reason = HookRunner.unsafeReason(dir, uid: st.st_uid, mode: st.st_mode, user: user) {
                return "its directory " + reason
            }
        }
        return nil
    }

    /// The check for one file or directory: owner `user` or root, no group or other write bit.
    static func unsafeReason(_ path: String, uid: uid_t, mode: mode_t, user: uid_t) -> String? {
        if uid != user && uid != 0 {
            return "\(path) is owned by uid \(uid), not by this user (uid \(user)) or root"
        }
        if mode & (S_IWGRP | S_IWOTH) != 0 {
            let who = mode & S_IWGRP != 0 ? (mode & S_IWOTH != 0 ? "group and others" : "group") : "others"
            return "\(path) is writable by \(who) (chmod go-w \(path))"
        }
        return nil
    }

    func runOne(_ path: String, environment: [String]) -> HookResult {
        var st = stat()
        guard stat(path, &st) == 0 else {
            return HookResult(path: path, error: "cannot be read: \(BlockingError.errorText(errno))")
        }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return HookResult(path: path, error: "not a regular file") }
        if let reason = unsafeReason(path, file: st) {
            return HookResult(path: path, skipped: true, error: reason)
        }
        guard faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0 else {
            return HookResult(path: path, error: "not executable (chmod +x \(path))")
        }
        let start = Proc.monotonicMs()
        let spawned: Spawned
        switch Spawned.spawn(path: path, arguments: [], environment: environment, newProcessGroup: true, captureOutput: true) {
        case .success(let s): spawned = s
        case .failure(let f): return HookResult(path: path, durationMs: Int(Proc.monotonicMs() - start), error: f.message)
        }
        let pid = spawned.pid
        var fds: [Int32] = [spawned.stdout!, spawned.stderr!]
        var outputs: [[UInt8]] = [[], []]
        var dropped = [0, 0]
        var status: Int32?
        var statusLost = false
        var exitedAt: Int64 = 0
        var termSentAt: Int64?
        let deadline = start + Int64(timeoutMs)
        var buffer = [UInt8](repeating: 0, count: 64 << 10)

        func reap(blocking: Bool) {
            var s: Int32 = 0
            while true {
                let r = waitpid(pid, &s, blocking ? 0 : WNOHANG)
                if r == pid { status = s; exitedAt = Proc.monotonicMs(); return }
                if r == 0 { return }
                if errno == EINTR { continue }
                statusLost = true  // ECHILD: reaped elsewhere
                status = 0
                exitedAt = Proc.monotonicMs()
                return
            }
        }

        while true {
            let now = Proc.monotonicMs()
            if status == nil && termSentAt == nil {
                reap(blocking: false)
                if status == nil && now >= deadline {
                    kill(-pid, SIGTERM)
                    termSentAt = now
                }
            }
            if let t = termSentAt, status == nil {
                // The leader is not reaped before this point, so the group id cannot be reused.
                let leaderGone = Proc.stat(pid)?.isGone ?? true
                if now >= t + HookRunner.killAfterMs || (leaderGone && fds.allSatisfy { $0 < 0 }) {
                    kill(-pid, SIGKILL)
                    reap(blocking: true)
                }
            }
            let open = fds.filter { $0 >= 0 }
            if status != nil && (open.isEmpty || now >= exitedAt + HookRunner.outputGraceMs) { break }

            var pollFDs = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let wait: Int64 = status != nil ? max(1, exitedAt + HookRunner.outputGraceMs - now) : 20
            let ready = poll(&pollFDs, nfds_t(pollFDs.count), Int32(min(wait, 20)))
            if ready <= 0 { continue }
            for i in 0..<2 where fds[i] >= 0 && pollFDs[i].revents != 0 {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(fds[i], $0.baseAddress, $0.count) }
                if n > 0 {
                    let room = max(0, HookRunner.outputCap - outputs[i].count)
                    outputs[i] += buffer[0..<min(n, room)]
                    dropped[i] += n - min(n, room)
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    close(fds[i])
                    fds[i] = -1
                }
            }
        }
        for fd in fds where fd >= 0 { close(fd) }

        func text(_ i: Int) -> String {
            let s = String(decoding: outputs[i], as: UTF8.self)
            return dropped[i] > 0 ? s + "\n[\(dropped[i]) more bytes not kept]" : s
        }
        let duration = Int(Proc.monotonicMs() - start)
        let s = status ?? 0
        let exited = (s & 0x7f) == 0
        return HookResult(
            path: path,
            exitCode: statusLost ? nil : (exited ? (s >> 8) & 0xff : nil),
            signal: statusLost || exited ? nil : s & 0x7f,
            timedOut: termSentAt != nil,
            stdout: text(0), stderr: text(1),
            durationMs: duration,
            error: statusLost ? "its exit status was lost (reaped by another part of the process)" : nil)
    }
}

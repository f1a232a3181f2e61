#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import TandemThreads

/// A process the guard stopped.
public struct StoppedProcess: Sendable, Equatable, CustomStringConvertible {
    public let pid: Int32
    /// The executable's base name (from `/proc/PID/exe`, else the kernel's 15-byte `comm`).
    public let name: String
    /// The executable's absolute path, when this process may read `/proc/PID/exe`.
    public let path: String?
    /// The last signal sent: `SIGTERM`, or `SIGKILL` when it was still running 1 s later.
    public let signal: Int32
    /// The blocked item it matched.
    public let item: String

    public var description: String {
        let signalName = signal == SIGKILL ? "SIGKILL" : signal == SIGTERM ? "SIGTERM" : "signal \(signal)"
        return "stopped \(name) (pid \(pid)\(path.map { ", \($0)" } ?? "")) with \(signalName): it matches the blocked app '\(item)'"
    }
}

/// Stops the processes of a locked mode's blocked applications while it is locked.
///
/// A background thread scans `/proc` every `scanIntervalMs` (default 200 ms). A process is
/// judged once per pid (again when its `comm` changes, i.e. after an `exec` under a new name, and
/// when `set` changes the lists). One that matches a blocked item and no allowed (temporarily
/// unlocked) item gets SIGTERM; if the same process (same start time in `/proc/PID/stat`, so a
/// reused pid is never hit) is still there 1 s later it gets SIGKILL. `onStop` is called once per
/// process, after it is gone or was killed, with the last signal sent.
///
/// Matching:
/// - An item with a `/` is an absolute path: it matches a process whose `/proc/PID/exe` (without
///   " (deleted)") is that path or the path the item resolves to through symlinks at `set` time.
///   Reading `exe` needs ptrace rights over the process, so path items match only processes of the
///   node's own user (or with CAP_SYS_PTRACE).
/// - Any other item is a name: it matches the base name of `/proc/PID/exe`, the `comm` (what a
///   script run through its `#!` line is called), or the base name of `argv[0]`. When `exe`
///   cannot be read, a name longer than 15 bytes also matches a `comm` equal to its first 15.
///
/// Only processes of the user the node acts for (`user`, the effective uid by default) are
/// stopped: a process matches only when its real uid (the `Uid:` line of `/proc/PID/status`) is
/// `user`, so a node with CAP_KILL leaves other people's programs of the same name alone.
///
/// Never signalled: this process, its ancestors, pid 1, kernel threads, processes of other users
/// or whose uid cannot be read, and processes this user may not signal (`kill(pid, 0)` says
/// EPERM, e.g. a set-uid program; reported once per process through `onError`).
///
/// Thread safety, checked by the compiler: what `set`, `start` and `stop` share with the scanning
/// thread is one value in a `Monitor` (the thread sleeps on its condition between scans), and the
/// scan's own memory is one value in a `Mutex`. Callbacks run on the guard's thread, never under
/// either lock, so they may call `set` (and `stop`, which then does not wait for itself). The
/// thread keeps the guard alive: call `stop()` when done.
///
/// Cost: each scan lists `/proc` and reads one small file per process (`comm` for processes
/// already judged, `stat` for new ones); `exe` and `cmdline` only for new ones. A pid reused
/// within one scan interval by a process with the same `comm` is not judged again.
public final class AppGuard: Sendable {
    /// At most this many items per list; longer lists are cut.
    public static let maxItems = 1000
    /// How long a process has after SIGTERM before SIGKILL.
    public static let killAfterMs: Int64 = 1000

    /// The uid whose processes may be stopped.
    public let user: uid_t
    private let onStop: @Sendable (StoppedProcess) -> Void
    private let onError: @Sendable (String) -> Void

    /// What the callers and the scanning thread share.
    private struct Control {
        var blocked: [Item] = []
        var allowed: [Item] = []
        /// Counts `set` calls: a scan judges every process again after one.
        var generation: UInt64 = 0
        var interval = 200
        var running = false
        var stopRequested = false
        var threadDone = true
        var scannerThread: pthread_t?
    }
    private let control = Monitor(Control())
    /// The scan's own memory (the scanning thread, or a test calling `scanOnce`).
    private let scanState = Mutex(ScanState())

    public init(user: uid_t = geteuid(), onStop: @escaping @Sendable (StoppedProcess) -> Void,
                onError: @escaping @Sendable (String) -> Void) {
        self.user = user
        self.onStop = onStop
        self.onError = onError
    }

    /// Time between two scans in milliseconds, 20...5000.
    public var scanIntervalMs: Int {
        get { control.withLock { $0.interval } }
        set { control.update { $0.interval = min(5000, max(20, newValue)) } }
    }

    /// Whether the guard's thread is running.
    public var isRunning: Bool { control.withLock { $0.running } }

    /// The apps to stop (`blocked`) and the temporary items open now (`allowed`, never stopped).
    /// An empty `blocked` list makes the guard idle. Returns the items that were left out: empty,
    /// a relative path (`bin/app`), `.`/`..`, over 4096 bytes, or past `maxItems`.
    @discardableResult
    public func set(blocked: [String], allowed: [String]) -> [String] {
        var rejected: [String] = []
        let b = AppGuard.items(blocked, rejected: &rejected)
        let a = AppGuard.items(allowed, rejected: &rejected)
        control.update {
            $0.blocked = b
            $0.allowed = a
            $0.generation &+= 1
        }
        return rejected
    }

    /// Starts the scanning thread (no-op when it runs).
    public func start() {
        let shouldStart = control.withLock { c -> Bool in
            if c.running { return false }
            c.running = true
            c.stopRequested = false
            c.threadDone = false
            return true
        }
        guard shouldStart else { return }
        let thread = Thread { [self] in self.loop() }
        thread.name = "tandem-app-guard"
        thread.start()
    }

    /// Stops the scanning thread and waits for it (unless called from a callback on it).
    /// Pending SIGKILL follow-ups are dropped.
    public func stop() {
        let me = pthread_self()
        let onScanner = control.update { c -> Bool in
            c.stopRequested = true
            if let t = c.scannerThread { return pthread_equal(t, me) != 0 }
            return false
        }
        guard !onScanner else { return }
        control.wait(until: { $0.threadDone }, then: { _ in })
    }

    private func loop() {
        let me = pthread_self()
        control.withLock { $0.scannerThread = me }
        while true {
            let (stop, generation, interval) = control.withLock { ($0.stopRequested, $0.generation, $0.interval) }
            if stop { break }
            scanOnce()
            // Idle (nothing blocked, no SIGKILL due): sleep until `set` or `stop` wakes the thread,
            // instead of scanning every interval in every node that has no lock on.
            let waiting = scanState.withLock { !$0.pending.isEmpty }
            let idle = control.withLock { $0.blocked.isEmpty } && !waiting
            control.wait(atMostMs: idle ? 60_000 : interval,
                         until: { $0.stopRequested || $0.generation != generation || $0.interval != interval })
        }
        scanState.withLock { $0 = ScanState() }
        control.update { c in
            c.running = false
            c.threadDone = true
            c.scannerThread = nil
        }
    }

    // MARK: - One scan

    fileprivate struct Judged {
        var startTime: UInt64
        var comm: String
    }

    fileprivate struct Pending {
        var startTime: UInt64
        var identity: Identity
        var item: String
        var deadline: Int64
    }

    struct Identity: Equatable {
        var exe: String?
        var comm: String
        var argv0: String?

        var name: String { exe.map(Proc.basename) ?? comm }
    }

    enum Item: Equatable {
        case path(String, resolved: String?)
        case name(String)

        var text: String {
            switch self {
            case .path(let p, _): return p
            case .name(let n): return n
            }
        }

        func matches(_ id: Identity) -> Bool {
            switch self {
            case .path(let path, let resolved):
                guard let exe = id.exe else { return false }
                return exe == path || exe == resolved
            case .name(let name):
                if let exe = id.exe, Proc.basename(exe) == name { return true }
                if id.comm == name { return true }
                if let a = id.argv0, Proc.basename(a) == name { return true }
                if id.exe == nil, name.utf8.count > 15, id.comm.utf8.count == 15,
                   name.utf8.prefix(15).elementsEqual(id.comm.utf8) { return true }
                return false
            }
        }
    }

    /// Whether a process whose real uid is `uid` (nil: unreadable) belongs to `user`.
    static func belongs(uid: uid_t?, to user: uid_t) -> Bool {
        guard let uid else { return false }
        return uid == user
    }

    static func items(_ raw: [String], rejected: inout [String]) -> [Item] {
        var out: [Item] = []
        for (index, entry) in raw.enumerated() {
            let text = entry.trimming(" \t\r\n")
            guard index < maxItems, !text.isEmpty, text.utf8.count <= 4096, !text.utf8.contains(0),
                  text != ".", text != ".." else {
                if rejected.count < 100 { rejected.append(String(entry.prefix(100))) }
                continue
            }
            if text.contains("/") {
                guard text.hasPrefix("/") else {
                    if rejected.count < 100 { rejected.append(String(entry.prefix(100))) }
                    continue
                }
                var resolved: String?
                if let real = realpath(text, nil) {
                    resolved = String(cString: real)
                    free(real)
                }
                out.append(.path(text, resolved: resolved == text ? nil : resolved))
            } else {
                out.append(.name(text))
            }
        }
        return out
    }

    /// This process, its ancestors (up to 64) and pid 1.
    fileprivate static func protectedPids() -> Set<Int32> {
        var out: Set<Int32> = [1, getpid()]
        var pid = getppid()
        var depth = 0
        while pid > 1 && depth < 64 && out.insert(pid).inserted {
            guard let st = Proc.stat(pid) else { break }
            pid = st.ppid
            depth += 1
        }
        return out
    }

    /// One scan: follow-ups of earlier SIGTERMs, then new processes. Callbacks run after it,
    /// outside every lock.
    func scanOnce() {
        let (blockedNow, allowedNow, gen) = control.withLock { ($0.blocked, $0.allowed, $0.generation) }
        var stopped: [StoppedProcess] = []
        var errors: [String] = []
        scanState.withLock { $0.scan(blockedNow, allowedNow, gen, user: user, &stopped, &errors) }
        for s in stopped { onStop(s) }
        for e in errors { onError(e) }
    }
}

/// What the scans remember between them: the processes judged (by pid, with their start time and
/// `comm`), the SIGTERMs waiting for their SIGKILL follow-up, and the last error reported.
struct ScanState {
    fileprivate var judged: [Int32: AppGuard.Judged] = [:]
    fileprivate var pending: [Int32: AppGuard.Pending] = [:]
    fileprivate var judgedGeneration: UInt64 = .max
    fileprivate var lastError: String?

    fileprivate init() {}

    fileprivate mutating func scan(_ blockedNow: [AppGuard.Item], _ allowedNow: [AppGuard.Item], _ gen: UInt64, user: uid_t,
                                   _ stopped: inout [StoppedProcess], _ errors: inout [String]) {
        typealias Identity = AppGuard.Identity
        if gen != judgedGeneration {
            judged.removeAll()
            judgedGeneration = gen
        }
        let now = Proc.monotonicMs()
        func stillBlocked(_ id: Identity) -> Bool {
            blockedNow.contains { $0.matches(id) } && !allowedNow.contains { $0.matches(id) }
        }
        func report(_ pid: Int32, _ p: AppGuard.Pending, _ signal: Int32) {
            stopped.append(StoppedProcess(pid: pid, name: p.identity.name, path: p.identity.exe, signal: signal, item: p.item))
        }

        for (pid, p) in pending {
            guard let st = Proc.stat(pid), st.startTime == p.startTime, !st.isGone else {
                pending[pid] = nil
                report(pid, p, SIGTERM)
                continue
            }
            guard now >= p.deadline else { continue }
            pending[pid] = nil
            guard stillBlocked(p.identity) else { continue }  // unlocked meanwhile: leave it be
            if kill(pid, SIGKILL) == 0 {
                report(pid, p, SIGKILL)
            } else if errno == ESRCH {
                report(pid, p, SIGTERM)
            } else {
                errors.append("app guard: cannot SIGKILL \(p.identity.name) (pid \(pid)): \(BlockingError.errorText(errno))")
            }
        }

        guard !blockedNow.isEmpty else {
            judged.removeAll()
            return
        }
        guard let pids = Proc.pids() else {
            let message = "app guard: cannot list /proc (\(BlockingError.errorText(errno))); apps are not blocked"
            if lastError != message { errors.append(message); lastError = message }
            return
        }
        lastError = nil
        let protected = AppGuard.protectedPids()
        let seen = Set(pids)
        judged = judged.filter { seen.contains($0.key) }

        for pid in pids where !protected.contains(pid) && pending[pid] == nil {
            if let j = judged[pid], let comm = Proc.comm(pid), comm == j.comm { continue }
            guard let st = Proc.stat(pid) else { continue }
            judged[pid] = AppGuard.Judged(startTime: st.startTime, comm: st.comm)
            if st.isKernelThread || st.isGone { continue }
            let id = Identity(exe: Proc.exe(pid), comm: st.comm, argv0: Proc.argv0(pid))
            guard let item = blockedNow.first(where: { $0.matches(id) }),
                  !allowedNow.contains(where: { $0.matches(id) }),
                  AppGuard.belongs(uid: Proc.realUid(pid), to: user) else { continue }
            if kill(pid, 0) != 0 {
                if errno == EPERM {
                    errors.append("app guard: not permitted to stop \(id.name) (pid \(pid)); "
                                  + "a node acting for another uid than its own needs CAP_KILL (see Deploy/README.md)")
                }
                continue
            }
            // The same process as judged (a pid reused in between would have another start time).
            guard let again = Proc.stat(pid), again.startTime == st.startTime, !again.isGone else { continue }
            if kill(pid, SIGTERM) == 0 {
                pending[pid] = AppGuard.Pending(startTime: st.startTime, identity: id, item: item.text,
                                       deadline: now + AppGuard.killAfterMs)
            } else if errno != ESRCH {
                errors.append("app guard: cannot SIGTERM \(id.name) (pid \(pid)): \(BlockingError.errorText(errno))")
            }
        }
    }
}

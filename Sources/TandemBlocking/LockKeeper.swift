import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What a lock's keeper enforces while the node is not running: written by the node (atomically,
/// mode 0600, in its data directory) at every change of what is blocked, read by the keeper.
/// Everything in it is what the node's own blocking uses; nothing secret.
public struct KeeperState: Codable, Sendable, Equatable {
    public static let version = 1
    /// Largest state file read (a file grown by someone else is ignored, not parsed).
    public static let maximumBytes = 1 << 20

    public var version = KeeperState.version
    /// The locked mode, or nil once nothing is locked (the keeper then ends).
    public var mode: String?
    public var sites: [String]
    public var apps: [String]
    /// Blocked apps a temporary unlock lets run, until `allowedUntilMs`.
    public var allowedApps: [String]
    public var allowedUntilMs: Int64?
    /// When a lock held by time ends by itself (nil: held until a key, a challenge's end or bedtime's
    /// morning, which only the node can judge; the keeper then holds until the node says otherwise).
    public var untilMs: Int64?
    public var hostsPath: String?
    public var appUser: UInt32
    /// The node that wrote it (the keeper stands aside while that process lives).
    public var nodePid: Int32

    public init(mode: String?, sites: [String], apps: [String], allowedApps: [String], allowedUntilMs: Int64?,
                untilMs: Int64?, hostsPath: String?, appUser: UInt32, nodePid: Int32) {
        (self.mode, self.sites, self.apps, self.allowedApps, self.allowedUntilMs) = (mode, sites, apps, allowedApps, allowedUntilMs)
        (self.untilMs, self.hostsPath, self.appUser, self.nodePid) = (untilMs, hostsPath, appUser, nodePid)
    }

    /// Within the limits the node's own blocking has (anything else is not a state the node wrote).
    var isValid: Bool {
        version == Self.version && sites.count <= HostsBlock.maxDomains && apps.count <= AppGuard.maxItems
            && allowedApps.count <= AppGuard.maxItems && (mode?.utf8.count ?? 0) <= HostsBlock.maxModeNameBytes && nodePid > 0
    }
}

/// The lock's keeper (`tandem keeper`, started by the node when a mode locks): a small process that
/// outlives the node, so stopping or killing the node does not lift a lock (README "Focus modes").
/// While the node runs it only watches; when the node is gone it stops the blocked apps and keeps
/// the hosts block in place, until the lock's time is up (then it lifts the block itself) or the
/// node, back, says nothing is locked. One keeper per data directory (a lock file).
public enum LockKeeper {
    public static let stateFileName = "lock-keeper.json"
    public static let lockFileName = "lock-keeper.lock"

    /// Writes the state atomically (a temporary file renamed into place), mode 0600.
    public static func write(_ state: KeeperState, directory: String) throws {
        let data = try JSONEncoder().encode(state)
        let path = directory + "/" + stateFileName
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw BlockingError.io("cannot write", path: tmp, errno: errno) }
        let ok = data.withUnsafeBytes { raw in Glibc.write(fd, raw.baseAddress, raw.count) == raw.count }
        let synced = fsync(fd) == 0
        close(fd)
        guard ok, synced, rename(tmp, path) == 0 else {
            let code = errno
            unlink(tmp)
            throw BlockingError.io("cannot write", path: path, errno: code)
        }
    }

    /// The state in `directory`, or nil when there is none or it is not one the node wrote.
    public static func read(directory: String) -> KeeperState? {
        let path = directory + "/" + stateFileName
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),  // none: nothing to keep
              let size = attributes[.size] as? Int, size <= KeeperState.maximumBytes,
              let data = FileManager.default.contents(atPath: path),
              let state = try? JSONDecoder().decode(KeeperState.self, from: data),  // not ours: ignored
              state.isValid else { return nil }
        return state
    }

    /// Whether a keeper holds the directory's keeper lock now.
    public static func isRunning(directory: String) -> Bool {
        let fd = open(directory + "/" + lockFileName, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return true
    }

    /// Starts `executable keeper --data-dir directory` in a session of its own (it outlives the
    /// node, and a signal to the node's process group does not reach it), unless one runs.
    /// Returns its pid; the caller reaps it (`reap`).
    public static func spawn(executable: String, directory: String) -> pid_t? {
        guard !isRunning(directory: directory) else { return nil }
        var env = ProcessInfo.processInfo.environment.filter { $0.key == "PATH" || $0.key == "LANG" || $0.key.hasPrefix("LC_") }
        env["TANDEM_KEEPER"] = "1"
        switch Spawned.spawn(path: executable, arguments: ["keeper", "--data-dir", directory],
                             environment: env.map { "\($0.key)=\($0.value)" }, newProcessGroup: true, captureOutput: false) {
        case .success(let s): return s.pid
        case .failure: return nil
        }
    }

    /// Collects a keeper this process started, once it ended (no zombie left); true when it did.
    @discardableResult
    public static func reap(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == pid
    }

    /// Closes every descriptor but 0–2 that the node left open across the exec (sockets without
    /// close-on-exec): a keeper holding the node's listening or control socket would make a
    /// restarted node believe another one runs, and would accept connections nobody answers.
    static func closeInheritedDescriptors() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }  // no /proc: nothing to list
        for fd in names.compactMap(Int32.init) where fd > 2 { close(fd) }
    }

    /// Whether the node that wrote `state` still runs.
    static func nodeAlive(_ pid: Int32) -> Bool {
        if kill(pid, 0) == 0 { return true }
        return errno == EPERM
    }

    /// The keeper's loop (`tandem keeper`). Returns the exit status: 0 when the lock ended or another
    /// keeper runs, 1 when the directory cannot be used.
    public static func run(directory: String, log: @escaping @Sendable (String) -> Void, nowMs: () -> Int64 = { Int64(Date().timeIntervalSince1970 * 1000) },
                           intervalMs: Int = 250) -> Int32 {
        closeInheritedDescriptors()
        let fd = open(directory + "/" + lockFileName, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { log("cannot open the keeper lock in \(directory)"); return 1 }
        defer { close(fd) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return 0 }  // another keeper keeps this lock
        var guardian: AppGuard?
        defer { guardian?.stop() }
        var lastMode: String?
        while true {
            guard let state = read(directory: directory), let mode = state.mode else {
                log(lastMode.map { "mode \($0) is no longer locked; the keeper ends" } ?? "nothing is locked; the keeper ends")
                return 0
            }
            lastMode = mode
            let now = nowMs()
            let nodeRuns = nodeAlive(state.nodePid)
            if let until = state.untilMs, now >= until {
                // Time is up. A running node lifts the block itself; otherwise the keeper does.
                if !nodeRuns, let hosts = state.hostsPath { try? HostsFile(path: hosts).remove(mode: mode) }  // unwritable: the node retries at its start
                log("mode \(mode)'s lock time is up; the keeper ends")
                return 0
            }
            if nodeRuns {
                guardian?.stop()
                guardian = nil
            } else {
                if guardian == nil {
                    log("the node is not running; the keeper holds mode \(mode)")
                    guardian = AppGuard(user: state.appUser, onStop: { p in log("stopped \(p)") }, onError: { log($0) })
                    guardian?.start()
                }
                let allowed = (state.allowedUntilMs ?? 0) > now ? state.allowedApps : []
                guardian?.set(blocked: state.apps, allowed: allowed)
                if let path = state.hostsPath, !state.sites.isEmpty {
                    let hosts = HostsFile(path: path)
                    if let text = try? hosts.read(),  // unreadable: tried again next round
                       HostsBlock.applying(mode: mode, domains: state.sites, to: text) != text {
                        do {
                            _ = try hosts.apply(mode: mode, domains: state.sites)
                            log("the hosts block of mode \(mode) was changed; restored")
                        } catch {
                            log("cannot restore the hosts block: \(error)")
                        }
                    }
                }
            }
            usleep(useconds_t(intervalMs * 1000))
        }
    }
}

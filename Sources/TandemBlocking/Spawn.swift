#if canImport(Glibc)
import Glibc
#endif

/// A child started with `posix_spawn`: its own process group when asked, stdin from /dev/null,
/// stdout and stderr to pipes (or /dev/null), every signal back to its default disposition and
/// an empty signal mask (the node may ignore SIGPIPE or block signals; a child must not inherit
/// that). Our pipe ends are close-on-exec, so no other child inherits them.
struct Spawned {
    let pid: pid_t
    /// Read ends of the child's stdout and stderr (nil when not captured). The caller closes them.
    let stdout: Int32?
    let stderr: Int32?

    static func spawn(path: String, arguments: [String], environment: [String],
                      newProcessGroup: Bool, captureOutput: Bool) -> Result<Spawned, SpawnFailure> {
        var outPipe: [Int32] = [-1, -1]
        var errPipe: [Int32] = [-1, -1]
        if captureOutput {
            guard pipeCloseOnExec(&outPipe) == 0 else { return .failure(SpawnFailure(code: errno, what: "pipe")) }
            guard pipeCloseOnExec(&errPipe) == 0 else {
                let code = errno
                close(outPipe[0]); close(outPipe[1])
                return .failure(SpawnFailure(code: code, what: "pipe"))
            }
        }
        func closeAll() {
            for fd in outPipe + errPipe where fd >= 0 { close(fd) }
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if captureOutput {
            posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
            posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }

        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        if newProcessGroup {
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
            posix_spawnattr_setpgroup(&attr, 0)
        }
        posix_spawnattr_setflags(&attr, Int16(flags))
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attr, &noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        sigdelset(&allSignals, SIGKILL)
        sigdelset(&allSignals, SIGSTOP)
        posix_spawnattr_setsigdefault(&attr, &allSignals)

        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0.replacingNUL()) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0.replacingNUL()) } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
        if rc != 0 {
            closeAll()
            return .failure(SpawnFailure(code: rc, what: "posix_spawn"))
        }
        if captureOutput {
            close(outPipe[1])
            close(errPipe[1])
            return .success(Spawned(pid: pid, stdout: outPipe[0], stderr: errPipe[0]))
        }
        return .success(Spawned(pid: pid, stdout: nil, stderr: nil))
    }
}

/// pipe(2) with both ends close-on-exec (pipe2 is not exported to Swift; a child spawned by another
/// thread in between could inherit an end, which only delays our EOF: the hook runner stops
/// waiting for output 200 ms after the hook exits).
private func pipeCloseOnExec(_ fds: inout [Int32]) -> Int32 {
    guard pipe(&fds) == 0 else { return -1 }
    _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
    _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
    return 0
}

struct SpawnFailure: Error {
    let code: Int32
    let what: String
    var message: String { "\(what) failed: \(BlockingError.errorText(code))" }
}

extension String {
    /// NUL cannot cross into a C string; it would silently cut the rest.
    func replacingNUL() -> String {
        guard utf8.contains(0) else { return self }
        return String(decoding: utf8.map { $0 == 0 ? UInt8(ascii: "?") : $0 }, as: UTF8.self)
    }
}

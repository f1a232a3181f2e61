#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The hosts file on disk, rewritten with `HostsBlock`.
///
/// Writes are atomic: a temporary file in the same directory gets the new text, the file's
/// permission bits (and its owner and group when this process may set them), is flushed with
/// `fsync`, renamed over the file, and the directory is flushed. When the path is a symlink the
/// file it points to is rewritten (the link stays).
///
/// When no temporary file can be made next to it (the directory is read-only or not ours — as
/// under systemd's `ProtectSystem=strict` with `ReadWritePaths=/etc/hosts`) or the rename is
/// refused (`EBUSY`/`EXDEV`/`EPERM`/`EACCES`/`EROFS`: a bind-mounted `/etc/hosts` in a container or
/// service), the file is rewritten in place instead: the new bytes are written over the old from
/// offset 0, the file is truncated to their length and flushed. That is not atomic: a crash in
/// the middle can leave a mix; the managed block is found and repaired on the next write.
///
/// A file that does not exist reads as empty and is created (mode 0644) on the first write.
/// Writes from all `HostsFile` values in this process are serialised.
public struct HostsFile: Sendable {
    public let path: String
    /// Files larger than this are not rewritten.
    public static let maxBytes = 16 << 20

    private static let writeLock = NSLock()

    public init(path: String) {
        self.path = path
    }

    /// The file's text (invalid UTF-8 replaced for display; writes keep the original bytes).
    public func read() throws -> String {
        String(decoding: try readBytes(), as: UTF8.self)
    }

    /// The mode's block lists `domains` (and their `www.` forms); no valid domain removes it.
    /// Returns the entries that are not domains (they are left out).
    @discardableResult
    public func apply(mode: String, domains: [String]) throws -> [String] {
        let rejected = HostsBlock.hostNames(for: domains).rejected
        try update { HostsBlock.applying(mode: mode, domains: domains, to: $0) }
        return rejected
    }

    /// The mode's block (and any damaged remains of it) removed; nothing else changes.
    public func remove(mode: String) throws {
        try update { HostsBlock.removing(mode: mode, from: $0) }
    }

    /// Every Tandem block removed (stale ones after a crash included).
    public func removeAll() throws {
        try update { HostsBlock.removingAll(from: $0) }
    }

    /// The modes that have a block (or a damaged one) in the file.
    public func modes() throws -> [String] {
        HostsBlock.modes(in: try read())
    }

    // MARK: - I/O

    func update(_ transform: ([UInt8]) -> [UInt8]) throws {
        HostsFile.writeLock.lock()
        defer { HostsFile.writeLock.unlock() }
        let target = resolvedPath()
        let old = try readBytes(target)
        let new = transform(old)
        if new == old { return }
        try write(new, to: target)
    }

    /// The file a symlink at `path` points to (a dangling or looping link: `path` itself).
    func resolvedPath() -> String {
        var st = stat()
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK,
              let real = realpath(path, nil) else { return path }
        defer { free(real) }
        return String(cString: real)
    }

    func readBytes(_ target: String? = nil) throws -> [UInt8] {
        let target = target ?? path
        let fd = open(target, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            if code == ENOENT { return [] }
            throw BlockingError.io("cannot read", path: target, errno: code)
        }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw BlockingError.io("cannot read", path: target, errno: errno)
            }
            if n == 0 { break }
            out += buffer[0..<n]
            if out.count > HostsFile.maxBytes { throw BlockingError.tooLarge(path: target, limit: HostsFile.maxBytes) }
        }
        return out
    }

    static func isPermissionError(_ code: Int32) -> Bool {
        code == EACCES || code == EPERM || code == EROFS
    }

    func write(_ bytes: [UInt8], to target: String) throws {
        var st = stat()
        let exists = stat(target, &st) == 0
        let mode: mode_t = exists ? (st.st_mode & 0o7777) : 0o644
        // The file's own permission decides, not the directory's: a rename would replace a file
        // we may not write.
        if exists && faccessat(AT_FDCWD, target, W_OK, AT_EACCESS) != 0 {
            let code = errno
            if HostsFile.isPermissionError(code) { throw BlockingError.notWritable(path: path, errno: code) }
        }

        let directory = (target as NSString).deletingLastPathComponent
        let dir = directory.isEmpty ? "." : directory
        let base = (target as NSString).lastPathComponent
        var template = Array("\(dir)/.\(base).tandem-XXXXXX".utf8CString)
        let tmpFD = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if tmpFD >= 0 { _ = fcntl(tmpFD, F_SETFD, FD_CLOEXEC) }
        if tmpFD < 0 {
            let code = errno
            // No temporary file next to it: rewrite in place (read-only directory, bind mount).
            if HostsFile.isPermissionError(code) || code == ENOSPC {
                return try writeInPlace(bytes, to: target, mode: mode, createCode: code)
            }
            throw BlockingError.io("cannot create a temporary file next to", path: target, errno: code)
        }
        let tmpPath = String(cString: template.withUnsafeBufferPointer { $0.baseAddress! })
        var renamed = false
        defer {
            if !renamed { unlink(tmpPath) }
        }
        do {
            defer { close(tmpFD) }
            if fchmod(tmpFD, mode) != 0 {
                throw BlockingError.io("cannot set the mode of", path: tmpPath, errno: errno)
            }
            if exists && (st.st_uid != geteuid() || st.st_gid != getegid()) {
                _ = fchown(tmpFD, st.st_uid, st.st_gid)  // only when we may; the bits are kept either way
            }
            try HostsFile.writeAll(tmpFD, bytes, path: tmpPath)
            if fsync(tmpFD) != 0 { throw BlockingError.io("cannot flush", path: tmpPath, errno: errno) }
        }
        if rename(tmpPath, target) != 0 {
            let code = errno
            if code == EBUSY || code == EXDEV || HostsFile.isPermissionError(code) {
                unlink(tmpPath)
                renamed = true
                return try writeInPlace(bytes, to: target, mode: mode, createCode: code)
            }
            throw BlockingError.io("cannot replace", path: target, errno: code)
        }
        renamed = true
        let dirFD = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirFD >= 0 {
            _ = fsync(dirFD)  // best effort: some file systems refuse fsync on a directory
            close(dirFD)
        }
    }

    /// The fallback: the same file rewritten from offset 0, then truncated to the new length.
    func writeInPlace(_ bytes: [UInt8], to target: String, mode: mode_t, createCode: Int32) throws {
        let fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, mode)
        if fd < 0 {
            let code = errno
            if HostsFile.isPermissionError(code) { throw BlockingError.notWritable(path: path, errno: code) }
            throw BlockingError.io("cannot open for writing", path: target, errno: code)
        }
        defer { close(fd) }
        try HostsFile.writeAll(fd, bytes, path: target)
        if ftruncate(fd, off_t(bytes.count)) != 0 {
            throw BlockingError.io("cannot truncate", path: target, errno: errno)
        }
        if fsync(fd) != 0 { throw BlockingError.io("cannot flush", path: target, errno: errno) }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                pwrite(fd, raw.baseAddress! + offset, raw.count - offset, off_t(offset))
            }
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                if isPermissionError(code) { throw BlockingError.notWritable(path: path, errno: code) }
                throw BlockingError.io("cannot write", path: path, errno: code)
            }
            offset += n
        }
    }
}

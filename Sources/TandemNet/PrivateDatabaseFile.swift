#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Database files (the node's store, the relay's mailbox) are 0600 whatever the umask. SQLite
/// creates a new database 0644 (and fchmods it to that, overriding a stricter umask), and gives its
/// -wal and -shm files the database's mode. So the database file is created here first, 0600,
/// before SQLite opens it; and after opening, the database and its -wal and -shm are set to 0600
/// explicitly (files made by an older version).
public enum PrivateDatabaseFile {
    /// Creates `path` empty with mode 0600 if it does not exist (never through a symlink).
    public static func prepare(_ path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PrivateFileError(path: path, errno: errno) }
        defer { close(fd) }
        guard fchmod(fd, 0o600) == 0 else { throw PrivateFileError(path: path, errno: errno) }
    }

    /// Sets the database and its -wal and -shm (those that exist) to 0600.
    public static func restrict(_ path: String) throws {
        for p in [path, path + "-wal", path + "-shm"] {
            if chmod(p, 0o600) != 0, errno != ENOENT { throw PrivateFileError(path: p, errno: errno) }
        }
    }
}

public struct PrivateFileError: Error, CustomStringConvertible, Sendable {
    public let path: String
    public let errno: Int32
    public var description: String { "cannot make \(path) private (mode 0600): \(String(cString: strerror(errno)))" }
}

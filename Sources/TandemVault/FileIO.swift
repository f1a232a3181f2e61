#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// The few POSIX file operations the vault (and the node's backup holder) needs, with errors that say which file and why.
/// POSIX rather than FileHandle so fsync of files and directories and pread are explicit.
public enum FileIO {
    public static func errorText() -> String { String(cString: strerror(errno)) }

    /// Writes `parts` to `url` atomically and durably: a temporary file in the same directory, fsync,
    /// rename over `url`, fsync of the directory. After it returns the file is on disk whole; a crash
    /// before leaves the old file (or none), never a partial one.
    static func writeAtomically(_ parts: [UnsafeRawBufferPointer], to url: URL, mode: mode_t = 0o600) throws {
        let dir = url.deletingLastPathComponent()
        try createDirectory(dir)
        let tmp = dir.appendingPathComponent(".tmp-\(url.lastPathComponent)-\(Hex.encode(randomTag()))")
        let fd = open(tmp.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw VaultError.io("cannot create \(tmp.path): \(errorText())") }
        var ok = false
        defer {
            if !ok { unlink(tmp.path) }
        }
        do {
            defer { close(fd) }
            for part in parts { try writeAll(fd, part, path: tmp.path) }
            guard fsync(fd) == 0 else { throw VaultError.io("fsync \(tmp.path): \(errorText())") }
        }
        try rename(tmp, to: url)
        ok = true
        try syncDirectory(dir)
    }

    public static func writeAtomically(_ bytes: [UInt8], to url: URL) throws {
        try bytes.withUnsafeBytes { try writeAtomically([$0], to: url) }
    }

    public static func writeAll(_ fd: Int32, _ buffer: UnsafeRawBufferPointer, path: String) throws {
        guard var p = buffer.baseAddress else { return }
        var left = buffer.count
        while left > 0 {
            let n = write(fd, p, left)
            if n < 0 {
                if errno == EINTR { continue }
                throw VaultError.io("write \(path): \(errorText())")
            }
            p += n
            left -= n
        }
    }

    /// A new file open for writing (mode 0600); fails if it exists.
    public static func createExclusive(_ url: URL) throws -> Int32 {
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw VaultError.io("cannot create \(url.path): \(errorText())") }
        return fd
    }

    public static func rename(_ from: URL, to: URL) throws {
        guard systemRename(from.path, to.path) == 0 else { throw VaultError.io("rename to \(to.path): \(errorText())") }
    }

    public static func syncDirectory(_ dir: URL) throws {
        let fd = open(dir.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw VaultError.io("open directory \(dir.path): \(errorText())") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw VaultError.io("fsync directory \(dir.path): \(errorText())") }
    }

    public static func createDirectory(_ dir: URL) throws {
        do {
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw VaultError.io("cannot create directory \(dir.path): \(error.localizedDescription)")
        }
    }

    public static func exists(_ url: URL) -> Bool {
        var st = stat()
        return stat(url.path, &st) == 0
    }

    /// The whole file, refusing one larger than `limit` bytes (before reading it).
    public static func readAll(_ url: URL, limit: Int, what: String) throws -> [UInt8] {
        let file = try ReadFile(url, what: what)
        guard file.size <= Int64(limit) else { throw VaultError.corrupt("\(what) is \(file.size) bytes (at most \(limit))") }
        var out = [UInt8](repeating: 0, count: Int(file.size))
        try out.withUnsafeMutableBytes { try file.read(into: $0, at: 0) }
        return out
    }

    public static func remove(_ url: URL) throws {
        guard unlink(url.path) == 0 || errno == ENOENT else { throw VaultError.io("cannot remove \(url.path): \(errorText())") }
    }

    static func randomTag() -> [UInt8] {
        var r = SystemRandomNumberGenerator()
        return (0..<8).map { _ in UInt8.random(in: 0...255, using: &r) }
    }
}

/// A file open for reading, with its size taken once; reads are positional (pread).
public final class ReadFile {
    public let fd: Int32
    public let size: Int64
    public let path: String

    public init(_ url: URL, what: String) throws {
        path = url.path
        fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let missing = errno == ENOENT
            throw VaultError(missing ? .notFound : .io, "cannot open \(what) \(url.path): \(FileIO.errorText())")
        }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let text = FileIO.errorText()
            close(fd)
            throw VaultError.io("cannot stat \(url.path): \(text)")
        }
        size = Int64(st.st_size)
    }

    deinit { close(fd) }

    /// Fills `buffer` from `offset`; a short file is `.corrupt` (the caller checked offsets against
    /// the size it expected, so running out means the file changed or is damaged).
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws {
        guard var p = buffer.baseAddress else { return }
        var left = buffer.count
        var at = off_t(offset)
        while left > 0 {
            let n = pread(fd, p, left, at)
            if n < 0 {
                if errno == EINTR { continue }
                throw VaultError.io("read \(path): \(FileIO.errorText())")
            }
            if n == 0 { throw VaultError.corrupt("\(path) ends early (at byte \(at))") }
            p += n
            left -= n
            at += off_t(n)
        }
    }

    /// Up to `buffer.count` bytes from the current sequential position (for streaming imports); 0 at end.
    public func readSome(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let p = buffer.baseAddress else { return 0 }
        while true {
            let n = systemRead(fd, p, buffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                throw VaultError.io("read \(path): \(FileIO.errorText())")
            }
            return n
        }
    }
}

@inline(__always)
private func systemRead(_ fd: Int32, _ p: UnsafeMutableRawPointer, _ n: Int) -> Int {
    #if canImport(Glibc)
    return Glibc.read(fd, p, n)
    #else
    return Darwin.read(fd, p, n)
    #endif
}

@inline(__always)
private func systemRename(_ from: String, _ to: String) -> Int32 {
    #if canImport(Glibc)
    return Glibc.rename(from, to)
    #else
    return Darwin.rename(from, to)
    #endif
}

/// Durable file writes for the vault's neighbours in the node (the recovery code): the same
/// temporary-file, fsync, rename, directory-fsync sequence the vault uses for its own files.
public enum DurableFile {
    /// Writes `bytes` to `url` (mode 0600) atomically and durably; a `.io` VaultError on failure.
    public static func write(_ bytes: [UInt8], to url: URL) throws {
        try FileIO.writeAtomically(bytes, to: url)
    }
}

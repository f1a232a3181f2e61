#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Logging
import Sodium
import TandemProtocol

/// Where an import keeps the stripped copy of a photo while the vault reads it (Protocol/vault.md
/// "Photos"): in memory, in an anonymous file (`memfd_create`) that has no name on any disk and
/// is gone with the process, so an import killed at any moment leaves no clear copy behind. Where
/// the system has no memfd, the copy goes to `<vault>/tmp/` (0700) and is removed after its group;
/// anything a crash left there is shredded (overwritten with zeros, synced, unlinked) when the
/// vault service starts and whenever the vault is unlocked.
enum ImportScratch {
    /// A copy being staged: where to write and read it, and what to release afterwards.
    struct Copy: Sendable {
        let url: URL
        /// The memory file's descriptor (closed when the copy is done); nil for a file in tmp/.
        let descriptor: Int32?

        func release() {
            if let descriptor {
                close(descriptor)
            } else {
                try? FileManager.default.removeItem(at: url)  // already gone is fine; tmp/ is shredded at the next start or unlock
            }
        }
    }

    static func directory(vault: URL) -> URL { vault.appendingPathComponent("tmp", isDirectory: true) }

    /// A new place for a copy: in memory when the system allows it, else a random name in tmp/.
    static func make(vault: URL) -> Copy {
        if let fd = memoryFile() {
            return Copy(url: URL(fileURLWithPath: "/proc/self/fd/\(fd)"), descriptor: fd)
        }
        let dir = directory(vault: vault)
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])  // a failure shows when the copy is written
        return Copy(url: dir.appendingPathComponent("import-" + hexString(Sodium.randomBytes(8))), descriptor: nil)
    }

    private typealias MemfdCreate = @convention(c) (UnsafePointer<CChar>, UInt32) -> Int32

    /// An anonymous memory file (`memfd_create`, close-on-exec), or nil where there is none (the
    /// libc lacks it, or /proc is not mounted so the copy could not be reopened by path).
    static func memoryFile() -> Int32? {
        #if os(Linux)
        // Glibc declares memfd_create only under _GNU_SOURCE, which Swift's Glibc module lacks.
        guard let symbol = dlsym(nil, "memfd_create") else { return nil }
        let create = unsafeBitCast(symbol, to: MemfdCreate.self)
        let fd = create("tandem-import", 1 /* MFD_CLOEXEC */)
        guard fd >= 0 else { return nil }
        guard access("/proc/self/fd/\(fd)", R_OK | W_OK) == 0 else {
            close(fd)
            return nil
        }
        return fd
        #else
        return nil
        #endif
    }

    /// Shreds every file in `<vault>/tmp/`: each is overwritten with zeros, synced and unlinked.
    /// Returns how many; a file that cannot be shredded is logged and left (tried again next time).
    @discardableResult
    static func shred(vault: URL, logger: Logger) -> Int {
        let dir = directory(vault: vault)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: dir.path) else { return 0 }  // no tmp/: nothing to do
        var shredded = 0
        for name in names {
            let path = dir.appendingPathComponent(name).path
            do {
                try shredFile(path)
                shredded += 1
            } catch {
                logger.error("cannot shred a file an import left", metadata: ["path": "\(path)", "error": "\(error)"])
            }
        }
        if shredded > 0 {
            logger.notice("shredded what an interrupted import left", metadata: ["files": "\(shredded)"])
        }
        return shredded
    }

    struct ShredError: Error, CustomStringConvertible {
        let description: String
    }

    static func shredFile(_ path: String) throws {
        let fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 {
            // A symlink or something else that is not a plain file: never followed, only removed.
            if errno == ELOOP || errno == EISDIR {
                guard unlink(path) == 0 || rmdir(path) == 0 else { throw ShredError(description: "remove: \(String(cString: strerror(errno)))") }
                return
            }
            throw ShredError(description: "open: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ShredError(description: "fstat: \(String(cString: strerror(errno)))") }
        if (st.st_mode & S_IFMT) == S_IFREG {
            let zeros = [UInt8](repeating: 0, count: 1 << 20)
            var left = Int64(st.st_size)
            while left > 0 {
                let n = zeros.withUnsafeBytes { write(fd, $0.baseAddress, Int(min(left, Int64(zeros.count)))) }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw ShredError(description: "write: \(String(cString: strerror(errno)))")
                }
                guard n > 0 else { throw ShredError(description: "write: no progress") }
                left -= Int64(n)
            }
            guard fsync(fd) == 0 else { throw ShredError(description: "fsync: \(String(cString: strerror(errno)))") }
        }
        guard unlink(path) == 0 else { throw ShredError(description: "unlink: \(String(cString: strerror(errno)))") }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// A new output file written through a buffer. `OutputFile.write(to:_:)` removes a partial file when
/// the body throws, so a failed sanitize never leaves half a photo behind.
final class OutputFile {
    let path: String
    private let fd: Int32
    private var pending: [UInt8] = []
    private let flushAt = 1 << 20

    private init(_ url: URL) throws {
        path = url.path
        fd = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw MediaError.io("cannot create \(url.path): \(errorText())") }
        pending.reserveCapacity(flushAt)
    }

    deinit { close(fd) }

    /// Runs `body` on a new file at `url`, flushes it, and removes the file if anything threw.
    static func write<T>(to url: URL, _ body: (OutputFile) throws -> T) throws -> T {
        let out = try OutputFile(url)
        do {
            let result = try body(out)
            try out.flush()
            return result
        } catch {
            unlink(url.path)
            throw error
        }
    }

    /// The descriptor, for libvips to write to directly (after anything buffered).
    func descriptor() throws -> Int32 {
        try flush()
        return fd
    }

    func write<C: Collection>(_ bytes: C) throws where C.Element == UInt8 {
        pending.append(contentsOf: bytes)
        if pending.count >= flushAt { try flush() }
    }

    func flush() throws {
        try pending.withUnsafeBytes { raw in
            guard var p = raw.baseAddress else { return }
            var left = raw.count
            while left > 0 {
                let n = systemWrite(fd, p, left)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw MediaError.io("write \(path): \(errorText())")
                }
                p += n
                left -= n
            }
        }
        pending.removeAll(keepingCapacity: true)
    }
}

@inline(__always)
private func systemWrite(_ fd: Int32, _ p: UnsafeRawPointer, _ n: Int) -> Int {
    #if canImport(Glibc)
    return Glibc.write(fd, p, n)
    #else
    return Darwin.write(fd, p, n)
    #endif
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// The text of the current errno.
func errorText() -> String { String(cString: strerror(errno)) }

/// A file read front to back through one fixed buffer: photos are walked segment by segment and
/// their image data streamed through, so memory stays the buffer's size whatever the file's.
/// Running out of bytes where the format promised more is `.malformed`, never a trap.
final class InputFile {
    let path: String
    let size: Int64
    private let fd: Int32
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    /// Bytes consumed so far (for error messages).
    private(set) var offset: Int64 = 0

    init(_ url: URL, bufferSize: Int = 1 << 20) throws {
        path = url.path
        fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw MediaError.io("cannot open \(url.path): \(errorText())") }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let text = errorText()
            close(fd)
            throw MediaError.io("cannot stat \(url.path): \(text)")
        }
        size = Int64(st.st_size)
        buffer = [UInt8](repeating: 0, count: max(bufferSize, 16))
    }

    deinit { close(fd) }

    /// The descriptor, for libvips to read on its own (rewound to the start first).
    func rewoundDescriptor() throws -> Int32 {
        guard lseek(fd, 0, SEEK_SET) == 0 else { throw MediaError.io("cannot seek in \(path): \(errorText())") }
        start = 0
        end = 0
        offset = 0
        return fd
    }

    /// Refills the buffer when it is empty; false at end of file.
    private func fill() throws -> Bool {
        if start < end { return true }
        start = 0
        end = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return systemRead(fd, base, raw.count)
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw MediaError.io("read \(path): \(errorText())")
            }
            end = n
            return n > 0
        }
    }

    /// Up to `count` bytes from the start (fewer if the file is shorter); for sniffing.
    func prefix(_ count: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        while out.count < count, let b = try readByte() { out.append(b) }
        return out
    }

    /// The next byte, or nil at end of file.
    func readByte() throws -> UInt8? {
        guard try fill() else { return nil }
        let b = buffer[start]
        start += 1
        offset += 1
        return b
    }

    /// The next byte; end of file is `.malformed` (`what` says what was being read).
    func byte(_ what: @autoclosure () -> String) throws -> UInt8 {
        guard let b = try readByte() else { throw MediaError.malformed("\(path) ends inside \(what()) (at byte \(offset))") }
        return b
    }

    /// Exactly `count` bytes; fewer left is `.malformed`. Callers cap `count` before calling.
    func read(_ count: Int, _ what: @autoclosure () -> String) throws -> [UInt8] {
        precondition(count >= 0)
        guard Int64(count) <= size - offset else {
            throw MediaError.malformed("\(path) ends inside \(what()): \(count) bytes announced at byte \(offset), \(size - offset) left")
        }
        var out: [UInt8] = []
        out.reserveCapacity(count)
        while out.count < count {
            guard try fill() else { throw MediaError.malformed("\(path) ends inside \(what()) (at byte \(offset))") }
            let n = min(count - out.count, end - start)
            out.append(contentsOf: buffer[start..<(start + n)])
            start += n
            offset += Int64(n)
        }
        return out
    }

    /// Passes `count` bytes to `output` (or drops them when it is nil) without holding them all.
    func copy(_ count: Int64, to output: OutputFile?, _ what: @autoclosure () -> String) throws {
        guard count >= 0, count <= size - offset else {
            throw MediaError.malformed("\(path) ends inside \(what()): \(count) bytes announced at byte \(offset), \(size - offset) left")
        }
        var left = count
        while left > 0 {
            guard try fill() else { throw MediaError.malformed("\(path) ends inside \(what()) (at byte \(offset))") }
            let n = Int(min(left, Int64(end - start)))
            try output?.write(buffer[start..<(start + n)])
            start += n
            offset += Int64(n)
            left -= Int64(n)
        }
    }

    /// Moves past `count` bytes without reading them (a seek past what is buffered).
    func skip(_ count: Int64, _ what: @autoclosure () -> String) throws {
        guard count >= 0, count <= size - offset else {
            throw MediaError.malformed("\(path) ends inside \(what()): \(count) bytes announced at byte \(offset), \(size - offset) left")
        }
        let buffered = Int64(end - start)
        if count <= buffered {
            start += Int(count)
        } else {
            guard lseek(fd, off_t(count - buffered), SEEK_CUR) >= 0 else {
                throw MediaError.io("cannot seek in \(path): \(errorText())")
            }
            start = 0
            end = 0
        }
        offset += count
    }

    /// Passes bytes to `output` up to the next 0xFF, which is consumed and not written. False when
    /// the file ended first. memchr keeps entropy-coded JPEG data fast even in a debug build.
    func copyUntilFF(to output: OutputFile) throws -> Bool {
        while try fill() {
            let found: Int? = buffer.withUnsafeBytes { raw in
                guard let base = raw.baseAddress,
                      let hit = memchr(base + start, 0xFF, end - start) else { return nil }
                return base.distance(to: UnsafeRawPointer(hit))
            }
            let stop = found ?? end
            try output.write(buffer[start..<stop])
            offset += Int64(stop - start)
            start = stop
            if found != nil {
                start += 1
                offset += 1
                return true
            }
        }
        return false
    }
}

/// Random access for formats that point around (HEIF's item locations). pread leaves the
/// descriptor's offset, and so the buffered reading above, alone.
extension InputFile: RandomAccessBytes {
    var name: String { path }

    func bytes(at position: Int64, count: Int) throws -> [UInt8] {
        guard position >= 0, count >= 0, position <= size, Int64(count) <= size - position else {
            throw MediaError.malformed("\(path): \(count) bytes at \(position) are outside its \(size) bytes")
        }
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = out.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return pread(fd, base + done, count - done, off_t(position + Int64(done)))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw MediaError.io("read \(path): \(errorText())")
            }
            guard n > 0 else { throw MediaError.malformed("\(path) ended while being read (at byte \(position + Int64(done)))") }
            done += n
        }
        return out
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

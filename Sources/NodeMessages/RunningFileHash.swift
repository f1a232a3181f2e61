import Sodium
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The BLAKE2b-256 of a file being received (messages.md 7.3: `file_hash`, checked once every chunk
/// is in), computed while its chunks are written instead of in a second pass over the finished file.
/// A chunk written at the next index in order is hashed from memory, where it already is; one
/// written ahead is hashed from the file when the hash reaches it (it is then in the page cache);
/// at the end, whatever is not in the hash yet is read back from the file — after a restart that is
/// all of it, so the check is the same either way. Used by the writing lane only, under its lock.
final class RunningFileHash {
    private var hasher: Blake2b? = Blake2b(outputLength: 32)
    /// Chunks `0..<next` are in the hash.
    private(set) var next = 0
    /// Chunks written past `next` in this process, by index: their lengths.
    private var ahead: [Int: Int] = [:]
    let chunkBytes: Int

    init(chunkBytes: Int = ChatLimits.chunkBytes) {
        self.chunkBytes = chunkBytes
    }

    /// Chunk `index` (`data`) was written to the partial file `fd`.
    func written(index: Int, _ data: [UInt8], fd: Int32) throws {
        guard hasher != nil else { return }
        if index == next {
            data.withUnsafeBytes { hasher!.update($0) }
            next += 1
            try catchUp(fd)
        } else if index > next {
            ahead[index] = data.count
        }
        // Below `next`: a chunk written twice (the receiver refuses a chunk it holds, so never); the
        // file then differs from what was hashed and fails the check, which is the safe side.
    }

    private func catchUp(_ fd: Int32) throws {
        guard ahead[next] != nil else { return }
        var buffer = [UInt8](repeating: 0, count: chunkBytes)
        while let length = ahead.removeValue(forKey: next) {
            try FileDisk.readFully(fd, &buffer, length: length, offset: Int64(next) * Int64(chunkBytes), path: "a received file")
            buffer.withUnsafeBytes { hasher!.update(UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
            next += 1
        }
    }

    /// The hash of the whole file at `path`: the chunks already in the hash, then the file from the
    /// end of the last of them to its end. Once only.
    func finish(path: String) throws -> [UInt8] {
        guard var h = hasher.take() else { throw FileDisk.HashError.io("the hash of \(path) was taken") }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw FileDisk.HashError.io("cannot open \(path)") }
        defer { close(fd) }
        var offset = Int64(next) * Int64(chunkBytes)
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, $0.count, off_t(offset)) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw FileDisk.HashError.io("cannot read \(path)") }
            if n == 0 { break }
            buffer.withUnsafeBytes { h.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            offset += Int64(n)
        }
        return h.finalize()
    }
}

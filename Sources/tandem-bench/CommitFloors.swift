import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What the disk under a store asks of one synced commit, measured beside it (`tandem-bench
/// messages`, Protocol/messages.md 11.5): a commit appends WAL frames (a 24-byte header and a 4 KiB
/// page each, so a frame straddles file blocks) and syncs the file with `fdatasync`. A WAL that grows
/// (a fresh store, or one past its size so far) makes the sync journal the file's new size too; one
/// that is reused after a checkpoint overwrites. Each figure: the median of `count` rounds, ms.
enum CommitFloors {
    static let frameBytes = 24 + 4096

    /// One round's median: writing `frames` frames (pwrite each header and page, as SQLite does) and
    /// then the `fdatasync`, either appended to a growing file or over frames written and synced before.
    static func frames(_ frames: Int, overwrite: Bool, in directory: URL, count: Int = 30) throws -> (write: Double, sync: Double) {
        let path = directory.appendingPathComponent("commit-probe").path
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw TandemBenchError("cannot open \(path)") }
        defer { close(fd); unlink(path) }
        let header = [UInt8](repeating: 0x17, count: 24), page = [UInt8](repeating: 0x5a, count: 4096)
        let span = 32 + frames * frameBytes * count
        if overwrite {
            let zeros = [UInt8](repeating: 0, count: 1 << 16)
            var at = 0
            while at < span {
                guard pwrite(fd, zeros, min(zeros.count, span - at), off_t(at)) > 0 else { throw TandemBenchError("cannot write \(path)") }
                at += zeros.count
            }
            guard fsync(fd) == 0 else { throw TandemBenchError("cannot sync \(path)") }
        }
        var writes: [Double] = [], syncs: [Double] = []
        var offset = 32
        for _ in 0..<count {
            let t0 = monotonicNanos()
            for _ in 0..<frames {
                guard pwrite(fd, header, 24, off_t(offset)) == 24, pwrite(fd, page, 4096, off_t(offset + 24)) == 4096 else {
                    throw TandemBenchError("cannot write \(path)")
                }
                offset += frameBytes
            }
            let t1 = monotonicNanos()
            guard fdatasync(fd) == 0 else { throw TandemBenchError("cannot sync \(path)") }
            let t2 = monotonicNanos()
            writes.append(Double(t1 - t0) / 1e6)
            syncs.append(Double(t2 - t1) / 1e6)
        }
        return (Percentiles(writes).p50, Percentiles(syncs).p50)
    }

    /// The floors for commits of 1 frame and of each of `sizes` frames, appended and overwritten.
    static func report(sizes: [Int], in directory: URL) throws -> [String: Any] {
        var out: [String: Any] = [:]
        for n in ([1] + sizes).sorted() where out["append_\(n)_frames"] == nil {
            let a = try frames(n, overwrite: false, in: directory), o = try frames(n, overwrite: true, in: directory)
            out["append_\(n)_frames"] = ["write": a.write, "fdatasync": a.sync]
            out["overwrite_\(n)_frames"] = ["write": o.write, "fdatasync": o.sync]
        }
        out["note"] = "median ms of writing N WAL-sized frames (24-byte header + 4 KiB page, pwrite each) and of the fdatasync after, appended to a growing file or over frames already written and synced"
        return out
    }
}

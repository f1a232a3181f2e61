import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// CPU time the file lanes of this process used (`FileDisk`: the thread CPU clock around each job),
/// for `tandem-bench message-files`, which reports it per byte beside each thread's (messages.md
/// 11.4). A few nanoseconds per 256 KiB chunk; nothing else reads it.
package enum FileLaneCPU {
    package enum Lane: String, Sendable, CaseIterable {
        /// Hashing a file to offer.
        case offering
        /// Serving chunks: `pread`, then the link (`FILE_CHUNK` encoded and handed to the event loop).
        case reading
        /// Received chunks: the leaf check, the `pwrite`, the whole-file hash, the sidecar.
        case writing
        /// `fdatasync`, dropping synced pages from the cache, the move into place.
        case syncing
    }

    private static let offering = Atomic<UInt64>(0)
    private static let reading = Atomic<UInt64>(0)
    private static let writing = Atomic<UInt64>(0)
    private static let syncing = Atomic<UInt64>(0)

    /// Nanoseconds of CPU each lane used so far in this process.
    package static func nanoseconds(_ lane: Lane) -> UInt64 {
        switch lane {
        case .offering: offering.load(ordering: .relaxed)
        case .reading: reading.load(ordering: .relaxed)
        case .writing: writing.load(ordering: .relaxed)
        case .syncing: syncing.load(ordering: .relaxed)
        }
    }

    /// Runs `body` on the calling thread and counts its CPU time to `lane`.
    static func measure<T>(_ lane: Lane, _ body: () throws -> T) rethrows -> T {
        let start = threadNanoseconds()
        defer {
            let used = threadNanoseconds() &- start
            switch lane {
            case .offering: offering.add(used, ordering: .relaxed)
            case .reading: reading.add(used, ordering: .relaxed)
            case .writing: writing.add(used, ordering: .relaxed)
            case .syncing: syncing.add(used, ordering: .relaxed)
            }
        }
        return try body()
    }

    private static func threadNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return UInt64(max(0, ts.tv_sec)) &* 1_000_000_000 &+ UInt64(max(0, ts.tv_nsec))
    }
}

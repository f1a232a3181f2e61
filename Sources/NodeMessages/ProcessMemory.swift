#if canImport(Glibc)
import Glibc
#endif

/// The allocator's settings for a process that moves files (messages.md 11.4).
///
/// A file chunk passes through several buffers of 256 KiB and more (a received frame, its payload,
/// the chunk). glibc serves blocks above 128 KiB with a fresh `mmap`, and gives freed memory at the
/// top of a thread's heap back to the kernel; either way the next block of that size starts on pages
/// the kernel must fault in and zero, a cost that was a fifth of a transfer's CPU. Blocks up to
/// 4 MiB now come from the heaps, and up to 16 MiB of free memory at the top of a heap is kept
/// (the process's peak use, not more, stays resident). Once per process; glibc only (`mallopt` is
/// looked up, as `malloc.h` is not part of the Glibc module).
enum ProcessMemory {
    /// glibc's `M_TRIM_THRESHOLD` and `M_MMAP_THRESHOLD`.
    private static let trimThreshold: Int32 = -1, mmapThreshold: Int32 = -3

    private static let tuned: Bool = {
        #if canImport(Glibc)
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return false }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        return mallopt(mmapThreshold, 4 << 20) == 1 && mallopt(trimThreshold, 16 << 20) == 1
        #else
        return false
        #endif
    }()

    static func keepLargeBuffers() { _ = tuned }
}

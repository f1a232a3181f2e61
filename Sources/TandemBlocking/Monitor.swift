#if canImport(Glibc)
import Glibc
#endif

/// A mutex with a condition on the monotonic clock (a wall-clock jump does not stretch a wait).
final class Monitor: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let cond = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(cond, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(cond)
        pthread_mutex_destroy(mutex)
        cond.deallocate()
        mutex.deallocate()
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Waits up to `ms` milliseconds or until `broadcast`; call with the lock held (inside `withLock`).
    func wait(ms: Int) {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let total = Int(now.tv_nsec) + max(0, ms) % 1000 * 1_000_000
        var deadline = timespec()
        deadline.tv_sec = now.tv_sec + max(0, ms) / 1000 + total / 1_000_000_000
        deadline.tv_nsec = total % 1_000_000_000
        pthread_cond_timedwait(cond, mutex, &deadline)
    }

    func broadcast() {
        pthread_cond_broadcast(cond)
    }
}

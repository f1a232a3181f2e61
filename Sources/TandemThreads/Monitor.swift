#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// State shared between threads together with a condition its waiters sleep on: a pthread mutex
/// and condition variable around one value.
///
/// `@unchecked Sendable` because its invariant is a lock the compiler cannot see: `state` is read
/// and written only inside `withLock`, `update` and `wait(until:)`, each of which holds `mutex`
/// for the whole access. It is `Synchronization.Mutex` plus a condition variable (which `Mutex`
/// does not offer); `State` must be `Sendable` because what one thread puts in, another takes out.
public final class Monitor<State: Sendable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var state: State

    public init(_ initial: State) {
        state = initial
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        precondition(pthread_mutex_init(mutex, nil) == 0, "pthread_mutex_init failed")
        // Timed waits measure on the monotonic clock: a wall-clock jump neither cuts nor stretches one.
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        precondition(pthread_cond_init(condition, &attributes) == 0, "pthread_cond_init failed")
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` on the state under the lock.
    public func withLock<R, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }

    /// Runs `body` on the state under the lock, then wakes every waiter (they re-check their
    /// conditions).
    public func update<R, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer {
            pthread_cond_broadcast(condition)
            pthread_mutex_unlock(mutex)
        }
        return try body(&state)
    }

    /// Sleeps until `ready` holds for the state (checked under the lock, again after every
    /// `update`) or `milliseconds` have passed on the monotonic clock, whichever comes first.
    /// Returns whether `ready` held.
    @discardableResult
    public func wait(atMostMs milliseconds: Int, until ready: (State) -> Bool) -> Bool {
        let ms = Swift.max(0, milliseconds)
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nanoseconds = Int(now.tv_nsec) + ms % 1000 * 1_000_000
        var deadline = timespec()
        deadline.tv_sec = now.tv_sec + ms / 1000 + nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !ready(state) {
            if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT { return ready(state) }
        }
        return true
    }

    /// Sleeps until `ready` holds for the state (checked under the lock, again after every
    /// `update`), then runs `body` under the same lock hold.
    public func wait<R, E: Error>(until ready: (State) -> Bool, then body: (inout State) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !ready(state) { pthread_cond_wait(condition, mutex) }
        return try body(&state)
    }
}

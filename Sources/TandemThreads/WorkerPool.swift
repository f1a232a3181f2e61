import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A fixed set of named threads that run synchronous jobs in the order they were submitted: the
/// one primitive for blocking work and fork-join in the libraries below the node (the vault's pack
/// writes, key derivations, object-key alignment), where there is no event loop, no `ServiceGroup`
/// and no async caller to hand work to.
///
/// What crosses threads is checked by the compiler: a job is an `@escaping @Sendable` closure and
/// its result is `Sendable`. Lifetime: the threads start in `init` and end in `shutdown()` (which
/// runs the jobs already queued, then joins every thread: none is left running when it returns);
/// `deinit` shuts a pool down that was not. `WorkerPool.shared` is the one pool that lives for the
/// process: a documented global of fixed size.
///
/// Why not `NIOThreadPool`: TandemVault and TandemKeys do not depend on NIO (pure libraries),
/// `NIOThreadPool` has no result handle a synchronous caller can wait on (`runIfActive` is async),
/// and fork-join needs the caller to take part in the work (as `concurrentPerform` did) so a busy
/// pool costs latency, never a deadlock.
public final class WorkerPool: Sendable {
    /// Jobs submitted after `shutdown()` started fail with this.
    public struct ShutDown: Error, Equatable {}

    public let name: String
    public let threadCount: Int
    private let queue: Monitor<JobQueue>
    private let threads: Monitor<Threads>

    /// Starts `threads` threads and returns once all have started (0 is allowed: then `map` runs
    /// everything on the caller, and `submit`ted jobs wait for `shutdown()`, which runs them).
    /// `name` is the threads' name as `ps -L`, `top -H` and `/proc/<pid>/task/*/comm` show it
    /// (its first 15 bytes).
    public init(name: String, threads count: Int) {
        precondition(count >= 0, "a pool cannot have \(count) threads")
        self.name = name
        threadCount = count
        let queue = Monitor(JobQueue())
        self.queue = queue
        var ids: [pthread_t] = []
        let started = Monitor(0)
        for _ in 0..<count {
            let context = Unmanaged.passRetained(ThreadContext(queue: queue, name: name, started: started)).toOpaque()
            var id = pthread_t()
            let rc = pthread_create(&id, nil, { raw in
                let context = Unmanaged<ThreadContext>.fromOpaque(raw!).takeRetainedValue()
                context.run()
                return nil
            }, context)
            precondition(rc == 0, "pthread_create failed: \(rc)")
            ids.append(id)
        }
        threads = Monitor(Threads(ids: ids))
        // Every thread has named itself (and set its priority) before `init` returns.
        started.wait(until: { $0 == count }, then: { _ in })
    }

    deinit { shutdown() }

    /// Runs `work` on one of the pool's threads; the handle gives its result.
    @discardableResult
    public func submit<R: Sendable>(_ work: @escaping @Sendable () throws -> R) -> Pending<R> {
        let pending = Pending<R>()
        let accepted = queue.update { q -> Bool in
            guard !q.closed else { return false }
            q.push { pending.complete(Result { try work() }) }
            return true
        }
        if !accepted { pending.complete(.failure(ShutDown())) }
        return pending
    }

    /// Runs `job` on one of the pool's threads, with no handle: for a stream of small jobs whose
    /// end the owner learns from a later `submit` (a pool of one thread runs its jobs in order).
    /// Returns false, and drops the job, once `shutdown()` has started.
    @discardableResult
    public func execute(_ job: @escaping @Sendable () -> Void) -> Bool { enqueue(job) }

    /// Enqueues a job with no handle (fork-join helpers). Returns false once the pool is closed.
    private func enqueue(_ job: @escaping @Sendable () -> Void) -> Bool {
        queue.update { q -> Bool in
            guard !q.closed else { return false }
            q.push(job)
            return true
        }
    }

    /// Refuses new jobs, lets the threads finish the queued ones, and joins them. Idempotent; may
    /// be called from any thread but the pool's own (which would wait for itself).
    public func shutdown() {
        queue.update { $0.closed = true }
        let ids = threads.withLock { t -> [pthread_t] in
            defer { t.ids = [] }
            return t.ids
        }
        let me = pthread_self()
        for id in ids {
            precondition(pthread_equal(id, me) == 0, "WorkerPool \(name) shut down from its own thread")
            pthread_join(id, nil)
        }
        // A pool without threads runs what was queued on the caller.
        if threadCount == 0 { while let job = queue.withLock({ $0.pop() }) { job() } }
    }

    /// `transform` of every item, in the items' order, on the calling thread and up to
    /// `width - 1` of the pool's threads at once (fork-join). Items are claimed one at a time, so
    /// a slow item does not hold up the rest. The caller takes part: if the pool's threads are busy
    /// (or there are none) it does every item itself, and it never waits for a helper that has not
    /// started. After an item fails no further item is started; the error of the first failing
    /// item (in the items' order) is thrown once every started item has ended.
    public func map<T: Sendable, R: Sendable, E: Error>(_ items: [T], width: Int,
                                                       _ transform: @escaping @Sendable (T) throws(E) -> R) throws(E) -> [R] {
        let helpers = Swift.min(width, items.count, threadCount + 1) - 1
        guard helpers > 0 else {
            var out: [R] = []
            out.reserveCapacity(items.count)
            for item in items { out.append(try transform(item)) }
            return out
        }
        let join = ForkJoin(items: items, transform: transform)
        for _ in 0..<helpers {
            guard enqueue({ join.work() }) else { break }
        }
        join.work()
        return try join.results()
    }
}

extension WorkerPool {
    /// The process's fork-join pool: `min(4, cores) - 1` threads (the caller is the other one),
    /// started on first use and never shut down (idle threads sleep on a condition variable).
    /// Fixed size whatever the callers: nested or concurrent `map`s share it, and a caller that
    /// finds it busy does its items itself.
    public static let shared = WorkerPool(name: "tandem.fork", threads: Swift.max(0, Swift.min(4, onlineCores) - 1))

    /// Cores this process may use (Foundation's count: on Linux it honours the CPU affinity mask).
    public static var onlineCores: Int { Swift.max(1, ProcessInfo.processInfo.activeProcessorCount) }
}

/// The result of a job submitted to a `WorkerPool`.
public final class Pending<R: Sendable>: Sendable {
    private let state = Monitor<Result<R, any Error>?>(nil)

    init() {}

    func complete(_ result: Result<R, any Error>) { state.update { $0 = result } }

    /// Whether the job has ended.
    public var isDone: Bool { state.withLock { $0 != nil } }

    /// Blocks until the job has ended; returns its result or throws its error.
    public func wait() throws -> R {
        try state.wait(until: { $0 != nil }, then: { $0! }).get()
    }
}

/// Jobs waiting for a thread, first in first out.
private struct JobQueue: Sendable {
    private var jobs: [@Sendable () -> Void] = []
    private var head = 0
    var closed = false

    var isEmpty: Bool { head == jobs.count }

    mutating func push(_ job: @escaping @Sendable () -> Void) { jobs.append(job) }

    mutating func pop() -> (@Sendable () -> Void)? {
        guard head < jobs.count else { return nil }
        let job = jobs[head]
        head += 1
        if head == jobs.count {
            jobs.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64, head * 2 >= jobs.count {
            jobs.removeFirst(head)
            head = 0
        }
        return job
    }
}

private struct Threads: Sendable {
    var ids: [pthread_t]
}

/// What one pool thread runs: take a job, run it, until the pool is closed and drained.
private final class ThreadContext: Sendable {
    let queue: Monitor<JobQueue>
    let name: String
    let started: Monitor<Int>

    init(queue: Monitor<JobQueue>, name: String, started: Monitor<Int>) {
        self.queue = queue
        self.name = name
        self.started = started
    }

    func run() {
        // Foundation sets the kernel's name of the current thread (pthread_setname_np, which
        // Swift does not import from Glibc).
        Thread.current.name = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        #if canImport(Glibc)
        // Linux keeps the nice value per thread and a new thread inherits its creator's: a pool
        // first used from a niced thread (the node's core runs at +10) would serve every caller
        // at that priority. The pool's threads take the process's (its main thread's) instead;
        // raising priority may be refused (no CAP_SYS_NICE), then they keep what they have.
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        errno = 0
        let processNice = getpriority(which, id_t(getpid()))
        if errno == 0 { _ = setpriority(which, 0, processNice) }
        #endif
        started.update { $0 += 1 }
        while let job = queue.wait(until: { $0.closed || !$0.isEmpty }, then: { $0.pop() }) {
            job()
        }
    }
}

/// One `map`: the items, the transform, and which items are claimed, running and done.
private final class ForkJoin<T: Sendable, R: Sendable, E: Error>: Sendable {
    struct State: Sendable {
        var next = 0
        var running = 0
        var failed = false
        var results: [Result<R, E>?]
    }

    let items: [T]
    let transform: @Sendable (T) throws(E) -> R
    let state: Monitor<State>

    init(items: [T], transform: @escaping @Sendable (T) throws(E) -> R) {
        self.items = items
        self.transform = transform
        state = Monitor(State(results: Array(repeating: nil, count: items.count)))
    }

    /// Claims and runs items until none is left (or one failed).
    func work() {
        var finished: (Int, Result<R, E>)? = nil
        while true {
            let claimed = state.update { s -> Int? in
                if let (i, r) = finished {
                    s.results[i] = r
                    s.running -= 1
                    if case .failure = r { s.failed = true }
                }
                guard !s.failed, s.next < items.count else { return nil }
                defer { s.next += 1 }
                s.running += 1
                return s.next
            }
            guard let i = claimed else { return }
            do throws(E) {
                finished = (i, .success(try transform(items[i])))
            } catch {
                finished = (i, .failure(error))
            }
        }
    }

    /// Waits until every started item has ended; the results in order, or the first failure.
    func results() throws(E) -> [R] {
        let all = state.wait(until: { $0.running == 0 && ($0.failed || $0.next == items.count) }, then: { $0.results })
        var out: [R] = []
        out.reserveCapacity(all.count)
        for r in all {
            switch r {
            case .success(let value)?: out.append(value)
            case .failure(let error)?: throw error
            case nil: preconditionFailure("an item was not run")  // only after a failure, which threw above
            }
        }
        return out
    }
}

import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization
import TandemNet
import TandemProtocol
import TandemStore

#if canImport(Glibc)
import Glibc
#endif

/// The one owner of the node's state, as a global actor: every store write, every flow step and
/// every event it records runs isolated to `@NodeCore`, on the core's one thread, one job at a
/// time, never on an event loop. The compiler refuses a call into a flow's step from anywhere else
/// without an `await` (which hops here); a slow disk delays the flows, not the links' pings, clock
/// replies and handshakes.
///
/// The executor (`CoreExecutor`) is one thread per process (the same thread the node core always
/// had: its latency is a condition-variable wake-up, no thread pool in between). A process that
/// runs several nodes (tests, the demo, benches) runs all their flows on it.
@globalActor
public actor NodeCore {
    public static let shared = NodeCore()

    public nonisolated var unownedExecutor: UnownedSerialExecutor { CoreExecutor.shared.asUnownedSerialExecutor() }

    /// Runs `job` on the core after the work queued before it, from any thread, without waiting
    /// (timers that fire on an event loop, links): no task is created for it.
    public nonisolated static func submit(_ job: @escaping @NodeCore @Sendable () -> Void) {
        CoreExecutor.shared.submit(job)
    }

    /// Runs `body` on the core and returns its result (from code that is not on the core).
    public static func perform<T: Sendable>(_ body: @NodeCore @Sendable () throws -> T) async throws -> T {
        try await body()
    }

    /// `perform` for work that cannot fail.
    public static func run<T: Sendable>(_ body: @NodeCore @Sendable () -> T) async -> T {
        await body()
    }

    /// Runs `body` as isolated to the core from synchronous code that the core's executor itself
    /// runs (an inbound batch); traps anywhere else.
    static func assumeOnCore<T>(_ body: @NodeCore () throws -> T) rethrows -> T {
        CoreExecutor.shared.checkIsolated()
        return try withoutActuallyEscaping(body) { body in
            // Isolation is a static property of a synchronous function: the representation is the
            // same, and the check above makes the assumption true.
            try unsafeBitCast(body, to: (() throws -> T).self)()
        }
    }
}

/// The node core's thread as a serial executor. Two lanes feed it. **Work** (tasks isolated to
/// `@NodeCore`: control-socket intents, timers, delivery rounds; and jobs `NodeCore.submit` hands
/// in) is local and bounded by its sources, and goes first. **Inbound** (each node's
/// `InboundLane`: what links, relay mailboxes and the LAN hand in) goes in batches, one lane at a
/// time, round robin, when no work waits.
///
/// The thread runs at a lower CPU priority than the event loops (nice +10 where allowed): when a
/// flood of frames that each cost store work saturates the machine, the flows slow down, not the
/// loops that answer friends' pings.
final class CoreExecutor: SerialExecutor, @unchecked Sendable {  // state only under `lock`
    /// `TANDEM_CORE_NICE` (an integer from 0 to 19) sets the increment instead: for benches that
    /// measure what the priority costs a message's latency on a busy machine.
    static let shared = CoreExecutor(niceIncrement: {
        guard let text = getenv("TANDEM_CORE_NICE").map({ String(cString: $0) }), let n = Int32(text), (0...19).contains(n) else { return 10 }
        return n
    }())

    private enum Work {
        case job(UnownedJob)
        case closure(@Sendable () -> Void)
    }
    private struct State {
        var work = CircularBuffer<Work>()
        var inbound = CircularBuffer<InboundLane>()
        var hasWork: Bool { !work.isEmpty || !inbound.isEmpty }
    }
    private let lock = ConditionLock(value: 0)
    private var state = State()
    private let pool: NIOThreadPool
    private let thread = Atomic<UInt>(0)

    private init(niceIncrement: Int32) {
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        pool.submit { [self] _ in
            thread.store(UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))), ordering: .releasing)
            #if canImport(Glibc)
            if niceIncrement != 0 {
                // On Linux, PRIO_PROCESS with who 0 is the calling thread only (nice is per thread).
                let which = __priority_which_t(PRIO_PROCESS.rawValue)
                _ = setpriority(which, 0, getpriority(which, 0) + niceIncrement)
            }
            #endif
            while true { step() }
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        add(.job(UnownedJob(job)))
    }

    func submit(_ job: @escaping @NodeCore @Sendable () -> Void) {
        // Run only by this executor's thread (`step`), where `@NodeCore` code may run.
        add(.closure(unsafeBitCast(job, to: (@Sendable () -> Void).self)))
    }

    private func add(_ work: Work) {
        lock.lock()
        state.work.append(work)
        lock.unlock(withValue: 1)
    }

    /// `lane` has events and a consumer: it gets a turn once no work waits.
    func ready(_ lane: InboundLane) {
        lock.lock()
        state.inbound.append(lane)
        lock.unlock(withValue: 1)
    }

    /// Whether the calling thread is the core's.
    var isCurrent: Bool {
        thread.load(ordering: .acquiring) == UInt(bitPattern: Int(bitPattern: UInt(pthread_self())))
    }

    func checkIsolated() {
        precondition(isCurrent, "not on the node core's thread")
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Runs one piece of work, or one batch of one lane's events.
    private func step() {
        lock.lock(whenValue: 1)
        if let work = state.work.popFirst() {
            lock.unlock(withValue: state.hasWork ? 1 : 0)
            switch work {
            case .job(let job): job.runSynchronously(on: asUnownedSerialExecutor())
            case .closure(let body): body()
            }
        } else if let lane = state.inbound.popFirst() {
            lock.unlock(withValue: state.hasWork ? 1 : 0)
            if lane.drain() { ready(lane) }
        } else {
            lock.unlock(withValue: 0)
        }
    }
}

/// Something that happened on a link, a relay mailbox or the LAN, for the node core to act on.
package enum InboundEvent: Sendable {
    /// A frame that passed the link rules. `receivedAtUs`: our wall clock on arrival, taken on the
    /// event loop before it waited here (clock sync needs it). `prepared`: what a `FramePreparation`
    /// made of it on that event loop (nil: nothing), for the flow that owns its type.
    case frame(Envelope, PeerLink, receivedAtUs: Int64, prepared: (any Sendable)? = nil)
    /// A frame opened from a relay mailbox at `relay`; `done` runs on the core after it was handled
    /// (it acknowledges the item to the relay, or leaves it there).
    case mail(Envelope, relay: RelayAddress, done: @Sendable () -> Void)
    case linkUp([UInt8], PeerLink)
    case linkDown([UInt8])
    case peerError(Tandem_V1_Error, from: [UInt8])
    case sighting(PeerSighting)
}

/// A link whose reading the core can hold back (a `PeerLink`; a fake in tests).
protocol PausableLink: AnyObject, Sendable {
    var serial: UInt64 { get }
    var remotePublicKey: [UInt8]? { get }
    func pauseReading()
    func resumeReading()
}

extension PeerLink: PausableLink {}

/// What the node core hands inbound events to (the frame router): one or more at a time, the
/// events that waited together (at most `InboundLane.maximumBatch`), to handle in one commit.
package protocol InboundConsumer: Sendable {
    @NodeCore func handle(_ events: [InboundEvent])
}

/// Work done on the event loop that received a frame, before the frame waits for the core
/// (DESIGN.md: handlers decode and verify; the core keeps the state): for a frame of one of `types`
/// on a trusted link (a friend's, `PeerLink.isTrusted`), `prepare` makes a value that reaches the
/// owning flow with the frame (`FrameFlow.handle(_:prepared:from:_:)`); nil, or any other link,
/// and the flow does that work on the core as before. A stranger's frames therefore cost the event
/// loop nothing more. `prepare` must be pure: it reads no node state and may run on any loop.
package struct FramePreparation: Sendable {
    package let types: Set<MessageType>
    package let prepare: @Sendable (Envelope) -> (any Sendable)?

    package init(types: Set<MessageType>, prepare: @escaping @Sendable (Envelope) -> (any Sendable)?) {
        (self.types, self.prepare) = (types, prepare)
    }
}

/// One node's inbound events on their way to the core, bounded: at most `maximumPending` frames
/// wait, and at most `maximumPendingPerAuthor` from any one key. A frame past either bound is
/// still kept (it was already verified, and its id is in the replay cache), but the link it came
/// by is paused and reads nothing more until the queue has drained to half: backpressure reaches
/// the sender through TCP, and the queue can exceed its bound by at most one frame per link. Link
/// events (up, down, an ERROR) are never refused; LAN sightings (UDP, repeated every few seconds)
/// are dropped when full, and counted.
package final class InboundLane: FrameHandler, Sendable {
    let maximumPending: Int
    let maximumPendingPerAuthor: Int
    /// Inbound events handed over together at most (one commit for all: group commit).
    static let maximumBatch = 128

    private struct Item {
        var event: InboundEvent
        var author: [UInt8]?
    }
    private struct State {
        var inbound = CircularBuffer<Item>()
        var consumer: InboundConsumer?
        /// The lane is in the executor's inbound queue (or being drained).
        var scheduled = false
        var pendingFrames = 0
        var perAuthor: [ByteKey: Int] = [:]  // hashed in one go (messages.md 11.6)
        /// Links paused because their frames found the queue full, by serial.
        var paused: [UInt64: PausableLink] = [:]
        var dropped = 0
        var pausedTotal = 0
    }
    private let state = NIOLockedValueBox(State())

    /// Done on the event loops, before a frame is queued.
    let preparations: [FramePreparation]

    package init(maximumPending: Int = 4_096, maximumPendingPerAuthor: Int = 64, preparing preparations: [FramePreparation] = []) {
        self.maximumPending = maximumPending
        self.maximumPendingPerAuthor = maximumPendingPerAuthor
        self.preparations = preparations
    }

    /// Frames refused (LAN sightings while full), and links paused for a full queue, so far.
    package var dropped: Int { state.withLockedValue { $0.dropped } }
    package var pausedLinks: Int { state.withLockedValue { $0.pausedTotal } }
    /// Frames waiting now.
    package var pendingFrames: Int { state.withLockedValue { $0.pendingFrames } }

    /// Hands one event in. `link`: paused when the queue or the author's share is full.
    func enqueue(_ event: InboundEvent, author: [UInt8]?, pausing link: PausableLink?) {
        let schedule = state.withLockedValue { state -> Bool in
            if let author = author.map(ByteKey.init) {
                let mine = state.perAuthor[author, default: 0]
                if state.pendingFrames >= maximumPending || mine >= maximumPendingPerAuthor {
                    guard let link else {
                        state.dropped += 1
                        return false
                    }
                    if state.paused.updateValue(link, forKey: link.serial) == nil { state.pausedTotal += 1 }
                    link.pauseReading()
                }
                state.pendingFrames += 1
                state.perAuthor[author] = mine + 1
            }
            state.inbound.append(Item(event: event, author: author))
            return Self.claimTurn(&state)
        }
        if schedule { CoreExecutor.shared.ready(self) }
    }

    /// Whether the lane must be put in the executor's queue now (it has a consumer, events, and no
    /// turn yet); marks it as having one.
    private static func claimTurn(_ state: inout State) -> Bool {
        guard !state.scheduled, state.consumer != nil, !state.inbound.isEmpty else { return false }
        state.scheduled = true
        return true
    }

    /// Hands inbound events to `consumer` until the task is cancelled (events that came before
    /// wait for it: nothing is handled before the node's services are up).
    package func consume(with consumer: InboundConsumer) async {
        let schedule = state.withLockedValue { state -> Bool in
            state.consumer = consumer
            return Self.claimTurn(&state)
        }
        if schedule { CoreExecutor.shared.ready(self) }
        // The core's thread does the consuming; this task only marks how long it goes on.
        while !Task.isCancelled {
            do { try await Task.sleep(for: .seconds(3_600)) } catch { break }  // cancelled: shutting down
        }
        let paused = state.withLockedValue { state -> [PausableLink] in
            state.consumer = nil
            defer { state.paused.removeAll() }
            return Array(state.paused.values)
        }
        // Shutting down: links closing now must not wait on a queue nobody reads.
        for link in paused { link.resumeReading() }
    }

    /// On the core's thread: hands one batch to the consumer. True when more events wait (the lane
    /// keeps its turn and goes to the back of the queue).
    func drain() -> Bool {
        let taken = state.withLockedValue { state -> ([InboundEvent], InboundConsumer, [PausableLink])? in
            guard let consumer = state.consumer, !state.inbound.isEmpty else {
                state.scheduled = false
                return nil
            }
            // What waits goes together (one commit), up to a batch.
            var events: [InboundEvent] = []
            var resume: [PausableLink] = []
            while events.count < Self.maximumBatch, let item = state.inbound.popFirst() {
                events.append(item.event)
                guard let author = item.author.map(ByteKey.init) else { continue }
                state.pendingFrames -= 1
                let n = state.perAuthor[author, default: 1] - 1
                state.perAuthor[author] = n > 0 ? n : nil
            }
            // Paused links read again once the queue has drained to half (and their author's
            // share too), so a full queue does not flap at its bound.
            if !state.paused.isEmpty, state.pendingFrames <= maximumPending / 2 {
                for (serial, link) in state.paused
                where state.perAuthor[ByteKey(link.remotePublicKey ?? []), default: 0] <= maximumPendingPerAuthor / 2 {
                    resume.append(link)
                    state.paused[serial] = nil
                }
            }
            return (events, consumer, resume)
        }
        guard let (events, consumer, resume) = taken else { return false }
        for link in resume { link.resumeReading() }
        NodeCore.assumeOnCore { consumer.handle(events) }
        return state.withLockedValue { state -> Bool in
            if state.consumer != nil, !state.inbound.isEmpty { return true }
            state.scheduled = false
            return false
        }
    }

    // MARK: FrameHandler (called on the event loops)

    package func handle(_ envelope: Envelope, from link: PeerLink) {
        let receivedAtUs = wallClockMicros()
        if PathTrace.isArmed {
            if envelope.type == .chatMessage { PathTrace.stamp(.frameRead) } else if envelope.type == .ack { PathTrace.stamp(.ackRead) }
        }
        var prepared: (any Sendable)?
        if !preparations.isEmpty, link.isTrusted, let p = preparations.first(where: { $0.types.contains(envelope.type) }) {
            prepared = p.prepare(envelope)
        }
        enqueue(.frame(envelope, link, receivedAtUs: receivedAtUs, prepared: prepared), author: envelope.author, pausing: link)
    }

    package func peerConnected(_ key: [UInt8], link: PeerLink) { enqueue(.linkUp(key, link), author: nil, pausing: nil) }

    package func peerDisconnected(_ key: [UInt8]) { enqueue(.linkDown(key), author: nil, pausing: nil) }

    package func peerReportedError(_ error: Tandem_V1_Error, from key: [UInt8]) {
        enqueue(.peerError(error, from: key), author: nil, pausing: nil)
    }

    /// A LAN beacon's sighting (each writes the sighting and the address): the sighted key counts
    /// as the author; dropped when full (beacons repeat).
    package func sighted(_ sighting: PeerSighting) {
        enqueue(.sighting(sighting), author: sighting.publicKey, pausing: nil)
    }
}

extension ControlRouter {
    /// Registers a method whose body runs on the node core, where each store intent it calls is its
    /// own transaction (a challenge step stores its state, frames and events in one): the frames a
    /// step queues go out right after that step's commit, not after the whole method.
    package func registerOnCore(_ method: String, _ body: @escaping @NodeCore @Sendable (JSONValue) throws -> JSONValue) {
        register(method) { params in try await NodeCore.perform { try body(params) } }
    }

    /// Registers a method whose body is store work: it runs on the node core, as one transaction
    /// of `store` (everything it writes commits together, or nothing if it throws), and its events
    /// reach subscribers, its frames their links, and its answer the caller, after that commit.
    /// Registers a method whose store work is one step (`body`), and whose answer is made from its
    /// result once that step is committed and its events are out (`answer` reads the store): the
    /// frames the step sends do not wait for the answer to be built.
    package func registerOnCore<T>(in store: NodeStore, publishing events: EventBus, _ method: String,
                           _ body: @escaping @NodeCore @Sendable (JSONValue, StoreStep) throws -> T,
                           answer: @escaping @NodeCore @Sendable (T) throws -> JSONValue) {
        register(method) { params in
            try await NodeCore.perform {
                let value = try store.step { step in try body(params, step) }
                events.published()
                return try answer(value)
            }
        }
    }

    package func registerOnCore(in store: NodeStore, publishing events: EventBus, _ method: String,
                        _ body: @escaping @NodeCore @Sendable (JSONValue, StoreStep) throws -> JSONValue) {
        register(method) { params in
            try await NodeCore.perform {
                defer { events.published() }
                return try store.step { step in try body(params, step) }
            }
        }
    }
}

extension NodeCore {
    /// Runs `body` on the core and waits for it, blocking the calling thread: only for synchronous
    /// entry points that drive a node from outside (the fuzz harness), never from the core itself
    /// or an event loop.
    public static func blocking<T>(_ body: @NodeCore () throws -> T) rethrows -> T {
        precondition(!CoreExecutor.shared.isCurrent, "NodeCore.blocking called on the core: it would wait for itself")
        return try withoutActuallyEscaping(body) { body -> T in
            let box = BlockingCall(body)
            CoreExecutor.shared.submit { box.run() }
            return try box.wait()
        }
    }
}

/// One `NodeCore.blocking` call: its closure and result cross to the core and back under a lock.
private final class BlockingCall<T>: @unchecked Sendable {  // the closure runs once, on the core, while its caller waits
    /// Dropped before the caller is woken: the closure must not outlive the call.
    private var body: (@NodeCore () throws -> T)?
    private let done = ConditionLock(value: 0)
    private var result: Result<T, Error>?

    init(_ body: @escaping @NodeCore () throws -> T) { self.body = body }

    @NodeCore func run() {
        let r = Result { try body!() }
        body = nil
        done.lock()
        result = r
        done.unlock(withValue: 1)
    }

    func wait() throws -> T {
        done.lock(whenValue: 1)
        defer { done.unlock() }
        return try result!.get()
    }
}

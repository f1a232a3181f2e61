import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TandemNet
import TandemProtocol
import TandemStore

#if canImport(Glibc)
import Glibc
#endif

/// Something that happened on a link, a relay mailbox or the LAN, for the node core to act on.
enum InboundEvent: Sendable {
    /// A frame that passed the link rules. `receivedAtUs`: our wall clock on arrival, taken on the
    /// event loop before it waited here (clock sync needs it).
    case frame(Envelope, PeerLink, receivedAtUs: Int64)
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
/// events that waited together (at most `NodeCore.maximumBatch`), to handle in one commit.
protocol InboundConsumer: Sendable {
    func handle(_ events: [InboundEvent])
}

/// The one owner of the node's state. Every store read and write, every flow step and every event
/// it records runs on the core's one thread, one job at a time, never on an event loop: a slow disk
/// delays the flows, not the links' pings, clock replies and handshakes.
///
/// Two lanes feed it. **Work** (control-socket intents, timers, delivery rounds) is local and
/// bounded by its sources, and goes first. **Inbound** (what links, relay mailboxes and the LAN
/// hand in) is bounded: at most `maximumPending` frames wait, and at most
/// `maximumPendingPerAuthor` from any one key. A frame past either bound is still kept (it was
/// already verified, and its id is in the replay cache), but the link it came by is paused and
/// reads nothing more until the queue has drained to half: backpressure reaches the sender through
/// TCP, and the queue can exceed its bound by at most one frame per link. Link events (up, down,
/// an ERROR) are never refused; LAN sightings (UDP, repeated every few seconds) are dropped when
/// full, and counted.
///
/// The thread runs at a lower CPU priority than the event loops (nice +10 where allowed): when a
/// flood of frames that each cost store work saturates the machine, the flows slow down, not the
/// loops that answer friends' pings.
final class NodeCore: FrameHandler, @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    let maximumPending: Int
    let maximumPendingPerAuthor: Int
    /// Inbound events handed over together at most (one commit for all: group commit).
    static let maximumBatch = 32

    private struct Item {
        var event: InboundEvent
        var author: [UInt8]?
    }
    private struct State {
        var work = CircularBuffer<Job>()
        var inbound = CircularBuffer<Item>()
        var consumer: InboundConsumer?
        var pendingFrames = 0
        var perAuthor: [[UInt8]: Int] = [:]
        /// Links paused because their frames found the queue full, by serial.
        var paused: [UInt64: PausableLink] = [:]
        var dropped = 0
        var pausedTotal = 0
        var stopped = false
        var hasWork: Bool { !work.isEmpty || (consumer != nil && !inbound.isEmpty) }
    }
    private let lock = ConditionLock(value: 0)
    private var state = State()
    private let pool: NIOThreadPool

    init(maximumPending: Int = 4_096, maximumPendingPerAuthor: Int = 64, niceIncrement: Int32 = 10) {
        self.maximumPending = maximumPending
        self.maximumPendingPerAuthor = maximumPendingPerAuthor
        pool = NIOThreadPool(numberOfThreads: 1)
        pool.start()
        // The thread holds the core only while it runs a step (at most a second when idle), so a
        // core nobody else holds any more is released, and its thread ends.
        pool.submit { [weak self] _ in
            #if canImport(Glibc)
            if niceIncrement != 0 {
                // On Linux, PRIO_PROCESS with who 0 is the calling thread only (nice is per thread).
                let which = __priority_which_t(PRIO_PROCESS.rawValue)
                _ = setpriority(which, 0, getpriority(which, 0) + niceIncrement)
            }
            #endif
            while let core = self, core.step() {}
        }
    }

    deinit {
        stop()
        pool.shutdownGracefully { _ in }
    }

    /// Ends the core's thread after the job it runs now (nothing queued runs).
    func stop() {
        lock.lock()
        state.stopped = true
        lock.unlock(withValue: 1)
    }

    // MARK: - The work lane

    /// Runs `job` on the core, after the work queued before it.
    func submit(_ job: @escaping Job) {
        lock.lock()
        state.work.append(job)
        lock.unlock(withValue: 1)
    }

    /// Runs `body` on the core and returns its result.
    func perform<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, Error>) in
            submit { c.resume(with: Result { try body() }) }
        }
    }

    /// `perform` for work that cannot fail.
    func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { (c: CheckedContinuation<T, Never>) in
            submit { c.resume(returning: body()) }
        }
    }

    // MARK: - The inbound lane

    /// Frames refused (LAN sightings while full), and links paused for a full queue, so far.
    var dropped: Int { locked { $0.dropped } }
    var pausedLinks: Int { locked { $0.pausedTotal } }
    /// Frames waiting now.
    var pendingFrames: Int { locked { $0.pendingFrames } }

    /// Hands one event in. `link`: paused when the queue or the author's share is full.
    func enqueue(_ event: InboundEvent, author: [UInt8]?, pausing link: PausableLink?) {
        lock.lock()
        if let author {
            let mine = state.perAuthor[author, default: 0]
            if state.pendingFrames >= maximumPending || mine >= maximumPendingPerAuthor {
                guard let link else {
                    state.dropped += 1
                    lock.unlock(withValue: state.hasWork ? 1 : 0)
                    return
                }
                if state.paused.updateValue(link, forKey: link.serial) == nil { state.pausedTotal += 1 }
                link.pauseReading()
            }
            state.pendingFrames += 1
            state.perAuthor[author] = mine + 1
        }
        state.inbound.append(Item(event: event, author: author))
        lock.unlock(withValue: state.hasWork ? 1 : 0)
    }

    /// Hands inbound events to `consumer` until the task is cancelled (events that came before
    /// wait for it: nothing is handled before the node's services are up).
    func consume(with consumer: InboundConsumer) async {
        lock.lock()
        state.consumer = consumer
        lock.unlock(withValue: state.hasWork ? 1 : 0)
        // The core's thread does the consuming; this task only marks how long it goes on.
        while !Task.isCancelled { try? await Task.sleep(for: .seconds(3_600)) }
        lock.lock()
        state.consumer = nil
        let paused = Array(state.paused.values)
        state.paused.removeAll()
        lock.unlock(withValue: state.hasWork ? 1 : 0)
        // Shutting down: links closing now must not wait on a queue nobody reads.
        for link in paused { link.resumeReading() }
    }

    // MARK: FrameHandler (called on the event loops)

    func handle(_ envelope: Envelope, from link: PeerLink) {
        enqueue(.frame(envelope, link, receivedAtUs: wallClockMicros()), author: envelope.author, pausing: link)
    }

    func peerConnected(_ key: [UInt8], link: PeerLink) { enqueue(.linkUp(key, link), author: nil, pausing: nil) }

    func peerDisconnected(_ key: [UInt8]) { enqueue(.linkDown(key), author: nil, pausing: nil) }

    func peerReportedError(_ error: Tandem_V1_Error, from key: [UInt8]) {
        enqueue(.peerError(error, from: key), author: nil, pausing: nil)
    }

    /// A LAN beacon's sighting (each writes the sighting and the address): the sighted key counts
    /// as the author; dropped when full (beacons repeat).
    func sighted(_ sighting: PeerSighting) {
        enqueue(.sighting(sighting), author: sighting.publicKey, pausing: nil)
    }

    // MARK: - The thread

    private func locked<T>(_ body: (State) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(state)
    }

    private enum Next {
        case job(Job)
        case events([InboundEvent], InboundConsumer, resume: [PausableLink])
        case stop
    }

    /// Runs one job or one batch of inbound events, waiting a second at most for one. False once
    /// the core is stopped.
    private func step() -> Bool {
        guard lock.lock(whenValue: 1, timeoutSeconds: 1) else { return true }
        let next: Next
        if state.stopped {
            next = .stop
        } else if let job = state.work.popFirst() {
            next = .job(job)
        } else if let consumer = state.consumer, !state.inbound.isEmpty {
            // What waits goes together (one commit), up to a batch.
            var events: [InboundEvent] = []
            var resume: [PausableLink] = []
            while events.count < Self.maximumBatch, let item = state.inbound.popFirst() {
                events.append(item.event)
                guard let author = item.author else { continue }
                state.pendingFrames -= 1
                let n = state.perAuthor[author, default: 1] - 1
                state.perAuthor[author] = n > 0 ? n : nil
            }
            // Paused links read again once the queue has drained to half (and their author's
            // share too), so a full queue does not flap at its bound.
            if !state.paused.isEmpty, state.pendingFrames <= maximumPending / 2 {
                for (serial, link) in state.paused
                where state.perAuthor[link.remotePublicKey ?? [], default: 0] <= maximumPendingPerAuthor / 2 {
                    resume.append(link)
                    state.paused[serial] = nil
                }
            }
            next = .events(events, consumer, resume: resume)
        } else {
            lock.unlock(withValue: 0)
            return true
        }
        lock.unlock(withValue: state.hasWork || state.stopped ? 1 : 0)
        switch next {
        case .stop:
            return false
        case .job(let job):
            job()
        case .events(let events, let consumer, let resume):
            for link in resume { link.resumeReading() }
            consumer.handle(events)
        }
        return true
    }
}

extension ControlRouter {
    /// Registers a method whose body is store work, on the node core, where each store intent it
    /// calls is its own transaction (a challenge step stores its state, frames and events in one):
    /// the frames a step queues go out right after that step's commit, not after the whole method.
    func register(on core: NodeCore, _ method: String, _ body: @escaping @Sendable (JSONValue) throws -> JSONValue) {
        register(method) { params in try await core.perform { try body(params) } }
    }

    /// Registers a method whose body is store work: it runs on the node core, as one transaction
    /// of `store` (everything it writes commits together, or nothing if it throws), and its events
    /// reach subscribers, its frames their links, and its answer the caller, after that commit.
    func register(on core: NodeCore, in store: NodeStore, publishing events: EventBus, _ method: String,
                  _ body: @escaping @Sendable (JSONValue) throws -> JSONValue) {
        register(method) { params in
            try await core.perform {
                var result: JSONValue = .null
                defer { events.published() }
                try store.batch { result = try body(params) }
                return result
            }
        }
    }
}

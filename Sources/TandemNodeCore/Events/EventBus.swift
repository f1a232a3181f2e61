import Foundation
import TandemNet
import TandemStore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import TandemProtocol

/// A type filter: exact names, or a prefix ending in `.*` (`friend.*`). Empty matches everything.
public struct EventTypeFilter: Sendable, Equatable {
    public var patterns: [String]

    public init(_ patterns: [String]) { self.patterns = patterns }

    public func matches(_ type: String) -> Bool {
        if patterns.isEmpty { return true }
        return patterns.contains { pattern in
            if pattern == "*" { return true }
            if pattern.hasSuffix(".*") { return type.hasPrefix(pattern.dropLast()) }
            return type == pattern
        }
    }
}

/// Everything that happens in the node becomes an event: stored in the `EventLog`, then handed
/// to every subscriber. A subscriber first replays stored events after its `since`, then gets live
/// ones, with no gap and no duplicate. Each subscriber buffers at most `subscriberBuffer` events;
/// one that falls further behind gets an `events.overflow` marker and is ended.
public final class EventBus: Sendable {
    public static let defaultSubscriberBuffer = 10_000
    /// Events fetched from the log at a time while replaying.
    static let replayPage = 256

    private struct State {
        var subscribers: [UInt64: EventSubscription] = [:]
        var nextID: UInt64 = 1
        /// The highest seq handed to subscribers: delivery follows the log, in seq order, whoever
        /// stored the event (`emit`, or an intent's transaction via `record`).
        var delivered: Int64 = 0
    }

    public let log: EventLog
    public let subscriberBuffer: Int
    private let state = NIOLockedValueBox(State())
    private let logger: Logger

    public init(log: EventLog, subscriberBuffer: Int = EventBus.defaultSubscriberBuffer,
                logger: Logger = Logger(label: "tandem.events")) {
        precondition(subscriberBuffer > 0)
        self.log = log
        self.subscriberBuffer = subscriberBuffer
        self.logger = logger
        let last: Int64
        do {
            last = try log.lastSeq()
        } catch {
            // Subscribers then start from the beginning of the log: said, not hidden.
            logger.error("cannot read the event log's last sequence number", metadata: ["error": "\(error)"])
            last = 0
        }
        state.withLockedValue { $0.delivered = last }
    }

    /// An event to store in the transaction of the change it reports (the store's intents take
    /// them; needs a log kept in that store, `StoreEventLog`). Call `published()` once the
    /// transaction has committed.
    public func record(_ type: String, _ fields: [String: JSONValue] = [:]) -> PendingEvent {
        PendingEvent(type: type, timeMs: Int64(clamping: NodeEvent.nowMs()), fields: JSONValue.object(fields).compactJSON,
                     decoded: JSONValue.object(fields).survivesJSONRoundTrip ? fields : nil)
    }

    /// Hands every event stored since the last delivery to subscribers, in seq order.
    public func published() {
        let wakes = state.withLockedValue { state -> [EventSubscription.Wake] in
            var wakes: [EventSubscription.Wake] = []
            catchUp(&state, &wakes)
            return wakes
        }
        EventSubscription.wake(wakes)
    }

    /// Under the bus lock. A waiting consumer is not resumed here but in `wakes`, after the lock is
    /// released: resuming a task takes its status lock, and a task being cancelled holds that lock
    /// while its stream's cancellation handler takes the bus lock (`unsubscribe`): resuming under
    /// the bus lock deadlocked a node (seen once in `make test`, the core thread and a cancelled
    /// subscriber each waiting for the other's lock).
    private func catchUp(_ state: inout State, _ wakes: inout [EventSubscription.Wake]) {
        while true {
            let page: [NodeEvent]
            do {
                page = try log.events(since: state.delivered, limit: 1000)
            } catch {
                logger.error("cannot read stored events", metadata: ["error": "\(error)"])
                return
            }
            guard let last = page.last else { return }
            for event in page { deliver(event, &state, &wakes) }
            state.delivered = last.seq
            // A short page is the end of the log: no second read to find that out.
            if page.count < 1000 { return }
        }
    }

    private func deliver(_ event: NodeEvent, _ state: inout State, _ wakes: inout [EventSubscription.Wake]) {
        for (id, subscriber) in state.subscribers where !subscriber.deliver(event, wakes: &wakes) {
            state.subscribers[id] = nil
        }
    }

    /// Stores the event and delivers it. Returns nil (and logs) when the log cannot store it.
    @discardableResult
    @NodeCore public func emit(_ type: String, _ fields: [String: JSONValue] = [:], in step: StoreStep) -> NodeEvent? {
        // Stored with the step, delivered once it commits (`published()`). No bus lock: another
        // thread may hold it while it waits for the store this step holds.
        do {
            return try log.append(type: type, timeMs: NodeEvent.nowMs(), fields: fields, in: step)
        } catch {
            logger.error("cannot store event", metadata: ["type": "\(type)", "error": "\(error)"])
            return nil
        }
    }

    /// Stores events made by `record` in `step`, in this order with consecutive seqs (a send batch's
    /// `message.sent` events, one INSERT for many), delivered once it commits (`published()`).
    /// Returns false (and logs) when the log cannot store them: then none is stored.
    @discardableResult
    @NodeCore public func emit(_ pending: [PendingEvent], in step: StoreStep) -> Bool {
        guard !pending.isEmpty else { return true }
        do {
            try log.append(pending, in: step)
            return true
        } catch {
            logger.error("cannot store events", metadata: ["type": "\(pending[0].type)", "count": "\(pending.count)", "error": "\(error)"])
            return false
        }
    }

    /// Stores the event in a step of its own and delivers it. Returns nil (and logs) when the log
    /// cannot store it.
    @discardableResult
    @NodeCore public func emit(_ type: String, _ fields: [String: JSONValue] = [:]) -> NodeEvent? {
        // Appending and delivering under one lock keeps delivery in sequence order and lets a new
        // subscriber split cleanly between "already in the log" and "delivered live".
        var wakes: [EventSubscription.Wake] = []
        defer { EventSubscription.wake(wakes) }
        return state.withLockedValue { state -> NodeEvent? in
            let event: NodeEvent
            do {
                event = try log.append(type: type, timeMs: NodeEvent.nowMs(), fields: fields)
            } catch {
                logger.error("cannot store event", metadata: ["type": "\(type)", "error": "\(error)"])
                return nil
            }
            if event.seq == state.delivered + 1 {
                // Nothing else was stored since the last delivery: this event is the next one, as
                // appended (no read back from the log).
                deliver(event, &state, &wakes)
                state.delivered = event.seq
            } else {
                catchUp(&state, &wakes)
            }
            return event
        }
    }

    /// The last stored sequence number (0 when none).
    public func lastSeq() throws -> Int64 { try log.lastSeq() }

    /// Number of live subscribers (for tests and status).
    public var subscriberCount: Int { state.withLockedValue { $0.subscribers.count } }

    /// Events with `seq > since` from the log, then live events; `since == nil`: live events only.
    /// Cancelling the consuming task ends the stream and unsubscribes.
    public func subscribe(since: Int64?) -> AsyncStream<NodeEvent> {
        let (id, subscription) = state.withLockedValue { state -> (UInt64, EventSubscription) in
            let id = state.nextID
            state.nextID += 1
            let subscription = EventSubscription(log: log, since: since, limit: subscriberBuffer)
            state.subscribers[id] = subscription
            return (id, subscription)
        }
        // The token lives as long as the stream (its closure holds it): a consumer that simply stops
        // iterating and drops the stream is unsubscribed too, not only one that is cancelled.
        let token = SubscriptionToken(bus: self, id: id, subscription: subscription)
        return AsyncStream(unfolding: {
            let event = await token.subscription.next()
            if event == nil { token.end() }
            return event
        }, onCancel: {
            token.end()
        })
    }

    fileprivate func unsubscribe(_ id: UInt64) {
        state.withLockedValue { _ = $0.subscribers.removeValue(forKey: id) }
    }
}

/// Ends a subscription when its stream ends, is cancelled, or is released.
private final class SubscriptionToken: Sendable {
    weak let bus: EventBus?
    let id: UInt64
    let subscription: EventSubscription

    init(bus: EventBus, id: UInt64, subscription: EventSubscription) {
        self.bus = bus
        self.id = id
        self.subscription = subscription
    }

    func end() {
        subscription.cancel()
        bus?.unsubscribe(id)
    }

    deinit { end() }
}

/// One subscriber's buffer and replay cursor. The bus lock may be held while this one is taken,
/// never the other way round.
final class EventSubscription: Sendable {
    private enum Phase {
        /// Reading the log after `cursor`; `page` holds fetched events not yet handed out,
        /// `live` the events emitted since subscribing.
        case replaying(cursor: Int64, page: CircularBuffer<NodeEvent>, live: CircularBuffer<NodeEvent>)
        /// Caught up: `pending` not yet taken; `waiter` set while the consumer waits; `after` the
        /// highest seq already queued or handed out. An emit can store an event, be overtaken by a
        /// replay page that reads it from the log, and deliver it only then: `after` drops that copy.
        case live(pending: CircularBuffer<NodeEvent>, waiter: CheckedContinuation<NodeEvent?, Never>?, after: Int64)
        /// Ended (overflow or cancel): hand out what is left, then nil.
        case finished(pending: CircularBuffer<NodeEvent>)
        /// Only inside one `withLockedValue`, while a buffer taken out of the phase is changed: the
        /// phase then holds no second reference to it, so appending to it or taking its first event
        /// changes it in place. (A buffer bound out of the phase while the phase still held it was
        /// copied whole on every append and every `popFirst`: a subscriber a few hundred events
        /// behind cost ~120 k instructions of copying per event, messages.md 11.6.)
        case modifying
    }

    private enum Step {
        case yield(NodeEvent?)
        case fetch(Int64)
        case wait
    }

    private let log: EventLog
    private let limit: Int
    private let phase: NIOLockedValueBox<Phase>

    init(log: EventLog, since: Int64?, limit: Int) {
        self.log = log
        self.limit = limit
        if let since {
            phase = NIOLockedValueBox(.replaying(cursor: since, page: [], live: []))
        } else {
            phase = NIOLockedValueBox(.live(pending: [], waiter: nil, after: .min))
        }
    }

    /// A waiting consumer and the event it gets: resumed by the bus once its lock is released.
    struct Wake: Sendable {
        let waiter: CheckedContinuation<NodeEvent?, Never>
        let event: NodeEvent
    }

    static func wake(_ wakes: [Wake]) {
        for w in wakes { w.waiter.resume(returning: w.event) }
    }

    /// Called by the bus (under its lock) for each new event; a consumer waiting for it is added to
    /// `wakes`, never resumed here. Returns false once this subscriber has ended.
    func deliver(_ event: NodeEvent, wakes: inout [Wake]) -> Bool {
        let alive = phase.withLockedValue { phase -> Bool in
            switch phase {
            case .replaying(let cursor, var page, var live):
                phase = .modifying  // `page` and `live` are now the buffers' only owners
                if live.count >= limit {
                    page.append(overflowMarker(after: page.last?.seq ?? cursor))
                    phase = .finished(pending: page)
                    return false
                }
                live.append(event)
                phase = .replaying(cursor: cursor, page: page, live: live)
                return true
            case .live(var pending, let waiter, let after):
                if event.seq <= after { return true }  // already handed out by the replay
                if let waiter {
                    phase = .live(pending: pending, waiter: nil, after: event.seq)
                    wakes.append(Wake(waiter: waiter, event: event))
                    return true
                }
                phase = .modifying  // `pending` is now the buffer's only owner
                if pending.count >= limit {
                    pending.append(overflowMarker(after: pending.last?.seq ?? after))
                    phase = .finished(pending: pending)
                    return false
                }
                pending.append(event)
                phase = .live(pending: pending, waiter: nil, after: event.seq)
                return true
            case .finished:
                return false
            case .modifying:
                preconditionFailure("an event subscription's phase left modifying")
            }
        }
        return alive
    }

    private func overflowMarker(after seq: Int64) -> NodeEvent {
        NodeEvent(seq: seq, type: NodeEvent.overflowType, timeMs: NodeEvent.nowMs(),
                  fields: ["resume_since": .int(seq), "buffer": .int(Int64(limit)),
                           "message": .string("this subscriber fell more than \(limit) events behind; resume with --since \(seq)")])
    }

    /// The next event, or nil when the subscription has ended. One consumer at a time.
    func next() async -> NodeEvent? {
        while true {
            let step = phase.withLockedValue { phase -> Step in
                switch phase {
                case .replaying(let cursor, var page, let live):
                    if page.isEmpty { return .fetch(cursor) }
                    phase = .modifying  // `page` is now the buffer's only owner
                    let event = page.removeFirst()
                    phase = .replaying(cursor: cursor, page: page, live: live)
                    return .yield(event)
                case .live(var pending, let waiter, let after):
                    precondition(waiter == nil, "EventSubscription.next() called concurrently")
                    if pending.isEmpty { return .wait }
                    phase = .modifying  // `pending` is now the buffer's only owner
                    let event = pending.removeFirst()
                    phase = .live(pending: pending, waiter: nil, after: after)
                    return .yield(event)
                case .finished(var pending):
                    phase = .modifying  // as above
                    let event = pending.popFirst()
                    phase = .finished(pending: pending)
                    return .yield(event)
                case .modifying:
                    preconditionFailure("an event subscription's phase left modifying")
                }
            }
            switch step {
            case .yield(let event):
                return event
            case .fetch(let cursor):
                let fetched: [NodeEvent]
                do {
                    fetched = try log.events(since: cursor, limit: EventBus.replayPage)
                } catch {
                    finish()
                    return nil
                }
                phase.withLockedValue { phase in
                    switch phase {
                    case .replaying(_, _, let live):
                        if let last = fetched.last {
                            phase = .replaying(cursor: last.seq, page: CircularBuffer(fetched), live: live)
                        } else {
                            // Caught up with the log: live events it already covered are dropped.
                            var pending = CircularBuffer<NodeEvent>()
                            for event in live where event.seq > cursor { pending.append(event) }
                            phase = .live(pending: pending, waiter: nil, after: pending.last?.seq ?? cursor)
                        }
                    case .live, .finished:
                        break  // overflowed or cancelled meanwhile
                    case .modifying:
                        preconditionFailure("an event subscription's phase left modifying")
                    }
                }
            case .wait:
                let event: NodeEvent? = await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<NodeEvent?, Never>) in
                        let immediate = phase.withLockedValue { phase -> NodeEvent?? in
                            switch phase {
                            case .live(var pending, _, let after):
                                if !pending.isEmpty {
                                    phase = .modifying  // `pending` is now the buffer's only owner
                                    let event = pending.removeFirst()
                                    phase = .live(pending: pending, waiter: nil, after: after)
                                    return .some(event)
                                }
                                if Task.isCancelled {
                                    phase = .finished(pending: [])
                                    return .some(nil)
                                }
                                phase = .live(pending: pending, waiter: continuation, after: after)
                                return .none
                            case .finished(var pending):
                                phase = .modifying  // as above
                                let event = pending.popFirst()
                                phase = .finished(pending: pending)
                                return .some(event)
                            case .replaying:
                                preconditionFailure("a subscription never returns to replaying")
                            case .modifying:
                                preconditionFailure("an event subscription's phase left modifying")
                            }
                        }
                        if let immediate { continuation.resume(returning: immediate) }
                    }
                } onCancel: {
                    self.cancel()
                }
                return event
            }
        }
    }

    /// Ends the subscription; a waiting consumer gets nil.
    func cancel() {
        let waiter = phase.withLockedValue { phase -> CheckedContinuation<NodeEvent?, Never>? in
            switch phase {
            case .live(_, let waiter, _):
                phase = .finished(pending: [])
                return waiter
            case .replaying:
                phase = .finished(pending: [])
                return nil
            case .finished:
                return nil
            case .modifying:
                preconditionFailure("an event subscription's phase left modifying")
            }
        }
        waiter?.resume(returning: nil)
    }

    private func finish() { cancel() }
}

extension EventBus {
    /// Most events one `events.list` call returns.
    public static let maximumListLimit = 1000
    /// Most stored events one `events.list` call examines (type filters skip the rest).
    static let maximumListScan = 10_000

    /// Registers `events.list` and the stream `events.subscribe` (Protocol/control.md).
    public func registerControlMethods(on router: ControlRouter) {
        router.register("events.list") { [self] params in
            let since = try params.optionalInt("since") ?? 0
            let limit = try params.optionalInt("limit") ?? 100
            guard since >= 0 else { throw ControlError.invalid("\"since\" must not be negative") }
            guard (0...Int64(Self.maximumListLimit)).contains(limit) else {
                throw ControlError.invalid("\"limit\" must be between 0 and \(Self.maximumListLimit)")
            }
            let filter = EventTypeFilter(try params.optionalStrings("types", maximumCount: 64) ?? [])
            let last = try lastSeq()
            var found: [JSONValue] = []
            var cursor = since
            var scanned = 0
            scanning: while found.count < limit, scanned < Self.maximumListScan {
                let page = try log.events(since: cursor, limit: min(EventBus.replayPage, Self.maximumListScan - scanned))
                if page.isEmpty { break }
                for event in page {
                    scanned += 1
                    cursor = event.seq
                    if filter.matches(event.type) {
                        found.append(event.jsonValue)
                        if found.count == limit { break scanning }
                    }
                }
            }
            // `next_since`: pass it as `since` to continue; `more`: whether stored events remain after it.
            return ["events": .array(found), "last_seq": .int(last), "next_since": .int(cursor),
                    "more": .bool(cursor < last && limit > 0)]
        }

        router.registerStream("events.subscribe") { [self] params, writer in
            let since = try params.optionalInt("since")
            if let since, since < 0 { throw ControlError.invalid("\"since\" must not be negative") }
            let filter = EventTypeFilter(try params.optionalStrings("types", maximumCount: 64) ?? [])
            for await event in subscribe(since: since) {
                if event.type == NodeEvent.overflowType || filter.matches(event.type) {
                    try await writer.send(event.jsonValue)
                }
            }
        }
    }
}

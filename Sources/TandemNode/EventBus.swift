import Foundation
import TandemNet
import TandemStore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import TandemProtocol

/// Something that happened in the node, as the CLI streams it. `seq` orders events and is what a
/// script passes to `--since` to resume.
public struct NodeEvent: Codable, Sendable, Equatable {
    public var seq: Int64
    public var type: String
    public var timeMs: UInt64
    public var fields: [String: JSONValue]

    public init(seq: Int64, type: String, timeMs: UInt64, fields: [String: JSONValue] = [:]) {
        self.seq = seq
        self.type = type
        self.timeMs = timeMs
        self.fields = fields
    }

    enum CodingKeys: String, CodingKey {
        case seq
        case type
        case timeMs = "time_ms"
        case fields
    }

    /// The type of the marker a subscriber gets when it fell too far behind; its `seq` is the last
    /// event it received, so `--since <seq>` resumes exactly where it stopped.
    public static let overflowType = "events.overflow"

    /// Wall-clock milliseconds since 1970.
    public static func nowMs() -> UInt64 {
        UInt64(max(0, (Date().timeIntervalSince1970 * 1000).rounded()))
    }

    /// The wire form: `{"seq", "type", "time_ms", "fields"}`.
    public var jsonValue: JSONValue {
        ["seq": .int(seq), "type": .string(type), "time_ms": JSONValue(timeMs), "fields": .object(fields)]
    }

    public init?(json: JSONValue) {
        guard let seq = json["seq"]?.intValue, let type = json["type"]?.stringValue,
              let time = json["time_ms"]?.intValue, time >= 0 else { return nil }
        self.init(seq: seq, type: type, timeMs: UInt64(time), fields: json["fields"]?.objectValue ?? [:])
    }

    /// The CLI's `--json` form: the fields flattened beside `seq`, `type`, `time` (ISO 8601) and
    /// `time_ms` (which win over fields of the same name).
    public var flatJSON: JSONValue {
        var object = fields
        object["seq"] = .int(seq)
        object["type"] = .string(type)
        object["time"] = .string(isoTime)
        object["time_ms"] = JSONValue(timeMs)
        return .object(object)
    }

    /// The CLI's readable form: `#12 2025-01-02T03:04:05.678Z node.started address=… id=…`.
    public var textLine: String {
        // Field values are often a peer's text (names, messages): `quote` shows controls escaped.
        var line = "#\(seq) \(isoTime) \(type.terminalSafe)"
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            line += " \(key.terminalSafe)=\(StructuredLogHandler.quote(value.textValue))"
        }
        return line
    }

    public var isoTime: String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(timeMs) / 1000))
    }

    /// True when every `key=value` condition holds (field text compared as strings).
    public func matches(_ conditions: [FieldCondition]) -> Bool {
        conditions.allSatisfy { fields[$0.key]?.textValue == $0.value }
    }
}

/// `key=value` from `tandem wait --match`.
public struct FieldCondition: Sendable, Equatable {
    public var key: String
    public var value: String

    public init(key: String, value: String) {
        self.key = key
        self.value = value
    }

    /// Parses `key=value` (the value may contain `=` and may be empty).
    public init(parsing text: String) throws {
        guard let eq = text.firstIndex(of: "="), eq != text.startIndex else {
            throw NodeError.invalidArgument("'\(text)' is not key=value")
        }
        self.init(key: String(text[..<eq]), value: String(text[text.index(after: eq)...]))
    }
}

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

/// Durable storage of events, implemented by the node's store (and by `InMemoryEventLog`).
public protocol EventLog: Sendable {
    /// Stores an event durably and assigns the next sequence number (1, 2, 3, … without gaps).
    func append(type: String, timeMs: UInt64, fields: [String: JSONValue]) throws -> NodeEvent
    /// Stored events with `seq > since`, in order, at most `limit`.
    func events(since seq: Int64, limit: Int) throws -> [NodeEvent]
    /// The highest sequence number stored (0 when none). A default pages through `events`; stores should answer directly.
    func lastSeq() throws -> Int64
    /// True while what is appended is not committed yet (the node core's batch on this thread):
    /// the bus then stores events but delivers them only at the next `published()` after it.
    var holdsDelivery: Bool { get }
}

extension EventLog {
    public var holdsDelivery: Bool { false }

    public func lastSeq() throws -> Int64 {
        var cursor: Int64 = 0
        while true {
            let page = try events(since: cursor, limit: 1000)
            guard let last = page.last else { return cursor }
            cursor = last.seq
        }
    }
}

/// Keeps the last `capacity` events in memory, for tests and for nodes without a store.
public final class InMemoryEventLog: EventLog {
    private struct State {
        var events = CircularBuffer<NodeEvent>()
        var nextSeq: Int64 = 1
    }

    public let capacity: Int
    private let state = NIOLockedValueBox(State())

    public init(capacity: Int = 10_000) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    public func append(type: String, timeMs: UInt64, fields: [String: JSONValue]) throws -> NodeEvent {
        state.withLockedValue { state in
            let event = NodeEvent(seq: state.nextSeq, type: type, timeMs: timeMs, fields: fields)
            state.nextSeq += 1
            state.events.append(event)
            if state.events.count > capacity { state.events.removeFirst() }
            return event
        }
    }

    public func events(since seq: Int64, limit: Int) throws -> [NodeEvent] {
        state.withLockedValue { state in
            guard limit > 0, let first = state.events.first?.seq else { return [] }
            // Sequence numbers are contiguous, so the position is arithmetic.
            let offset = max(0, seq + 1 - first)
            guard offset < Int64(state.events.count) else { return [] }
            let start = state.events.index(state.events.startIndex, offsetBy: Int(offset))
            let end = state.events.index(start, offsetBy: min(limit, state.events.count - Int(offset)))
            return Array(state.events[start..<end])
        }
    }

    public func lastSeq() throws -> Int64 {
        state.withLockedValue { $0.nextSeq - 1 }
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
        let last = (try? log.lastSeq()) ?? 0
        state.withLockedValue { $0.delivered = last }
    }

    /// An event to store in the transaction of the change it reports (the store's intents take
    /// them; needs a log kept in that store, `StoreEventLog`). Call `published()` once the
    /// transaction has committed.
    public func record(_ type: String, _ fields: [String: JSONValue] = [:]) -> PendingEvent {
        PendingEvent(type: type, timeMs: Int64(clamping: NodeEvent.nowMs()), fields: JSONValue.object(fields).compactJSON)
    }

    /// Hands every event stored since the last delivery to subscribers, in seq order.
    public func published() {
        guard !log.holdsDelivery else { return }
        state.withLockedValue { catchUp(&$0) }
    }

    private func catchUp(_ state: inout State) {
        while true {
            let page: [NodeEvent]
            do {
                page = try log.events(since: state.delivered, limit: 1000)
            } catch {
                logger.error("cannot read stored events", metadata: ["error": "\(error)"])
                return
            }
            guard let last = page.last else { return }
            for event in page { deliver(event, &state) }
            state.delivered = last.seq
            // A short page is the end of the log: no second read to find that out.
            if page.count < 1000 { return }
        }
    }

    private func deliver(_ event: NodeEvent, _ state: inout State) {
        for (id, subscriber) in state.subscribers where !subscriber.deliver(event) {
            state.subscribers[id] = nil
        }
    }

    /// Stores the event and delivers it. Returns nil (and logs) when the log cannot store it.
    @discardableResult
    public func emit(_ type: String, _ fields: [String: JSONValue] = [:]) -> NodeEvent? {
        if log.holdsDelivery {
            // Inside a batch (on the core): stored with it, delivered once it commits. No bus lock:
            // another thread may hold it while it waits for the store this batch holds.
            do {
                return try log.append(type: type, timeMs: NodeEvent.nowMs(), fields: fields)
            } catch {
                logger.error("cannot store event", metadata: ["type": "\(type)", "error": "\(error)"])
                return nil
            }
        }
        // Appending and delivering under one lock keeps delivery in sequence order and lets a new
        // subscriber split cleanly between "already in the log" and "delivered live".
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
                deliver(event, &state)
                state.delivered = event.seq
            } else {
                catchUp(&state)
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

    /// Called by the bus (under its lock) for each new event. Returns false once this subscriber has ended.
    func deliver(_ event: NodeEvent) -> Bool {
        var resume: (CheckedContinuation<NodeEvent?, Never>, NodeEvent)?
        let alive = phase.withLockedValue { phase -> Bool in
            switch phase {
            case .replaying(let cursor, let page, var live):
                if live.count >= limit {
                    var rest = page
                    rest.append(overflowMarker(after: page.last?.seq ?? cursor))
                    phase = .finished(pending: rest)
                    return false
                }
                live.append(event)
                phase = .replaying(cursor: cursor, page: page, live: live)
                return true
            case .live(var pending, let waiter, let after):
                if event.seq <= after { return true }  // already handed out by the replay
                if let waiter {
                    phase = .live(pending: pending, waiter: nil, after: event.seq)
                    resume = (waiter, event)
                    return true
                }
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
            }
        }
        if let (continuation, event) = resume { continuation.resume(returning: event) }
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
                    if let event = page.popFirst() {
                        phase = .replaying(cursor: cursor, page: page, live: live)
                        return .yield(event)
                    }
                    return .fetch(cursor)
                case .live(var pending, let waiter, let after):
                    precondition(waiter == nil, "EventSubscription.next() called concurrently")
                    if let event = pending.popFirst() {
                        phase = .live(pending: pending, waiter: nil, after: after)
                        return .yield(event)
                    }
                    return .wait
                case .finished(var pending):
                    let event = pending.popFirst()
                    phase = .finished(pending: pending)
                    return .yield(event)
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
                    }
                }
            case .wait:
                let event: NodeEvent? = await withTaskCancellationHandler {
                    await withCheckedContinuation { (continuation: CheckedContinuation<NodeEvent?, Never>) in
                        let immediate = phase.withLockedValue { phase -> NodeEvent?? in
                            switch phase {
                            case .live(var pending, _, let after):
                                if let event = pending.popFirst() {
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
                                let event = pending.popFirst()
                                phase = .finished(pending: pending)
                                return .some(event)
                            case .replaying:
                                preconditionFailure("a subscription never returns to replaying")
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

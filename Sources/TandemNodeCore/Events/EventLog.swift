import NIOConcurrencyHelpers
import NIOCore
import TandemStore

/// Durable storage of events, implemented by the node's store (and by `InMemoryEventLog`).
public protocol EventLog: Sendable {
    /// Stores an event durably and assigns the next sequence number (1, 2, 3, … without gaps).
    @NodeCore func append(type: String, timeMs: UInt64, fields: [String: JSONValue]) throws -> NodeEvent
    /// Stored events with `seq > since`, in order, at most `limit`.
    func events(since seq: Int64, limit: Int) throws -> [NodeEvent]
    /// The highest sequence number stored (0 when none). A default pages through `events`; stores should answer directly.
    func lastSeq() throws -> Int64
    /// Stores an event in `step`'s transaction (committed with the change it reports). A log
    /// kept elsewhere (in memory) stores it at once.
    @NodeCore func append(type: String, timeMs: UInt64, fields: [String: JSONValue], in step: StoreStep) throws -> NodeEvent
    /// Stores `events` in `step`'s transaction, in this order, with consecutive seqs: all or none.
    /// The default appends them one at a time (a log kept elsewhere: at once).
    @NodeCore func append(_ events: [PendingEvent], in step: StoreStep) throws
}

extension EventLog {
    @NodeCore public func append(type: String, timeMs: UInt64, fields: [String: JSONValue], in step: StoreStep) throws -> NodeEvent {
        try append(type: type, timeMs: timeMs, fields: fields)
    }

    @NodeCore public func append(_ events: [PendingEvent], in step: StoreStep) throws {
        for p in events {
            let fields = p.decoded as? [String: JSONValue] ?? (try? JSONValue.parse(p.fields))?.objectValue ?? [:]
            _ = try append(type: p.type, timeMs: UInt64(max(0, p.timeMs)), fields: fields, in: step)
        }
    }

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

import Foundation
import TandemStore

/// Keeps the node's events in its store, so `tandem events --since N` survives restarts.
public struct StoreEventLog: EventLog {
    let store: NodeStore

    public init(store: NodeStore) { self.store = store }

    @NodeCore public func append(type: String, timeMs: UInt64, fields: [String: JSONValue]) throws -> NodeEvent {
        try store.step(syncing: false) { step in try append(type: type, timeMs: timeMs, fields: fields, in: step) }
    }

    @NodeCore public func append(type: String, timeMs: UInt64, fields: [String: JSONValue], in step: StoreStep) throws -> NodeEvent {
        let stored = try step.appendEvent(type: type, timeMs: Int64(timeMs), fields: JSONValue.object(fields).compactJSON,
                                          decoded: JSONValue.object(fields).survivesJSONRoundTrip ? fields : nil)
        return NodeEvent(seq: stored.seq ?? 0, type: type, timeMs: timeMs, fields: fields)
    }

    /// One multi-row INSERT per power of two in the batch's size (`StoreStep.appendEvents`).
    @NodeCore public func append(_ events: [PendingEvent], in step: StoreStep) throws {
        _ = try step.appendEvents(events)
    }

    public func events(since seq: Int64, limit: Int) throws -> [NodeEvent] {
        try store.recentEvents(since: seq, limit: limit).map { recent in
            let e = recent.stored
            // Fields decoded by whoever stored the event, else parsed from the row.
            let fields = recent.decoded as? [String: JSONValue] ?? (try? JSONValue.parse(e.fields))?.objectValue ?? [:]  // fields that do not parse show as none
            return NodeEvent(seq: e.seq ?? 0, type: e.type, timeMs: UInt64(max(0, e.timeMs)), fields: fields)
        }
    }

    public func lastSeq() throws -> Int64 { try store.lastEventSeq() }
}

import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore

/// Connects to the node serving the data directory (exit 7 with a hint when none runs).
private func connectToNode(_ common: CommonOptions) async throws -> ControlClient {
    try await ControlClient.connect(dataDirectory: common.dataDirectory)
}

private func printEvent(_ event: NodeEvent, json: Bool) {
    if json { outputJSON(event.flatJSON.compactJSON) } else { output(event.textLine) }
}

private func overflowError(_ event: NodeEvent) -> TandemError {
    TandemError("fell too far behind the node's events; resume with --since \(event.seq)")
}

struct Events: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the node's events: the stored ones, and with --follow the live ones as they happen.",
        discussion: """
        Text lines by default (`#seq time type key=value…`); with --json one JSON object per line: \
        {"seq":…,"type":…,"time":"ISO 8601","time_ms":…, plus the event's fields}.

        A script can remember where it was: seq=$(tandem events --json | tail -1 | jq .seq), \
        then `tandem events --since "$seq"` or `tandem wait TYPE --since "$seq"`.

        --type takes an event type or a prefix pattern such as `friend.*`; repeat it for several. \
        Needs a running node (exit 7 without one).
        """)

    @OptionGroup var common: CommonOptions

    @Flag(name: .shortAndLong, help: "Keep printing live events until interrupted.")
    var follow = false

    @Option(help: ArgumentHelp("Only events after this sequence number.", valueName: "seq"))
    var since: Int64?

    @Option(name: .customLong("type"), help: ArgumentHelp("Only events of this type (repeatable; `friend.*` matches a prefix).", valueName: "type"))
    var types: [String] = []

    @Flag(help: "With --follow: end (exit 1) when the node stops, instead of waiting for it to start again.")
    var noReconnect = false

    /// Prints live events; when the node stops, says so on stderr, waits for it to start again and
    /// goes on after the last event printed (sequence numbers survive a restart: nothing is printed
    /// twice, nothing stored in between is missed).
    private func followEvents(first: ControlClient, types: JSONValue) async throws {
        var cursor = since ?? 0
        var client: ControlClient? = first
        while true {
            if let c = client {
                do {
                    for try await item in c.stream(method: "events.subscribe", params: ["since": .int(cursor), "types": types]) {
                        guard let event = NodeEvent(json: item) else { continue }
                        printEvent(event, json: common.json)
                        if event.type == NodeEvent.overflowType { throw overflowError(event) }
                        cursor = max(cursor, event.seq)
                    }
                } catch let e as TandemError {
                    throw e
                } catch {
                    if noReconnect { c.close(); throw error }
                }
                c.close()
                client = nil
                if noReconnect { throw TandemError("the node stopped") }
                FileHandle.standardError.write(Data("tandem: the node stopped; waiting for it to start again (Ctrl-C to end)\n".utf8))
            }
            try await Task.sleep(for: .milliseconds(500))
            do {
                client = try await connectToNode(common)
                FileHandle.standardError.write(Data("tandem: the node is running again; following its events\n".utf8))
            } catch let e as NodeError where e.kind == .noNode {
                continue
            }
        }
    }

    func validate() throws {
        if noReconnect && !follow { throw ValidationError("--no-reconnect goes with --follow") }
        if let since, since < 0 { throw ValidationError("--since must not be negative") }
        guard types.count <= 64 else { throw ValidationError("at most 64 --type options") }
    }

    func run() async throws {
        let client = try await connectToNode(common)
        defer { client.close() }
        let typesJSON = JSONValue.array(types.map(JSONValue.string))
        if follow {
            try await followEvents(first: client, types: typesJSON)
            return
        }
        var cursor = since ?? 0
        // Pages until the end of what was stored when the command started (bounded even while events keep coming).
        var stopAt: Int64?
        while true {
            let page = try await client.call(method: "events.list",
                                             params: ["since": .int(cursor), "limit": .int(Int64(EventBus.maximumListLimit)), "types": typesJSON])
            let last = page["last_seq"]?.intValue ?? 0
            if stopAt == nil { stopAt = last }
            for item in page["events"]?.arrayValue ?? [] {
                guard let event = NodeEvent(json: item) else { continue }
                if let stopAt, event.seq > stopAt { return }
                printEvent(event, json: common.json)
            }
            guard let next = page["next_since"]?.intValue, next > cursor, page["more"]?.boolValue == true,
                  next < (stopAt ?? last) else { return }
            cursor = next
        }
    }
}

struct Wait: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait for an event of a type (whose fields match every --match key=value), print it, exit 0.",
        discussion: """
        Race-free for scripts: by default only events that happen after the command starts count \
        (it asks the node for its last sequence number first). To also catch events that happened \
        before, pass a sequence number captured earlier:

          seq=$(tandem events --json | tail -1 | jq .seq)
          … something that makes the node emit an event …
          tandem wait friend.accepted --since "$seq" --match name=bob

        Field values are compared as text. Exits 6 on timeout, 7 when no node runs. \
        Durations: 500ms, 30s, 2m, 1h (or combined, 1m30s).
        """)

    @OptionGroup var common: CommonOptions

    @Argument(help: ArgumentHelp("The event type to wait for (`friend.*` matches a prefix).", valueName: "event-type"))
    var eventType: String

    @Option(name: .customLong("match"), help: ArgumentHelp("Only an event whose field key has this value (repeatable).", valueName: "key=value"))
    var matches: [String] = []

    @Option(help: ArgumentHelp("Give up after this long (exit 6).", valueName: "duration"))
    var timeout: String = "30s"

    @Option(help: ArgumentHelp("Consider events after this sequence number (default: the node's last one now).", valueName: "seq"))
    var since: Int64?

    func validate() throws {
        do {
            _ = try DurationText.parse(timeout)
            _ = try matches.map(FieldCondition.init(parsing:))
        } catch let error as TandemError {
            throw ValidationError(error.message)
        } catch let error as NodeError {
            throw ValidationError(error.message)
        }
        if let since, since < 0 { throw ValidationError("--since must not be negative") }
        guard !eventType.isEmpty else { throw ValidationError("the event type must not be empty") }
    }

    func run() async throws {
        let limit = try DurationText.parse(timeout)
        let conditions = try matches.map(FieldCondition.init(parsing:))
        let client = try await connectToNode(common)
        defer { client.close() }
        let start: Int64
        if let since {
            start = since
        } else {
            start = try await client.call(method: "events.list", params: ["limit": 0])["last_seq"]?.intValue ?? 0
        }
        let type = eventType
        let found: NodeEvent? = try await withThrowingTaskGroup(of: NodeEvent?.self) { group in
            group.addTask {
                try await Self.firstMatch(client: client, type: type, conditions: conditions, since: start)
            }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
        guard let event = found else {
            throw TandemError("timed out after \(DurationText.format(limit)) waiting for \(eventType)",
                              exitCode: TandemError.timeoutExitCode)
        }
        printEvent(event, json: common.json)
    }

    /// Subscribes after `since` and returns the first matching event; resubscribes after an overflow.
    static func firstMatch(client: ControlClient, type: String, conditions: [FieldCondition], since: Int64) async throws -> NodeEvent {
        var cursor = since
        while true {
            var resumed = false
            let stream = client.stream(method: "events.subscribe", params: ["since": .int(cursor), "types": [.string(type)]])
            for try await item in stream {
                guard let event = NodeEvent(json: item) else { continue }
                if event.type == NodeEvent.overflowType {
                    // The node ends the stream right after this marker; then subscribe again from here.
                    cursor = event.seq
                    resumed = true
                    continue
                }
                cursor = event.seq
                if event.matches(conditions) { return event }
            }
            if !resumed { throw TandemError("the node ended the event stream") }
        }
    }
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask the running node how it is (exit 7 when no node runs).")

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let client = try await connectToNode(common)
        defer { client.close() }
        let status = try await client.call(method: "node.status")
        if common.json {
            outputJSON(status.compactJSON)
        } else if status.terminalSafe.objectValue != nil {
            for line in StatusText.lines(status.terminalSafe) { output(line) }
        } else {
            output(status.terminalSafe.textValue)
        }
    }
}

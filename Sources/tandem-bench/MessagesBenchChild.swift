import ArgumentParser
import Foundation
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// The receiving node of `tandem-bench messages` (started by it unless `--in-process`): a full
/// NodeRuntime on its own data directory, in its own process — so with its own `@NodeCore` thread,
/// as every real node has — that accepts the friend request of `--accept`. It prints one JSON line
/// per latency round's message it stores (`{"event": "received", "text", "mono_ns"}`, CLOCK_MONOTONIC
/// is shared with the parent), and answers a `list HEX_ID` line on stdin with the conversation's
/// message ids, oldest first (`{"event": "list", "ids": […]}`). It exits when its stdin closes.
struct MessagesChild: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "messages-child", abstract: "The receiving node of `tandem-bench messages` (started by it).",
        shouldDisplay: false)

    @Option var dataDir: String
    @Option(help: "The node's identity seed (hex, 32 bytes).") var seed: String
    @Option(help: "The key (hex) whose friend request is accepted.") var accept: String
    @Option var timeout: Int = 900

    func run() async throws {
        guard let seedBytes = parseHex(seed), seedBytes.count == 32 else { throw ValidationError("--seed: 32 bytes in hex") }
        guard let friend = parseHex(accept), friend.count == 32 else { throw ValidationError("--accept: a key of 32 bytes in hex") }
        let identity = try SigningKeyPair(seed: seedBytes)
        let node = try NodeRuntime(identity: identity, configuration: MessagesBench.nodeConfiguration(),
                                   dataDirectory: DataDirectory(url: URL(fileURLWithPath: dataDir)),
                                   logger: quietLogger("tandem-bench.messages.receiver"))
        let (requests, input) = AsyncStream.makeStream(of: String.self)
        // Stdin lines (a thread of its own, as `Watchdog` reads them); its end ends the process.
        Thread.detachNewThread {
            var lines = PipeLines()
            while let line = lines.next(from: 0, timeoutSeconds: 3600) { input.yield(line) }
            Glibc.exit(0)
        }
        let limit = timeout
        Thread.detachNewThread {
            sleep(UInt32(max(1, limit)))
            FileHandle.standardError.write(Data("tandem-bench messages-child: timeout, exiting\n".utf8))
            Glibc.exit(0)
        }
        let events = node.eventBus.subscribe(since: nil)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await node.run(signals: false) }
            tasks.addTask {
                for await e in events {
                    switch e.type {
                    case "friend.request.received":
                        guard let id = e.fields["id"]?.stringValue, NodeID(id)?.publicKey == friend else { continue }
                        _ = try? await node.friends.accept(friend)
                    case "message.received":
                        // Only the latency rounds: the burst's 10,000 would cost this process a line each.
                        guard let text = e.fields["text"]?.stringValue, text.hasPrefix("round ") else { continue }
                        printJSONLine(["event": "received", "text": text, "mono_ns": Int(monotonicNanos())])
                    default:
                        continue
                    }
                }
            }
            tasks.addTask {
                for await line in requests {
                    let words = line.split(separator: " ")
                    guard words.count == 2, words[0] == "list" else { continue }
                    let ids = try await MessagesBench.conversation(node, with: String(words[1]))
                    printJSONLine(["event": "list", "ids": ids])
                }
            }
            let address = try await node.listener.boundAddress
            printJSONLine(["port": address.port ?? 0, "public_key": hexString(identity.publicKey), "mode": "messages-receiver"])
            try await tasks.next()
        }
    }
}

extension ChildProcess {
    /// One line to the child's stdin.
    func send(_ line: String) {
        stdinHandle.write(Data((line + "\n").utf8))
    }

    /// The child's next stdout line that is a JSON object with `event` equal to `event` (others are
    /// skipped), or nil on timeout.
    func nextEvent(_ event: String, timeoutSeconds: Double) -> [String: Any]? {
        let deadline = monotonicNanos() + UInt64(timeoutSeconds * 1e9)
        while monotonicNanos() < deadline {
            guard let line = readLine(timeoutSeconds: Double(deadline - monotonicNanos()) / 1e9) else { return nil }
            if let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
               object["event"] as? String == event { return object }
        }
        return nil
    }
}

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

/// CPU seconds of each thread of a process (`/proc/PID/task/*/stat`), by thread id, with the
/// thread's name: which thread of a node (its core, an event loop, a pool) spent a burst's CPU.
struct ThreadCPU {
    struct Thread { let name: String; let seconds: Double }
    let threads: [Int: Thread]

    init(_ pid: Int32) {
        var threads: [Int: Thread] = [:]
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        let tick = Double(sysconf(Int32(_SC_CLK_TCK)))
        for tid in tasks {
            guard let id = Int(tid), let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/stat", encoding: .utf8),
                  let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { continue }
            let name = String(stat[stat.index(after: open)..<close])
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { continue }
            threads[id] = Thread(name: name, seconds: (user + system) / tick)
        }
        self.threads = threads
    }

    /// Each thread's CPU since `earlier` (threads that spent at least 10 ms), busiest first, as
    /// `[{"thread": name, "tid": id, "cpu_seconds": s, "ms_per_message": …}]`.
    func since(_ earlier: ThreadCPU, messages: Int) -> [[String: Any]] {
        threads.compactMap { id, t -> (Int, String, Double)? in
            let spent = t.seconds - (earlier.threads[id]?.seconds ?? 0)
            return spent >= 0.01 ? (id, t.name, spent) : nil
        }
        .sorted { $0.2 > $1.2 }
        .map { ["thread": $0.1, "tid": $0.0, "cpu_seconds": $0.2, "ms_per_message": 1000 * $0.2 / Double(max(messages, 1))] }
    }
}

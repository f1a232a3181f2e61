import ArgumentParser
import Foundation
import Logging
import NodeMessages
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

/// `tandem-bench message-files`: one file from one node to a friend's node on loopback, through
/// `message.send_file`: the sender's hashing pass (the offer), then the transfer (FILE_REQUEST →
/// FILE_CHUNKs → each chunk checked against the hash tree, written and hashed into the whole-file
/// hash, synced every `syncEveryChunks` chunks, `window` chunks asked for at once
/// (`MessageFiles.Limits`) → the rest of the file hashed, compared with `file_hash` and moved into
/// place) until `message.file_received`. The sender is a node in this process, the receiver a node in
/// a child process (`message-files-child`), so each side's CPU is its own process's. Reported beside
/// the same run's box-stream bulk figure (`tandem-bench bulk`).
///
/// `--kill-at P`: the receiver is killed (SIGKILL) once P % of the file is durable on it, started
/// again on the same data directory and port, and the transfer resumes; the figure is then the bytes
/// the sender sent beyond the file's size (messages.md 7.3: goal under 1 %).
struct MessageFilesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "message-files",
        abstract: "A file between two nodes on loopback (MiB/s, CPU ns/byte per side) vs the box-stream bulk figure (goal ≥ 0.5×); --kill-at: re-sent bytes after a kill -9 of the receiver (goal < 1 %).")

    @Option(help: "File size in MiB.") var mib: Int = 256
    @Option(help: "Where the nodes keep their stores and files (default: a temporary directory).") var workDir: String?
    @Flag(help: "Do not measure the box-stream bulk figure.") var skipBulk = false
    @Option(help: "Kill the receiver (SIGKILL) once this percentage of the file is durable on it, start it again, and report the bytes re-sent.")
    var killAt: Int?
    @Option(help: "The receiver's window in chunks (default: the node's, MessageFiles.Limits.window).") var window: Int?
    @Option(help: "The step the receiver refills its window in, in chunks (default: the node's).") var refill: Int?
    @Flag(help: "Do not measure the floors of the file path (messages.md 11.4).") var skipFloors = false
    @Option(help: "Bytes each node reads from a friend's link per turn of its event loop (LinkLimits.trustedMaximumReadBytes; default: the node's).")
    var readBytes: Int?

    static let shareGoal = 0.5
    static let resendGoal = 0.01

    func validate() throws {
        guard (1...4096).contains(mib) else { throw ValidationError("--mib must be between 1 and 4096") }
        if let killAt, !(1...99).contains(killAt) { throw ValidationError("--kill-at must be between 1 and 99") }
        if let window, !(1...256).contains(window) { throw ValidationError("--window must be between 1 and 256") }
        if let readBytes, !(1024...(1 << 20)).contains(readBytes) { throw ValidationError("--read-bytes must be between 1024 and 1048576") }
        if let refill, !(1...FileReceiver.chunksPerRequest).contains(refill) {
            throw ValidationError("--refill must be between 1 and \(FileReceiver.chunksPerRequest)")
        }
    }

    func call(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    static func perByte(_ now: [String: Int], since start: [String: Int], bytes: Int64) -> [String: Double] {
        Dictionary(uniqueKeysWithValues: now.map { ($0.key, round3(Double($0.value - start[$0.key, default: 0]) / Double(max(1, bytes)))) })
    }

    /// One line of the receiver, or nil (none yet): polls briefly, so no thread of this process
    /// (the sender's) is held.
    func nextLine(_ child: ChildProcess) async throws -> [String: Any]? {
        guard let line = child.readLine(timeoutSeconds: 0.001) else {
            guard child.process.isRunning else { throw BenchError("the receiving node exited") }
            try await Task.sleep(for: .milliseconds(5))
            return nil
        }
        return try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    }

    func run() async throws {
        warnIfDebug()
        let started = environment()
        let root = URL(fileURLWithPath: workDir ?? NSTemporaryDirectory()).appendingPathComponent("tandem-files-bench-\(getpid())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let size = Int64(mib) << 20
        let source = root.appendingPathComponent("payload.bin")
        say("message-files: writing \(mib) MiB of random data…")
        _ = FileManager.default.createFile(atPath: source.path, contents: nil)
        let handle = try FileHandle(forWritingTo: source)
        for _ in 0..<mib { try handle.write(contentsOf: Data(Sodium.randomBytes(1 << 20))) }
        try handle.close()

        var bulkMBps = 0.0, bulkBusierNs = 0.0, bulkSenderNs = 0.0, bulkReceiverNs = 0.0
        if !skipBulk {
            say("message-files: box-stream bulk rate (tandem-bench bulk)…")
            let bulk = try await BulkBenchmark.run(BenchSettings())
            bulkMBps = bulk.measured
            // CPU per byte of the busier of the bulk's two processes (each one thread: its event loop).
            let perCPUSecond = median(bulk.samples.linkCPU)
            bulkBusierNs = perCPUSecond > 0 ? 1e3 / perCPUSecond : 0
            bulkSenderNs = median(bulk.details["cpu_ns_per_byte_sender"] as? [Double] ?? [])
            bulkReceiverNs = median(bulk.details["cpu_ns_per_byte_receiver"] as? [Double] ?? [])
        }

        var config = LoopbackNodes.configuration()
        if let readBytes { config.linkLimits.trustedMaximumReadBytes = readBytes }
        let window = self.window ?? config.fileLimits.window
        let refill = min(window, self.refill ?? config.fileLimits.refillChunks)
        let syncEvery = config.fileLimits.syncEveryChunks
        let (aliceKey, alice, _) = try LoopbackNodes.node("alice", in: root, configuration: config, logger: quietLogger("bench.alice"))
        let bobSeed = Sodium.randomBytes(32)
        let bobKey = try SigningKeyPair(seed: bobSeed)
        let bobID = NodeID(publicKey: bobKey.publicKey).canonical
        let timeout = 600 + mib
        func receiver(port: Int) throws -> ChildProcess {
            try ChildProcess(arguments: ["message-files-child", "--data-dir", root.appendingPathComponent("bob").path,
                                         "--seed", hexString(bobSeed), "--accept", hexString(aliceKey.publicKey),
                                         "--port", String(port), "--timeout", String(timeout),
                                         "--window", String(window), "--refill", String(refill),
                                         "--read-bytes", String(config.linkLimits.trustedMaximumReadBytes)],
                             timeoutSeconds: timeout)
        }
        var bob = try receiver(port: 0)
        defer { bob.stop() }
        let bobPort = bob.port

        var offerSeconds = 0.0, transferSeconds = 0.0, senderCPU = 0.0, receiverCPU = 0.0
        var bytesSent: Int64 = 0, bytesReceived: Int64 = 0, durableAtKill: Int64 = 0, downSeconds = 0.0
        var identical = false, killed = false
        var senderThreads: [String: Any] = [:], receiverThreads: [String: Any] = [:]
        var senderLanes: [String: Double] = [:], receiverLanes: [String: Double] = [:]

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await alice.run(signals: false) }
            let aliceEvents = alice.eventBus.subscribe(since: nil)
            _ = try await alice.friends.request(bobKey.publicKey, message: "", address: ("127.0.0.1", bobPort))
            var aliceIterator = aliceEvents.makeAsyncIterator()
            while let e = await aliceIterator.next(), e.type != "friend.accepted" {}

            say("message-files: sending \(mib) MiB to a node in another process…")
            let t0 = monotonicNanos()
            let sent = try await call(alice, "message.send_file", ["to": .string(bobID), "path": .string(source.path)])
            let fileID = sent["file_id"]?.stringValue ?? ""
            let t1 = monotonicNanos()
            let senderCPU1 = processCPUSeconds()
            let senderThreads1 = ThreadCPU.now(), senderLanes1 = laneNanos()
            var receiverThreads0: ThreadCPU?, receiverLanes0: [String: Int]?
            var receiverCPU0: Double?, receiverCPUBeforeKill = 0.0
            var received: [String: Any]?
            var killedAt: UInt64 = 0
            while received == nil {
                guard let line = try await nextLine(bob) else { continue }
                switch line["event"] as? String {
                case "offered":
                    receiverCPU0 = receiverCPU0 ?? (line["cpu_seconds"] as? Double)
                    receiverThreads0 = receiverThreads0 ?? ThreadCPU(json: line["threads"])
                    receiverLanes0 = receiverLanes0 ?? (line["lanes"] as? [String: Int])
                case "progress":
                    guard let killAt, !killed, let percent = line["percent"] as? Int, percent >= killAt else { continue }
                    killed = true
                    durableAtKill = (line["bytes_received"] as? Int).map(Int64.init) ?? 0
                    receiverCPUBeforeKill = (line["cpu_seconds"] as? Double ?? 0) - (receiverCPU0 ?? 0)
                    say("message-files: \(percent) % durable on the receiver: kill -9, then start it again")
                    kill(bob.process.processIdentifier, SIGKILL)
                    bob.process.waitUntilExit()
                    killedAt = monotonicNanos()
                    bob.stop()
                    bob = try receiver(port: bobPort)
                    receiverCPU0 = 0
                case "received":
                    received = line
                    if killed, let resumed = line["resumed_mono_ns"] as? Int { downSeconds = Double(UInt64(resumed) &- killedAt) / 1e9 }
                case "failed":
                    throw BenchError("the transfer failed on the receiver: \(line["reason"] as? String ?? "?")")
                default:
                    continue
                }
            }
            guard let received, let path = received["path"] as? String, let doneNs = received["mono_ns"] as? Int else {
                throw BenchError("the file did not arrive")
            }
            offerSeconds = Double(t1 - t0) / 1e9
            transferSeconds = Double(UInt64(doneNs) &- t1) / 1e9
            senderCPU = processCPUSeconds() - senderCPU1
            if !killed {
                // Per thread and per lane (a receiver killed and started again has no one start).
                senderThreads = ThreadCPU.now().since(senderThreads1, bytes: size, seconds: transferSeconds)
                senderLanes = Self.perByte(laneNanos(), since: senderLanes1, bytes: size)
                if let start = receiverThreads0 {
                    receiverThreads = ThreadCPU(json: received["threads"]).since(start, bytes: size, seconds: transferSeconds)
                }
                receiverLanes = Self.perByte(received["lanes"] as? [String: Int] ?? [:], since: receiverLanes0 ?? [:], bytes: size)
            }
            receiverCPU = receiverCPUBeforeKill + (received["cpu_seconds"] as? Double ?? 0) - (receiverCPU0 ?? 0)
            bytesReceived = (received["bytes_received"] as? Int).map(Int64.init) ?? 0
            // The sender's count settles once its last batch is recorded.
            var last: Int64 = -1
            for _ in 0..<100 {
                let info = try await call(alice, "message.file_info", ["id": .string(fileID)])
                bytesSent = info["bytes_sent"]?.intValue ?? 0
                if bytesSent >= size, bytesSent == last { break }
                last = bytesSent
                try await Task.sleep(for: .milliseconds(200))
            }
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            identical = (attributes[.size] as? Int64 ?? (attributes[.size] as? Int).map(Int64.init) ?? -1) == size
            tasks.cancelAll()
        }
        let mbps = Double(size) / 1e6 / max(transferSeconds, 1e-9)
        let share = bulkMBps > 0 ? mbps / bulkMBps : 0
        let senderNs = senderCPU * 1e9 / Double(size), receiverNs = receiverCPU * 1e9 / Double(size)
        let resent = Double(bytesSent - size) / Double(size)
        var floors: FileFloors?
        if !skipFloors {
            say("message-files: the floors of the file path (one thread)…")
            floors = FileFloors.measure(in: root)
        }
        var report: [String: Any] = [
            "benchmark": "message-files", "environment": started, "file_bytes": size,
            "offer_seconds": offerSeconds, "offer_note": "message.send_file: the sender reads and hashes the file once (BLAKE2b-256 and the chunk tree)",
            "transfer_seconds": transferSeconds, "transfer_mib_per_s": Double(size) / 1_048_576 / max(transferSeconds, 1e-9),
            "transfer_mb_per_s": mbps,
            "cpu_ns_per_byte_sender": senderNs, "cpu_ns_per_byte_receiver": receiverNs,
            "cpu_note": "user+system CPU of each node's process from the offer to message.file_received, per file byte (sender: this process; receiver: the child)",
            "bytes_sent": bytesSent, "bytes_received": bytesReceived, "size_matches": identical,
            "receiver_window_chunks": window, "receiver_refill_chunks": refill, "link_read_bytes": config.linkLimits.trustedMaximumReadBytes, "receiver_sync_every_chunks": syncEvery,
        ]
        if !killed {
            report["threads"] = ["sender": senderThreads, "receiver": receiverThreads,
                                 "note": "CPU per file byte of each node's threads from the offer to message.file_received "
                                     + "(/proc/self/task/*/schedstat), by role: core (the node core, niced), event_loops (the links: "
                                     + "box-stream seal/open, FILE_CHUNK encode/decode), thread_pools (the file lanes: see lanes), "
                                     + "swift_tasks (Swift concurrency's pool: the tasks between them; on the sender also this bench's "
                                     + "polling of the receiver); busy_share: CPU seconds per second of the transfer (1 = a whole core)"] as [String: Any]
            report["lanes_ns_per_byte"] = ["sender": senderLanes, "receiver": receiverLanes,
                                           "note": "CPU per file byte of each file lane's jobs (FileLaneCPU: reading = pread + FILE_CHUNK "
                                               + "handed to the link; writing = leaf check + pwrite + whole-file hash + sidecar; "
                                               + "syncing = fdatasync + dropping synced pages + the move into place)"] as [String: Any]
        }
        if let floors {
            let busiest = [senderThreads, receiverThreads].compactMap { ($0["busiest_threads"] as? [[String: Any]])?.first?["ns_per_byte"] as? Double }.max()
            report["floors"] = floors.json(cores: Double(ProcessInfo.processInfo.activeProcessorCount), senderNs: senderNs,
                                           receiverNs: receiverNs, busiestThreadNs: busiest ?? 0, bulkMBps: bulkMBps,
                                           bulkSenderNs: bulkSenderNs, bulkReceiverNs: bulkReceiverNs)
        }
        if killAt != nil {
            report["killed_at_bytes_durable"] = durableAtKill
            report["receiver_down_seconds"] = downSeconds
            report["resent_share_of_file"] = resent
            report["resent_goal"] = Self.resendGoal
            report["resent_goal_met"] = killed && resent < Self.resendGoal
            report["throughput_note"] = "includes the kill, the restart and the reconnection: not a throughput figure"
        }
        if !skipBulk {
            report["bulk_mb_per_s"] = bulkMBps
            report["bulk_cpu_ns_per_byte_busier_process"] = round3(bulkBusierNs)
            report["bulk_cpu_ns_per_byte"] = ["sender": round3(bulkSenderNs), "receiver": round3(bulkReceiverNs),
                                              "note": "CPU of each bulk process per byte (median slice; the sender's includes nothing of the floors, "
                                                  + "measured between them)"] as [String: Any]
            report["share_of_bulk"] = share
            report["share_goal"] = Self.shareGoal
            report["goal_met"] = share >= Self.shareGoal
        }
        let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted])
        print(String(decoding: data, as: UTF8.self))
        if let floors {
            say(String(format: "message-files: floors %.2f ns/byte sender (pread + seal), %.2f receiver (open + 2 BLAKE2b + pwrite), %.2f bulk (seal + open)",
                       floors.sender, floors.receiver, floors.bulk))
        }
        say(String(format: "message-files: %d MiB offered in %.2f s, transferred in %.2f s = %.0f MB/s%@; CPU %.2f ns/byte sender, %.2f ns/byte receiver%@",
                   mib, offerSeconds, transferSeconds, mbps,
                   skipBulk ? "" : String(format: " = %.0f %% of bulk %.0f MB/s (goal ≥ 50 %%)", 100 * share, bulkMBps), senderNs, receiverNs,
                   killAt == nil ? "" : String(format: "; re-sent %.2f %% of the file after the kill (goal < 1 %%)", 100 * resent)))
    }
}

/// The receiving node of `tandem-bench message-files` (started by it): a full NodeRuntime on its own
/// data directory that accepts the friend request of `--accept` and fetches every file offered
/// (auto-accept up to 8 GiB). One JSON line per event the parent needs (`offered`, `progress`,
/// `received`, `failed`), each with this process's CPU seconds and CLOCK_MONOTONIC (shared with
/// the parent). Started again on the same directory, seed and port, it resumes the transfer.
struct MessageFilesChild: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "message-files-child", abstract: "The receiving node of `tandem-bench message-files` (started by it).",
        shouldDisplay: false)

    @Option var dataDir: String
    @Option(help: "The node's identity seed (hex, 32 bytes): the same node when started again.") var seed: String
    @Option(help: "The key (hex) whose friend request is accepted.") var accept: String
    @Option var port: Int = 0
    @Option var timeout: Int = 600
    @Option var window: Int?
    @Option var refill: Int?
    @Option var readBytes: Int?

    func run() async throws {
        guard let seedBytes = parseHex(seed), seedBytes.count == 32 else { throw ValidationError("--seed: 32 bytes in hex") }
        guard let friend = parseHex(accept), friend.count == 32 else { throw ValidationError("--accept: a key of 32 bytes in hex") }
        let identity = try SigningKeyPair(seed: seedBytes)
        var config = LoopbackNodes.configuration()
        config.port = port
        config.fileLimits.autoAcceptBytes = 1 << 33
        if let window { config.fileLimits.window = min(max(1, window), 256) }
        if let refill { config.fileLimits.refillChunks = min(max(1, refill), FileReceiver.chunksPerRequest) }
        if let readBytes { config.linkLimits.trustedMaximumReadBytes = min(max(1024, readBytes), 1 << 20) }
        let node = try NodeRuntime(identity: identity, configuration: config, dataDirectory: DataDirectory(url: URL(fileURLWithPath: dataDir)),
                                   logger: quietLogger("tandem-bench.message-files.receiver"))
        Watchdog.start(timeoutSeconds: timeout) { ["cpu_seconds": processCPUSeconds()] }
        let events = node.eventBus.subscribe(since: nil)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await node.run(signals: false) }
            tasks.addTask {
                var resumed: UInt64?
                for await e in events {
                    let now = ["cpu_seconds": processCPUSeconds(), "mono_ns": Int(monotonicNanos())] as [String: Any]
                    switch e.type {
                    case "friend.request.received":
                        guard let id = e.fields["id"]?.stringValue, NodeID(id)?.publicKey == friend else { continue }
                        _ = try? await node.friends.accept(friend)
                    case "message.file_offered":
                        printJSONLine(now.merging(["event": "offered", "threads": ThreadCPU.now().json, "lanes": laneNanos()]) { a, _ in a })
                    case "message.file_progress":
                        resumed = resumed ?? monotonicNanos()
                        printJSONLine(now.merging(["event": "progress", "percent": Int(e.fields["percent"]?.intValue ?? 0),
                                                   "bytes_received": Int(e.fields["bytes_received"]?.intValue ?? 0)]) { a, _ in a })
                    case "message.file_received":
                        printJSONLine(now.merging(["event": "received", "path": e.fields["path"]?.stringValue ?? "",
                                                   "bytes_received": Int(e.fields["bytes_received"]?.intValue ?? 0),
                                                   "resumed_mono_ns": Int(resumed ?? 0), "threads": ThreadCPU.now().json,
                                                   "lanes": laneNanos()]) { a, _ in a })
                    case "message.file_failed":
                        printJSONLine(["event": "failed", "reason": e.fields["reason"]?.stringValue ?? ""])
                    default:
                        continue
                    }
                }
            }
            let address = try await node.listener.boundAddress
            printJSONLine(["port": address.port ?? 0, "public_key": hexString(identity.publicKey), "mode": "message-files-receiver"])
            try await tasks.next()
        }
    }
}

/// CPU nanoseconds of each file lane of this process so far (`FileLaneCPU`).
func laneNanos() -> [String: Int] {
    Dictionary(uniqueKeysWithValues: FileLaneCPU.Lane.allCases.map { ($0.rawValue, Int(FileLaneCPU.nanoseconds($0))) })
}

import ArgumentParser
import Foundation
import Logging
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

/// `tandem-bench message-files`: one file from one node to a friend's node on loopback (both in this
/// process, stores and files on disk), through `message.send_file`: the sender's hashing pass (the
/// offer), then the transfer (FILE_REQUEST → FILE_CHUNKs → each chunk checked against the hash tree,
/// written, synced every `syncEveryChunks` chunks, `window` chunks asked for at once (`MessageFiles.Limits`) → the whole file hashed again and moved into place) until
/// `message.file_received`. Reported beside the same run's box-stream bulk figure (`tandem-bench
/// bulk`), with the CPU both nodes used per byte moved (one process: the two sides are not split).
struct MessageFilesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "message-files",
        abstract: "A file between two nodes on loopback (MiB/s, CPU ns/byte) vs the box-stream bulk figure (goal ≥ 0.5×).")

    @Option(help: "File size in MiB.") var mib: Int = 256
    @Option(help: "Where the nodes keep their stores and files (default: a temporary directory).") var workDir: String?
    @Flag(help: "Do not measure the box-stream bulk figure.") var skipBulk = false

    static let shareGoal = 0.5

    func validate() throws {
        guard (1...4096).contains(mib) else { throw ValidationError("--mib must be between 1 and 4096") }
    }

    func call(_ node: NodeRuntime, _ method: String, _ params: [String: JSONValue]) async throws -> JSONValue {
        guard case .unary(let handler) = node.router.entry(method) else { throw TandemError("no method \(method)") }
        return try await handler(.object(params))
    }

    func run() async throws {
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

        var bulkMBps = 0.0
        if !skipBulk {
            say("message-files: box-stream bulk rate (tandem-bench bulk)…")
            bulkMBps = try await BulkBenchmark.run(BenchSettings()).measured
        }

        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        var config = LoopbackNodes.configuration()
        config.fileLimits.autoAcceptBytes = 1 << 33
        let (window, syncEvery) = (config.fileLimits.window, config.fileLimits.syncEveryChunks)
        let (aliceKey, alice, _) = try LoopbackNodes.node("alice", in: root, configuration: config, logger: logger)
        let (bobKey, bob, _) = try LoopbackNodes.node("bob", in: root, configuration: config, logger: logger)
        let bobID = NodeID(publicKey: bobKey.publicKey).canonical
        var offerSeconds = 0.0, transferSeconds = 0.0, cpuSeconds = 0.0, bytesSent: Int64 = 0, bytesReceived: Int64 = 0
        var identical = false

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await alice.run(signals: false) }
            tasks.addTask { try await bob.run(signals: false) }
            let bobPort = try await bob.listener.boundAddress.port!
            let bobEvents = bob.eventBus.subscribe(since: nil)
            let aliceEvents = alice.eventBus.subscribe(since: nil)
            _ = try await alice.friends.request(bobKey.publicKey, message: "", address: ("127.0.0.1", bobPort))
            var bobIterator = bobEvents.makeAsyncIterator()
            while let e = await bobIterator.next(), e.type != "friend.request.received" {}
            _ = try await bob.friends.accept(aliceKey.publicKey)
            var aliceIterator = aliceEvents.makeAsyncIterator()
            while let e = await aliceIterator.next(), e.type != "friend.accepted" {}

            say("message-files: sending \(mib) MiB…")
            let clock = ContinuousClock()
            let t0 = clock.now
            let sent = try await call(alice, "message.send_file", ["to": .string(bobID), "path": .string(source.path)])
            let fileID = sent["file_id"]?.stringValue
            let t1 = clock.now
            let cpu1 = processCPUSeconds()
            var received: NodeEvent?
            while let e = await bobIterator.next() {
                if e.type == "message.file_received", e.fields["file_id"]?.stringValue == fileID {
                    received = e
                    break
                }
                if e.type == "message.file_failed", e.fields["file_id"]?.stringValue == fileID { break }
            }
            let t2 = clock.now
            let cpu2 = processCPUSeconds()
            guard let received, let path = received.fields["path"]?.stringValue else {
                throw BenchError("the file did not arrive")
            }
            offerSeconds = (t1 - t0).milliseconds / 1000
            transferSeconds = (t2 - t1).milliseconds / 1000
            cpuSeconds = cpu2 - cpu1
            bytesReceived = received.fields["bytes_received"]?.intValue ?? 0
            // The sender's count settles once its last batch is recorded.
            for _ in 0..<50 {
                let info = try await call(alice, "message.file_info", ["id": .string(fileID ?? "")])
                bytesSent = info["bytes_sent"]?.intValue ?? 0
                if bytesSent >= size { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            identical = (attributes[.size] as? Int64 ?? (attributes[.size] as? Int).map(Int64.init) ?? -1) == size
            tasks.cancelAll()
        }
        let mibps = Double(size) / 1_048_576 / max(transferSeconds, 1e-9)
        let mbps = Double(size) / 1e6 / max(transferSeconds, 1e-9)
        let share = bulkMBps > 0 ? mbps / bulkMBps : 0
        let nsPerByte = cpuSeconds * 1e9 / Double(size)
        var report: [String: Any] = [
            "benchmark": "message-files", "environment": started, "file_bytes": size,
            "offer_seconds": offerSeconds, "offer_note": "message.send_file: the sender reads and hashes the file once (BLAKE2b-256 and the chunk tree)",
            "transfer_seconds": transferSeconds, "transfer_mib_per_s": mibps, "transfer_mb_per_s": mbps,
            "cpu_ns_per_byte_both_sides": nsPerByte,
            "cpu_note": "user+system CPU of this process (both nodes) during the transfer, per file byte; the sides are not split",
            "bytes_sent": bytesSent, "bytes_received": bytesReceived, "size_matches": identical,
            "receiver_window_chunks": window, "receiver_sync_every_chunks": syncEvery,
        ]
        if !skipBulk {
            report["bulk_mb_per_s"] = bulkMBps
            report["share_of_bulk"] = share
            report["share_goal"] = Self.shareGoal
            report["goal_met"] = share >= Self.shareGoal
        }
        let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted])
        print(String(decoding: data, as: UTF8.self))
        say(String(format: "message-files: %d MiB offered in %.2f s, transferred in %.2f s = %.0f MiB/s (%.0f MB/s)%@; CPU %.2f ns/byte (both sides)",
                   mib, offerSeconds, transferSeconds, mibps, mbps,
                   skipBulk ? "" : String(format: " = %.0f %% of bulk %.0f MB/s (goal ≥ 50 %%)", 100 * share, bulkMBps), nsPerByte))
    }
}

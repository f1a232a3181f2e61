import Foundation
import Logging
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol
import TandemStore

/// `tandem-bench messages --search`: one node with its store on disk holding `--search-rows`
/// messages (default 1,000,000) from one friend, written straight through the store's bulk intent
/// (`importMessages`: one step, the search index built once at its end), then `message.search`
/// and `message.list` (the newest 50) through the node's control methods, p50/p99 over
/// `--queries` calls each. Goals: search p99 ≤ 20 ms, list p99 ≤ 5 ms.
extension MessagesBench {
    /// A vocabulary of 4,096 made-up words (two or three syllables), the same in every run.
    static func vocabulary() -> [String] {
        let onsets = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "st"]
        let vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ee"]
        var words: [String] = []
        var seen = Set<String>()
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        while words.count < 4096 {
            x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            var w = ""
            for i in 0..<(2 + Int(x >> 60) % 2) {
                w += onsets[Int((x >> UInt64(8 * i)) % 16)] + vowels[Int((x >> UInt64(8 * i + 4)) % 8)]
            }
            if seen.insert(w).inserted { words.append(w) }
        }
        return words
    }

    func runSearch(root: URL, logger: Logger) async throws {
        let me = SigningKeyPair.generate(), friend = SigningKeyPair.generate()
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let node = try NodeRuntime(identity: me, configuration: config, dataDirectory: DataDirectory(url: root.appendingPathComponent("search")),
                                   logger: logger)
        let words = Self.vocabulary()
        let rows = searchRows
        let friendKey = friend.publicKey
        let clock = ContinuousClock()
        let started = environment()
        let fillStart = clock.now
        // The friend, as if its request had been accepted, and the conversation.
        let cid: Int64 = try await NodeCore.perform {
            let store = node.store
            let now = Int64(wallClockMilliseconds())
            var request = Tandem_V1_FriendRequest()
            request.contact = node.friends.contactRecord(store)
            let env = Envelope.sign(type: .friendRequest, author: me, recipient: friendKey, createdAt: UInt64(now),
                                    payload: try request.serializedBytes())
            let frame = OutboxItem(messageId: env.messageID.bytes, recipient: friendKey, type: MessageType.friendRequest.rawValue,
                                   frame: env.bytes, nowMs: now)
            return try store.step { step in
                _ = try step.requestFriend(friendKey, message: nil, frame: frame, nowMs: now)
                _ = try step.receiveFriendAccept(from: friendKey, displayName: "friend", record: [], recordVersion: 1, nowMs: now)
                _ = try step.acknowledge(Array(frame.messageId))
                guard let id = try step.directConversation(peer: friendKey, nowMs: now).id else { throw TandemError("no conversation") }
                return id
            }
        }
        var x: UInt64 = 42
        func next() -> UInt64 {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            return x
        }
        let baseMs = Int64(wallClockMilliseconds()) - Int64(rows) * 1000
        // One step: the rows through the store's bulk intent, the search index built once at the end.
        let texts: [String] = (0..<rows).map { _ in
            let n = 6 + Int(next() % 7)
            return (0..<n).map { _ in words[Int(next() % UInt64(words.count))] }.joined(separator: " ")
        }
        try await NodeCore.perform {
            try node.store.step { step in
                try step.importMessages(count: rows) { i in
                    let seq = UInt64(i + 1)
                    let at = baseMs + Int64(seq) * 1000
                    return StoredMessage(id: Sodium.randomBytes(16), conversationId: cid, author: friendKey, seq: seq, lamport: seq,
                                         sentLamport: seq, text: texts[i], replyTo: nil, sentAtMs: at, receivedAtMs: at, state: .received,
                                         expiresAtMs: nil)
                }
            }
        }
        let fillSeconds = (clock.now - fillStart).milliseconds / 1000

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await node.run(signals: false) }
            _ = try await node.listener.boundAddress
            let friendID = NodeID(publicKey: friendKey).canonical
            var searches: [Double] = [], lists: [Double] = [], hits: [Int] = []
            // CPU of this process (node and caller) over each call: what a call costs whatever else
            // the machine runs, beside its wall time, which a loaded machine stretches.
            var searchCPU: [Double] = [], listCPU: [Double] = []
            for i in 0..<(queries + 5) {
                // One word (about 1 in 500 messages holds it), or two (both, as prefixes).
                let q = i % 4 == 3 ? "\(words[Int(next() % 4096)]) \(words[Int(next() % 4096)].prefix(3))" : words[Int(next() % 4096)]
                let start = clock.now, cpu = Self.processCPUms()
                let found = try await call(node, "message.search", ["text": .string(q)])["hits"]?.arrayValue?.count ?? 0
                if i >= 5 {
                    searches.append((clock.now - start).milliseconds)
                    searchCPU.append(Self.processCPUms() - cpu)
                    hits.append(found)
                }
            }
            for i in 0..<(queries + 5) {
                let start = clock.now, cpu = Self.processCPUms()
                let shown = try await call(node, "message.list", ["friend": .string(friendID), "limit": 50])["messages"]?.arrayValue?.count ?? 0
                guard shown == 50 else { throw TandemError("message.list showed \(shown) messages, not 50") }
                if i >= 5 {
                    lists.append((clock.now - start).milliseconds)
                    listCPU.append(Self.processCPUms() - cpu)
                }
            }
            let s = Percentiles(searches), l = Percentiles(lists)
            let report: [String: Any] = [
                "benchmark": "messages --search",
                "stored_messages": rows,
                "fill_seconds": fillSeconds,
                "search_ms": s.json, "search_goal_p99_ms": 20, "search_goal_met": s.p99 <= 20,
                "search_hits_median": hits.sorted()[hits.count / 2],
                "list_newest_50_ms": l.json, "list_goal_p99_ms": 5, "list_goal_met": l.p99 <= 5,
                "search_cpu_ms": Percentiles(searchCPU).json, "list_cpu_ms": Percentiles(listCPU).json,
                "environment": started.merging(["load_average_end": loadAverage()]) { a, _ in a },
                "queries": queries,
                "store": "on disk (WAL, synchronous = FULL)",
                "note": "search: one word (or a word and a prefix) through message.search, at most 50 hits newest first with snippets; list: message.list of the newest 50; *_cpu_ms: CPU time of this process (node and caller) during each call",
            ]
            let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted])
            print(String(decoding: data, as: UTF8.self))
            FileHandle.standardError.write(Data(String(format: "messages --search: %d stored (%.0f s to fill); search p50 %.2f ms p99 %.2f ms (goal ≤ 20); list 50 p50 %.2f ms p99 %.2f ms (goal ≤ 5); CPU per call p99: search %.2f ms, list %.2f ms\n",
                                                       rows, fillSeconds, s.p50, s.p99, l.p50, l.p99,
                                                       Percentiles(searchCPU).p99, Percentiles(listCPU).p99).utf8))
            tasks.cancelAll()
        }
    }

    /// CPU time of this process so far, in milliseconds (`CLOCK_PROCESS_CPUTIME_ID`: nanoseconds, not ticks).
    static func processCPUms() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t)
        return Double(t.tv_sec) * 1000 + Double(t.tv_nsec) / 1_000_000
    }
}

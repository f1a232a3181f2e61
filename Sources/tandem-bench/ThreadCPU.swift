import Foundation

/// The CPU time of each thread of a process (Linux: `/proc/PID/task/*/schedstat`, nanoseconds
/// on a CPU; name and nice value from `stat`), to split a process's CPU per byte or per message
/// between its threads (`tandem-bench message-files` and `messages`, messages.md 11.4, 11.6).
struct ThreadCPU {
    struct Thread {
        var name: String
        var nice: Int
        var nanos: UInt64
    }

    var threads: [Int: Thread]

    /// The threads of process `pid` (nil: this one) now.
    static func now(_ pid: Int32? = nil) -> ThreadCPU {
        var threads: [Int: Thread] = [:]
        let dir = "/proc/\(pid.map(String.init) ?? "self")/task"
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        for entry in tasks {
            guard let tid = Int(entry),
                  let stat = try? String(contentsOfFile: "\(dir)/\(entry)/stat", encoding: .utf8),
                  let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")"),
                  let sched = try? String(contentsOfFile: "\(dir)/\(entry)/schedstat", encoding: .utf8),
                  let nanos = sched.split(separator: " ").first.flatMap({ UInt64($0) }) else { continue }
            let name = String(stat[stat.index(after: open)..<close])
            // After ") ": state is field 3, nice field 19.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            let nice = fields.count > 16 ? Int(fields[16]) ?? 0 : 0
            threads[tid] = Thread(name: name, nice: nice, nanos: nanos)
        }
        return ThreadCPU(threads: threads)
    }

    /// What a node's thread is, by name and priority: the node core (the only thread with a nice
    /// increment, `CoreExecutor`), the event loops, the file lanes and other NIO thread pools, and
    /// Swift concurrency's cooperative pool (the tasks around them).
    static func role(_ t: Thread) -> String {
        if t.nice > 0 { return "core" }
        if t.name.hasPrefix("NIO-ELT") || t.name.hasPrefix("NIO-SGLTN") { return "event_loops" }
        if t.name.hasPrefix("TP-#") || t.name.hasPrefix("SGLTN-TP") { return "thread_pools" }
        if t.name.contains("qos") { return "swift_tasks" }
        return "other"
    }

    /// CPU nanoseconds per role (and per thread, busiest first) from `earlier` to `self`, as JSON:
    /// per file byte, and each thread's share of `seconds` of wall-clock time (1 = a whole core).
    func since(_ earlier: ThreadCPU, bytes: Int64, seconds: Double) -> [String: Any] {
        var roles: [String: UInt64] = [:]
        var each: [(String, UInt64)] = []
        for (tid, t) in threads {
            let used = t.nanos &- (earlier.threads[tid]?.nanos ?? 0)
            guard used < UInt64(Int64.max), used > 0 else { continue }
            roles[Self.role(t), default: 0] += used
            each.append(("\(t.name)#\(tid)\(t.nice > 0 ? " nice \(t.nice)" : "")", used))
        }
        each.sort { $0.1 > $1.1 }
        let perByte = { (n: UInt64) in round3(Double(n) / Double(max(1, bytes))) }
        return [
            "ns_per_byte": roles.mapValues(perByte),
            "busiest_threads": each.prefix(8).map { ["thread": $0.0, "ns_per_byte": perByte($0.1),
                                                    "busy_share": round3(Double($0.1) / 1e9 / max(seconds, 1e-9))] as [String: Any] },
        ]
    }

    /// Each thread's CPU since `earlier` (threads that spent at least 10 ms), busiest first, as
    /// `[{"thread": name, "tid": id, "cpu_seconds": s, "ms_per_message": …}]`.
    func since(_ earlier: ThreadCPU, messages: Int) -> [[String: Any]] {
        threads.compactMap { tid, t -> (Int, String, Double)? in
            let spent = Double(t.nanos &- (earlier.threads[tid]?.nanos ?? 0)) / 1e9
            return spent >= 0.01 && spent < 1e9 ? (tid, t.name, spent) : nil
        }
        .sorted { $0.2 > $1.2 }
        .map { ["thread": $0.1, "tid": $0.0, "cpu_seconds": $0.2, "ms_per_message": 1000 * $0.2 / Double(max(messages, 1))] }
    }

    /// For a JSON line (the child reports its threads to the parent): tid → [name, nice, nanos].
    var json: [String: [Any]] {
        Dictionary(uniqueKeysWithValues: threads.map { (String($0.key), [$0.value.name, $0.value.nice, Int($0.value.nanos)] as [Any]) })
    }

    init(threads: [Int: Thread]) { self.threads = threads }

    init(json: Any?) {
        var threads: [Int: Thread] = [:]
        for (k, v) in json as? [String: [Any]] ?? [:] {
            guard let tid = Int(k), v.count == 3, let name = v[0] as? String, let nice = v[1] as? Int, let n = v[2] as? Int else { continue }
            threads[tid] = Thread(name: name, nice: nice, nanos: UInt64(max(0, n)))
        }
        self.threads = threads
    }
}

import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Backups of your vault that friends hold for you (and theirs that you hold).",
        discussion: """
        A friend offers space (`tandem backup offer YOUR-ID --quota 10GiB` on their node); your node then pushes \
        snapshots of your vault there: the encrypted index and the packs the friend lacks. Friends hold ciphertext \
        only; `backup verify` makes them prove they still hold it. Your recovery kit (identity, friends, vault keys, \
        sealed under your recovery code) goes with each push, so `tandem restore` can rebuild this node from any one of them.
        """,
        subcommands: [BackupOffer.self, BackupOffers.self, BackupPush.self, BackupStatus.self, BackupVerify.self,
                      BackupSnapshots.self, BackupForget.self, BackupSchedule.self])
}

/// A byte count as people write it: 500MB, 10GiB, 1.5TB, 0 (no unit: bytes).
func parseByteCount(_ text: String) throws -> Int64 {
    let t = text.trimmingCharacters(in: .whitespaces)
    let units: [(String, Double)] = [("KiB", 1024), ("MiB", 1_048_576), ("GiB", 1_073_741_824), ("TiB", 1_099_511_627_776),
                                     ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12), ("kB", 1e3), ("B", 1)]
    var number = t
    var factor = 1.0
    for (suffix, f) in units where t.hasSuffix(suffix) {
        number = String(t.dropLast(suffix.count)).trimmingCharacters(in: .whitespaces)
        factor = f
        break
    }
    guard let v = Double(number), v >= 0, v.isFinite, v * factor <= Double(1 << 50) else {
        throw TandemError("'\(text)' is not a size (e.g. 500MB, 10GiB; at most 1 PiB)", exitCode: TandemError.usageExitCode)
    }
    return Int64(v * factor)
}

func callBackup(_ common: CommonOptions, _ method: String, _ params: [String: JSONValue] = [:], render: (JSONValue) -> Void) async throws -> JSONValue {
    let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
    let result = try await client.call(method: method, params: .object(params), timeout: .seconds(3600))
    if common.json { outputJSON(result.compactJSON) } else { render(result.terminalSafe) }
    return result
}

/// A friend in a backup answer as people know it: the name the node gave (`name`: nickname, else
/// display name, else the short ID), else the short ID of `field`. `--json` keeps the canonical ID.
func personName(_ o: JSONValue, _ field: String) -> String {
    if let n = o["name"]?.stringValue, !n.isEmpty { return n }
    return shortID(o[field]?.stringValue)
}

func shortID(_ id: String?) -> String {
    guard let id else { return "?" }
    return NodeID(id).map { "tdm1-" + $0.short + "…" } ?? id
}

struct BackupOffer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "offer", abstract: "Offer a friend space for their backups (0 or --withdraw: stop).")
    @OptionGroup var common: CommonOptions
    @Argument(help: "The friend's ID.") var friend: String
    @Option(help: ArgumentHelp("How much of their backups you hold at most (e.g. 10GiB).", valueName: "size")) var quota: String?
    @Flag(help: "Withdraw the offer: everything you hold for them is deleted.") var withdraw = false

    func validate() throws {
        guard withdraw != (quota != nil) else { throw ValidationError("give --quota SIZE, or --withdraw") }
    }

    func run() async throws {
        let bytes = withdraw ? 0 : try parseByteCount(quota ?? "0")
        _ = try await callBackup(common, "backup.offer", ["id": .string(friend), "quota_bytes": .int(bytes)]) { r in
            if bytes == 0 {
                output("Offer withdrawn: nothing is held for \(shortID(r["to"]?.stringValue)) any more.")
            } else {
                output("Offered \(bytesText(bytes)) to \(shortID(r["to"]?.stringValue)); they are told when they are next reachable.")
            }
        }
    }
}

struct BackupOffers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "offers", abstract: "What you hold for whom, and who holds yours.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        _ = try await callBackup(common, "backup.offers") { r in
            let given = r["given"]?.arrayValue ?? []
            let received = r["received"]?.arrayValue ?? []
            output(given.isEmpty ? "You hold backups for nobody." : "You hold backups for:")
            for g in given {
                output("  \(personName(g, "to"))  \(bytesText(g["used_bytes"]?.intValue ?? 0)) of \(bytesText(g["quota_bytes"]?.intValue ?? 0)), "
                    + "\(g["snapshots"]?.intValue ?? 0) snapshots")
            }
            output(received.isEmpty ? "Nobody has offered to hold yours yet." : "Offered to hold yours:")
            for o in received {
                output("  \(personName(o, "from"))  up to \(bytesText(o["quota_bytes"]?.intValue ?? 0))")
            }
        }
    }
}

struct BackupPush: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push", abstract: "Send a snapshot of your vault to the friends who hold your backups.",
        discussion: "Only what a friend lacks is sent; an interrupted push resumes where it stopped (also after a restart of either node).")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("Only this friend (default: every friend who offered).", valueName: "friend")) var to: String?
    @Flag(help: "Only over the LAN (this machine or a private network), never through a relay.") var lanOnly = false
    @Flag(help: "Return at once; the node pushes in the background (see backup status).") var background = false

    func run() async throws {
        var params: [String: JSONValue] = ["lan_only": .bool(lanOnly), "background": .bool(background)]
        if let to { params["to"] = .string(to) }
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let bar = ProgressBar(verb: "Pushing", enabled: !common.json && isatty(STDERR_FILENO) == 1)
        var failed = false
        do {
            for try await item in client.stream(method: "backup.push", params: .object(params)) {
                if let progress = item["progress"] {
                    if common.json { outputJSON(JSONValue.object(["progress": progress]).compactJSON) } else { bar.show(progress) }
                } else if let result = item["result"] {
                    bar.finish()
                    failed = !(result["failed"]?.arrayValue ?? []).isEmpty
                    if common.json { outputJSON(result.compactJSON); continue }
                    let r = result.terminalSafe
                    for s in r["started"]?.arrayValue ?? [] { output("Pushing to \(shortID(s.stringValue)) in the background.") }
                    for p in r["pushes"]?.arrayValue ?? [] {
                        output("Pushed to \(shortID(p["to"]?.stringValue)): snapshot \(p["snapshot_id"]?.stringValue?.prefix(8) ?? "?") of "
                            + "\(bytesText(p["total_bytes"]?.intValue ?? 0)), \(bytesText(p["bytes_sent"]?.intValue ?? 0)) sent "
                            + "(\(p["blobs_sent"]?.intValue ?? 0) of \(p["blobs"]?.intValue ?? 0) blobs).")
                    }
                    for f in r["failed"]?.arrayValue ?? [] { FileHandle.standardError.write(Data("tandem: push failed: \(f.stringValue ?? "")\n".utf8)) }
                }
            }
        } catch {
            bar.finish()
            throw error
        }
        if failed { throw ExitCode(1) }
    }
}

struct BackupStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Your backups at each friend: last push, pushes running.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        _ = try await callBackup(common, "backup.status") { r in
            let holders = r["holders"]?.arrayValue ?? []
            guard !holders.isEmpty else { return output("No friend holds your backups yet.") }
            for h in holders {
                var line = "\(personName(h, "id"))  quota \(bytesText(h["quota_bytes"]?.intValue ?? 0))"
                if let last = h["last_push"], last != .null {
                    let at = h["copy_at_ms"]?.intValue.map(localTimeText) ?? last["at"]?.stringValue ?? "?"
                    line += ", copy from \(at) (\(agoText(h["age_ms"]?.intValue ?? 0))): \(bytesText(last["total_bytes"]?.intValue ?? 0))"
                    if let g = h["generation"]?.intValue { line += ", generation \(g)" }
                } else {
                    line += ", never pushed"
                }
                if let since = h["behind_since"]?.stringValue { line += ", behind since \(since)" }
                if let f = h["failures"]?.intValue, f > 0 {
                    line += ", \(f) automatic push(es) failed" + (h["last_error"]?.stringValue.map { " (\($0))" } ?? "")
                }
                if let p = h["pushing"], p != .null {
                    line += ", pushing (\(bytesText(p["done"]?.intValue ?? 0)) of \(bytesText(p["total"]?.intValue ?? 0)))"
                } else if h["pending"]?.boolValue == true {
                    line += ", push pending"
                }
                output(line)
            }
        }
    }
}

struct BackupVerify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify", abstract: "Make friends prove they still hold your backups (exit 1 if one does not).",
        discussion: "Each friend hashes randomly chosen blobs with a fresh random key; only the real data gives the right answer.")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("Only this friend.", valueName: "friend")) var from: String?
    @Flag(help: "Check every blob, not a random sample.") var all = false
    @Option(help: ArgumentHelp("How many random blobs to check per friend.", valueName: "n")) var count = 32

    func run() async throws {
        var params: [String: JSONValue] = ["all": .bool(all), "count": .int(Int64(count))]
        if let from { params["from"] = .string(from) }
        let result = try await callBackup(common, "backup.verify", params) { r in
            for h in r["holders"]?.arrayValue ?? [] {
                let failures = h["failures"]?.arrayValue ?? []
                if let note = h["note"]?.stringValue { output("\(personName(h, "from")): \(note)"); continue }
                output("\(personName(h, "from")): \(h["checked"]?.intValue ?? 0) blobs checked, \(failures.count) failed")
                for f in failures {
                    output("  holder \(personName(h, "from")) \(f["problem"]?.stringValue ?? "lost or altered") blob \(f["blob"]?.stringValue ?? "?")")
                }
            }
        }
        if result["ok"]?.boolValue != true { throw ExitCode(1) }
    }
}

struct BackupSnapshots: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "snapshots", abstract: "The snapshots each friend holds for you.")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("Only this friend.", valueName: "friend")) var from: String?

    func run() async throws {
        var params: [String: JSONValue] = [:]
        if let from { params["from"] = .string(from) }
        _ = try await callBackup(common, "backup.snapshots", params) { r in
            for h in r["holders"]?.arrayValue ?? [] {
                output("\(personName(h, "from")): \(bytesText(h["used_bytes"]?.intValue ?? 0)) of \(bytesText(h["quota_bytes"]?.intValue ?? 0))")
                for s in h["snapshots"]?.arrayValue ?? [] {
                    output("  \(s["id"]?.stringValue?.prefix(8) ?? "?")  \(s["created"]?.stringValue ?? "?")  \(bytesText(s["total_bytes"]?.intValue ?? 0)), "
                        + "\(s["blobs"]?.intValue ?? 0) blobs")
                }
            }
        }
    }
}

struct BackupForget: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "forget", abstract: "Keep only the newest snapshots at each friend; the rest is freed.")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("Snapshots to keep (1-64).", valueName: "n")) var keepLast: Int
    @Option(help: ArgumentHelp("Only this friend.", valueName: "friend")) var from: String?

    func run() async throws {
        var params: [String: JSONValue] = ["keep_last": .int(Int64(keepLast))]
        if let from { params["from"] = .string(from) }
        _ = try await callBackup(common, "backup.forget", params) { r in
            for h in r["holders"]?.arrayValue ?? [] {
                output("\(personName(h, "from")): \(h["freed_blobs"]?.intValue ?? 0) blobs freed, \(bytesText(h["used_bytes"]?.intValue ?? 0)) used")
            }
        }
    }
}

struct BackupSchedule: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedule", abstract: "When your node pushes by itself: a delay after each change, and at least daily.",
        discussion: """
        After a change that matters (the vault, the ledger, a friend) the node pushes to every friend holding your \
        backups once the delay has passed (default 5m), and at least once a day (--daily on). A friend that is \
        offline is tried again after 1 minute, doubling up to an hour. Without options: shows the schedule.
        """)
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("How long after a change to push (e.g. 30s, 5m, 1h; 0 = at once).", valueName: "duration")) var delay: String?
    @Option(help: ArgumentHelp("Push at least once a day: on or off.", valueName: "on|off")) var daily: String?

    static func parseDelay(_ text: String) throws -> Int64 {
        let ms: Int64
        do {
            ms = try durationMs(text)
        } catch {
            throw TandemError("--delay: '\(String(text.prefix(40)).terminalSafe)' is not a duration (e.g. 30s, 5m, 1h)", exitCode: TandemError.usageExitCode)
        }
        guard (0...604_800_000).contains(ms) else { throw TandemError("--delay is 0 to 7 days", exitCode: TandemError.usageExitCode) }
        return ms
    }

    func run() async throws {
        var params: [String: JSONValue] = [:]
        if let delay { params["delay_ms"] = .int(try Self.parseDelay(delay)) }
        if let daily {
            switch daily.lowercased() {
            case "on", "yes", "true": params["daily"] = .bool(true)
            case "off", "no", "false": params["daily"] = .bool(false)
            default: throw TandemError("--daily is on or off", exitCode: TandemError.usageExitCode)
            }
        }
        _ = try await callBackup(common, "backup.schedule", params) { r in
            let ms = r["delay_ms"]?.intValue ?? 0
            output("Automatic pushes: " + (ms == 0 ? "at once" : DurationText.format(.milliseconds(ms))) + " after a change" + (r["daily"]?.boolValue == true ? ", and at least daily." : "; no daily push."))
        }
    }
}

/// "3 hours ago", "just now".
func agoText(_ ms: Int64) -> String {
    let s = max(ms, 0) / 1000
    if s < 60 { return "just now" }
    if s < 3600 { return "\(s / 60) minute\(s / 60 == 1 ? "" : "s") ago" }
    if s < 86_400 { return "\(s / 3600) hour\(s / 3600 == 1 ? "" : "s") ago" }
    return "\(s / 86_400) day\(s / 86_400 == 1 ? "" : "s") ago"
}

/// A wall-clock time in ms as the local time, e.g. "2026-11-29 14:05".
func localTimeText(_ ms: Int64) -> String {
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = .current
    f.dateFormat = "yyyy-MM-dd HH:mm"
    return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
}

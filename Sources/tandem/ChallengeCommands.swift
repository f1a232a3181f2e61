import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

/// Milliseconds of a duration text such as 30m, 1h30m, 90s.
func durationMs(_ text: String, what: String) throws -> Int64 {
    let d = try DurationText.parse(text)
    let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
    guard ms > 0 else { throw TandemError("\(what) must be longer than 0", exitCode: TandemError.usageExitCode) }
    return ms
}

func clockText(_ ms: Int64) -> String {
    let s = max(0, ms) / 1000
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60)
    return h > 0 ? String(format: "%d:%02d:%02d", h, m, sec) : String(format: "%02d:%02d", m, sec)
}

func personLabel(_ p: JSONValue) -> String {
    let name = p["name"]?.stringValue ?? ""
    let id = p["id"]?.stringValue ?? "?"
    let short = NodeID(id).map { "tdm1-" + $0.short + "…" } ?? id
    if p["me"]?.boolValue == true { return "you" }
    return name.isEmpty ? short : name
}

/// What a participant is doing, in a word or two.
func participantState(_ p: JSONValue, phase: String) -> String {
    if let r = p["result"]?.stringValue {
        if r == "quit" { return "quit at \(clockText(p["quit_elapsed_ms"]?.intValue ?? 0))" + quitReason(p["reason"]) }
        if p["out_of_contact"]?.boolValue == true { return "out of contact" }
        if r == "running" { return phase == "running" ? "focusing" : "ready" }
        return r.replacingOccurrences(of: "_", with: " ")
    }
    return p["answer"]?.stringValue ?? "?"
}

/// A quit's reason as people read it after the time: ` (“too tired”)`, or nothing.
func quitReason(_ r: JSONValue?) -> String {
    guard let text = r?.stringValue, !text.isEmpty else { return "" }
    return " (“\(text.terminalSafe)”)"
}

func challengeLine(_ c: JSONValue) -> String {
    let phase = c["phase"]?.stringValue ?? "?"
    let short = c["short"]?.stringValue ?? "?"
    let others = (c["participants"]?.arrayValue ?? []).filter { $0["me"]?.boolValue != true }.map(personLabel)
    let with = c["solo"]?.boolValue == true ? "solo" : "with " + others.joined(separator: ", ")
    var line = "\(short)  \(phase)  \(clockText(c["duration_ms"]?.intValue ?? 0))  \(with)"
    if phase == "running" { line += "  \(clockText(c["remaining_ms"]?.intValue ?? 0)) left" }
    if phase == "scheduled" { line += "  starts in \(clockText(c["starts_in_ms"]?.intValue ?? 0))" }
    if phase == "ended", let r = c["result"]?.stringValue { line += "  you: \(r.replacingOccurrences(of: "_", with: " "))" }
    if let m = c["message"]?.stringValue, !m.isEmpty { line += "  “\(m)”" }
    return line
}

func printChallenge(_ c: JSONValue) {
    output(challengeLine(c))
    if let start = c["start_at"]?.stringValue {
        output("  start \(PeopleText.when(start))\(c["end_at"]?.stringValue.map { "  end \(PeopleText.when($0))" } ?? "")")
    }
    let phase = c["phase"]?.stringValue ?? ""
    for p in c["participants"]?.arrayValue ?? [] {
        output("  \(personLabel(p)): \(participantState(p, phase: phase))")
    }
    output("  id \(c["id"]?.stringValue ?? "?")")
}

struct ChallengeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "challenge",
        abstract: "Focus challenges with friends: invite, answer, watch the shared countdown, quit.",
        discussion: """
        A challenge starts at the same instant on every participant's node (clocks are compared over the links, \
        so a wrong clock does not matter) and ends together. Quitting early tells everyone at once. At the end \
        every participant signs the outcome; the co-signed record goes into each one's ledger (tandem ledger).
        A challenge is named by its id or any unique prefix of at least 4 hex digits (tandem challenge list).
        """,
        subcommands: [ChallengeInvite.self, ChallengeList.self, ChallengeShow.self, ChallengeAccept.self, ChallengeDecline.self,
                      ChallengeCancel.self, ChallengeQuit.self, ChallengeWatch.self])
}

struct ChallengeInvite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "invite", abstract: "Invite one or more friends to focus with you.",
        discussion: """
        With one friend and no start time, the challenge starts 2 s after they accept. A group (or any challenge \
        with --start-in/--start-at) starts at that time with everyone who accepted by then; a group without a \
        start time starts in 1 minute. Unanswered invites expire (10 minutes after sending without a start time).
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Friends' Tandem IDs.", valueName: "ID")) var ids: [String]
    @Option(help: ArgumentHelp("How long to focus: 30m, 1h, 90s, 1h30m.", valueName: "duration")) var duration: String
    @Option(help: ArgumentHelp("Start this long from now (e.g. 2m).", valueName: "duration")) var startIn: String?
    @Option(help: ArgumentHelp("Start at this time: HH:MM[:SS] today (or tomorrow if past) or ISO 8601.", valueName: "time")) var startAt: String?
    @Option(help: "A short note (at most 280 bytes).") var message: String = ""
    @Option(help: ArgumentHelp("How long a silent partner stays in before counting as out of contact.", valueName: "duration")) var grace: String?
    @Option(help: ArgumentHelp("Lock this focus mode on your node from the start to the end; its main key ends it early (a quit).", valueName: "mode")) var mode: String?

    func validate() throws {
        if startIn != nil && startAt != nil { throw ValidationError("give --start-in or --start-at, not both") }
        if ids.isEmpty { throw ValidationError("name at least one friend") }
    }

    func run() async throws {
        var params: [String: JSONValue] = [
            "ids": .array(try ids.map { .string(try parseID($0).canonical) }),
            "duration_ms": .int(try durationMs(duration, what: "--duration")),
            "message": .string(message),
        ]
        if let startIn { params["start_in_ms"] = .int(try durationMs(startIn, what: "--start-in")) }
        if let startAt { params["start_at_ms"] = .int(try parseClockTime(startAt)) }
        if let mode { params["mode"] = .string(mode) }
        if let grace { params["grace_ms"] = .int(try durationMs(grace, what: "--grace")) }
        try await callNode(common, "challenge.invite", .object(params)) { c in
            output("Invited: \(challengeLine(c))")
            output("Watch it with: tandem challenge watch \(c["short"]?.stringValue ?? "")")
        }
    }
}

/// ms since the epoch of "HH:MM[:SS]" (today, or tomorrow when already past) or an ISO 8601 time.
func parseClockTime(_ text: String) throws -> Int64 {
    let iso = ISO8601DateFormatter()
    if let d = iso.date(from: text) { return Int64(d.timeIntervalSince1970 * 1000) }
    let parts = text.split(separator: ":").map { Int($0) }
    guard (2...3).contains(parts.count), parts.allSatisfy({ $0 != nil }) else {
        throw TandemError("'\(text)' is not a time (HH:MM, HH:MM:SS or ISO 8601)", exitCode: TandemError.usageExitCode)
    }
    let (h, m, s) = (parts[0]!, parts[1]!, parts.count == 3 ? parts[2]! : 0)
    guard (0..<24).contains(h), (0..<60).contains(m), (0..<60).contains(s) else {
        throw TandemError("'\(text)' is not a time of day", exitCode: TandemError.usageExitCode)
    }
    let cal = Calendar.current
    var date = cal.date(bySettingHour: h, minute: m, second: s, of: Date())!
    if date < Date() { date = cal.date(byAdding: .day, value: 1, to: date)! }
    return Int64(date.timeIntervalSince1970 * 1000)
}

struct ChallengeList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "Challenges: open invites, scheduled, running and recent.")
    @OptionGroup var common: CommonOptions
    @Flag(help: "Every stored challenge, also declined, expired and cancelled ones.") var all = false

    func run() async throws {
        try await callNode(common, "challenge.list", .object(["all": .bool(all)])) { r in
            let list = r["challenges"]?.arrayValue ?? []
            if list.isEmpty { output("No challenges yet: tandem challenge invite ID --duration 30m") }
            for c in list { output(challengeLine(c)) }
        }
    }
}

struct ChallengeShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "One challenge in detail.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The challenge id or a unique prefix.", valueName: "id")) var id: String

    func run() async throws {
        try await callNode(common, "challenge.show", .object(["id": .string(id)])) { printChallenge($0) }
    }
}

struct ChallengeAccept: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "accept", abstract: "Accept an invite.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The challenge id or a unique prefix.", valueName: "id")) var id: String
    @Option(help: ArgumentHelp("Lock this focus mode on your node from the start to the end; its main key ends it early (a quit).", valueName: "mode")) var mode: String?

    func run() async throws {
        var params: [String: JSONValue] = ["id": .string(id)]
        if let mode { params["mode"] = .string(mode) }
        try await callNode(common, "challenge.accept", .object(params)) { c in
            output("Accepted: \(challengeLine(c))")
            output("It starts when the inviter's node confirms; watch it with: tandem challenge watch \(c["short"]?.stringValue ?? id)")
        }
    }
}

struct ChallengeDecline: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "decline", abstract: "Decline an invite (the others are told).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The challenge id or a unique prefix.", valueName: "id")) var id: String

    func run() async throws {
        try await callNode(common, "challenge.decline", .object(["id": .string(id)])) { c in output("Declined: \(challengeLine(c))") }
    }
}

struct ChallengeCancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cancel", abstract: "Call off a challenge you sent, before it starts.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The challenge id or a unique prefix.", valueName: "id")) var id: String
    @Option(help: "Why (at most 280 bytes).") var reason: String = ""

    func run() async throws {
        try await callNode(common, "challenge.cancel", .object(["id": .string(id), "reason": .string(reason)])) { c in
            output("Cancelled: \(challengeLine(c))")
        }
    }
}

struct ChallengeQuit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quit", abstract: "Quit a running challenge early; every partner is told at once.",
        discussion: "Your early exit is signed and recorded in everyone's ledger; the others go on.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The challenge id or a unique prefix.", valueName: "id")) var id: String
    @Option(help: "Why (at most 280 bytes).") var reason: String = ""

    func run() async throws {
        try await callNode(common, "challenge.quit", .object(["id": .string(id), "reason": .string(reason)])) { c in
            let me = (c["participants"]?.arrayValue ?? []).first { $0["me"]?.boolValue == true }
            output("You quit after \(clockText(me?["quit_elapsed_ms"]?.intValue ?? 0)); your partners have been told.")
        }
    }
}

struct ChallengeWatch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch", abstract: "A live countdown: time left, a progress bar, each partner's state.",
        discussion: "Updates every second until the challenge is over. With --json, one JSON object per second (a tick) and a last one when it ends.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The challenge id or a unique prefix.", valueName: "id")) var id: String

    func run() async throws {
        try await watchChallenge(common, method: "challenge.show", params: .object(["id": .string(id)]))
    }
}

/// Polls the node once a second and redraws the countdown until the challenge is over.
func watchChallenge(_ common: CommonOptions, method: String, params: JSONValue) async throws {
    let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
    let tty = isatty(STDOUT_FILENO) == 1 && !common.json
    var drawn = 0
    while true {
        let c = try await client.call(method: method, params: params)
        let phase = c["phase"]?.stringValue ?? "?"
        let over = ["ended", "declined", "expired", "cancelled"].contains(phase)
        if common.json {
            var tick = c
            if case .object(var o) = tick { o["tick_at"] = JSONValue.iso(Int64(Date().timeIntervalSince1970 * 1000)); tick = .object(o) }
            outputJSON(tick.compactJSON)
        } else {
            let lines = countdownLines(c.terminalSafe, width: terminalWidth())
            // On a terminal, redraw in place: cursor up over the last frame, clear each line.
            let up = tty && drawn > 0 ? "\u{1B}[\(drawn)A" : ""
            output(up + lines.map { tty ? "\u{1B}[2K" + $0 : $0 }.joined(separator: "\n"))
            drawn = lines.count
        }
        if over { return }
        try await Task.sleep(for: .seconds(1))
    }
}

func terminalWidth() -> Int {
    var w = winsize()
    if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &w) == 0, w.ws_col > 0 { return Int(w.ws_col) }
    return 80
}

/// The countdown as a few lines that fit `width` columns.
func countdownLines(_ c: JSONValue, width: Int) -> [String] {
    let phase = c["phase"]?.stringValue ?? "?"
    let duration = c["duration_ms"]?.intValue ?? 0
    let remaining = c["remaining_ms"]?.intValue ?? duration
    let elapsed = duration - remaining
    let fraction = duration > 0 ? Double(elapsed) / Double(duration) : 0
    var head: String
    switch phase {
    case "running": head = "\(clockText(remaining)) left"
    case "scheduled": head = "starts in \(clockText(c["starts_in_ms"]?.intValue ?? 0))"
    case "ended": head = "over: \((c["result"]?.stringValue ?? "?").replacingOccurrences(of: "_", with: " "))"
    default: head = phase
    }
    let barWidth = max(5, min(40, width - head.count - 8))
    let filled = Int((Double(barWidth) * fraction).rounded(.down))
    let bar = "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: barWidth - filled) + "]"
    var lines = ["\(head) \(bar) \(Int(fraction * 100))%"]
    if width < head.count + barWidth + 8 { lines = [head, "\(bar) \(Int(fraction * 100))%"] }
    for p in c["participants"]?.arrayValue ?? [] where p["in_roster"]?.boolValue != false || phase == "invited" {
        let line = "  \(personLabel(p)): \(participantState(p, phase: phase))"
        lines.append(String(line.prefix(max(10, width))))
    }
    return lines
}

struct Focus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Solo focus sessions: the same countdown without partners; friends see you as focusing.",
        subcommands: [FocusStart.self, FocusStatus.self, FocusQuit.self])
}

struct FocusStart: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "start", abstract: "Start a solo focus session now.")
    @OptionGroup var common: CommonOptions
    @Option(help: ArgumentHelp("How long: 25m, 1h, 90s.", valueName: "duration")) var duration: String
    @Flag(help: "Show the live countdown until the session ends.") var watch = false
    @Option(help: ArgumentHelp("Lock this focus mode for the session; its main key ends it early (a quit).", valueName: "mode")) var mode: String?

    func run() async throws {
        let ms = try durationMs(duration, what: "--duration")
        var id = ""
        var params: [String: JSONValue] = ["duration_ms": .int(ms)]
        if let mode { params["mode"] = .string(mode) }
        try await callNode(common, "focus.start", .object(params)) { c in
            id = c["id"]?.stringValue ?? ""
            // With a locked mode only its main key ends the session early (focus quit is refused then).
            output("Focus session started: \(clockText(ms)); "
                   + (mode == nil ? "quit early with `tandem focus quit`." : "mode \(mode!.terminalSafe) is locked; its main key ends it early (`tandem unlock --yes …`)."))
        }
        if watch { try await watchChallenge(common, method: "challenge.show", params: .object(["id": .string(id)])) }
    }
}

struct FocusStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "The running solo session, if any.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "focus.status") { r in
            guard let s = r["session"], !s.isNull else { output("No focus session running."); return }
            output(countdownLines(s, width: terminalWidth()).first ?? "")
        }
    }
}

struct FocusQuit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "quit", abstract: "End the solo session early (recorded as quit).")
    @OptionGroup var common: CommonOptions
    @Option(help: "Why (at most 280 bytes).") var reason: String = ""

    func run() async throws {
        try await callNode(common, "focus.quit", .object(["reason": .string(reason)])) { c in
            let me = (c["participants"]?.arrayValue ?? []).first { $0["me"]?.boolValue == true }
            output("Focus session quit after \(clockText(me?["quit_elapsed_ms"]?.intValue ?? 0)); it is in your ledger.")
        }
    }
}

struct LedgerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ledger",
        abstract: "Your accountability ledger: every finished challenge, co-signed by its participants, hash-chained.",
        subcommands: [LedgerList.self, LedgerVerify.self], defaultSubcommand: LedgerList.self)
}

struct LedgerList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the ledger's entries, oldest first.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "ledger.list") { r in
            let entries = r["entries"]?.arrayValue ?? []
            if entries.isEmpty { output("The ledger is empty: finish a challenge or a focus session.") }
            for e in entries {
                let outcomes = (e["outcomes"]?.arrayValue ?? []).map { o -> String in
                    let who = o["name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } ?? String((o["id"]?.stringValue ?? "?").prefix(12))
                    var r = (o["result"]?.stringValue ?? "?").replacingOccurrences(of: "_", with: " ")
                    if r == "quit" { r += " at \(clockText(o["elapsed_ms"]?.intValue ?? 0))" + quitReason(o["reason"]) }
                    return "\(who): \(r)"
                }
                output("#\(e["seq"]?.intValue ?? 0)  \(PeopleText.when(e["committed_at"]?.stringValue))  \(clockText(e["duration_ms"]?.intValue ?? 0))  \(outcomes.joined(separator: ", "))  \(e["signers"]?.arrayValue?.count ?? 0) signatures  \(String((e["hash"]?.stringValue ?? "").prefix(16)))")
                for c in e["cheers"]?.arrayValue ?? [] {
                    let who = c["from_name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } ?? String((c["from"]?.stringValue ?? "?").prefix(12))
                    let text = c["text"]?.stringValue ?? ""
                    output("    \(c["emoji"]?.stringValue ?? "") from \(who)\(text.isEmpty ? "" : ": " + text)")
                }
            }
        }
    }
}

struct LedgerVerify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify", abstract: "Check every signature and the hash chain; report the first break (exit 1).")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let r = try await client.call(method: "ledger.verify", params: .object([:]))
        if common.json { outputJSON(r.compactJSON) }
        if r["ok"]?.boolValue == true {
            if !common.json { output("The ledger holds: \(r["entries"]?.intValue ?? 0) entries, every signature and link checked.") }
            return
        }
        let seq = r["break"]?["seq"]?.intValue ?? 0
        throw TandemError("the ledger is broken at entry \(seq): \(r["break"]?["reason"]?.stringValue ?? "?")", exitCode: 1)
    }
}

struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Completed and failed challenges, focused minutes, daily streaks (from the ledger).")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "stats") { r in
            func n(_ k: String) -> Int64 { r[k]?.intValue ?? 0 }
            output("Challenges: \(n("challenges_completed")) completed, \(n("challenges_failed")) failed")
            output("Solo sessions: \(n("solo_completed")) completed, \(n("solo_failed")) failed")
            output("Focused: \(n("focused_minutes")) minutes")
            output("Streak: \(n("current_streak_days")) days (longest \(n("longest_streak_days")))")
            output("Cheers received: \(n("cheers_received"))")
            let recent = r["recent"]?.arrayValue ?? []
            if !recent.isEmpty { output("Recent:") }
            for e in recent {
                var result = (e["result"]?.stringValue ?? "?").replacingOccurrences(of: "_", with: " ")
                if e["solo"]?.boolValue == true { result = "solo, " + result }
                output("  #\(e["seq"]?.intValue ?? 0)  \(e["committed_at"]?.stringValue ?? "")  \(clockText(e["duration_ms"]?.intValue ?? 0))  \(result)")
                // The cheers beside the entry they are about.
                for c in e["cheers"]?.arrayValue ?? [] {
                    let who = c["from_name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } ?? String((c["from"]?.stringValue ?? "?").prefix(12))
                    let text = c["text"]?.stringValue ?? ""
                    output("      \(c["emoji"]?.stringValue ?? "") from \(who)\(text.isEmpty ? "" : ": " + text)")
                }
            }
        }
    }
}

import ArgumentParser
import Foundation
import TandemNet
import TandemNodeCore
import TandemProtocol

/// Calls the running node; prints JSON with --json, else `render` gets the raw answer (each
/// renderer makes what it prints terminal-safe: message text through `ChatText.terminalSafe`,
/// which keeps its line breaks, everything else through `terminalSafe`).
private func callMessages(_ common: CommonOptions, _ method: String, _ params: JSONValue,
                          render: (JSONValue) -> Void) async throws {
    let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
    defer { client.close() }
    let result = try await client.call(method: method, params: params)
    if common.json { outputJSON(result.compactJSON) } else { render(result) }
}

private func usageError(_ text: String) -> TandemError { TandemError(text, exitCode: TandemError.usageExitCode) }

/// A message's text from an argument, or from standard input for `-`: valid UTF-8, at most 16 KiB
/// (the node normalises to NFC and checks again).
func messageText(_ argument: String) throws -> String {
    var text = argument
    if argument == "-" {
        let data = FileHandle.standardInput.readDataToEndOfFile()
        guard let s = String(validating: data, as: UTF8.self) else { throw usageError("standard input is not valid UTF-8") }
        text = s
        if text.hasSuffix("\n") { text.removeLast() }  // the line feed a shell or `echo` adds
    }
    guard text.utf8.count <= ChatLimits.textBytes else {
        throw usageError("the message is \(text.utf8.count) bytes; at most \(ChatLimits.textBytes) bytes of UTF-8")
    }
    guard !text.isEmpty else { throw usageError("the message is empty") }
    return text
}

/// An ISO 8601 instant as local time for people: "2026-11-28 21:50:03".
func localTime(_ iso: String?) -> String {
    guard let iso else { return "?" }
    let parse = ISO8601DateFormatter()
    parse.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    guard let date = parse.date(from: iso) else { return iso.terminalSafe }
    let f = DateFormatter()
    f.dateFormat = "yyyy-MM-dd HH:mm:ss"
    f.timeZone = .current
    return f.string(from: date)
}

/// Who wrote a message, as the person knows them: their nickname or display name (terminal-safe),
/// else the short form of their ID.
func authorLabel(_ m: JSONValue) -> String {
    if let name = m["author_name"]?.stringValue, !name.isEmpty { return name.terminalSafe }
    return NodeID(m["author"]?.stringValue ?? "").map { "tdm1-" + $0.short + "…" } ?? "?"
}

func messageLine(_ m: JSONValue) -> String {
    let id = String((m["id"]?.stringValue ?? "?").prefix(8))
    let who = m["me"]?.boolValue == true ? "you" : authorLabel(m)
    let state = (m["state"]?.stringValue ?? "?").terminalSafe
    var line = "\(localTime(m["sent_at"]?.stringValue))  \(id)  \(who) [\(state)]"
    if let r = m["reply_to"]?.stringValue { line += " ↪ \(r.prefix(8))" }
    let text = m["retracted"]?.boolValue == true ? "(message retracted)" : ChatText.terminalSafe(m["text"]?.stringValue ?? "")
    line += ": " + text
    let reactions = (m["reactions"]?.arrayValue ?? []).compactMap { $0["emoji"]?.stringValue.map(ChatText.terminalSafe) }
    if !reactions.isEmpty { line += "  " + reactions.joined(separator: " ") }
    if let file = m["file"], let summary = fileSummary(file) { line += "  " + summary }
    return line
}

struct MessageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "message",
        abstract: "Messages between friends: send, list, react, retract, search.",
        discussion: """
        A message is durable in your node's outbox when `send` returns; it reaches the friend over a link \
        when there is one (exactly once, in order), and is `delivered` once stored on the friend's node. \
        FRIEND is a friend's Tandem ID or display name; a message is named by its id or a unique prefix \
        of at least 6 hex digits (tandem message list).
        """,
        subcommands: [MessageSend.self, MessageList.self, MessageReact.self, MessageRetract.self, MessageSearch.self,
                      MessageSettings.self, MessageSave.self, MessageAcceptFile.self, MessageCancelFile.self, MessageFileSettings.self])
}

struct MessageSend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send", abstract: "Send a message to a friend (or to a challenge's thread).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The friend's name or Tandem ID (omit with --challenge).", valueName: "friend")) var friend: String?
    @Argument(help: ArgumentHelp("The text, or - to read it from standard input (at most 16 KiB of UTF-8).", valueName: "text"))
    var text: String?
    @Option(help: ArgumentHelp("Reply to this message.", valueName: "id")) var replyTo: String?
    @Option(help: ArgumentHelp("Write to this challenge's thread (its full id).", valueName: "id")) var challenge: String?
    @Option(help: ArgumentHelp("Wait until the message is `delivered` (stored on the friend's node); with --file, until it is `sent` "
                               + "(the friend fetched all of it; a progress bar on a terminal).", valueName: "delivered|sent"))
    var wait: String?
    @Option(help: ArgumentHelp("How long --wait waits (exit 6 past it).", valueName: "duration")) var timeout: String = "30s"
    @Option(help: ArgumentHelp("Offer this file (up to 4 GiB) to the friend or, with --challenge, in the thread; the text, if any, is its caption.",
                               valueName: "path")) var file: String?

    func validate() throws {
        if file != nil {
            if challenge != nil {
                // `send --challenge ID --file PATH [CAPTION]`: the one argument, if any, is the caption.
                if text != nil { throw ValidationError("with --challenge, give only --file PATH and, if you like, a caption") }
            } else if friend == nil {
                throw ValidationError("give a friend and --file PATH")
            }
            if let wait, wait != "sent" { throw ValidationError("with --file, --wait takes `sent` (the friend fetched all of it)") }
            _ = try DurationText.parse(timeout)
            return
        }
        if let wait, wait != "delivered" { throw ValidationError("--wait takes `delivered`") }
        if challenge != nil {
            if text == nil, friend != nil { return }  // `send --challenge ID TEXT`: the one argument is the text
            if text != nil { throw ValidationError("with --challenge, give only the text") }
        }
        if friend == nil || text == nil { throw ValidationError("give a friend and the text (or - for standard input)") }
        _ = try DurationText.parse(timeout)
    }

    func run() async throws {
        if let file {
            let caption = try (challenge != nil ? friend : text).map(messageText)
            let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
            defer { client.close() }
            let r = try await sendFile(client, to: challenge != nil ? nil : friend, challenge: challenge, path: file, caption: caption)
            if wait != nil, let fileID = r["file_id"]?.stringValue {
                _ = try await followFile(client, id: fileID, verb: "Sending", until: "sent", timeout: try DurationText.parse(timeout),
                                         bar: !common.json)
            }
            if common.json { return outputJSON(r.compactJSON) }
            return output("Offered \(ChatText.terminalSafe(r["name"]?.stringValue ?? "")) (\(byteText(r["size"]?.intValue ?? 0))) "
                          + "with message \(r["id"]?.stringValue ?? "?").")
        }
        let body = try messageText(challenge != nil ? (friend ?? "") : (text ?? ""))
        var params: [String: JSONValue] = ["text": .string(body)]
        if let challenge { params["challenge"] = .string(challenge) } else { params["to"] = .string(friend ?? "") }
        if let replyTo { params["reply_to"] = .string(replyTo) }
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer { client.close() }
        let since = wait == nil ? 0 : (try await client.call(method: "events.list", params: ["limit": 0])["last_seq"]?.intValue ?? 0)
        let sent = try await client.call(method: "message.send", params: .object(params))
        let id = sent["id"]?.stringValue ?? ""
        var delivered: NodeEvent?
        if wait != nil {
            let limit = try DurationText.parse(timeout)
            delivered = try await withThrowingTaskGroup(of: NodeEvent?.self) { group in
                group.addTask {
                    try await Wait.firstMatch(client: client, type: "message.delivered",
                                              conditions: [FieldCondition(key: "id", value: id)], since: since)
                }
                group.addTask {
                    try await Task.sleep(for: limit)
                    return nil
                }
                defer { group.cancelAll() }
                return try await group.next() ?? nil
            }
            guard delivered != nil else {
                throw TandemError("message \(id) sent; not delivered within \(DurationText.format(limit))", exitCode: TandemError.timeoutExitCode)
            }
        }
        if common.json {
            var o: [String: JSONValue] = ["id": .string(id)]
            if let delivered { o["delivered_at"] = JSONValue.iso(Int64(clamping: delivered.timeMs)) }
            outputJSON(JSONValue.object(o).compactJSON)
        } else {
            output(delivered == nil ? "Sent \(id) (queued in your outbox)." : "Sent \(id); delivered.")
        }
    }
}

struct MessageList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "A conversation's messages, newest last, each with its state.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The friend's name or Tandem ID.", valueName: "friend")) var friend: String?
    @Option(help: ArgumentHelp("A challenge's thread instead (its full id).", valueName: "id")) var challenge: String?
    @Option(help: ArgumentHelp("Only messages before this one.", valueName: "id")) var before: String?
    @Option(help: "How many (1 to 1000).") var limit: Int = 50

    func validate() throws {
        if (friend == nil) == (challenge == nil) { throw ValidationError("give a friend or --challenge") }
        if !(1...1000).contains(limit) { throw ValidationError("--limit is from 1 to 1000") }
    }

    func run() async throws {
        var params: [String: JSONValue] = ["limit": .int(Int64(limit))]
        if let friend { params["friend"] = .string(friend) }
        if let challenge { params["challenge"] = .string(challenge) }
        if let before { params["before"] = .string(before) }
        try await callMessages(common, "message.list", .object(params)) { r in
            let list = r["messages"]?.arrayValue ?? []
            if list.isEmpty { output("No messages yet.") }
            for m in list { output(messageLine(m)) }
        }
    }
}

struct MessageReact: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "react", abstract: "Put an emoji on a message (\"\" takes it back).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The message id or a unique prefix.", valueName: "id")) var id: String
    @Argument(help: "The emoji.") var emoji: String

    func run() async throws {
        try await callMessages(common, "message.react", ["id": .string(id), "emoji": .string(emoji)]) { r in
            let e = r["emoji"]?.stringValue ?? ""
            output(e.isEmpty ? "Reaction removed." : "Reacted \(ChatText.terminalSafe(e)).")
        }
    }
}

struct MessageRetract: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retract", abstract: "Take one of your messages back, for everyone.",
        discussion: "Honest nodes delete its text; it cannot undo what was already read or copied (Protocol/messages.md 9).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The message id or a unique prefix.", valueName: "id")) var id: String

    func run() async throws {
        try await callMessages(common, "message.retract", ["id": .string(id)]) { r in
            output("Retracted \(r["id"]?.stringValue ?? id).")
        }
    }
}

struct MessageSearch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "search", abstract: "Search message history (words match as prefixes).")
    @OptionGroup var common: CommonOptions
    @Argument(help: "The words to find.") var text: String
    @Option(help: ArgumentHelp("Only the conversation with this friend.", valueName: "friend")) var friend: String?

    func run() async throws {
        var params: [String: JSONValue] = ["text": .string(text)]
        if let friend { params["friend"] = .string(friend) }
        try await callMessages(common, "message.search", .object(params)) { r in
            let hits = r["hits"]?.arrayValue ?? []
            if hits.isEmpty { output("No messages match.") }
            for h in hits {
                let who = authorLabel(h)
                output("\(localTime(h["sent_at"]?.stringValue))  \(String((h["id"]?.stringValue ?? "?").prefix(8)))  \(who): "
                       + ChatText.terminalSafe(h["snippet"]?.stringValue ?? ""))
            }
        }
    }
}

/// `on` / `off`.
func onOff(_ text: String) throws -> Bool {
    switch text.lowercased() {
    case "on", "true", "yes": return true
    case "off", "false", "no": return false
    default: throw ValidationError("give on or off")
    }
}

func settingsLine(_ r: JSONValue, _ friend: String) -> String {
    let timer = r["disappear_after_ms"]?.intValue ?? 0
    return "\((r["friend"]?.stringValue ?? friend).terminalSafe): read receipts \(r["read_receipts"]?.boolValue == true ? "on" : "off"), "
        + "\(r["muted"]?.boolValue == true ? "muted" : "not muted"), "
        + (timer > 0 ? "messages disappear after \(DurationText.format(.milliseconds(timer)))" : "messages kept")
}

struct MessageSettings: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settings", abstract: "Per-friend message settings: read receipts, mute, disappearing messages.",
        discussion: """
        Read receipts are off by default and reciprocal: you see when a friend read your messages only while you \
        send yours to them. A disappearing timer applies to both sides' new messages (each node deletes them that \
        long after storing them; it cannot undo what was read or copied). Without options: the settings as they are.
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The friend's name or Tandem ID.", valueName: "friend")) var friend: String
    @Option(help: ArgumentHelp("Send (and see) read receipts with this friend.", valueName: "on|off")) var readReceipts: String?
    @Option(help: ArgumentHelp("No notifications for this conversation (events say muted).", valueName: "on|off")) var mute: String?
    @Option(help: ArgumentHelp("Messages disappear this long after they are stored (30s to 365d), or off.", valueName: "duration|off"))
    var disappear: String?

    func validate() throws {
        if let readReceipts { _ = try onOff(readReceipts) }
        if let mute { _ = try onOff(mute) }
        if let disappear, disappear != "off" { _ = try DurationText.parse(disappear) }
    }

    func run() async throws {
        var params: [String: JSONValue] = ["friend": .string(friend)]
        if let readReceipts { params["read_receipts"] = .bool(try onOff(readReceipts)) }
        if let mute { params["muted"] = .bool(try onOff(mute)) }
        if let disappear { params["disappear_after_ms"] = .int(disappear == "off" ? 0 : try durationMs(disappear, what: "--disappear")) }
        try await callMessages(common, "message.settings", .object(params)) { r in output(settingsLine(r, friend)) }
    }
}

/// `tandem friend set FRIEND --read-receipts on|off`: the same setting, where people look for it.
struct FriendSet: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Per-friend settings: read receipts (off by default; reciprocal).")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The friend's name or Tandem ID.", valueName: "friend")) var friend: String
    @Option(help: ArgumentHelp("Send (and see) read receipts with this friend.", valueName: "on|off")) var readReceipts: String

    func validate() throws { _ = try onOff(readReceipts) }

    func run() async throws {
        try await callMessages(common, "message.settings",
                               ["friend": .string(friend), "read_receipts": .bool(try onOff(readReceipts))]) { r in
            output(settingsLine(r, friend))
        }
    }
}

struct Cheer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cheer a friend's result in a ledger entry, or a friend whose health is low.",
        discussion: """
        `tandem cheer ENTRY [TEXT]`: a cheer on a friend's result in ledger entry ENTRY (a number; tandem ledger \
        shows them). `tandem cheer FRIEND [TEXT]`: a few words to a friend who shares a weak (or dead) health \
        (tandem friend list shows it): sent as a message that starts with the cheer marker \(healthCheerMarker) \
        (Protocol/bedtime.md "Cheers").
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("A ledger entry's number, or a friend (ID, nickname or name).", valueName: "entry|friend")) var target: String
    @Argument(help: "A few words (at most 280 bytes).") var text: String?
    @Option(help: ArgumentHelp("Whose result, when several friends took part.", valueName: "friend")) var friend: String?
    @Option(help: "The emoji (default 👏).") var emoji: String?

    func run() async throws {
        guard let entry = Int64(target) else { return try await cheerHealth() }
        var params: [String: JSONValue] = ["entry": .int(entry)]
        if let text { params["text"] = .string(text) }
        if let friend { params["friend"] = .string(friend) }
        if let emoji { params["emoji"] = .string(emoji) }
        try await callMessages(common, "message.cheer", .object(params)) { r in
            output("Cheered entry #\(entry) \(ChatText.terminalSafe(r["emoji"]?.stringValue ?? "")).")
        }
    }

    /// A cheer for a friend's low health: only to a friend who shares a weak or dead state.
    func cheerHealth() async throws {
        let who = try contactArgument(target)
        let words = (text ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard words.utf8.count <= 280 else { throw usageError("a cheer is at most 280 bytes") }
        let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer { client.close() }
        let list = try await client.call(method: "friend.list", params: [:])
        let folded = who.lowercased()
        let matches = (list["friends"]?.arrayValue ?? []).filter { f in
            [f["id"]?.stringValue, f["nickname"]?.stringValue, f["name"]?.stringValue].compactMap { $0?.lowercased() }.contains(folded)
        }
        guard let f = matches.first else { throw TandemError("no friend \(who.terminalSafe)", exitCode: TandemError.nothingToActOnExitCode) }
        guard matches.count == 1 else { throw usageError("several friends are called \(who.terminalSafe): name one by Tandem ID") }
        let name = PeopleText.who(f.terminalSafe)
        guard let state = f["state"]?.stringValue, let h = f["health"]?.intValue else {
            throw TandemError("\(name) does not share their health with you (or is offline): nothing to cheer", exitCode: TandemError.nothingToActOnExitCode)
        }
        guard state == HealthPool.State.weak.rawValue || state == HealthPool.State.dead.rawValue else {
            throw TandemError("\(name) is \(state) (health \(h)): cheers are for a weak friend", exitCode: 1)
        }
        let body = "\(healthCheerMarker) " + (words.isEmpty ? "Cheering you on — you've got this!" : words)
        let sent = try await client.call(method: "message.send", params: ["to": f["id"] ?? .null, "text": .string(body)])
        if common.json { outputJSON(sent.compactJSON) } else { output("Cheered \(name) (health \(h), \(state)).") }
    }
}

/// What a health cheer's text starts with (Protocol/bedtime.md "Cheers").
let healthCheerMarker = "💪"

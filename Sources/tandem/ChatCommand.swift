import ArgumentParser
import Foundation
import TandemNet
import TandemNodeCore
import TandemProtocol

/// `tandem chat FRIEND`: a conversation in the terminal, line by line. History first, then what
/// arrives (messages, receipts, reactions) as it comes, and every line typed is sent. It draws no
/// screen of its own, so it behaves the same on a narrow terminal (lines wrap), in a pipe, and in
/// a script; every peer's text is printed through `ChatText.terminalSafe`.
struct Chat: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Talk with a friend: history, live messages and receipts, a line to type into.",
        discussion: """
        Each line you type is sent (at most 16 KiB). Commands: /react ID EMOJI, /retract ID, /file PATH, /quit (or end \
        of input). Message ids are shown shortened; any unique prefix of at least 6 hex digits works. Messages \
        you see here count as read (a read receipt goes out only if you turned them on for this friend).
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The friend's name or Tandem ID.", valueName: "friend")) var friend: String
    @Option(help: "How many earlier messages to show first (1 to 1000).") var history: Int = 20

    func validate() throws {
        if !(1...1000).contains(history) { throw ValidationError("--history is from 1 to 1000") }
        if common.json { throw ValidationError("chat has no --json output (see tandem message list --json, tandem events)") }
    }

    func run() async throws {
        let calls = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        let live = try await ControlClient.connect(dataDirectory: common.dataDirectory)
        defer {
            calls.close()
            live.close()
        }
        let since = try await calls.call(method: "events.list", params: ["limit": 0])["last_seq"]?.intValue ?? 0
        let first = try await calls.call(method: "message.list", params: ["friend": .string(friend), "limit": .int(Int64(history))])
        let friendID = first["conversation"]?.stringValue ?? friend
        output("-- chat with \(friend.terminalSafe) -- /react ID EMOJI, /retract ID, /file PATH, /quit")
        for m in first["messages"]?.arrayValue ?? [] { output(messageLine(m)) }
        let lines = Self.standardInputLines()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await Self.follow(live, calls: calls, friendID: friendID, since: since) }
            group.addTask {
                for await line in lines {
                    guard try await Self.typed(line, calls: calls, friendID: friendID) else { return }
                }
            }
            // Whichever ends first (the person quits or input ends; the node goes away) ends the chat.
            try await group.next()
            group.cancelAll()
        }
    }

    /// Standard input, a line at a time, read on a thread of its own (reading blocks).
    static func standardInputLines() -> AsyncStream<String> {
        AsyncStream { continuation in
            let reader = Thread {
                while let line = readLine(strippingNewline: true) { continuation.yield(line) }
                continuation.finish()
            }
            reader.start()
        }
    }

    /// One typed line: a command or a message. False to end the chat.
    static func typed(_ line: String, calls: ControlClient, friendID: String) async throws -> Bool {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty { return true }
        let words = trimmed.split(separator: " ", maxSplits: 2).map(String.init)
        do {
            switch words[0] {
            case "/quit", "/exit":
                return false
            case "/react":
                guard words.count == 3 else { return note("usage: /react ID EMOJI") }
                let r = try await calls.call(method: "message.react", params: ["id": .string(words[1]), "emoji": .string(words[2])])
                output("  reacted \(ChatText.terminalSafe(r["emoji"]?.stringValue ?? "")) on \(words[1].terminalSafe)")
            case "/retract":
                guard words.count == 2 else { return note("usage: /retract ID") }
                _ = try await calls.call(method: "message.retract", params: ["id": .string(words[1])])
                output("  retracted \(words[1].terminalSafe)")
            case "/file":
                // The rest of the line is the path (it may hold spaces).
                let path = trimmed.dropFirst("/file".count).trimmingCharacters(in: .whitespaces)
                guard !path.isEmpty else { return note("usage: /file PATH") }
                do {
                    let r = try await sendFile(calls, to: friendID, path: path, caption: nil)
                    output("  offered \(ChatText.terminalSafe(r["name"]?.stringValue ?? "")) (\(byteText(r["size"]?.intValue ?? 0)))"
                           + " as \(String((r["id"]?.stringValue ?? "?").prefix(8)))")
                } catch let e as TandemError {
                    return note(e.message)
                }
            case let w where w.hasPrefix("/") && !w.hasPrefix("//"):
                return note("unknown command \(w.terminalSafe) (/react ID EMOJI, /retract ID, /file PATH, /quit)")
            default:
                // "//text" sends "/text".
                let text = trimmed.hasPrefix("//") ? String(line.drop { $0 == " " }.dropFirst()) : line
                let sent = try await calls.call(method: "message.send", params: ["to": .string(friendID), "text": .string(text)])
                let id = sent["id"]?.stringValue ?? "?"
                output("\(localTime(sent["sent_at"]?.stringValue))  \(id.prefix(8))  you: \(ChatText.terminalSafe(text))")
            }
        } catch let e as ControlError {
            return note(e.message)
        } catch let e as NodeError {
            return note(e.message)
        }
        return true
    }

    /// A line for the person (not the conversation), on stderr; the chat goes on.
    static func note(_ text: String) -> Bool {
        FileHandle.standardError.write(Data("tandem: \(text.terminalSafe)\n".utf8))
        return true
    }

    /// Prints what happens in the conversation until the stream ends; a message shown counts as read.
    static func follow(_ live: ControlClient, calls: ControlClient, friendID: String, since: Int64) async throws {
        var cursor = since
        while true {
            var resumed = false
            for try await item in live.stream(method: "events.subscribe", params: ["since": .int(cursor), "types": ["message.*"]]) {
                guard let event = NodeEvent(json: item) else { continue }
                cursor = event.seq
                if event.type == NodeEvent.overflowType {
                    resumed = true
                    continue
                }
                let f = event.fields
                func short(_ key: String) -> String { String((f[key]?.stringValue ?? "?").prefix(8)).terminalSafe }
                switch event.type {
                case "message.received" where f["conversation"]?.stringValue == friendID:
                    let name = f["from_name"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } ?? "them"
                    // Shown: read (the node sends READ only where the reciprocal rule allows). Marked
                    // before the line is printed, so whoever sees the line (a person, a script that
                    // quits next) sees a message the node already counts as read.
                    _ = try? await calls.call(method: "message.list", params: ["friend": .string(friendID), "limit": 1])  // a failed mark is retried at the next message
                    output("\(localTime(f["sent_at"]?.stringValue))  \(short("id"))  \(name.terminalSafe): "
                           + ChatText.terminalSafe(f["text"]?.stringValue ?? ""))
                case "message.delivered" where f["to"]?.stringValue == friendID:
                    output("  \(short("id")) delivered")
                case "message.read" where f["by"]?.stringValue == friendID:
                    output("  read up to \(String((f["ids"]?.arrayValue?.last?.stringValue ?? "?").prefix(8)).terminalSafe)")
                case "message.reaction" where f["conversation"]?.stringValue == friendID:
                    output("  \(short("id")) \(ChatText.terminalSafe(f["emoji"]?.stringValue ?? "")) from them")
                case "message.retracted" where f["conversation"]?.stringValue == friendID:
                    output("  \(short("id")) was retracted")
                case "message.file_offered" where f["from"]?.stringValue == friendID && f["auto_accept"]?.boolValue == false:
                    output("  \(short("message_id")) offers \(ChatText.terminalSafe(f["name"]?.stringValue ?? "")) "
                           + "(\(byteText(f["size"]?.intValue ?? 0))): tandem message accept \(short("message_id"))")
                case "message.file_received" where f["from"]?.stringValue == friendID:
                    output("  \(short("message_id")) file received: \((f["path"]?.stringValue ?? "?").terminalSafe)")
                case "message.file_failed" where f["from"]?.stringValue == friendID || f["to"]?.stringValue == friendID:
                    output("  file \(short("file_id")) failed: \((f["reason"]?.stringValue ?? "?").terminalSafe)")
                default:
                    break
                }
            }
            if !resumed { throw TandemError("the node ended the event stream") }
        }
    }
}

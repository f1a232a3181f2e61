import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

/// Checks an ID on the client side first, so a typo is a usage error even with no node running.
func parseID(_ text: String) throws -> NodeID {
    do {
        return NodeID(publicKey: try NodeID.parse(text))
    } catch {
        throw TandemError("'\(text)' is not a Tandem ID: \(error)", exitCode: TandemError.usageExitCode)
    }
}

/// Calls the running node and prints the result: JSON with --json, else `render`.
func callNode(_ common: CommonOptions, _ method: String, _ params: JSONValue = .object([:]),
              render: (JSONValue) -> Void) async throws {
    let client = try await ControlClient.connect(dataDirectory: common.dataDirectory)
    let result = try await client.call(method: method, params: params)
    if common.json {
        outputJSON(result.compactJSON)
    } else {
        render(result.terminalSafe)
    }
}

func friendLine(_ f: JSONValue) -> String {
    let id = f["id"]?.stringValue ?? "?"
    let short = NodeID(id).map { "tdm1-" + $0.short + "…" } ?? id
    let who = PeopleText.who(f)
    var line = who == short ? short : "\(who) (\(short))"
    if let nick = f["nickname"]?.stringValue, !nick.isEmpty, let name = f["name"]?.stringValue, !name.isEmpty, name != nick {
        line += " “\(name)”"
    }
    if let status = f["status"]?.stringValue { line += "  \(status)" }
    if let via = f["via"]?.stringValue { line += " via \(via)" }
    if let h = f["health"]?.intValue, let state = f["state"]?.stringValue { line += "  health \(h) (\(state))" }
    if f["online"]?.boolValue == false, let seen = f["last_seen"]?.stringValue { line += "  last seen \(PeopleText.when(seen))" }
    return line
}

/// A contact named on the command line: a Tandem ID (checked here, so a typo is a usage error
/// even with no node running) or a nickname or display name (the node resolves it).
func contactArgument(_ text: String) throws -> String {
    let t = text.trimmingCharacters(in: .whitespaces)
    if t.lowercased().hasPrefix("tdm1") { return try parseID(t).canonical }
    guard !t.isEmpty else { throw TandemError("name a contact by Tandem ID, nickname or display name", exitCode: TandemError.usageExitCode) }
    return t
}

struct Friend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Friends: send, answer and manage friend requests.",
        subcommands: [FriendRequest.self, FriendRequests.self, FriendAccept.self, FriendDecline.self, FriendList.self,
                      FriendRemove.self, FriendBlock.self, FriendUnblock.self, FriendSet.self, FriendNick.self])
}

struct FriendRequest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request", abstract: "Ask someone to be your friend.",
        discussion: """
        The request waits in your node's outbox until their node is reachable (found on the LAN, at --addr, at an \
        address you used before, or through their home relay); it is retried with backoff and delivered once. \
        When their relay says they are offline, it waits in their mailbox there instead.

        Off the LAN, paste their share code (`tandem id --share` on their side): tandem:ID?relay=RELAYID@host:port.
        """)
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Their Tandem ID or share code.", valueName: "ID|share-code")) var id: String
    @Option(help: "A short note for them (at most 280 bytes).") var message: String = ""
    @Option(help: ArgumentHelp("Where their node listens, when it is not on your LAN.", valueName: "host:port")) var addr: String?
    @Option(help: ArgumentHelp("Their home relay, when the ID is not a share code that names it.", valueName: "ID@host:port")) var relay: String?

    func run() async throws {
        let code: ShareCode
        do {
            code = try ShareCode(parsing: id)
        } catch {
            throw TandemError("'\(id)' is not a Tandem ID or share code: \(error)", exitCode: TandemError.usageExitCode)
        }
        let nodeID = code.id
        if let addr { _ = try NodeConfiguration.parseHostPort(addr, defaultHost: "127.0.0.1") }
        if let relay {
            do { _ = try RelayAddress(parsing: relay) } catch {
                throw TandemError("'\(relay)' is not a relay address: \(error)", exitCode: TandemError.usageExitCode)
            }
        }
        var params: [String: JSONValue] = ["id": .string(id), "message": .string(message)]
        if let addr { params["addr"] = .string(addr) }
        if let relay { params["relay"] = .string(relay) }
        try await callNode(common, "friend.request", .object(params)) { r in
            if r["relationship"]?.stringValue == "friend" {
                output("You and \(nodeID.display) are friends now (they had asked you).")
            } else {
                output("Friend request to \(nodeID.display) queued; it is delivered when their node is reachable.")
            }
        }
    }
}

struct FriendRequests: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "requests", abstract: "List friend requests you received and sent.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "friend.requests") { r in
            let received = r["received"]?.arrayValue ?? []
            let sent = r["sent"]?.arrayValue ?? []
            output(received.isEmpty ? "No pending requests." : "Received:")
            for f in received {
                let msg = f["message"]?.stringValue ?? ""
                output("  \(f["id"]?.stringValue ?? "?")  \(PeopleText.who(f))\(msg.isEmpty ? "" : "  “\(msg)”")")
            }
            if !sent.isEmpty {
                output("Sent, waiting for an answer:")
                for f in sent { output("  \(f["id"]?.stringValue ?? "?")  \(PeopleText.who(f))") }
            }
        }
    }
}

/// accept, decline, remove, block, unblock share one shape.
protocol SimpleFriendCommand: AsyncParsableCommand {
    static var method: String { get }
    static func describe(_ who: String) -> String
    var common: CommonOptions { get }
    var id: String { get }
}

extension SimpleFriendCommand {
    func run() async throws {
        let arg = try contactArgument(id)
        try await callNode(common, Self.method, .object(["id": .string(arg)])) { r in
            // The node's answer names the contact; a name typed by the person is kept as typed.
            let shown = NodeID(arg).map(\.display) ?? arg.terminalSafe
            output(Self.describe(r["name"] == nil && r["nickname"] == nil ? shown : PeopleText.who(r)))
        }
    }
}

struct FriendAccept: SimpleFriendCommand {
    static let configuration = CommandConfiguration(commandName: "accept", abstract: "Accept a friend request.")
    static let method = "friend.accept"
    static func describe(_ who: String) -> String { "You and \(who) are friends now." }
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Their Tandem ID, nickname or display name.", valueName: "friend")) var id: String
}

struct FriendDecline: SimpleFriendCommand {
    static let configuration = CommandConfiguration(commandName: "decline", abstract: "Decline a friend request (they are told).")
    static let method = "friend.decline"
    static func describe(_ who: String) -> String { "Declined the request from \(who)." }
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Their Tandem ID, nickname or display name.", valueName: "friend")) var id: String
}

struct FriendRemove: SimpleFriendCommand {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "End a friendship or withdraw your request (they are told).")
    static let method = "friend.remove"
    static func describe(_ who: String) -> String { "\(who) is no longer your friend." }
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Their Tandem ID, nickname or display name.", valueName: "friend")) var id: String
}

struct FriendBlock: SimpleFriendCommand {
    static let configuration = CommandConfiguration(commandName: "block", abstract: "Drop everything from an ID, silently.")
    static let method = "friend.block"
    static func describe(_ who: String) -> String { "Blocked \(who)." }
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Their Tandem ID, nickname or display name.", valueName: "friend")) var id: String
}

struct FriendUnblock: SimpleFriendCommand {
    static let configuration = CommandConfiguration(commandName: "unblock", abstract: "Lift a block.")
    static let method = "friend.unblock"
    static func describe(_ who: String) -> String { "Unblocked \(who)." }
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Their Tandem ID, nickname or display name.", valueName: "friend")) var id: String
}

struct FriendList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "Your friends: online or not, status, how connected (LAN or direct).")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "friend.list") { r in
            let friends = r["friends"]?.arrayValue ?? []
            if friends.isEmpty { output("No friends yet: `tandem friend request ID`.") }
            for f in friends { output(friendLine(f)) }
        }
    }
}

struct FriendNick: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nick", abstract: "Give a friend a nickname only you see (shown and accepted wherever a friend is named).",
        discussion: "With no NAME the nickname is removed. A nickname is 1 to 64 bytes and unique among your contacts.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("Their Tandem ID, nickname or display name.", valueName: "friend")) var id: String
    @Argument(help: ArgumentHelp("The nickname.", valueName: "name")) var name: [String] = []

    func run() async throws {
        let nick = name.joined(separator: " ")
        try await callNode(common, "friend.nick", .object(["id": .string(try contactArgument(id)), "nickname": .string(nick)])) { r in
            let id = NodeID(r["id"]?.stringValue ?? "").map(\.display) ?? "?"
            output(nick.isEmpty ? "\(id) has no nickname now." : "\(id) is “\(PeopleText.who(r))” to you now.")
        }
    }
}

struct Name: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show or set the display name your friends see.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The new display name (at most 64 bytes).", valueName: "display name")) var name: [String] = []

    func run() async throws {
        if name.isEmpty {
            try await callNode(common, "name.get") { r in output(r["name"]?.stringValue ?? "") }
        } else {
            let text = name.joined(separator: " ")
            try await callNode(common, "name.set", .object(["name": .string(text)])) { _ in
                output("Display name set to “\(text)”; your friends are told.")
            }
        }
    }
}

struct Peers: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Nodes seen on the LAN: ID, display name, address, last seen.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "peers.list") { r in
            let peers = r["peers"]?.arrayValue ?? []
            if peers.isEmpty { output("No nodes seen on the LAN yet.") }
            for p in peers {
                let name = p["name"]?.stringValue ?? ""
                output("\(p["id"]?.stringValue ?? "?")  \(name.isEmpty ? "-" : name)  \(p["address"]?.stringValue ?? "")  \(PeopleText.when(p["last_seen"]?.stringValue))\(p["friend"]?.boolValue == true ? "  friend" : "")")
            }
        }
    }
}

struct Discoverable: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show or set whether strangers on the LAN can find you (open beacons).",
        discussion: "auto (the default) is on until your first friend is added, then off. Friends always recognise your private beacons.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("on, off or auto.", valueName: "mode")) var mode: String?

    func validate() throws {
        if let mode, !["on", "off", "auto"].contains(mode) { throw ValidationError("mode must be on, off or auto") }
    }

    func run() async throws {
        if let mode {
            try await callNode(common, "discoverable.set", .object(["mode": .string(mode)])) { r in
                output("Discoverable: \(mode)\(r["discoverable"]?.boolValue == true ? " (strangers on the LAN can find you)" : " (only friends recognise you)")")
            }
        } else {
            try await callNode(common, "discoverable.get") { r in
                output("Discoverable: \(r["mode"]?.stringValue ?? "?") (now \(r["discoverable"]?.boolValue == true ? "on" : "off"))")
            }
        }
    }
}

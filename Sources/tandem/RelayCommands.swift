import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemProtocol

struct RelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay",
        abstract: "Home relays: how friends off your LAN reach you, and where mail waits while you are offline.",
        discussion: """
        A relay address is ID@host:port (`tandem-relay id` prints it on the relay's machine). Your node keeps a link \\
        to its home relays and tells friends the first one; `tandem id --share` then prints a code friends can paste.
        """,
        subcommands: [RelayAdd.self, RelayRemove.self, RelayList.self])
}

struct RelayAdd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Add a home relay.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The relay's address.", valueName: "ID@host:port")) var address: String

    func run() async throws {
        let relay: RelayAddress
        do {
            relay = try RelayAddress(parsing: address)
        } catch {
            throw TandemError("'\(address)' is not a relay address: \(error)", exitCode: TandemError.usageExitCode)
        }
        try await callNode(common, "relay.add", .object(["address": .string(relay.description)])) { r in
            if r["added"]?.boolValue == false {
                output("\(relay) is already a home relay.")
            } else {
                output("Added home relay \(relay); your node connects to it now (see tandem relay list).")
            }
        }
    }
}

struct RelayRemove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "Stop using a home relay.")
    @OptionGroup var common: CommonOptions
    @Argument(help: ArgumentHelp("The relay's ID or address.", valueName: "ID")) var id: String

    func run() async throws {
        try await callNode(common, "relay.remove", .object(["id": .string(id)])) { r in
            output("Removed relay \(r["id"]?.stringValue ?? id).")
        }
    }
}

struct RelayList: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List home relays and whether the node is connected.")
    @OptionGroup var common: CommonOptions

    func run() async throws {
        try await callNode(common, "relay.list") { r in
            let relays = r["relays"]?.arrayValue ?? []
            if relays.isEmpty { output("No relays. Add one with `tandem relay add ID@host:port`.") }
            for rel in relays {
                var line = rel["address"]?.stringValue ?? "?"
                if rel["connected"]?.boolValue == true {
                    line += "  connected since \(rel["since"]?.stringValue ?? "?")"
                } else {
                    line += "  not connected"
                    if let e = rel["last_error"]?.stringValue { line += " (\(e))" }
                }
                output(line)
            }
        }
    }
}

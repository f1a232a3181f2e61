import ArgumentParser
import Foundation
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol
import TandemVault

@main
struct Tandem: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tandem",
        abstract: "Tandem: focus with friends, peer to peer.",
        discussion: """
        A Tandem node holds your identity and talks to your friends' nodes over authenticated, \
        encrypted links. Start with `tandem init`, then run `tandem node`.

        Exit codes: 0 ok, 1 error, 2 usage, 3 not initialised, 4 peer unreachable,
        5 authentication failed (wrong ID, network or passphrase), 6 timed out,
        7 no node running for the data directory, 8 nothing to act on (no such request, friend or block).
        """,
        version: TandemVersion.string,
        subcommands: [Init.self, ID.self, Node.self, Name.self, Friend.self, ChallengeCommand.self, Focus.self, ModeCommand.self, KeyCommand.self, LockCommand.self, UnlockCommand.self, TempUnlockCommand.self, LedgerCommand.self,
                      Stats.self, RelayCommand.self, VaultCommand.self, BackupCommand.self, RecoveryCommand.self, Restore.self, Peers.self, Discoverable.self, Events.self, Wait.self,
                      Status.self, Ping.self, Demo.self, Dev.self, MessageCommand.self, Chat.self, Cheer.self, Keeper.self, DaylightCommand.self, WebCommand.self,
                      SunCommand.self, BedtimeCommand.self, HealthCommand.self, TimelineCommand.self, ShareCommand.self, SetupCommand.self]
    )

    /// Runs the command; every failure becomes one line on stderr and an exit code.
    static func main() async {
        do {
            var command = try parseAsRoot(commandLineArguments())
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as TandemError {
            FileHandle.standardError.write(Data("tandem: error: \(error.message.terminalSafe)\n".utf8))
            Foundation.exit(error.exitCode)
        } catch let error as NodeError {
            FileHandle.standardError.write(Data("tandem: error: \(error.message.terminalSafe)\n".utf8))
            Foundation.exit(error.exitCode)
        } catch let error as ControlError {
            // The node's answer to a control request: its message and the exit code it chose.
            FileHandle.standardError.write(Data("tandem: error: \(error.message.terminalSafe)\n".utf8))
            Foundation.exit(error.exitCode)
        } catch let error as VaultError {
            // The vault's files as the CLI writes them itself (restore): the error names the file.
            FileHandle.standardError.write(Data("tandem: error: \(error.description.terminalSafe)\n".utf8))
            Foundation.exit(1)
        } catch {
            let code = exitCode(for: error)
            if code == .success || code.rawValue == 0 {
                // --help, --version: ArgumentParser's own output.
                exit(withError: error)
            }
            let message = fullMessage(for: error).split(separator: "\n").first.map(String.init) ?? "\(error)"
            let trimmed = message.hasPrefix("Error: ") ? String(message.dropFirst(7)) : message
            FileHandle.standardError.write(Data("tandem: error: \(trimmed.terminalSafe) (see `tandem --help`)\n".utf8))
            Foundation.exit(code.rawValue == 64 ? TandemError.usageExitCode : code.rawValue)
        }
    }
}

/// The arguments after the program name. Under some LD_PRELOAD libraries (libfaketime moves the
/// environment at start-up) the runtime finds no arguments at all; /proc/self/cmdline still has them.
func commandLineArguments() -> [String] {
    let args = Array(CommandLine.arguments.dropFirst())
    guard args.isEmpty, let data = FileManager.default.contents(atPath: "/proc/self/cmdline") else { return args }
    var parts = data.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
    if parts.last == "" { parts.removeLast() } // the NUL that ends the last argument
    return Array(parts.dropFirst())
}

enum TandemVersion {
    static let string = "0.1.0"
}

/// Flags every command shares.
struct CommonOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The node's data directory (default: $TANDEM_HOME or ~/.tandem).", valueName: "path"))
    var dataDir: String?

    @Flag(name: .long, help: "Print machine-readable JSON instead of text.")
    var json = false

    var dataDirectory: DataDirectory { DataDirectory(explicit: dataDir) }
}

/// Prints a JSON object on stdout (sorted keys, one line).
func printJSON(_ object: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
    outputJSON(String(decoding: data, as: UTF8.self))
}

/// Prints one line of JSON. The encoders escape U+0000–U+001F in strings; DEL, C1 and bidi
/// controls become \uNNNN escapes too (the same JSON value), so a peer's text in it cannot drive
/// the terminal it is printed on.
func outputJSON(_ text: String) {
    output(text.jsonTerminalSafe)
}

extension JSONValue {
    /// The same value with every string (and object key) shown terminal-safe: what the human
    /// renderers get, since names, messages, reasons and addresses in a node's answers may come
    /// from peers.
    var terminalSafe: JSONValue {
        switch self {
        case .string(let s): return .string(s.terminalSafe)
        case .array(let a): return .array(a.map(\.terminalSafe))
        case .object(let o): return .object(Dictionary(o.map { ($0.key.terminalSafe, $0.value.terminalSafe) }, uniquingKeysWith: { a, _ in a }))
        case .null, .bool, .int, .double: return self
        }
    }
}

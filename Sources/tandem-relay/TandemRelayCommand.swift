import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol
import TandemRelay

@main
struct TandemRelayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tandem-relay",
        abstract: "A Tandem relay: reach friends behind NAT through end-to-end encrypted tunnels, and hold sealed mail for offline nodes.",
        discussion: """
        Node operators add the relay with `tandem relay add ID@host:port`; `tandem-relay id` prints
        that address. The relay never sees content: tunnels carry the nodes' own Secret Handshake
        and box-stream, and mail is sealed to its recipient.

        Exit codes: 0 ok, 1 error, 2 usage.
        """,
        version: "0.1.0",
        subcommands: [Run.self, Id.self],
        defaultSubcommand: Run.self)

    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch let error as TandemError {
            FileHandle.standardError.write(Data("tandem-relay: error: \(error.message)\n".utf8))
            Foundation.exit(error.exitCode)
        } catch {
            let code = exitCode(for: error)
            if code.rawValue == 0 { exit(withError: error) }
            let message = fullMessage(for: error).split(separator: "\n").first.map(String.init) ?? "\(error)"
            let trimmed = message.hasPrefix("Error: ") ? String(message.dropFirst(7)) : message
            FileHandle.standardError.write(Data("tandem-relay: error: \(trimmed) (see `tandem-relay --help`)\n".utf8))
            Foundation.exit(code.rawValue == 64 ? TandemError.usageExitCode : code.rawValue)
        }
    }
}

/// Options shared by `run` and `id`.
struct RelayOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Read settings from this file (lines of `key = value`; flags win).", valueName: "file"))
    var config: String?

    @Option(help: ArgumentHelp("Where the relay keeps its identity (identity.key) and its mailbox (mailbox.sqlite); created if missing. Default: ./tandem-relay-data.", valueName: "path"))
    var dataDir: String?

    @Option(help: ArgumentHelp("The address clients reach the relay at, when it differs from the listen address (behind NAT or a load balancer).", valueName: "host:port"))
    var publicAddress: String?

    func load() throws -> RelayConfiguration {
        var c = RelayConfiguration()
        if let config { c = try RelayConfiguration.load(file: config, into: c) }
        if let dataDir { c.dataDirectory = dataDir }
        if c.dataDirectory == nil { c.dataDirectory = "tandem-relay-data" }
        if let publicAddress {
            let (h, p) = try HostPort.parse(publicAddress, defaultHost: "")
            guard !h.isEmpty, p > 0 else { throw TandemError("--public-address needs host:port", exitCode: TandemError.usageExitCode) }
            c.publicAddress = publicAddress
        }
        return c
    }

    /// The relay's identity, created on first use.
    static func identity(_ c: RelayConfiguration) throws -> SigningKeyPair {
        let dir = DataDirectory(explicit: c.dataDirectory)
        if !IdentityFile.exists(in: dir) { try IdentityFile.create(in: dir) }
        return try IdentityFile.load(from: dir)
    }
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the relay (the default command).",
        discussion: "Stops gracefully on SIGINT/SIGTERM, telling every client to reconnect later.")

    @OptionGroup var options: RelayOptions

    @Option(help: ArgumentHelp("Where clients connect (default 0.0.0.0:\(RelayAddress.defaultPort)).", valueName: "host:port"))
    var listen: String?

    @Option(help: ArgumentHelp("Serve Prometheus metrics at http://host:port/metrics, or `off` (default 127.0.0.1:7821).", valueName: "host:port|off"))
    var metrics: String?

    @Option(help: ArgumentHelp("Event-loop threads (default 1: a tunnel's two connections share a thread; raise it when handshakes need more than one core).",
                               valueName: "n")) var eventLoops: Int?
    @Option(help: ArgumentHelp("Authenticated clients at most.", valueName: "n")) var maxClients: Int?
    @Option(help: ArgumentHelp("Authenticated clients from one source address at most (IPv6: per /64).", valueName: "n")) var maxClientsPerAddress: Int?
    @Option(help: ArgumentHelp("Tunnels per client at most.", valueName: "n")) var maxTunnelsPerClient: Int?
    @Option(help: ArgumentHelp("Bytes per second one client may push through the relay; 0 for no limit.", valueName: "bytes")) var clientRate: Int?
    @Flag(help: ArgumentHelp("Keep the mailbox in memory (lost at exit) instead of in the data directory.")) var memoryMailbox = false
    @Option(help: ArgumentHelp("Log format: text or json.", valueName: "format")) var logFormat: String?
    @Option(help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error.", valueName: "level")) var logLevel: String?

    func run() async throws {
        var c = try options.load()
        if let listen {
            let (h, p) = try HostPort.parse(listen)
            c.listenHost = h
            c.listenPort = p
        }
        if let metrics {
            if metrics == "off" {
                c.metricsHost = nil
            } else {
                let (h, p) = try HostPort.parse(metrics, defaultHost: "127.0.0.1")
                c.metricsHost = h
                c.metricsPort = p
            }
        }
        if let eventLoops {
            guard (1...RelayConfiguration.maximumEventLoops).contains(eventLoops) else {
                throw usage("--event-loops must be between 1 and \(RelayConfiguration.maximumEventLoops)")
            }
            c.eventLoops = eventLoops
        }
        if let maxClients { guard maxClients > 0 else { throw usage("--max-clients must be positive") }; c.maximumClients = maxClients }
        if let maxClientsPerAddress {
            guard maxClientsPerAddress > 0 else { throw usage("--max-clients-per-address must be positive") }
            c.maximumClientsPerAddress = maxClientsPerAddress
        }
        if let maxTunnelsPerClient { guard maxTunnelsPerClient > 0 else { throw usage("--max-tunnels-per-client must be positive") }; c.maximumTunnelsPerClient = maxTunnelsPerClient }
        if let clientRate { guard clientRate >= 0 else { throw usage("--client-rate must be 0 or more") }; c.clientBytesPerSecond = clientRate }
        if let logFormat {
            guard let f = RelayConfiguration.LogFormat(rawValue: logFormat) else { throw usage("--log-format is text or json") }
            c.logFormat = f
        }
        if let logLevel { c.logLevel = logLevel }
        guard let level = Logger.Level(rawValue: c.logLevel) else { throw usage("unknown log level '\(c.logLevel)'") }
        let format: StructuredLogHandler.Format = c.logFormat == .json ? .json : .text
        LoggingSystem.bootstrap { label in StructuredLogHandler(label: label, format: format, level: level) }
        let logger = Logger(label: "tandem-relay")

        let identity = try RelayOptions.identity(c)
        let dir = DataDirectory(explicit: c.dataDirectory)
        let mailboxPath = memoryMailbox ? nil : dir.url.appendingPathComponent("mailbox.sqlite").path
        let mailbox: RelayMailbox
        do {
            // 0600 whatever the umask (the data directory itself is 0700: DataDirectory.create).
            if let mailboxPath { try PrivateDatabaseFile.prepare(mailboxPath) }
            mailbox = try RelayMailbox(path: mailboxPath, quotas: c.mailboxQuotas)
            if let mailboxPath { try PrivateDatabaseFile.restrict(mailboxPath) }
        } catch {
            throw TandemError("cannot open the mailbox \(mailboxPath ?? "in memory"): \(error)")
        }
        let relay = RelayRuntime(identity: identity, configuration: c, mailbox: mailbox, logger: logger)
        try await relay.run(extra: [AddressAnnouncer(server: relay.server)])
    }

    private func usage(_ message: String) -> TandemError { TandemError(message, exitCode: TandemError.usageExitCode) }
}

/// Prints the relay's address on stdout once it listens (scripts read it), then waits.
struct AddressAnnouncer: Service {
    let server: RelayServer
    func run() async throws {
        let address = try await server.boundAddress
        FileHandle.standardOutput.write(Data("tandem-relay listening: \(server.address(bound: address))\n".utf8))
        try? await gracefulShutdown()
    }
}

struct Id: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the relay's address (ID@host:port) for node operators; creates the identity if there is none.")

    @OptionGroup var options: RelayOptions

    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let c = try options.load()
        let pair = try RelayOptions.identity(c)
        let id = NodeID(publicKey: pair.publicKey)
        let address: String
        if let p = c.publicAddress {
            address = "\(id.canonical)@\(p)"
        } else {
            address = RelayAddress(id: id, host: HostPort.reachable(fromBound: c.listenHost), port: c.listenPort).description
        }
        if json {
            let obj: [String: Any] = ["id": id.canonical, "address": address, "data_dir": DataDirectory(explicit: c.dataDirectory).path]
            let data = try JSONSerialization.data(withJSONObject: obj, options: [.sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(address)
        }
    }
}

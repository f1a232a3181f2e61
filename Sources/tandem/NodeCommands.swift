import ArgumentParser
import Foundation
import Logging
import TandemNet
import TandemNode
import NodeFocus
import NodeVault
import NodeWeb
import TandemNodeCore
import TandemProtocol
import TandemVault

struct Node: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run this node in the foreground (Ctrl-C or SIGTERM stops it gracefully).",
        discussion: "Listens on TCP port \(TandemConstants.defaultPort) by default. Logs go to stderr, one record per line.")

    @OptionGroup var common: CommonOptions

    @Option(help: ArgumentHelp("Address to listen on: host:port, :port or [v6]:port.", valueName: "host:port"))
    var listen: String = "0.0.0.0:\(TandemConstants.defaultPort)"

    @Option(help: "Log format: text (logfmt) or json.")
    var logFormat: String = "text"

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: ArgumentHelp("Largest frame accepted, in bytes (at most 1048576).", valueName: "bytes"))
    var maxFrame: Int = TandemConstants.maximumEnvelopeLength

    @Option(help: ArgumentHelp("Read the identity passphrase from this file.", valueName: "file"))
    var passphraseFile: String?

    @Option(help: ArgumentHelp("UDP port of LAN discovery beacons.", valueName: "port"))
    var discoveryPort: Int = TandemConstants.discoveryPort

    @Option(help: ArgumentHelp("Seconds between LAN beacons.", valueName: "seconds"))
    var discoveryInterval: Double = 5

    @Flag(help: "Send and listen for no LAN beacons (friends are then reached at known addresses only). Also set by a non-empty $TANDEM_NO_DISCOVERY.")
    var noDiscovery = false

    @Option(help: ArgumentHelp("The hosts file a locked mode's site block goes into (between '# BEGIN tandem mode NAME' and '# END tandem mode NAME').", valueName: "path"))
    var hostsFile: String = "/etc/hosts"

    @Option(help: ArgumentHelp("Hooks run at each lock transition: DIR/MODE/TRANSITION and DIR/all/TRANSITION (default: DATA-DIR/hooks).", valueName: "dir"))
    var hooksDir: String?

    @Flag(help: "Do not stop a locked mode's blocked apps (sites and hooks still apply).")
    var noAppGuard = false

    @Option(help: ArgumentHelp("Run a resolver here that blocks a locked mode's sites and every name under them (m.news.example too), forwarding the rest; point the system's resolv.conf at it (port 53 needs root or CAP_NET_BIND_SERVICE). Off by default.", valueName: "host:port"))
    var dns: String?

    @Option(help: ArgumentHelp("Where --dns forwards what it does not block (default: the first nameserver of /etc/resolv.conf that is not --dns, port 53).", valueName: "host:port"))
    var dnsUpstream: String?

    @Flag(help: "Start no lock keeper: stopping or killing the node then lifts the app block of a locked mode (the hosts block stays). Also set by a non-empty $TANDEM_NO_LOCK_KEEPER.")
    var noLockKeeper = false

    @Option(help: ArgumentHelp("Stop the blocked apps of this user (a name or a uid) rather than the node's own; another user needs CAP_KILL. Also read from $TANDEM_APP_USER.", valueName: "user"))
    var appUser: String?

    @Option(help: ArgumentHelp("Seconds between heartbeats on each friend link; a friend silent for three heartbeats is offline.", valueName: "seconds"))
    var heartbeat: Int = 10

    @Option(help: ArgumentHelp("The local web dashboard: a loopback host:port (port 0 picks a free one; another address only with --web-tls or --web-tls-cert), or off. Default \(WebConfiguration.defaultAddress), or $TANDEM_WEB when set. Open it with `tandem web`.", valueName: "host:port|off"))
    var web: String?

    @Flag(name: .customLong("web-tls"), help: "Serve the dashboard over HTTPS with a self-signed certificate made on first use (kept in DATA/web-tls; `tandem web` prints its fingerprint). Needed for a --web address off loopback, unless --web-tls-cert is given.")
    var webTLS = false

    @Option(name: .customLong("web-tls-cert"), help: ArgumentHelp("Serve the dashboard over HTTPS with this certificate chain (PEM); with --web-tls-key.", valueName: "file"))
    var webTLSCert: String?

    @Option(name: .customLong("web-tls-key"), help: ArgumentHelp("The private key (PEM) of --web-tls-cert.", valueName: "file"))
    var webTLSKey: String?

    /// The dashboard's TLS setup, when asked for.
    func webTLSSetup(_ dir: URL) -> WebConfiguration.TLS? {
        guard webTLS || webTLSCert != nil else { return nil }
        func absolute(_ p: String?) -> String? { p.map { URL(fileURLWithPath: $0).standardizedFileURL.path } }
        return WebConfiguration.TLS(certificatePath: absolute(webTLSCert), keyPath: absolute(webTLSKey),
                                    selfSignedDirectory: dir.appendingPathComponent("web-tls").path)
    }

    /// `--web`, else a non-empty $TANDEM_WEB (the test harness sets it to off), else the default.
    var webText: String {
        web ?? ProcessInfo.processInfo.environment["TANDEM_WEB"].flatMap { $0.isEmpty ? nil : $0 } ?? WebConfiguration.defaultAddress
    }

    func validate() throws {
        do {
            if (webTLSCert == nil) != (webTLSKey == nil) { throw ValidationError("--web-tls-cert and --web-tls-key go together") }
            _ = try WebConfiguration.parse(webText, tls: webTLSSetup(URL(fileURLWithPath: "/")))
        } catch let error as NodeError {
            throw ValidationError(error.message)
        } catch let error as TandemError {
            throw ValidationError("--web: \(error.message)")
        }
        guard (1...65535).contains(discoveryPort) else { throw ValidationError("--discovery-port must be between 1 and 65535") }
        guard discoveryInterval >= 0.1, discoveryInterval <= 3600 else {
            throw ValidationError("--discovery-interval must be between 0.1 and 3600 seconds")
        }
        guard (1...300).contains(heartbeat) else { throw ValidationError("--heartbeat must be between 1 and 300 seconds") }
        guard StructuredLogHandler.Format(rawValue: logFormat) != nil else {
            throw ValidationError("--log-format must be text or json")
        }
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard (Envelope.minimumLength...TandemConstants.maximumEnvelopeLength).contains(maxFrame) else {
            throw ValidationError("--max-frame must be between \(Envelope.minimumLength) and \(TandemConstants.maximumEnvelopeLength)")
        }
        if let user = appUserText, Self.uid(of: user) == nil {
            throw ValidationError("--app-user: no user '\(user.prefix(64))' (give a user name or a uid)")
        }
    }

    /// `--app-user`, else a non-empty $TANDEM_APP_USER (a systemd drop-in sets it).
    var appUserText: String? {
        appUser ?? ProcessInfo.processInfo.environment["TANDEM_APP_USER"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// A uid given as digits, or a user name's uid.
    static func uid(of user: String) -> uid_t? {
        if !user.isEmpty, user.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) { return uid_t(user) }
        guard let entry = getpwnam(user) else { return nil }
        return entry.pointee.pw_uid
    }

    func run() async throws {
        let dir = common.dataDirectory
        let identity = try IdentityFile.load(from: dir, passphrase: try Passphrase.forLoading(dir, file: passphraseFile))
        let format = StructuredLogHandler.Format(rawValue: logFormat)!
        let level = Logger.Level(rawValue: logLevel)!
        LoggingSystem.bootstrap { StructuredLogHandler(label: $0, format: format, level: level) }
        let logger = Logger(label: "tandem.node")
        var config = NodeConfiguration()
        (config.host, config.port) = try NodeConfiguration.parseHostPort(listen)
        config.link.maximumEnvelopeLength = maxFrame
        // Tests only: a vault created by this node gets the cheapest Argon2id cost (stored in its
        // keys file, so it stays cheap; never set this for a real vault).
        if ProcessInfo.processInfo.environment["TANDEM_TEST_CHEAP_PIN_HASH"] == "1" {
            config.vault.keyParameters = .testing
        }
        // Tests only: a short file-offer lifetime, and a pause per chunk served (messages.md 7.5).
        if let ms = ProcessInfo.processInfo.environment["TANDEM_TEST_FILE_OFFER_LIFETIME_MS"].flatMap(Int64.init), ms > 0 {
            config.fileLimits.offerLifetimeMs = ms
        }
        if let ms = ProcessInfo.processInfo.environment["TANDEM_TEST_FILE_SERVE_DELAY_MS"].flatMap(Int.init), ms > 0 {
            config.fileLimits.serveDelayMs = ms
        }
        let discoveryOff = noDiscovery || !(ProcessInfo.processInfo.environment["TANDEM_NO_DISCOVERY"] ?? "").isEmpty
        if !discoveryOff {
            var discovery = DiscoveryConfiguration()
            discovery.port = discoveryPort
            discovery.interval = .milliseconds(Int64(discoveryInterval * 1000))
            config.discovery = discovery
        }
        config.friends.heartbeat = .seconds(Int64(heartbeat))
        config.friends.silenceLimit = .seconds(Int64(3 * heartbeat))
        config.focus.hostsFile = hostsFile
        config.focus.hooksDirectory = hooksDir
        config.focus.appGuard = !noAppGuard
        config.focus.appGuardUser = appUserText.flatMap(Self.uid(of:))
        if let dns {
            let (host, port) = try NodeConfiguration.parseHostPort(dns, defaultHost: "127.0.0.1")
            var upstream: (String, Int)
            if let dnsUpstream {
                upstream = try NodeConfiguration.parseHostPort(dnsUpstream, defaultHost: "127.0.0.1")
                if upstream.1 == 0 { upstream.1 = 53 }
            } else {
                let text = (try? String(contentsOfFile: "/etc/resolv.conf", encoding: .utf8)) ?? ""  // unreadable: said below
                guard let found = FocusResolverConfig.upstream(fromResolvConf: text, excluding: host) else {
                    throw TandemError("--dns needs an upstream resolver: /etc/resolv.conf names none other than \(host); give --dns-upstream",
                                      exitCode: TandemError.usageExitCode)
                }
                upstream = (found, 53)
            }
            config.focus.dns = .init(listenHost: host, listenPort: port, upstreamHost: upstream.0, upstreamPort: upstream.1)
        }
        // The lock keeper is this executable (`tandem keeper`), started by the node when a mode locks.
        if !noLockKeeper, (ProcessInfo.processInfo.environment["TANDEM_NO_LOCK_KEEPER"] ?? "").isEmpty,
           let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {  // no /proc: no keeper, said below
            config.focus.keeper = .init(executable: exe, directory: dir.path)
        } else if !noLockKeeper, (ProcessInfo.processInfo.environment["TANDEM_NO_LOCK_KEEPER"] ?? "").isEmpty {
            logger.warning("no lock keeper: /proc/self/exe is not readable; stopping the node lifts a lock's app block")
        }
        config.web = try WebConfiguration.parse(webText, tls: webTLSSetup(dir.url))
        let node = try NodeRuntime(identity: identity, configuration: config, dataDirectory: dir, logger: logger)
        try await node.run()
        logger.info("node stopped")
    }
}

struct Ping: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to a node, prove both identities, exchange signed ping/pong frames.",
        discussion: "Exits 4 when the node cannot be reached, 5 when the handshake fails (wrong ID or not a Tandem node), 6 on timeout.")

    @OptionGroup var common: CommonOptions

    @Argument(help: ArgumentHelp("The node's address.", valueName: "host:port"))
    var address: String

    @Argument(help: ArgumentHelp("The node's Tandem ID (tdm1…).", valueName: "ID"))
    var id: String

    @Option(name: .shortAndLong, help: "How many pings to send.")
    var count: Int = 1

    @Option(help: ArgumentHelp("Seconds to wait for each answer.", valueName: "seconds"))
    var timeout: Int = 10

    @Option(help: ArgumentHelp("Read the identity passphrase from this file.", valueName: "file"))
    var passphraseFile: String?

    func validate() throws {
        guard count >= 1, count <= 100_000 else { throw ValidationError("--count must be between 1 and 100000") }
        guard timeout >= 1 else { throw ValidationError("--timeout must be at least 1 second") }
    }

    func run() async throws {
        let remote: NodeID
        do {
            remote = NodeID(publicKey: try NodeID.parse(id))
        } catch {
            throw TandemError("'\(id)' is not a Tandem ID: \(error)", exitCode: TandemError.usageExitCode)
        }
        let (host, port) = try NodeConfiguration.parseHostPort(address, defaultHost: "127.0.0.1")
        guard port != 0 else { throw TandemError("the address needs a port", exitCode: TandemError.usageExitCode) }
        let dir = common.dataDirectory
        let identity = try IdentityFile.load(from: dir, passphrase: try Passphrase.forLoading(dir, file: passphraseFile))
        var logger = Logger(label: "tandem.ping")
        logger.logLevel = .critical
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        let node = try NodeRuntime(identity: identity, configuration: config, logger: logger)
        let link: PeerLink, waiter: LinkWaiter
        do {
            (link, waiter) = try await node.connect(host: host, port: port, to: remote)
        } catch let e as TandemError where e.exitCode == TandemError.authenticationExitCode {
            // A node closes a connection at once, before any handshake, when this address opened
            // too many handshakes (Protocol 5.12); from here that looks like a wrong ID or network.
            // One retry after the limit's refill tells them apart: a second refusal is not the limit.
            try await Task.sleep(for: .milliseconds(700))
            do {
                (link, waiter) = try await node.connect(host: host, port: port, to: remote)
            } catch let again as TandemError where again.exitCode == TandemError.authenticationExitCode {
                throw TandemError(again.message + " — refused twice, 0.7 s apart, so not the node's limit on handshakes from one address",
                                  exitCode: again.exitCode)
            }
        }
        defer { link.close() }
        var rtts: [Double] = []
        for i in 1...count {
            let (rtt, _) = try await waiter.ping(timeout: .seconds(Int64(timeout)))
            let ms = Double(rtt.components.seconds) * 1000 + Double(rtt.components.attoseconds) / 1e15
            rtts.append(ms)
            if !common.json {
                output("pong from \(remote.short)… at \(host):\(port): seq=\(i) time=\(String(format: "%.3f", ms)) ms")
            }
        }
        if common.json {
            printJSON(["id": remote.canonical, "address": "\(host):\(port)", "count": rtts.count,
                       "rtt_ms": rtts, "min_ms": rtts.min()!, "max_ms": rtts.max()!,
                       "avg_ms": rtts.reduce(0, +) / Double(rtts.count)])
        }
    }
}

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run throwaway nodes on loopback and narrate what they do: a LAN story, one through a relay, and a bedtime.")

    @Flag(help: "Only the LAN part.") var lanOnly = false
    @Flag(help: "Only the relay part.") var relayOnly = false
    @Flag(help: "Only the bedtime part (a node under libfaketime).") var bedtimeOnly = false
    @Option(help: ArgumentHelp("The folder with the bedtime part's photos (default: Deploy/demo here).", valueName: "path"))
    var photos: String?

    func validate() throws {
        guard [lanOnly, relayOnly, bedtimeOnly].filter({ $0 }).count <= 1 else {
            throw ValidationError("choose at most one of --lan-only, --relay-only and --bedtime-only")
        }
    }

    func run() async throws {
        if !relayOnly && !bedtimeOnly { try await DemoScenario.run { line in output(line) } }
        if !lanOnly && !bedtimeOnly { try await RelayDemoScenario.run { line in output(line) } }
        if !lanOnly && !relayOnly { try await BedtimeDemoScenario.run(photos: photos) { line in output(line) } }
    }
}

import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

/// `tandem dev discover`: runs LAN discovery alone for a while and prints what it sees, so
/// discovery can be tested without the rest of the node (Tests/lan).
struct DevDiscover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "discover",
        abstract: "Send and receive LAN discovery beacons for a while; print sightings as JSON lines.",
        discussion: """
        Prints {"event":"listening","address":…,"id":…} once the discovery port is bound, then one line per
        accepted beacon: {"id":"tdm1…","key":hex,"host":…,"port":…,"name":…|null,"friend":true|false,"seen_at_ms":…}
        (every beacon, repeats included), and at the end {"event":"metrics",…} with the counters.
        """)

    enum Mode: EnumerableFlag {
        case discoverable
        case privateOnly

        static func help(for value: Mode) -> ArgumentHelp? {
            switch value {
            case .discoverable: return "Send open beacons (ID and name) as well as private ones (default)."
            case .privateOnly: return "Send only private beacons, recognisable by friends alone."
            }
        }
    }

    @OptionGroup var common: CommonOptions

    @Option(help: "Display name in open beacons (at most 64 bytes are sent).")
    var name: String = ""

    @Option(help: "TCP port to announce.")
    var tcpPort: Int = TandemConstants.defaultPort

    @Flag(exclusivity: .exclusive)
    var mode: Mode = .discoverable

    @Option(name: .customLong("friend"), help: ArgumentHelp("A friend's ID (tdm1…) or public key in hex; repeatable.", valueName: "id"))
    var friends: [String] = []

    @Option(help: "UDP port to bind and send to.")
    var discoveryPort: Int = TandemConstants.discoveryPort

    @Option(help: "Address to bind.")
    var bind: String = "0.0.0.0"

    @Option(name: .customLong("target"), help: ArgumentHelp("Send to this host:port instead of the broadcast addresses; repeatable.", valueName: "host:port"))
    var targets: [String] = []

    @Option(help: "Milliseconds between rounds of beacons.")
    var intervalMs: Int = 5000

    @Option(help: "Milliseconds between reads of the interface list (address changes trigger beacons).")
    var pollMs: Int = 3000

    @Option(help: "Seconds to run.")
    var seconds: Double = 5

    @Option(help: ArgumentHelp("Read the identity passphrase from this file.", valueName: "file"))
    var passphraseFile: String?

    func validate() throws {
        guard (1...65535).contains(tcpPort) else { throw ValidationError("--tcp-port must be 1…65535") }
        guard (0...65535).contains(discoveryPort) else { throw ValidationError("--discovery-port must be 0…65535") }
        guard intervalMs >= 10 else { throw ValidationError("--interval-ms must be at least 10") }
        guard pollMs >= 10 else { throw ValidationError("--poll-ms must be at least 10") }
        guard seconds > 0, seconds <= 86_400 else { throw ValidationError("--seconds must be above 0 and at most 86400") }
    }

    func run() async throws {
        let dir = common.dataDirectory
        let identity = try IdentityFile.load(from: dir, passphrase: try Passphrase.forLoading(dir, file: passphraseFile))
        let friendKeys = try friends.map { try ShsConnect.parseServerKey($0) }
        var config = DiscoveryConfiguration()
        config.port = discoveryPort
        config.bindHost = bind
        config.interval = .milliseconds(Int64(intervalMs))
        config.devicePollInterval = .milliseconds(Int64(pollMs))
        if !targets.isEmpty {
            config.targets = try targets.map { text in
                let (host, port) = try NodeConfiguration.parseHostPort(text, defaultHost: "127.0.0.1")
                return try SocketAddress(ipAddress: host, port: port)
            }
        }
        LoggingSystem.bootstrap { StructuredLogHandler(label: $0, format: .text, level: .warning) }
        let logger = Logger(label: "tandem.dev.discover")
        let state = DiscoveryState(discoverable: mode == .discoverable, displayName: name, tcpPort: tcpPort, friends: friendKeys)
        let id = NodeID(publicKey: identity.publicKey).canonical
        let service = DiscoveryService(
            identity: identity, configuration: config, group: MultiThreadedEventLoopGroup.singleton, logger: logger,
            state: { state },
            onSighting: { s in
                printJSON(["id": NodeID(publicKey: s.publicKey).canonical, "key": hexString(s.publicKey), "host": s.host, "port": s.port,
                           "name": s.displayName.map { $0 as Any } ?? NSNull(), "friend": s.isFriendBeacon,
                           "seen_at_ms": s.seenAtMs])
            },
            onReady: { address in
                printJSON(["event": "listening", "address": "\(address.ipAddress ?? "?"):\(address.port ?? 0)", "id": id])
            })
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: service)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        let nanoseconds = Int64(seconds * 1_000_000_000)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            tasks.addTask {
                try? await Task.sleep(for: .nanoseconds(nanoseconds))
                await group.triggerGracefulShutdown()
            }
            _ = try await tasks.next()
            tasks.cancelAll()
            try await tasks.waitForAll()
        }
        let m = service.metrics
        printJSON(["event": "metrics", "sent": m.sent, "send_failed": m.sendFailed, "send_rate_limited": m.sendRateLimited,
                   "received": m.received, "accepted_open": m.acceptedOpen, "accepted_private": m.acceptedPrivate,
                   "dropped": m.dropped, "dropped_total": m.droppedTotal])
    }
}

import NIOCore
import TandemNode
import TandemProtocol

/// Everything an operator can set on a relay, with the defaults a small public relay wants.
/// Filled from a config file (`--config`, lines of `key = value`, keys as below in kebab-case)
/// and then from command-line flags, which win.
public struct RelayConfiguration: Sendable, Equatable {
    /// Where clients connect.
    public var listenHost = "0.0.0.0"
    public var listenPort = RelayAddress.defaultPort
    /// Prometheus text at http://host:port/metrics; nil turns it off. Loopback by default.
    public var metricsHost: String? = "127.0.0.1"
    public var metricsPort = 7821
    /// Identity and the durable mailbox live here; nil keeps the mailbox in memory (tests).
    public var dataDirectory: String? = nil
    /// The address clients are told to use (printed by `tandem-relay id`); default: listen address.
    public var publicAddress: String? = nil

    // Limits (0 means "no limit" only where noted).
    /// Authenticated clients at once; past it new clients are refused with a clear error.
    public var maximumClients = 20_000
    /// Connections that have not finished the handshake (or tunnel join) at once, in total and per source address.
    public var maximumPendingConnections = 1_024
    public var maximumPendingPerAddress = 64
    public var handshakeTimeoutSeconds: Int64 = 10
    /// A client link with no frame for this long is closed (nodes ping every 30 s).
    public var idleTimeoutSeconds: Int64 = 120
    /// Tunnels (open or waiting for the other side to join) per client.
    public var maximumTunnelsPerClient = 32
    /// A tunnel whose two ends have not both joined in this time is dropped.
    public var tunnelJoinTimeoutSeconds: Int64 = 10
    /// Bytes per second a client may push through the relay (its links and tunnels); 0 = unlimited.
    public var clientBytesPerSecond = 4 * 1024 * 1024
    /// Bytes the relay queues per tunnel direction before it stops reading the sender.
    public var tunnelQueueBytes = 256 * 1024

    // Mailbox.
    public var mailboxItemsPerRecipient = 256
    public var mailboxBytesPerRecipient = 1 << 20
    /// Items one sender may hold in one recipient's mailbox.
    public var mailboxItemsPerSender = 64
    public var mailboxTotalItems = 200_000
    public var mailboxTotalBytes = 256 << 20
    public var mailboxItemBytes = MailboxSeal.defaultMaximumItemBytes
    public var mailboxTTLSeconds: Int64 = 7 * 24 * 3600

    /// Log lines as JSON objects (one per line) instead of text.
    public var logFormat: LogFormat = .text
    public var logLevel = "info"

    public enum LogFormat: String, Sendable, Equatable { case text, json }

    public init() {}
}

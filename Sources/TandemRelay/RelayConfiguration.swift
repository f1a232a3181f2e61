import NIOCore
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
    /// Authenticated clients from one source address (an IPv6 address counts by its /64) at once:
    /// one host cannot take the whole `maximumClients`.
    public var maximumClientsPerAddress = 64
    /// Connections that have not finished the handshake (or tunnel join) at once, in total and per source address.
    public var maximumPendingConnections = 1_024
    public var maximumPendingPerAddress = 64
    public var handshakeTimeoutSeconds: Int64 = 10
    /// A client link with no frame for this long is closed (nodes ping every 30 s).
    public var idleTimeoutSeconds: Int64 = 120
    /// Event-loop threads the relay's connections run on. One by default: a tunnel's two
    /// connections then always share a thread, and every byte spliced between threads cost a
    /// wake-up (+90 µs per round trip through a tunnel on the reference machine with one loop per
    /// core, 1.33× socat's against 1.03× with one). One loop also carried more tunnel bulk and
    /// registrations there; raise it for a relay whose handshakes need more than one core.
    public var eventLoops = 1
    public static let maximumEventLoops = 64
    /// Tunnels per client key: those it opened (waiting or spliced) plus spliced tunnels to it.
    public var maximumTunnelsPerClient = 32
    /// Tunnels (waiting or spliced) from one initiator key to one target key.
    public var maximumTunnelsPerPair = 4
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
    /// Charged bytes one sender key may hold across all recipients; nil: `mailboxTotalBytes / 64`.
    public var mailboxBytesPerSender: Int? = nil
    /// Charged bytes deposited from one source address across all recipients; nil: `mailboxTotalBytes / 16`.
    public var mailboxBytesPerAddress: Int? = nil
    /// Every item is charged at least this many bytes against the byte quotas.
    public var mailboxItemCharge = 1024
    /// Mailbox jobs (deposits, registrations, acknowledgements) waiting for the store, in all and per client link.
    public var mailboxQueueJobs = 1024
    public var mailboxQueueJobsPerClient = 8

    public var effectiveMailboxBytesPerSender: Int { mailboxBytesPerSender ?? max(1, mailboxTotalBytes / 64) }
    public var effectiveMailboxBytesPerAddress: Int { mailboxBytesPerAddress ?? max(1, mailboxTotalBytes / 16) }

    /// The mailbox quotas these settings give.
    public var mailboxQuotas: RelayMailbox.Quotas {
        .init(itemsPerRecipient: mailboxItemsPerRecipient, bytesPerRecipient: mailboxBytesPerRecipient,
              itemsPerSender: mailboxItemsPerSender, totalItems: mailboxTotalItems, totalBytes: mailboxTotalBytes,
              itemBytes: mailboxItemBytes, ttlMs: mailboxTTLSeconds.multipliedReportingOverflow(by: 1000).overflow
                  ? Int64.max : mailboxTTLSeconds * 1000,
              bytesPerSender: effectiveMailboxBytesPerSender, bytesPerAddress: effectiveMailboxBytesPerAddress,
              minimumChargedBytes: mailboxItemCharge)
    }

    /// Log lines as JSON objects (one per line) instead of text.
    public var logFormat: LogFormat = .text
    public var logLevel = "info"

    public enum LogFormat: String, Sendable, Equatable { case text, json }

    public init() {}
}

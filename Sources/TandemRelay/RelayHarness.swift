import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemProtocol

/// A relay with no client sockets: the real `RelayServer` frame handling (registration, tunnels,
/// mail, idle sweeps) over an in-memory mailbox, a manual clock, and mailbox jobs run inline.
/// Client links are recording links (`Link`) that keep what the relay sent them; tunnel joins
/// arrive on whatever channels the caller hands to `accept` (EmbeddedChannels in the fuzz
/// target), through the same front handler, join and splice code as a TCP connection. What the
/// structure-aware fuzz target (`tandem-fuzz -target=relay`) drives; `violations()` is what it asserts.
public final class RelayHarness: Sendable {
    /// One authenticated client link that records what the relay sends it.
    public final class Link: RelayClientLink, Sendable {
        public let key: [UInt8]
        public let connection: UInt64
        public let address: String
        private let state = NIOLockedValueBox<(sent: [(MessageType, [UInt8])], closed: Bool)>(([], false))

        init(key: [UInt8], connection: UInt64, address: String) {
            self.key = key
            self.connection = connection
            self.address = address
        }

        public var remotePublicKey: [UInt8]? { key }
        public var isClosed: Bool { state.withLockedValue { $0.closed } }

        public func sendSigned(type: MessageType, payload: [UInt8]) {
            state.withLockedValue { if !$0.closed { $0.sent.append((type, payload)) } }
        }

        public func sendEnvelope(_ envelope: Envelope) {
            sendSigned(type: envelope.type, payload: envelope.payload)
        }

        public func sendThenClose(type: MessageType, payload: [UInt8]) {
            sendSigned(type: type, payload: payload)
            close()
        }

        public func close() { state.withLockedValue { $0.closed = true } }

        /// What the relay sent since the last call.
        public func takeSent() -> [(MessageType, [UInt8])] {
            state.withLockedValue { s in defer { s.sent = [] }; return s.sent }
        }
    }

    public let server: RelayServer
    public let configuration: RelayConfiguration
    private let clockMs: NIOLockedValueBox<Int64>
    /// Mailbox jobs waiting for `runMailboxJobs` (when jobs are deferred), oldest first.
    private let queuedJobs = NIOLockedValueBox<[@Sendable () -> Void]>([])
    /// The last connection id handed out, and the links the server knows as established, by
    /// connection id.
    private let connections = NIOLockedValueBox<(last: UInt64, links: [UInt64: Link])>((1 << 32, [:]))
    /// Links the server knows as established, by connection id.
    public var links: [UInt64: Link] { connections.withLockedValue { $0.links } }

    /// `deferMailboxJobs`: mailbox jobs (registrations, deposits, acknowledgements) wait until
    /// `runMailboxJobs`, as on a busy relay, so the queue's limits and jobs that outlive their
    /// link are reached; false: each runs at once.
    public init(identity: SigningKeyPair, configuration: RelayConfiguration, startMs: Int64, maximumConnections: Int = 64,
                deferMailboxJobs: Bool = false) throws {
        self.configuration = configuration
        let clock = NIOLockedValueBox(startMs)
        clockMs = clock
        let queue = queuedJobs
        var logger = Logger(label: "tandem.relay-harness")
        logger.logLevel = .critical
        let mailbox = try RelayMailbox(path: nil, quotas: configuration.mailboxQuotas)
        let runJob: @Sendable (@escaping @Sendable () -> Void) -> Void
        if deferMailboxJobs {
            runJob = { job in queue.withLockedValue { $0.append(job) } }
        } else {
            runJob = { job in job() }
        }
        server = RelayServer(identity: identity, configuration: configuration, mailbox: mailbox,
                             group: MultiThreadedEventLoopGroup.singleton, logger: logger, maximumConnections: maximumConnections,
                             clock: { clock.withLockedValue { $0 } },
                             runMailboxJob: runJob)
    }

    public var nowMs: Int64 { clockMs.withLockedValue { $0 } }

    /// Moves the clock by `deltaMs` (backwards too: wall clocks jump), kept within 0...Int64.max,
    /// then runs the once-a-second sweep (idle links, join timeouts, mail expiry).
    public func advance(by deltaMs: Int64) {
        clockMs.withLockedValue { $0 = max(0, $0.addingSaturated(deltaMs)) }
        server.sweep()
        settle()
    }

    /// A client with `key` connected from `address` (an address bucket) and finished its
    /// handshake: admitted as a connection (as `accept` does), then authenticated. Nil when the
    /// relay refused the connection before the handshake; a link the relay refused after it
    /// comes back closed, with the relay's goodbye in it.
    public func connect(key: [UInt8], address: String) -> Link? {
        guard server.book.withLockedValue({ $0.admit(address: address) }) == .admitted else { return nil }
        let link = connections.withLockedValue { c -> Link in
            c.last += 1
            let link = Link(key: key, connection: c.last, address: address)
            c.links[c.last] = link
            return link
        }
        server.established(link, connection: link.connection, address: address, rate: ByteRate(bytesPerSecond: 0))
        return link
    }

    /// A frame that passed the link rules (signature, freshness, recipient), handed to the relay.
    public func deliver(_ envelope: Envelope, on link: Link) {
        guard !link.isClosed else { return }
        server.received(envelope, on: link, connection: link.connection)
        settle()
    }

    public func disconnect(_ link: Link) {
        link.close()
        settle()
    }

    public var queuedMailboxJobs: Int { queuedJobs.withLockedValue { $0.count } }

    /// Runs up to `count` of the deferred mailbox jobs, oldest first.
    public func runMailboxJobs(_ count: Int = .max) {
        for _ in 0..<max(0, count) {
            guard let job = queuedJobs.withLockedValue({ $0.isEmpty ? nil : $0.removeFirst() }) else { break }
            job()
            settle()
        }
    }

    /// A raw TCP connection (the caller feeds it a tunnel join): through the relay's front handler.
    public func accept(_ channel: Channel) throws {
        try server.accept(channel)
    }

    /// Links the relay (or the client) closed are reported closed to the server, as the
    /// pipeline would: their session and book entries go, their connection is counted out.
    public func settle() {
        let closed = connections.withLockedValue { c -> [(UInt64, Link)] in
            let closed = c.links.filter { $0.value.isClosed }
            for id in closed.keys { c.links[id] = nil }
            return closed.map { ($0.key, $0.value) }
        }
        for (id, link) in closed {
            server.closed(link, connection: id, address: link.address, wasEstablished: true)
            server.book.withLockedValue { $0.connectionClosed() }
        }
    }

    /// Every invariant of the relay's state: the book's and the mailbox's own checks, and every
    /// session belonging to a live link the book knows.
    /// `mailbox` false skips the mailbox's checks (SQL queries: the fuzz target runs them only
    /// after steps that can touch the mailbox).
    public func violations(mailbox: Bool = true) -> [String] {
        var out = server.book.withLockedValue { $0.violations() }
        do {
            if mailbox { out += try server.mailbox.violations() }
        } catch {
            out.append("the mailbox cannot be read: \(error)")
        }
        let (jobs, queued) = (server.book.withLockedValue { $0.mailboxJobs }, queuedMailboxJobs)
        // The book counts the clients' jobs; the queue also holds the sweep's expiry jobs.
        if jobs > queued { out.append("the book counts \(jobs) mailbox jobs, \(queued) are queued") }
        let sessions = server.sessionConnections()
        let links = self.links
        for id in sessions where links[id] == nil { out.append("a session for closed link \(id)") }
        let clients = server.book.withLockedValue { b in sessions.filter { b.key(of: $0) == nil } }
        if !clients.isEmpty { out.append("sessions the book does not know: \(clients)") }
        return out
    }

    /// The link that is `key`'s home link (registered), if any.
    public func homeConnection(of key: [UInt8]) -> UInt64? {
        server.book.withLockedValue { $0.homeClient(of: key) }
    }

    /// True when the relay holds nothing of any connection (after everything closed).
    public var isIdle: Bool {
        server.book.withLockedValue { $0.isEmpty } && server.sessionConnections().isEmpty && server.waitingCount == 0
    }
}

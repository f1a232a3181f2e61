import TandemProtocol

/// The relay's bookkeeping as a plain value (no sockets): which connections are still
/// unauthenticated and from where, which clients are connected and registered, which tunnels
/// are waiting for their two ends and whom they are charged to, and how much mailbox work is
/// queued. The server asks it before doing anything and carries out what it answers; the tests
/// drive it directly.
///
/// Tunnels are counted per **key**, not per link, so a client that reconnects finds its spliced
/// tunnels still counted (they outlive its link). A key's *load* is the tunnels it initiated
/// (waiting or spliced) plus the spliced tunnels it is the target of. Waiting tunnels are charged
/// to their initiator and to the initiator–target pair only: a stranger that opens tunnels and
/// never joins them uses up its own allowance, never its target's.
public struct RelayBook: Sendable {
    public struct Limits: Sendable, Equatable {
        public var maximumClients: Int
        public var maximumPending: Int
        public var maximumPendingPerAddress: Int
        public var maximumTunnelsPerClient: Int
        public var tunnelJoinTimeoutMs: Int64
        /// Connections of every kind the relay may hold (file descriptors it may spend).
        public var maximumConnections: Int
        /// Authenticated client links from one source address (see `addressBucket`).
        public var maximumClientsPerAddress: Int
        /// Tunnels (waiting or spliced) from one initiator key to one target key.
        public var maximumTunnelsPerPair: Int
        /// Mailbox jobs (deposits, registrations, acknowledgements) queued or running, in all and per client link.
        public var maximumMailboxJobs: Int
        public var maximumMailboxJobsPerClient: Int

        public init(maximumClients: Int, maximumPending: Int, maximumPendingPerAddress: Int, maximumTunnelsPerClient: Int,
                    tunnelJoinTimeoutMs: Int64, maximumConnections: Int, maximumClientsPerAddress: Int = .max,
                    maximumTunnelsPerPair: Int = .max, maximumMailboxJobs: Int = .max, maximumMailboxJobsPerClient: Int = .max) {
            self.maximumClients = maximumClients
            self.maximumPending = maximumPending
            self.maximumPendingPerAddress = maximumPendingPerAddress
            self.maximumTunnelsPerClient = maximumTunnelsPerClient
            self.tunnelJoinTimeoutMs = tunnelJoinTimeoutMs
            self.maximumConnections = maximumConnections
            self.maximumClientsPerAddress = maximumClientsPerAddress
            self.maximumTunnelsPerPair = maximumTunnelsPerPair
            self.maximumMailboxJobs = maximumMailboxJobs
            self.maximumMailboxJobsPerClient = maximumMailboxJobsPerClient
        }
    }

    public typealias ClientID = UInt64
    public typealias Token = [UInt8]

    struct Client {
        var key: [UInt8]
        var address: String
        var registered = false
        /// Tunnels this link opened or is the target's home link of (the unspliced ones end
        /// with the link).
        var tunnels: Set<Token> = []
    }

    public struct Tunnel: Sendable, Equatable {
        public let initiator: ClientID
        public let target: ClientID
        public let initiatorKey: [UInt8]
        public let targetKey: [UInt8]
        public let createdMs: Int64
        /// Ends that joined (connection ids), at most two.
        public var joined: [UInt64] = []
        public var spliced = false
    }

    /// What one key takes of the tunnel allowance.
    struct Load: Equatable {
        var initiated = 0
        var splicedIn = 0
        var total: Int { initiated + splicedIn }
        var isEmpty: Bool { initiated == 0 && splicedIn == 0 }
    }

    struct Pair: Hashable {
        let initiator: [UInt8]
        let target: [UInt8]
    }

    public let limits: Limits
    private(set) var pendingByAddress: [String: Int] = [:]
    public private(set) var pendingCount = 0
    public private(set) var connectionCount = 0
    private var clients: [ClientID: Client] = [:]
    private(set) var clientsByAddress: [String: Int] = [:]
    private var homes: [[UInt8]: ClientID] = [:]
    public private(set) var tunnels: [Token: Tunnel] = [:]
    private(set) var loads: [[UInt8]: Load] = [:]
    private(set) var pairs: [Pair: Int] = [:]
    public private(set) var mailboxJobs = 0
    private(set) var mailboxJobsByClient: [ClientID: Int] = [:]

    public init(limits: Limits) {
        self.limits = limits
    }

    public var clientCount: Int { clients.count }
    public var registeredCount: Int { homes.count }
    public var splicedTunnelCount: Int { tunnels.values.filter(\.spliced).count }

    /// The text per-address limits count by: an IPv4 address as it is, an IPv6 address by its /64
    /// prefix (one subscriber usually holds a whole /64, so counting single IPv6 addresses would
    /// give one host 2^64 allowances). An IPv4-mapped IPv6 address counts as its IPv4 address.
    public static func addressBucket(_ ip: String) -> String {
        let lower = ip.lowercased()
        if lower.hasPrefix("::ffff:"), lower.contains(".") { return String(lower.dropFirst(7)) }
        guard lower.contains(":") else { return ip }
        // Expand "::" into the missing zero groups, then keep the first four groups.
        let halves = lower.split(separator: "::", maxSplits: 1, omittingEmptySubsequences: false)
        let head = halves[0].split(separator: ":", omittingEmptySubsequences: true).map(String.init)
        let tail = halves.count > 1 ? halves[1].split(separator: ":", omittingEmptySubsequences: true).map(String.init) : []
        let missing = max(0, 8 - head.count - tail.count)
        let groups = head + Array(repeating: "0", count: halves.count > 1 ? missing : 0) + tail
        let prefix = groups.prefix(4).map { g -> String in
            let trimmed = g.drop(while: { $0 == "0" })
            return trimmed.isEmpty ? "0" : String(trimmed)
        }
        return prefix.joined(separator: ":") + "::/64"
    }

    // MARK: connections

    public enum Admission: Equatable, Sendable {
        case admitted
        /// Past the cap of connections (file descriptors).
        case tooManyConnections
        /// Past the cap of unauthenticated connections, in total or from this address.
        case tooManyPending
    }

    /// A TCP connection arrived from `address`; it is pending until it authenticates or joins.
    public mutating func admit(address: String) -> Admission {
        guard connectionCount < limits.maximumConnections else { return .tooManyConnections }
        guard pendingCount < limits.maximumPending,
              pendingByAddress[address, default: 0] < limits.maximumPendingPerAddress else { return .tooManyPending }
        connectionCount += 1
        pendingCount += 1
        pendingByAddress[address, default: 0] += 1
        return .admitted
    }

    /// The connection finished its handshake or join, or closed before that.
    public mutating func leavePending(address: String) {
        guard let n = pendingByAddress[address] else { return }
        pendingCount -= 1
        pendingByAddress[address] = n > 1 ? n - 1 : nil
    }

    /// An admitted connection closed.
    public mutating func connectionClosed() {
        connectionCount = max(0, connectionCount - 1)
    }

    // MARK: clients

    public enum Authentication: Equatable, Sendable {
        case accepted
        /// Past `maximumClients`.
        case full
        /// Past `maximumClientsPerAddress` from this address.
        case tooManyFromAddress
    }

    /// The link `id` proved `key` from `address` (an `addressBucket`).
    public mutating func authenticated(_ id: ClientID, key: [UInt8], address: String) -> Authentication {
        guard clients[id] == nil else { return .accepted }
        guard clients.count < limits.maximumClients else { return .full }
        guard clientsByAddress[address, default: 0] < limits.maximumClientsPerAddress else { return .tooManyFromAddress }
        clients[id] = Client(key: key, address: address)
        clientsByAddress[address, default: 0] += 1
        return .accepted
    }

    /// Makes `id` the home link of its key. Returns the client it replaces, if any (the server
    /// says goodbye to that one: a node keeps one home link per relay).
    public mutating func register(_ id: ClientID) -> ClientID? {
        guard var c = clients[id] else { return nil }
        c.registered = true
        clients[id] = c
        let previous = homes[c.key]
        homes[c.key] = id
        if let previous, previous != id {
            clients[previous]?.registered = false
            return previous
        }
        return nil
    }

    public func isOnline(_ key: [UInt8]) -> Bool { homes[key] != nil }

    public func homeClient(of key: [UInt8]) -> ClientID? { homes[key] }

    public func key(of id: ClientID) -> [UInt8]? { clients[id]?.key }

    /// A client link closed: forgets it and drops its tunnels that are not spliced yet (spliced
    /// tunnels live on their own connections, and stay charged to their keys). Returns the
    /// dropped tokens, each with the connections that joined it and now wait in vain.
    @discardableResult
    public mutating func clientClosed(_ id: ClientID) -> [Token: [UInt64]] {
        guard let c = clients.removeValue(forKey: id) else { return [:] }
        if homes[c.key] == id { homes[c.key] = nil }
        if let n = clientsByAddress[c.address] { clientsByAddress[c.address] = n > 1 ? n - 1 : nil }
        var dropped: [Token: [UInt64]] = [:]
        for t in c.tunnels {
            guard let tunnel = tunnels[t], !tunnel.spliced else { continue }
            dropTunnel(t)
            dropped[t] = tunnel.joined
        }
        return dropped
    }

    // MARK: tunnels

    public enum OpenResult: Equatable, Sendable {
        case ready(target: ClientID)
        case offline
        case limit(String)
        case badRequest(String)
    }

    /// `id` asks for a tunnel to `target`; `token` is the fresh random join token to use.
    ///
    /// Refused with `limit` when the initiator's key is at `maximumTunnelsPerClient` (its waiting
    /// tunnels count), when the pair already has `maximumTunnelsPerPair` tunnels, or when the
    /// target's key is at `maximumTunnelsPerClient` with tunnels it initiated or spliced tunnels
    /// to it. Tunnels merely waiting to reach the target do not count against the target.
    public mutating func openTunnel(from id: ClientID, to target: [UInt8], token: Token, nowMs: Int64) -> OpenResult {
        guard let me = clients[id] else { return .badRequest("not connected") }
        guard target.count == 32 else { return .badRequest("a target is a 32-byte key") }
        guard target != me.key else { return .badRequest("a tunnel to yourself") }
        guard let targetID = homes[target] else { return .offline }
        guard tunnels[token] == nil else { return .badRequest("token in use") }
        guard loads[me.key, default: Load()].total < limits.maximumTunnelsPerClient else {
            return .limit("at most \(limits.maximumTunnelsPerClient) tunnels per client")
        }
        let pair = Pair(initiator: me.key, target: target)
        guard pairs[pair, default: 0] < limits.maximumTunnelsPerPair else {
            return .limit("at most \(limits.maximumTunnelsPerPair) tunnels to one target")
        }
        guard loads[target, default: Load()].total < limits.maximumTunnelsPerClient else {
            return .limit("the target has too many tunnels")
        }
        tunnels[token] = Tunnel(initiator: id, target: targetID, initiatorKey: me.key, targetKey: target, createdMs: nowMs)
        loads[me.key, default: Load()].initiated += 1
        pairs[pair, default: 0] += 1
        clients[id]?.tunnels.insert(token)
        clients[targetID]?.tunnels.insert(token)
        return .ready(target: targetID)
    }

    public enum JoinResult: Equatable, Sendable {
        /// The first end is here; wait for the other.
        case waiting
        /// Both ends are here: splice `other` (a connection id) with the one that just joined.
        case paired(other: UInt64, tunnel: Tunnel)
        /// Both ends are here but the target reached its tunnel cap while this one waited: the
        /// tunnel is dropped; answer both ends "refused".
        case refused(other: UInt64)
        case unknownToken
    }

    /// `nowMs`: refuse a token past the join timeout even before the next `expireJoins`.
    public mutating func join(token: Token, connection: UInt64, nowMs: Int64? = nil) -> JoinResult {
        guard var t = tunnels[token], !t.spliced, t.joined.count < 2, !t.joined.contains(connection) else { return .unknownToken }
        if let nowMs, nowMs - t.createdMs >= limits.tunnelJoinTimeoutMs { return .unknownToken }
        guard t.joined.count == 1 else {
            t.joined.append(connection)
            tunnels[token] = t
            return .waiting
        }
        let other = t.joined[0]
        // Splicing makes the tunnel count against its target too: waiting ones did not.
        guard loads[t.targetKey, default: Load()].total < limits.maximumTunnelsPerClient else {
            dropTunnel(token)
            return .refused(other: other)
        }
        t.joined.append(connection)
        t.spliced = true
        tunnels[token] = t
        loads[t.targetKey, default: Load()].splicedIn += 1
        return .paired(other: other, tunnel: t)
    }

    /// A tunnel ended (either connection closed, or it expired).
    public mutating func dropTunnel(_ token: Token) {
        guard let t = tunnels.removeValue(forKey: token) else { return }
        clients[t.initiator]?.tunnels.remove(token)
        clients[t.target]?.tunnels.remove(token)
        var l = loads[t.initiatorKey, default: Load()]
        l.initiated = max(0, l.initiated - 1)
        loads[t.initiatorKey] = l.isEmpty ? nil : l
        if t.spliced {
            var l = loads[t.targetKey, default: Load()]
            l.splicedIn = max(0, l.splicedIn - 1)
            loads[t.targetKey] = l.isEmpty ? nil : l
        }
        let pair = Pair(initiator: t.initiatorKey, target: t.targetKey)
        if let n = pairs[pair] { pairs[pair] = n > 1 ? n - 1 : nil }
    }

    /// Tunnels still not spliced after the join timeout; they are forgotten. Returns each with
    /// the connections that joined and wait in vain.
    public mutating func expireJoins(nowMs: Int64) -> [(Token, [UInt64])] {
        let stale = tunnels.filter { !$0.value.spliced && nowMs - $0.value.createdMs >= limits.tunnelJoinTimeoutMs }
        for (token, _) in stale { dropTunnel(token) }
        return stale.map { ($0.key, $0.value.joined) }
    }

    /// Tunnels (any state) a link takes part in, as the initiator's link or the target's home link.
    public func tunnelCount(of id: ClientID) -> Int { clients[id]?.tunnels.count ?? 0 }

    /// A key's tunnel load: tunnels it initiated (waiting or spliced) and spliced tunnels to it.
    public func tunnelLoad(of key: [UInt8]) -> Int { loads[key]?.total ?? 0 }

    /// Tunnels (waiting or spliced) from `initiator` to `target`.
    public func tunnelCount(from initiator: [UInt8], to target: [UInt8]) -> Int {
        pairs[Pair(initiator: initiator, target: target)] ?? 0
    }

    // MARK: self-check

    /// Every rule the book promises, checked against its own state: the counters agree with what
    /// they count, and no limit is exceeded. Empty when all hold (the relay fuzz target and the
    /// tests assert it after every step).
    public func violations() -> [String] {
        var out: [String] = []
        if clients.count > limits.maximumClients { out.append("\(clients.count) clients > \(limits.maximumClients)") }
        var byAddress: [String: Int] = [:]
        for c in clients.values { byAddress[c.address, default: 0] += 1 }
        if byAddress != clientsByAddress { out.append("clientsByAddress \(clientsByAddress) != counted \(byAddress)") }
        for (a, n) in byAddress where n > limits.maximumClientsPerAddress {
            out.append("\(n) clients from \(a) > \(limits.maximumClientsPerAddress)")
        }
        if pendingCount < 0 || pendingCount > limits.maximumPending { out.append("pending \(pendingCount) out of 0...\(limits.maximumPending)") }
        if pendingByAddress.values.reduce(0, +) != pendingCount {
            out.append("pending by address sums to \(pendingByAddress.values.reduce(0, +)), not \(pendingCount)")
        }
        for (a, n) in pendingByAddress where n <= 0 || n > limits.maximumPendingPerAddress {
            out.append("\(n) pending from \(a)")
        }
        if connectionCount < 0 || connectionCount > limits.maximumConnections {
            out.append("connections \(connectionCount) out of 0...\(limits.maximumConnections)")
        }
        if pendingCount > connectionCount { out.append("pending \(pendingCount) > connections \(connectionCount)") }
        for (key, id) in homes {
            guard let c = clients[id] else { out.append("a home link \(id) that is not a client"); continue }
            if c.key != key || !c.registered { out.append("home link \(id) is not a registered link of its key") }
        }
        for (id, c) in clients where c.registered && homes[c.key] != id { out.append("registered link \(id) is not its key's home") }
        // Loads and pairs, recounted from the tunnels.
        var counted: [[UInt8]: Load] = [:]
        var countedPairs: [Pair: Int] = [:]
        for (token, t) in tunnels {
            counted[t.initiatorKey, default: Load()].initiated += 1
            if t.spliced { counted[t.targetKey, default: Load()].splicedIn += 1 }
            countedPairs[Pair(initiator: t.initiatorKey, target: t.targetKey), default: 0] += 1
            if t.joined.count > 2 || (t.spliced && t.joined.count != 2) { out.append("tunnel joined by \(t.joined.count) ends") }
            if t.initiatorKey == t.targetKey { out.append("a tunnel to oneself") }
            if !t.spliced {
                for id in [t.initiator, t.target] where clients[id] != nil && clients[id]?.tunnels.contains(token) != true {
                    out.append("a waiting tunnel its link \(id) does not hold")
                }
            }
        }
        if counted != loads { out.append("tunnel loads differ from the tunnels") }
        if countedPairs != pairs { out.append("tunnel pairs differ from the tunnels") }
        for (key, l) in loads where l.total > limits.maximumTunnelsPerClient || l.isEmpty || l.initiated < 0 || l.splicedIn < 0 {
            out.append("key \(hexString(key.prefix(4))) holds \(l.total) tunnels (limit \(limits.maximumTunnelsPerClient))")
        }
        for (_, n) in pairs where n > limits.maximumTunnelsPerPair { out.append("\(n) tunnels in one pair > \(limits.maximumTunnelsPerPair)") }
        for c in clients.values {
            for t in c.tunnels where tunnels[t] == nil { out.append("a link holds a tunnel that is gone") }
        }
        if mailboxJobs < 0 || mailboxJobs > limits.maximumMailboxJobs { out.append("mailbox jobs \(mailboxJobs)") }
        if mailboxJobsByClient.values.reduce(0, +) != mailboxJobs { out.append("mailbox jobs by client do not sum to \(mailboxJobs)") }
        for (_, n) in mailboxJobsByClient where n <= 0 || n > limits.maximumMailboxJobsPerClient { out.append("\(n) mailbox jobs of one link") }
        return out
    }

    /// True when nothing is held: no connection, client, tunnel or job.
    public var isEmpty: Bool {
        connectionCount == 0 && pendingCount == 0 && clients.isEmpty && homes.isEmpty && tunnels.isEmpty && loads.isEmpty
            && pairs.isEmpty && mailboxJobs == 0 && clientsByAddress.isEmpty && pendingByAddress.isEmpty
    }

    // MARK: mailbox work

    public enum MailboxJob: Equatable, Sendable {
        case accepted
        /// The queue is full: the relay is busy.
        case busy
        /// This link already has `maximumMailboxJobsPerClient` jobs waiting.
        case tooManyFromClient
    }

    /// `client` wants one job on the mailbox queue (a deposit, a registration, an acknowledgement).
    /// Each accepted job must be followed by `finishMailboxJob(client:)`.
    public mutating func startMailboxJob(client: ClientID) -> MailboxJob {
        guard mailboxJobs < limits.maximumMailboxJobs else { return .busy }
        guard mailboxJobsByClient[client, default: 0] < limits.maximumMailboxJobsPerClient else { return .tooManyFromClient }
        mailboxJobs += 1
        mailboxJobsByClient[client, default: 0] += 1
        return .accepted
    }

    public mutating func finishMailboxJob(client: ClientID) {
        guard let n = mailboxJobsByClient[client] else { return }
        mailboxJobs = max(0, mailboxJobs - 1)
        mailboxJobsByClient[client] = n > 1 ? n - 1 : nil
    }
}

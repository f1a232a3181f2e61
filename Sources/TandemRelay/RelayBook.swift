import TandemProtocol

/// The relay's bookkeeping as a plain value (no sockets): which connections are still
/// unauthenticated and from where, which clients are connected and registered, and which tunnels
/// are waiting for their two ends. The server asks it before doing anything and carries out what
/// it answers; the tests drive it directly.
public struct RelayBook: Sendable {
    public struct Limits: Sendable, Equatable {
        public var maximumClients: Int
        public var maximumPending: Int
        public var maximumPendingPerAddress: Int
        public var maximumTunnelsPerClient: Int
        public var tunnelJoinTimeoutMs: Int64
        /// Connections of every kind the relay may hold (file descriptors it may spend).
        public var maximumConnections: Int

        public init(maximumClients: Int, maximumPending: Int, maximumPendingPerAddress: Int, maximumTunnelsPerClient: Int,
                    tunnelJoinTimeoutMs: Int64, maximumConnections: Int) {
            self.maximumClients = maximumClients
            self.maximumPending = maximumPending
            self.maximumPendingPerAddress = maximumPendingPerAddress
            self.maximumTunnelsPerClient = maximumTunnelsPerClient
            self.tunnelJoinTimeoutMs = tunnelJoinTimeoutMs
            self.maximumConnections = maximumConnections
        }
    }

    public typealias ClientID = UInt64
    public typealias Token = [UInt8]

    struct Client {
        var key: [UInt8]
        var registered = false
        var tunnels: Set<Token> = []
    }

    public struct Tunnel: Sendable, Equatable {
        public let initiator: ClientID
        public let target: ClientID
        public let createdMs: Int64
        /// Ends that joined (connection ids), at most two.
        public var joined: [UInt64] = []
        public var spliced = false
    }

    public let limits: Limits
    private(set) var pendingByAddress: [String: Int] = [:]
    public private(set) var pendingCount = 0
    public private(set) var connectionCount = 0
    private var clients: [ClientID: Client] = [:]
    private var homes: [[UInt8]: ClientID] = [:]
    public private(set) var tunnels: [Token: Tunnel] = [:]

    public init(limits: Limits) {
        self.limits = limits
    }

    public var clientCount: Int { clients.count }
    public var registeredCount: Int { homes.count }
    public var splicedTunnelCount: Int { tunnels.values.filter(\.spliced).count }

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
        case full
    }

    public mutating func authenticated(_ id: ClientID, key: [UInt8]) -> Authentication {
        guard clients.count < limits.maximumClients else { return .full }
        clients[id] = Client(key: key)
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
    /// tunnels live on their own connections). Returns the dropped tokens.
    @discardableResult
    public mutating func clientClosed(_ id: ClientID) -> [Token] {
        guard let c = clients.removeValue(forKey: id) else { return [] }
        if homes[c.key] == id { homes[c.key] = nil }
        var dropped: [Token] = []
        for t in c.tunnels where tunnels[t]?.spliced == false {
            dropTunnel(t)
            dropped.append(t)
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
    public mutating func openTunnel(from id: ClientID, to target: [UInt8], token: Token, nowMs: Int64) -> OpenResult {
        guard let me = clients[id] else { return .badRequest("not connected") }
        guard target.count == 32 else { return .badRequest("a target is a 32-byte key") }
        guard target != me.key else { return .badRequest("a tunnel to yourself") }
        guard let targetID = homes[target] else { return .offline }
        guard me.tunnels.count < limits.maximumTunnelsPerClient else {
            return .limit("at most \(limits.maximumTunnelsPerClient) tunnels per client")
        }
        guard (clients[targetID]?.tunnels.count ?? 0) < limits.maximumTunnelsPerClient else {
            return .limit("the target has too many tunnels")
        }
        tunnels[token] = Tunnel(initiator: id, target: targetID, createdMs: nowMs)
        clients[id]?.tunnels.insert(token)
        clients[targetID]?.tunnels.insert(token)
        return .ready(target: targetID)
    }

    public enum JoinResult: Equatable, Sendable {
        /// The first end is here; wait for the other.
        case waiting
        /// Both ends are here: splice `other` (a connection id) with the one that just joined.
        case paired(other: UInt64, tunnel: Tunnel)
        case unknownToken
    }

    /// `nowMs`: refuse a token past the join timeout even before the next `expireJoins`.
    public mutating func join(token: Token, connection: UInt64, nowMs: Int64? = nil) -> JoinResult {
        guard var t = tunnels[token], !t.spliced, t.joined.count < 2, !t.joined.contains(connection) else { return .unknownToken }
        if let nowMs, nowMs - t.createdMs >= limits.tunnelJoinTimeoutMs { return .unknownToken }
        t.joined.append(connection)
        if t.joined.count == 2 {
            t.spliced = true
            tunnels[token] = t
            return .paired(other: t.joined[0], tunnel: t)
        }
        tunnels[token] = t
        return .waiting
    }

    /// A tunnel ended (either connection closed, or it expired).
    public mutating func dropTunnel(_ token: Token) {
        guard let t = tunnels.removeValue(forKey: token) else { return }
        clients[t.initiator]?.tunnels.remove(token)
        clients[t.target]?.tunnels.remove(token)
    }

    /// Tunnels still not spliced after the join timeout; they are forgotten. Returns each with
    /// the connections that joined and wait in vain.
    public mutating func expireJoins(nowMs: Int64) -> [(Token, [UInt64])] {
        let stale = tunnels.filter { !$0.value.spliced && nowMs - $0.value.createdMs >= limits.tunnelJoinTimeoutMs }
        for (token, _) in stale { dropTunnel(token) }
        return stale.map { ($0.key, $0.value.joined) }
    }

    /// Tunnels (any state) a client takes part in.
    public func tunnelCount(of id: ClientID) -> Int { clients[id]?.tunnels.count ?? 0 }
}

import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemProtocol

/// Receives every authenticated frame that the link layer did not handle itself.
public protocol FrameHandler: AnyObject, Sendable {
    func handle(_ envelope: Envelope, from link: PeerLink)
    func peerConnected(_ key: [UInt8], link: PeerLink)
    func peerDisconnected(_ key: [UInt8])
    func peerReportedError(_ error: Tandem_V1_Error, from key: [UInt8])
}

/// Keeps the node's authenticated links, at most a few per peer, and opens new ones on demand.
/// Inbound links (accepted by the listener) and outbound ones (opened here) are treated alike.
public final class PeerManager: PeerLinkDelegate, Sendable {
    private struct State {
        var links: [[UInt8]: [PeerLink]] = [:]
        var connecting: [[UInt8]: EventLoopPromise<PeerLink>] = [:]
        var lastFrameAt: [[UInt8]: UInt64] = [:]
        /// What a peer announced in its last PRESENCE (README 12.7) while a link to it is up:
        /// every link to it takes it, one that comes up later too (the peer sends its PRESENCE only
        /// on the first link, and the outbox writes on the newest).
        var announced: [[UInt8]: Announcement] = [:]
    }

    /// What a peer's PRESENCE said it takes on links to it (README 12.5, 5.4).
    public struct Announcement: Sendable, Equatable {
        public var takesAcks: Bool
        public var takesLinkAuthenticated: Bool
        public init(takesAcks: Bool, takesLinkAuthenticated: Bool) {
            self.takesAcks = takesAcks
            self.takesLinkAuthenticated = takesLinkAuthenticated
        }
    }

    /// A peer's PRESENCE came: what it takes holds for every link to it that is up, and for those
    /// that come up while one is (all links to one key reach one node). Forgotten with its last link.
    public func announced(_ key: [UInt8], _ a: Announcement) {
        let links = state.withLockedValue { s -> [PeerLink] in
            guard let list = s.links[key], !list.isEmpty else { return [] }
            s.announced[key] = a
            return list
        }
        for link in links { link.apply(a) }
    }

    public let identity: SigningKeyPair
    private let gate: FrameGate
    private let options: PeerPipeline.Options
    let group: EventLoopGroup
    private let logger: Logger
    private let state = NIOLockedValueBox(State())
    /// Where frames and link events go (the node core's inbound queue).
    let handler: FrameHandler?
    /// Links a node keeps open at most (inbound and outbound together); strangers past it are closed.
    public let maximumLinks: Int
    /// Direct links from one remote address at most (Protocol 5.12), so one address cannot take
    /// every link slot; tunnels (whose socket address is the relay's) are not counted.
    public let maximumLinksPerAddress: Int

    public init(identity: SigningKeyPair, gate: FrameGate, options: PeerPipeline.Options, group: EventLoopGroup,
                logger: Logger, handler: FrameHandler?, maximumLinks: Int = 1024, maximumLinksPerAddress: Int = 32) {
        self.handler = handler
        self.identity = identity
        self.gate = gate
        self.options = options
        self.group = group
        self.logger = logger
        self.maximumLinks = maximumLinks
        self.maximumLinksPerAddress = maximumLinksPerAddress
    }

    // MARK: PeerLinkDelegate

    public func linkEstablished(_ link: PeerLink) {
        guard let key = link.remotePublicKey else { return }
        let host = link.directRemoteHost
        let (isFirst, tooMany) = state.withLockedValue { s -> (Bool, Bool) in
            let total = s.links.values.reduce(0) { $0 + $1.count }
            if total >= maximumLinks { return (false, true) }
            if let host, s.links.values.reduce(0, { n, list in n + list.count(where: { $0.directRemoteHost == host }) })
                >= maximumLinksPerAddress { return (false, true) }
            let first = s.links[key, default: []].isEmpty
            s.links[key, default: []].append(link)
            if let a = s.announced[key] { link.apply(a) }
            s.lastFrameAt[key] = wallClockMilliseconds()
            return (first, false)
        }
        if tooMany {
            logger.notice("too many links, closing a new one", metadata: ["peer": "\(NodeID(publicKey: key).short)"])
            link.close()
            return
        }
        if isFirst { handler?.peerConnected(key, link: link) }
    }

    public func link(_ link: PeerLink, received envelope: Envelope) {
        guard let key = link.remotePublicKey else { return }
        state.withLockedValue { $0.lastFrameAt[key] = wallClockMilliseconds() }
        if envelope.type == .ping || envelope.type == .pong { return }
        handler?.handle(envelope, from: link)
    }

    public func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {
        guard let key = link.remotePublicKey else { return }
        handler?.peerReportedError(error, from: key)
    }

    public func linkClosed(_ link: PeerLink, error: Error?) {
        guard let key = link.remotePublicKey else { return }
        let wasLast = state.withLockedValue { s -> Bool in
            guard var list = s.links[key] else { return false }
            list.removeAll { $0 === link }
            if list.isEmpty {
                s.links[key] = nil
                s.lastFrameAt[key] = nil
                s.announced[key] = nil
                return true
            }
            s.links[key] = list
            return false
        }
        if wasLast { handler?.peerDisconnected(key) }
    }

    // MARK: using links

    /// The newest open direct link to a peer, else its newest tunnel through a relay.
    public func link(to key: [UInt8]) -> PeerLink? {
        state.withLockedValue { s in
            guard let list = s.links[key] else { return nil }
            return list.last { $0.channel.isActive && $0.relay == nil } ?? list.last { $0.channel.isActive }
        }
    }

    /// True when the peer's only links are relay tunnels.
    public func isRelayed(_ key: [UInt8]) -> Bool {
        link(to: key).map { $0.relay != nil } ?? false
    }

    public var connectedPeers: [[UInt8]] {
        state.withLockedValue { Array($0.links.keys) }
    }

    /// When the last frame from a peer arrived (ms), while a link is up.
    public func lastFrame(from key: [UInt8]) -> UInt64? {
        state.withLockedValue { $0.lastFrameAt[key] }
    }

    /// The remote address of the peer's newest link.
    public func remoteAddress(of key: [UInt8]) -> SocketAddress? {
        link(to: key)?.channel.remoteAddress
    }

    /// Sends a signed envelope on the peer's link; false when there is none.
    @discardableResult
    public func send(_ envelope: Envelope, to key: [UInt8]) -> Bool {
        guard let link = link(to: key) else { return false }
        link.send(envelope)
        return true
    }

    /// An open link to `key`, connecting to `host:port` when there is none. Concurrent calls for the
    /// same peer share one attempt.
    public func connect(to key: [UInt8], host: String, port: Int, timeout: TimeAmount = .seconds(5)) async throws -> PeerLink {
        if let existing = link(to: key) { return existing }
        let loop = group.next()
        let (promise, isNew) = state.withLockedValue { s -> (EventLoopPromise<PeerLink>, Bool) in
            if let p = s.connecting[key] { return (p, false) }
            let p = loop.makePromise(of: PeerLink.self)
            s.connecting[key] = p
            return (p, true)
        }
        guard isNew else { return try await promise.futureResult.valueUnlessCancelled() }
        do {
            let (link, _) = try await PeerConnector.connect(host: host, port: port, remote: key, identity: identity, gate: gate,
                                                            delegate: self, options: options, group: group, logger: logger,
                                                            connectTimeout: timeout)
            state.withLockedValue { _ = $0.connecting.removeValue(forKey: key) }
            promise.succeed(link)
            return link
        } catch {
            state.withLockedValue { _ = $0.connecting.removeValue(forKey: key) }
            promise.fail(error)
            throw error
        }
    }

    /// Closes every link (graceful: each says box-stream goodbye).
    public func closeAll() {
        let all = state.withLockedValue { s in s.links.values.flatMap { $0 } }
        for l in all { l.close() }
    }
}

extension PeerLink {
    fileprivate func apply(_ a: PeerManager.Announcement) {
        setTakesAcks(a.takesAcks)
        setTakesLinkAuthenticated(a.takesLinkAuthenticated)
    }
}

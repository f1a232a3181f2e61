import Logging
import NIOConcurrencyHelpers
import NIOCore
import Sodium
import TandemProtocol

/// What a relay sends unasked on a `RelayClientConnection`, handed on by it on the link's event
/// loop. Each method does nothing unless implemented.
public protocol RelayClientConnectionDelegate: AnyObject, Sendable {
    /// Another node asked for a tunnel to us (a registered link): join it as the handshake server.
    func relayConnection(_ connection: RelayClientConnection, tunnelIncomingFrom from: [UInt8], token: [UInt8])
    /// Sealed mail for us (a registered link); `acknowledge` it once handled, or not, to have it again.
    func relayConnection(_ connection: RelayClientConnection, mail itemID: UInt64, sealed: [UInt8])
    /// The link closed. Every caller still waiting has been answered `RelayClientError` (closed).
    func relayConnectionClosed(_ connection: RelayClientConnection, ending: RelayClientSession.Ending)
}

extension RelayClientConnectionDelegate {
    public func relayConnection(_ connection: RelayClientConnection, tunnelIncomingFrom from: [UInt8], token: [UInt8]) {}
    public func relayConnection(_ connection: RelayClientConnection, mail itemID: UInt64, sealed: [UInt8]) {}
    public func relayConnectionClosed(_ connection: RelayClientConnection, ending: RelayClientSession.Ending) {}
}

/// Why a `RelayClientConnection` call did not get its answer.
public struct RelayClientError: Error, CustomStringConvertible, Sendable {
    private enum Kind: Sendable {
        case closed
        case timedOut(waitingFor: String, after: TimeAmount)
        case alreadyRegistering
    }

    private let kind: Kind
    public let relay: RelayAddress
    /// Why the link closed, when it did and it is known: the relay's goodbye, else the link's error.
    public let reason: String?
    /// The relay said goodbye before the link closed (`reason` is what it said).
    public let saidGoodbye: Bool

    private init(_ kind: Kind, relay: RelayAddress, reason: String? = nil, saidGoodbye: Bool = false) {
        self.kind = kind
        self.relay = relay
        self.reason = reason
        self.saidGoodbye = saidGoodbye
    }

    static func closed(_ relay: RelayAddress, ending: RelayClientSession.Ending?, saidGoodbye: Bool) -> RelayClientError {
        RelayClientError(.closed, relay: relay, reason: ending?.reason, saidGoodbye: saidGoodbye)
    }

    static func timedOut(_ relay: RelayAddress, waitingFor what: String, after: TimeAmount) -> RelayClientError {
        RelayClientError(.timedOut(waitingFor: what, after: after), relay: relay)
    }

    static func alreadyRegistering(_ relay: RelayAddress) -> RelayClientError {
        RelayClientError(.alreadyRegistering, relay: relay)
    }

    /// The link was closed, or closed while the call waited.
    public var isClosed: Bool {
        switch kind {
        case .closed: return true
        case .timedOut, .alreadyRegistering: return false
        }
    }

    /// The relay did not answer within the caller's time limit.
    public var isTimeout: Bool {
        switch kind {
        case .timedOut: return true
        case .closed, .alreadyRegistering: return false
        }
    }

    public var description: String {
        let at = "relay \(relay.host):\(relay.port)"
        switch kind {
        case .closed:
            return "the link to \(at) closed\(reason.map { ": \($0)" } ?? "")"
        case .timedOut(let what, let after):
            return "\(at) did not \(what) within \(Self.text(after))"
        case .alreadyRegistering:
            return "the link to \(at) is already registering or registered"
        }
    }

    private static func text(_ t: TimeAmount) -> String {
        t.nanoseconds % 1_000_000_000 == 0 ? "\(t.nanoseconds / 1_000_000_000) s" : "\(t.nanoseconds / 1_000_000) ms"
    }
}

/// One authenticated link to a relay, driven by the sans-IO `RelayClientSession`: it connects,
/// sends the frames the session builds, and holds the callers waiting for the relay's answers, each
/// answered by the relay, by its own time limit, by its task's cancellation, or by the link
/// closing, whichever comes first. What the relay sends unasked goes to the delegate. The node's
/// relay client, restore and `tandem-bench relay` all talk to relays through it.
///
/// State is behind one lock; the link calls in on its event loop; callers wait on NIO promises of
/// that loop (no tasks or queues of its own).
public final class RelayClientConnection: PeerLinkDelegate, Sendable {
    public let relay: RelayAddress
    private weak let delegate: (any RelayClientConnectionDelegate)?

    private struct State {
        var machine: RelayClientSession
        /// Set once the handshake is done (`connect`).
        var link: PeerLink?
        var waiter: LinkWaiter?
        var replies: [UInt64: EventLoopPromise<RelayClientSession.Reply>] = [:]
        var registration: EventLoopPromise<UInt32>?
        /// How the link ended, once it has.
        var ending: RelayClientSession.Ending?
    }
    private let state: NIOLockedValueBox<State>

    private init(relay: RelayAddress, delegate: (any RelayClientConnectionDelegate)?) {
        self.relay = relay
        self.delegate = delegate
        let machine = RelayClientSession(relay: relay.id.publicKey, nowMs: Int64(clamping: wallClockMilliseconds()))
        self.state = NIOLockedValueBox(State(machine: machine))
    }

    /// Connects to `relay` and runs the Secret Handshake (the relay must prove its key); returns
    /// once the link is up. Not registered: call `register` to make it the node's home link.
    public static func connect(to relay: RelayAddress, identity: SigningKeyPair, gate: FrameGate,
                               options: PeerPipeline.Options = .init(), group: EventLoopGroup, logger: Logger,
                               connectTimeout: TimeAmount = .seconds(10), localAddress: SocketAddress? = nil,
                               delegate: (any RelayClientConnectionDelegate)? = nil) async throws -> RelayClientConnection {
        let connection = RelayClientConnection(relay: relay, delegate: delegate)
        let (link, waiter) = try await PeerConnector.connect(host: relay.host, port: relay.port, remote: relay.id.publicKey,
                                                             identity: identity, gate: gate, delegate: connection,
                                                             options: options, group: group, logger: logger,
                                                             connectTimeout: connectTimeout, localAddress: localAddress)
        connection.state.withLockedValue { $0.link = link; $0.waiter = waiter }
        return connection
    }

    // MARK: what the session knows

    /// The link (to pause reading while the owner is busy with its mail).
    public var link: PeerLink? { state.withLockedValue { $0.link } }
    public var isOpen: Bool { state.withLockedValue { !$0.machine.isClosed && $0.link?.channel.isActive == true } }
    public var isRegistered: Bool { state.withLockedValue { $0.machine.isRegistered } }
    /// Whether the registration was ever confirmed on this link (still true after it closed).
    public var wasRegistered: Bool { state.withLockedValue { $0.machine.wasRegistered } }
    /// The relay's goodbye, if it said one: (reason, retry after ms).
    public var goodbye: (reason: String, retryAfterMs: Int64)? { state.withLockedValue { $0.machine.goodbye } }
    public var connectedAtMs: Int64 { state.withLockedValue { $0.machine.connectedAtMs } }
    /// When a request was last made.
    public var lastUsedMs: Int64 { state.withLockedValue { $0.machine.lastUsedMs } }
    public var mailReceived: Int { state.withLockedValue { $0.machine.mailReceived } }

    // MARK: requests

    /// RELAY_REGISTER; the number of mail items waiting, once the relay confirms within `timeout`.
    public func register(agent: String, timeout: TimeAmount) async throws -> UInt32 {
        let (link, frame, promise) = try state.withLockedValue { s -> (PeerLink, RelayClientSession.Outbound, EventLoopPromise<UInt32>) in
            guard let link = s.link, !s.machine.isClosed else { throw closedError(s) }
            guard let frame = s.machine.register(agent: agent) else { throw RelayClientError.alreadyRegistering(relay) }
            let promise = link.channel.eventLoop.makePromise(of: UInt32.self)
            s.registration = promise
            return (link, frame, promise)
        }
        // Given up on (time limit, cancellation); there is no second registration on a link.
        promise.futureResult.whenFailure { [weak self] _ in
            self?.state.withLockedValue { $0.registration = nil }
        }
        return try await send(frame, on: link, awaiting: promise, within: timeout, waitingFor: "confirm the registration")
    }

    /// A request (TUNNEL_OPEN, MAILBOX_PUT); the relay's reply, checked by the session, within `timeout`.
    public func request(_ request: RelayClientSession.Request, timeout: TimeAmount) async throws -> RelayClientSession.Reply {
        let nowMs = Int64(clamping: wallClockMilliseconds())
        let (link, id, frame, promise) = try state.withLockedValue { s -> (PeerLink, UInt64, RelayClientSession.Outbound, EventLoopPromise<RelayClientSession.Reply>) in
            guard let link = s.link, let (id, frame) = s.machine.request(request, nowMs: nowMs) else { throw closedError(s) }
            let promise = link.channel.eventLoop.makePromise(of: RelayClientSession.Reply.self)
            s.replies[id] = promise
            return (link, id, frame, promise)
        }
        // Given up on (time limit, cancellation): a late answer is ignored.
        promise.futureResult.whenFailure { [weak self] _ in
            self?.state.withLockedValue { s in
                s.machine.abandon(id)
                s.replies[id] = nil
            }
        }
        return try await send(frame, on: link, awaiting: promise, within: timeout, waitingFor: "answer")
    }

    /// Sends `frame` and waits for `promise`, which fails after `timeout`, or at once when the
    /// waiting task is cancelled.
    private func send<T: Sendable>(_ frame: RelayClientSession.Outbound, on link: PeerLink, awaiting promise: EventLoopPromise<T>,
                                   within timeout: TimeAmount, waitingFor what: String) async throws -> T {
        let relay = self.relay
        let timer = promise.futureResult.eventLoop.scheduleTask(in: timeout) {
            promise.fail(RelayClientError.timedOut(relay, waitingFor: what, after: timeout))
        }
        promise.futureResult.whenComplete { _ in timer.cancel() }
        link.send(type: frame.type, payload: frame.payload)
        return try await withTaskCancellationHandler {
            try await promise.futureResult.get()
        } onCancel: {
            promise.fail(CancellationError())
        }
    }

    /// MAILBOX_ACK for mail the owner has handled (or can never handle): the relay forgets it.
    public func acknowledge(_ itemIDs: UInt64...) {
        let (frame, link) = state.withLockedValue { ($0.machine.acknowledge(itemIDs), $0.link) }
        link?.send(type: frame.type, payload: frame.payload)
    }

    /// A PING; the link is closed when no PONG comes within `timeout` (the relay or the path is gone).
    public func probe(timeout: TimeAmount) {
        guard let (link, waiter) = state.withLockedValue({ s in s.link.flatMap { l in s.waiter.map { (l, $0) } } }) else { return }
        waiter.sendPing(timeout: timeout).whenFailure { _ in link.close() }
    }

    public func close() {
        link?.close()
    }

    private func closedError(_ s: State) -> RelayClientError {
        .closed(relay, ending: s.ending, saidGoodbye: s.machine.goodbye != nil)
    }

    // MARK: PeerLinkDelegate (on the link's event loop)

    public func link(_ link: PeerLink, received envelope: Envelope) {
        let action = state.withLockedValue { $0.machine.receive(envelope) }
        switch action {
        case nil, .goodbye?:
            // A goodbye is kept by the session; the link closes next, and that ends the waits.
            break
        case .registered(let items)?:
            state.withLockedValue { s in defer { s.registration = nil }; return s.registration }?.succeed(items)
        case .replied(let id, let reply)?:
            state.withLockedValue { $0.replies.removeValue(forKey: id) }?.succeed(reply)
        case .tunnelIncoming(let from, let token)?:
            delegate?.relayConnection(self, tunnelIncomingFrom: from, token: token)
        case .mail(let itemID, let sealed)?:
            delegate?.relayConnection(self, mail: itemID, sealed: sealed)
        }
    }

    public func linkClosed(_ link: PeerLink, error: Error?) {
        let (ending, saidGoodbye, replies, registration) = state.withLockedValue { s in
            defer { s.replies = [:]; s.registration = nil }
            let ending = s.machine.closed(error: error.map { "\($0)" })
            s.ending = ending
            return (ending, s.machine.goodbye != nil, s.replies, s.registration)
        }
        let e = RelayClientError.closed(relay, ending: ending, saidGoodbye: saidGoodbye)
        for (_, p) in replies { p.fail(e) }
        registration?.fail(e)
        delegate?.relayConnectionClosed(self, ending: ending)
    }
}

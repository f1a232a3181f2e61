import Foundation
import Sodium
import SwiftProtobuf

/// The client's side of one authenticated link to a tandem-relay (Protocol/README.md section 14),
/// without I/O: registration, tunnel requests and announcements, mailbox put / item / ack, and the
/// relay's goodbye. The owner feeds it what it is asked to do and the frames the link delivers,
/// sends the frames it returns, and carries out what `receive` answers. Its one I/O owner is
/// TandemNet's `RelayClientConnection` (for the node's relay client, restore and `tandem-bench
/// relay`); `tandem-bench`'s registration loop and the fuzzer drive it directly.
///
/// Everything the relay sends is checked here: frames not signed by the relay are ignored, replies
/// must answer a request still waiting, a tunnel token or key must have its exact length, and a
/// goodbye's retry-after is taken only within its documented range (at most 1 h).
public struct RelayClientSession: Sendable {
    /// A frame for the link: message type and payload (the link signs it).
    public struct Outbound: Equatable, Sendable {
        public let type: MessageType
        public let payload: [UInt8]
    }

    /// A client request that waits for a RELAY_REPLY.
    public enum Request: Equatable, Sendable {
        case tunnelOpen(target: [UInt8])
        case mailboxPut(recipient: [UInt8], sealed: [UInt8])
    }

    /// The answer to a request, checked against what was asked.
    public enum Reply: Equatable, Sendable {
        /// TUNNEL_OPEN accepted: both ends join with this token (exactly `TunnelJoin.tokenLength` bytes).
        case tunnel(token: [UInt8])
        /// MAILBOX_PUT stored durably under this item id.
        case stored(itemID: UInt64)
        /// Refused, with the relay's status and its (length-capped) explanation.
        case refused(Tandem_V1_RelayStatus, detail: String)
    }

    /// What the owner does with a frame from the relay.
    public enum Action: Equatable, Sendable {
        /// The registration is confirmed (RELAY_REGISTERED): the link is now the node's home link.
        case registered(mailboxItems: UInt32)
        /// The relay answered request `requestID`.
        case replied(requestID: UInt64, Reply)
        /// Another node asked for a tunnel to us: join it as the handshake server.
        case tunnelIncoming(from: [UInt8], token: [UInt8])
        /// Sealed mail for us; open it, then `acknowledge` it (or not, to have it again later).
        case mail(itemID: UInt64, sealed: [UInt8])
        /// The relay said goodbye; the link closes next. Come back no sooner than `retryAfterMs`.
        case goodbye(reason: String, retryAfterMs: Int64)
    }

    /// How the link ended, for the owner's reconnect decision and its waiting callers.
    public struct Ending: Equatable, Sendable {
        /// The relay's goodbye reason, else the link's error, else nil (a plain close).
        public let reason: String?
        /// The relay's validated retry-after (0 without a goodbye).
        public let retryAfterMs: Int64
        /// Whether the registration was ever confirmed on this link.
        public let wasRegistered: Bool
        /// Requests that will get no answer now.
        public let unanswered: [UInt64]
        /// A registration that will get no answer now.
        public let registrationUnanswered: Bool
    }

    private enum Phase: Equatable {
        /// Authenticated; not registered (a visit to another node's relay, or before RELAY_REGISTER).
        case linked
        case registering
        case registered
        case closed(wasRegistered: Bool)
    }

    /// The relay's key: only frames it signed are taken.
    public let relay: [UInt8]
    private var phase: Phase = .linked
    private var pending: [UInt64: Request] = [:]
    private var lastRequestID: UInt64 = 0
    private var farewell: (reason: String, retryAfterMs: Int64)?
    /// When the link came up (the owner's clock, ms).
    public let connectedAtMs: Int64
    /// When a request was last made: idle visits are closed after a while.
    public private(set) var lastUsedMs: Int64
    /// Mail items received on this link.
    public private(set) var mailReceived = 0

    public init(relay: [UInt8], nowMs: Int64) {
        self.relay = relay
        self.connectedAtMs = nowMs
        self.lastUsedMs = nowMs
    }

    public var isRegistered: Bool { phase == .registered }
    /// Whether the registration was ever confirmed on this link (still true after it closed).
    public var wasRegistered: Bool {
        switch phase {
        case .registered: return true
        case .closed(let was): return was
        case .linked, .registering: return false
        }
    }
    public var isClosed: Bool {
        switch phase {
        case .closed: return true
        case .linked, .registering, .registered: return false
        }
    }
    /// Requests sent and not yet answered.
    public var waitingRequests: Int { pending.count }
    /// The relay's goodbye, if it said one: (reason, retry after ms).
    public var goodbye: (reason: String, retryAfterMs: Int64)? { farewell }

    // MARK: requests

    /// RELAY_REGISTER; nil when the link is not in a state to register (already registering,
    /// registered, or closed).
    public mutating func register(agent: String) -> Outbound? {
        switch phase {
        case .linked:
            var r = Tandem_V1_RelayRegister()
            r.agent = agent
            phase = .registering
            return Outbound(type: .relayRegister, payload: Self.serialize(r))
        case .registering, .registered, .closed:
            return nil
        }
    }

    /// A request with a fresh request id; nil once the link is closed.
    public mutating func request(_ request: Request, nowMs: Int64) -> (requestID: UInt64, frame: Outbound)? {
        switch phase {
        case .closed:
            return nil
        case .linked, .registering, .registered:
            break
        }
        lastRequestID &+= 1
        let id = lastRequestID
        lastUsedMs = max(lastUsedMs, nowMs)
        pending[id] = request
        let frame: Outbound
        switch request {
        case .tunnelOpen(let target):
            var m = Tandem_V1_TunnelOpen()
            m.requestID = id
            m.target = Data(target)
            frame = Outbound(type: .tunnelOpen, payload: Self.serialize(m))
        case .mailboxPut(let recipient, let sealed):
            var m = Tandem_V1_MailboxPut()
            m.requestID = id
            m.recipient = Data(recipient)
            m.sealed = Data(sealed)
            frame = Outbound(type: .mailboxPut, payload: Self.serialize(m))
        }
        return (id, frame)
    }

    /// The owner stopped waiting for `requestID` (its timer ran out); a late answer is ignored.
    /// False when it was not waiting.
    @discardableResult
    public mutating func abandon(_ requestID: UInt64) -> Bool {
        pending.removeValue(forKey: requestID) != nil
    }

    /// MAILBOX_ACK for items the node has handled (or can never handle): the relay forgets them.
    public func acknowledge(_ itemIDs: [UInt64]) -> Outbound {
        var ack = Tandem_V1_MailboxAck()
        ack.itemIds = itemIDs
        return Outbound(type: .mailboxAck, payload: Self.serialize(ack))
    }

    // MARK: frames from the relay

    /// A verified frame from the link. Returns what to do, or nil for a frame that needs nothing
    /// (not the relay's, malformed, unsolicited, or of a type a client does not handle).
    public mutating func receive(_ envelope: Envelope) -> Action? {
        guard envelope.author == relay else { return nil }
        switch phase {
        case .closed:
            return nil
        case .linked, .registering, .registered:
            break
        }
        switch envelope.type {
        case .relayRegistered:
            guard phase == .registering,
                  let m = try? Tandem_V1_RelayRegistered(serializedBytes: envelope.payload) else { return nil }
            phase = .registered
            return .registered(mailboxItems: m.mailboxItems)
        case .relayReply:
            guard let m = try? Tandem_V1_RelayReply(serializedBytes: envelope.payload),
                  let request = pending.removeValue(forKey: m.requestID) else { return nil }
            return .replied(requestID: m.requestID, Self.check(m, answering: request))
        case .tunnelIncoming:
            guard let m = try? Tandem_V1_TunnelIncoming(serializedBytes: envelope.payload),
                  m.from.count == 32, m.token.count == TunnelJoin.tokenLength else { return nil }
            return .tunnelIncoming(from: Array(m.from), token: Array(m.token))
        case .mailboxItem:
            guard let m = try? Tandem_V1_MailboxItem(serializedBytes: envelope.payload) else { return nil }
            mailReceived += 1
            return .mail(itemID: m.itemID, sealed: Array(m.sealed))
        case .relayGoodbye:
            // A malformed goodbye (a retry-after beyond 1 h) still ends the link, with the
            // client's own backoff.
            let said = (try? RelayGoodbyeMessage(payload: envelope.payload)).map { (reason: $0.reason, retryAfterMs: $0.retryAfterMs) }
            let g = said ?? farewell ?? (reason: "goodbye", retryAfterMs: 0)
            farewell = g
            return .goodbye(reason: g.reason, retryAfterMs: g.retryAfterMs)
        default:
            return nil
        }
    }

    /// The link closed (`error`: the link's own error, if any). Every waiting request is
    /// unanswered from now on.
    public mutating func closed(error: String?) -> Ending {
        let wasRegistered: Bool
        let registering: Bool
        switch phase {
        case .closed(let was):
            wasRegistered = was
            registering = false
        case .linked:
            wasRegistered = false
            registering = false
        case .registering:
            wasRegistered = false
            registering = true
        case .registered:
            wasRegistered = true
            registering = false
        }
        phase = .closed(wasRegistered: wasRegistered)
        let unanswered = pending.keys.sorted()
        pending = [:]
        return Ending(reason: farewell?.reason ?? error, retryAfterMs: farewell?.retryAfterMs ?? 0,
                      wasRegistered: wasRegistered, unanswered: unanswered, registrationUnanswered: registering)
    }

    // MARK: helpers

    private static func check(_ m: Tandem_V1_RelayReply, answering request: Request) -> Reply {
        let detail = String(decoding: Array(m.detail.utf8.prefix(PayloadLimits.relayTextBytes)), as: UTF8.self)
        guard m.status == .ok else { return .refused(m.status, detail: detail) }
        switch request {
        case .tunnelOpen:
            guard m.token.count == TunnelJoin.tokenLength else {
                return .refused(.unspecified, detail: "the relay's tunnel token is \(m.token.count) bytes, not \(TunnelJoin.tokenLength)")
            }
            return .tunnel(token: Array(m.token))
        case .mailboxPut:
            return .stored(itemID: m.itemID)
        }
    }

    private static func serialize(_ m: some SwiftProtobuf.Message) -> [UInt8] {
        // Messages built here from checked values always serialize.
        (try? m.serializedBytes()) ?? []
    }
}

/// When to try a home relay again after a failure (Protocol/README.md 14.2): 1 s, 2 s, 4 s … 60 s,
/// plus up to 25 % jitter so a relay's clients do not all come back at once; never sooner than the
/// relay's own retry-after, and a retry-after already noted is never shortened by a later failure.
public struct RelayBackoff: Equatable, Sendable {
    public private(set) var failures = 0
    /// When the next attempt is due (ms on the owner's clock; 0: now).
    public private(set) var nextAttemptMs: Int64 = 0
    /// What went wrong last.
    public private(set) var lastError: String?

    public init() {}

    public func isDue(nowMs: Int64) -> Bool { nextAttemptMs <= nowMs }

    /// Notes a failure at `nowMs`. `resetCount` starts the doubling again (a link that was up and
    /// registered, then lost). `jitter(n)` returns a value in 0...n (random in production).
    public mutating func failed(_ error: String, nowMs: Int64, minimumDelayMs: Int64 = 0, resetCount: Bool = false,
                                jitter: (Int64) -> Int64 = RelayBackoff.randomJitter) {
        if resetCount { failures = 0 }
        failures = min(failures + 1, 64)
        let base = Int64(min(60_000, 500 << min(failures, 7)))
        let spread = min(max(jitter(base / 4), 0), base / 4)
        let next = nowMs.addingSaturated(max(base + spread, minimumDelayMs))
        nextAttemptMs = nextAttemptMs > nowMs ? max(nextAttemptMs, next) : next
        lastError = error
    }

    public static func randomJitter(_ upTo: Int64) -> Int64 {
        upTo <= 0 ? 0 : Int64(Sodium.randomUInt64() % UInt64(upTo + 1))
    }
}

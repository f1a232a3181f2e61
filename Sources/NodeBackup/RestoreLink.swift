import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Sodium
import TandemNet
import TandemProtocol
import TandemNodeCore

/// One link from a restorer to a holder: connects, sends backup requests, and hands the answers
/// (validated) to whoever waits for them, with the asker's timeout and resend rule of backup.md
/// section 2 (30 s, then again with a new id after 1, 2, 4, 8, 16 s, six tries in all).
final class RestoreLink: PeerLinkDelegate, Sendable {
    enum Answer: Sendable {
        case kit(BackupKitMessage)
        case list(BackupListReplyMessage)
        case have(BackupHaveReplyMessage)
        case fetched(BackupFetchedMessage)
        case error(code: String, detail: String)
        case closed
    }

    let holder: NodeID
    let address: String
    private let eventLoop: EventLoop
    private struct State {
        /// Set once connected; the relay link a tunnel goes through stays open as long as this one.
        var link: PeerLink?
        var relayConnection: RelayClientConnection?
        var buffer: [Answer] = []
        var waiter: (token: UInt64, continuation: CheckedContinuation<Answer?, Never>)?
        var closed = false
        var nextToken: UInt64 = 0
    }
    private let state = NIOLockedValueBox(State())

    var link: PeerLink? { state.withLockedValue { $0.link } }

    private init(holder: NodeID, address: String, eventLoop: EventLoop) {
        self.holder = holder
        self.address = address
        self.eventLoop = eventLoop
    }

    /// Links to the holder as `identity`.
    static func connect(host: String, port: Int, holder: NodeID, identity: SigningKeyPair,
                        group: EventLoopGroup, logger: Logger) async throws -> RestoreLink {
        let r = RestoreLink(holder: holder, address: "\(holder.canonical) at \(host):\(port)", eventLoop: group.next())
        let gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics())
        let (link, _) = try await PeerConnector.connect(host: host, port: port, remote: holder.publicKey, identity: identity,
                                                        gate: gate, delegate: r, group: group, logger: logger)
        r.state.withLockedValue { $0.link = link }
        return r
    }

    /// Links to the holder through a tunnel of `relay` (a share code's relay): TUNNEL_OPEN on a
    /// link to the relay (a `RelayClientConnection`, as the node's relay client uses), then the
    /// Secret Handshake with the holder through the joined tunnel (`RelayTunnel.connect`). The
    /// relay link stays open as long as this link.
    static func connect(through relay: RelayAddress, holder: NodeID, identity: SigningKeyPair,
                        group: EventLoopGroup, logger: Logger) async throws -> RestoreLink {
        let r = RestoreLink(holder: holder, address: "\(holder.canonical) through relay \(relay.host):\(relay.port)", eventLoop: group.next())
        let gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics())
        let relayConnection = try await RelayClientConnection.connect(to: relay, identity: identity, gate: gate, group: group,
                                                                      logger: logger)
        do {
            let token = try await openTunnel(on: relayConnection, to: holder.publicKey)
            let (link, _) = try await RelayTunnel.connect(relay: relay, token: token, remote: holder.publicKey, identity: identity,
                                                          gate: gate, delegate: r, group: group, logger: logger)
            r.state.withLockedValue { s in
                s.link = link
                s.relayConnection = relayConnection
            }
            return r
        } catch {
            relayConnection.close()
            throw error
        }
    }

    /// One TUNNEL_OPEN and its RELAY_REPLY (15 s at most): the token to join with.
    private static func openTunnel(on connection: RelayClientConnection, to key: [UInt8]) async throws -> [UInt8] {
        let relay = connection.relay
        let reply: RelayClientSession.Reply
        do {
            reply = try await connection.request(.tunnelOpen(target: key), timeout: .seconds(15))
        } catch let error as RelayClientError {
            if error.isTimeout {
                throw NodeError.timedOut("relay \(relay.host):\(relay.port) did not answer the tunnel request")
            }
            if error.saidGoodbye, let reason = error.reason {
                throw NodeError.unavailable("relay \(relay.host):\(relay.port) said goodbye: \(reason.terminalSafe)")
            }
            throw NodeError.unavailable("the link to relay \(relay.host):\(relay.port) closed")
        }
        switch reply {
        case .tunnel(let token):
            return token
        case .refused(let status, let detail):
            throw NodeError.unavailable(status == .offline ? "the holder is not connected to relay \(relay.host):\(relay.port)"
                                                 : "relay \(relay.host):\(relay.port) refused the tunnel: \(detail.terminalSafe)")
        case .stored:
            throw NodeError.failed("relay \(relay.host):\(relay.port) answered the tunnel request as if it were mail")
        }
    }

    func close() {
        let (link, relayConnection) = state.withLockedValue { ($0.link, $0.relayConnection) }
        link?.close()
        relayConnection?.close()
    }

    // MARK: PeerLinkDelegate (on the link's event loop)

    func link(_ link: PeerLink, received envelope: Envelope) {
        let answer: Answer
        do {
            switch envelope.type {
            case .backupKit: answer = .kit(try BackupKitMessage(payload: envelope.payload))
            case .backupListReply: answer = .list(try BackupListReplyMessage(payload: envelope.payload))
            case .backupHaveReply: answer = .have(try BackupHaveReplyMessage(payload: envelope.payload))
            case .backupFetched: answer = .fetched(try BackupFetchedMessage(payload: envelope.payload))
            default: return
            }
        } catch {
            // A malformed answer is dropped (backup.md 2): the asker's timeout covers it.
            return
        }
        push(answer)
    }

    func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {
        push(.error(code: "\(error.code)", detail: error.detail))
    }

    func linkClosed(_ link: PeerLink, error: Error?) {
        state.withLockedValue { $0.closed = true }
        push(.closed)
    }

    private func push(_ a: Answer) {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Answer?, Never>? in
            if let w = s.waiter {
                s.waiter = nil
                return w.continuation
            }
            s.buffer.append(a)
            return nil
        }
        waiter?.resume(returning: a)
    }

    /// The next answer, or nil after `ms` without one.
    func next(withinMs ms: Int64) async -> Answer? {
        await withCheckedContinuation { (c: CheckedContinuation<Answer?, Never>) in
            let token: UInt64? = state.withLockedValue { s in
                if !s.buffer.isEmpty {
                    return nil
                }
                s.nextToken += 1
                s.waiter = (s.nextToken, c)
                return s.nextToken
            }
            guard let token else {
                let a = state.withLockedValue { $0.buffer.removeFirst() }
                c.resume(returning: a)
                return
            }
            eventLoop.scheduleTask(in: .milliseconds(max(1, ms))) {
                let w = self.state.withLockedValue { s -> CheckedContinuation<Answer?, Never>? in
                    guard let w = s.waiter, w.token == token else { return nil }
                    s.waiter = nil
                    return w.continuation
                }
                w?.resume(returning: nil)
            }
        }
    }

    var isClosed: Bool { state.withLockedValue { $0.closed } }

    func send(_ type: MessageType, _ payload: [UInt8]) {
        link?.send(type: type, payload: payload)
    }

    /// Sends a request and waits for its answer (matched by `match`), resending with a new id
    /// after each 30 s of silence, at most 5 times with 1, 2, 4, 8, 16 s of backoff.
    func request<T>(_ what: String, make: (BackupRequestID) -> (MessageType, [UInt8]),
                    match: (Answer, BackupRequestID) -> T?) async throws -> T {
        for attempt in 0...RestorePlan.resends {
            if attempt > 0 { try await Task.sleep(for: .seconds(1 << (attempt - 1))) }
            let id = BackupRequestID(bytes: Sodium.randomBytes(16))!
            let (type, payload) = make(id)
            send(type, payload)
            let deadline = ContinuousClock.now + .milliseconds(RestorePlan.answerTimeoutMs)
            while true {
                let left = deadline - ContinuousClock.now
                let ms = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000
                guard ms > 0 else { break }
                guard let a = await next(withinMs: ms) else { break }
                if let t = match(a, id) { return t }
                try check(a)
            }
        }
        throw NodeError.timedOut("holder \(address) did not answer \(what) (\(RestorePlan.resends + 1) tries of \(RestorePlan.answerTimeoutMs / 1000) s): unreachable")
    }

    /// Throws for an answer that ends the conversation: the link closed, or the holder does not
    /// know backup messages.
    func check(_ a: Answer) throws {
        switch a {
        case .closed:
            throw NodeError.unavailable("holder \(address) closed the link")
        case .error(let code, let detail):
            if code.contains("unknownType") || code.lowercased().contains("unknown") {
                throw NodeError.failed("holder \(address) does not handle backups (\(detail.terminalSafe))")
            }
        case .kit, .list, .have, .fetched:
            break
        }
    }
}

extension RestoreLink {
    /// The holder's answer for the kit at `index` under `locator` (BACKUP_KIT_GET, backup.md): the
    /// one request both the kit fetch and the freshness survey make.
    func kit(locator: KitLocator, index: Int) async throws -> BackupKitMessage {
        try await request("BACKUP_KIT_GET", make: { id in
            (.backupKitGet, BackupKitGetMessage(requestID: id, locator: locator, index: index).payload)
        }, match: { a, id -> BackupKitMessage? in
            if case .kit(let m) = a, m.requestID == id { return m }
            return nil
        })
    }
}

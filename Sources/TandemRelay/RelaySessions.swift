import Foundation
import NIOConcurrencyHelpers
import TandemNet
import TandemProtocol

// Client sessions: authenticated links, their admission (clients in total and per address),
// the frames they send, and the replies and errors the relay answers with.

extension RelayServer {
    func established(_ link: any RelayClientLink, connection: UInt64, address: String, rate: ByteRate) {
        book.withLockedValue { $0.leavePending(address: address) }
        guard let key = link.remotePublicKey else { return }
        if shuttingDown.withLockedValue({ $0 }) {
            goodbye(link, reason: "the relay is shutting down", retryAfterMs: 5_000)
            return
        }
        let verdict = book.withLockedValue { $0.authenticated(connection, key: key, address: address) }
        switch verdict {
        case .accepted:
            break
        case .full:
            metrics.refused("clients")
            logger.notice("refusing a client: the relay is full", metadata: ["clients": "\(configuration.maximumClients)"])
            goodbye(link, reason: "the relay is full (\(configuration.maximumClients) clients)", retryAfterMs: 60_000)
            return
        case .tooManyFromAddress:
            metrics.refused("clients_per_address")
            logger.notice("refusing a client: too many from its address",
                          metadata: ["from": "\(address)", "limit": "\(configuration.maximumClientsPerAddress)"])
            goodbye(link, reason: "too many clients from your address (\(configuration.maximumClientsPerAddress))",
                    retryAfterMs: 60_000)
            return
        }
        sessions.withLockedValue {
            $0[connection] = Session(link: link, key: key, address: address, lastFrameMs: now(), rate: rate)
        }
        logger.debug("client connected", metadata: ["client": "\(NodeID(publicKey: key).short)", "from": "\(address)"])
    }

    func closed(_ link: any RelayClientLink, connection: UInt64, address: String, wasEstablished: Bool) {
        if !wasEstablished {
            book.withLockedValue { $0.leavePending(address: address) }
            metrics.update { $0.handshakesFailed += 1 }
        }
        sessions.withLockedValue { _ = $0.removeValue(forKey: connection) }
        // The link's tunnels that were not spliced end with it: an end already waiting for its
        // partner is told at once (its token is gone), not left to wait for its own timeout.
        let dropped = book.withLockedValue { $0.clientClosed(connection) }
        for ends in dropped.values { dismissWaiting(ends, with: .unknownToken) }
    }

    func received(_ envelope: Envelope, on link: any RelayClientLink, connection: UInt64) {
        let nowMs = now()
        guard let session = sessions.withLockedValue({ s -> Session? in
            s[connection]?.lastFrameMs = nowMs
            return s[connection]
        }) else { return }
        // The bytes were charged to the client's rate as they were read (InboundRateHandler).
        switch envelope.type {
        case .ping, .pong, .error:
            return
        case .relayRegister:
            register(session, connection: connection)
        case .tunnelOpen:
            guard let m = try? Tandem_V1_TunnelOpen(serializedBytes: envelope.payload) else { return reject(envelope, link) }
            openTunnel(m, session: session, connection: connection)
        case .mailboxPut:
            guard let m = try? Tandem_V1_MailboxPut(serializedBytes: envelope.payload) else { return reject(envelope, link) }
            put(m, session: session, connection: connection)
        case .mailboxAck:
            guard let m = try? Tandem_V1_MailboxAck(serializedBytes: envelope.payload) else { return reject(envelope, link) }
            acknowledge(m, session: session, connection: connection)
        default:
            reject(envelope, link, code: .unknownType, "a relay does not handle \(envelope.type)")
        }
    }

    func reject(_ envelope: Envelope, _ link: any RelayClientLink, code: Tandem_V1_ErrorCode = .malformed,
                        _ detail: String = "the payload does not parse") {
        let r = FrameRejection(code, detail, messageID: envelope.messageID, author: envelope.author, type: envelope.type)
        if let reply = FrameVerifier.errorReply(to: r, from: identity, linkPeer: envelope.author, now: wallClockMilliseconds()) {
            link.sendEnvelope(reply)
        }
    }

    func reply(_ link: any RelayClientLink, _ requestID: UInt64, _ status: Tandem_V1_RelayStatus, _ detail: String = "",
                       token: [UInt8] = [], itemID: Int64 = 0) {
        var r = Tandem_V1_RelayReply()
        r.requestID = requestID
        r.status = status
        r.detail = detail
        r.token = Data(token)
        r.itemID = UInt64(bitPattern: itemID)
        link.sendSigned(type: .relayReply, payload: (try? r.serializedBytes()) ?? [])
    }

    /// The link becomes its key's home link; the link it replaces is told goodbye.
    func makeHome(_ session: Session, connection: UInt64) {
        let replaced = book.withLockedValue { $0.register(connection) }
        if let replaced, let old = sessions.withLockedValue({ $0[replaced] }) {
            goodbye(old.link, reason: "replaced by a newer link from the same node")
        }
    }
}

/// Relays the link events of one client connection to the server.
final class ClientDelegate: PeerLinkDelegate, Sendable {
    weak let server: RelayServer?
    let connection: UInt64
    let address: String
    let rate: ByteRate
    private let wasEstablished = NIOLockedValueBox(false)

    init(server: RelayServer, connection: UInt64, address: String, rate: ByteRate) {
        self.server = server
        self.connection = connection
        self.address = address
        self.rate = rate
    }

    func linkEstablished(_ link: PeerLink) {
        wasEstablished.withLockedValue { $0 = true }
        server?.established(link, connection: connection, address: address, rate: rate)
    }

    func link(_ link: PeerLink, received envelope: Envelope) {
        server?.received(envelope, on: link, connection: connection)
    }

    func linkClosed(_ link: PeerLink, error: Error?) {
        server?.closed(link, connection: connection, address: address, wasEstablished: wasEstablished.withLockedValue { $0 })
    }
}

import NIOConcurrencyHelpers
import Foundation
import NIOCore
import Sodium
import TandemNet
import TandemProtocol

// Tunnels: TUNNEL_OPEN hands out a token, both ends join with it on fresh connections, and the
// relay splices the two byte streams (Splice.swift) without reading them.

extension RelayServer {
    /// The first bytes were a tunnel join.
    func join(_ channel: Channel, connection: UInt64, address: String, token: [UInt8]) {
        book.withLockedValue { $0.leavePending(address: address) }
        // The first end is put in `waiting` under the book's lock: the second end (on another event
        // loop) pairs only after it is there. (Apart, a second end could pair in between, find no
        // waiting channel, and refuse both ends with "unknown token".)
        let result = book.withLockedValue { b -> RelayBook.JoinResult in
            let r = b.join(token: token, connection: connection, nowMs: now())
            if case .waiting = r { waiting.withLockedValue { $0[connection] = channel } }
            return r
        }
        switch result {
        case .unknownToken:
            metrics.refused("tunnel_token")
            answer(channel, .unknownToken, close: true)
        case .waiting:
            channel.closeFuture.whenComplete { [self] _ in
                if waiting.withLockedValue({ $0.removeValue(forKey: connection) }) != nil {
                    book.withLockedValue { $0.dropTunnel(token) }
                }
            }
        case .refused(let other):
            metrics.refused("tunnel_target_full")
            if let otherChannel = waiting.withLockedValue({ $0.removeValue(forKey: other) }) {
                answer(otherChannel, .refused, close: true)
            }
            answer(channel, .refused, close: true)
        case .paired(let other, let tunnel):
            guard let otherChannel = waiting.withLockedValue({ $0.removeValue(forKey: other) }) else {
                book.withLockedValue { $0.dropTunnel(token) }
                answer(channel, .unknownToken, close: true)
                return
            }
            splice(otherChannel, channel, token: token, tunnel: tunnel)
        }
    }

    /// Tunnel ends (connection ids) whose tunnel is gone: those still waiting get `answer` and are closed.
    func dismissWaiting(_ ends: [UInt64], with answer: TunnelJoin.Answer) {
        for c in ends {
            if let channel = waiting.withLockedValue({ $0.removeValue(forKey: c) }) { self.answer(channel, answer, close: true) }
        }
    }

    func answer(_ channel: Channel, _ answer: TunnelJoin.Answer, close: Bool) {
        let buf = channel.allocator.buffer(bytes: [answer.rawValue])
        let f = channel.writeAndFlush(buf)
        if close { f.whenComplete { _ in channel.close(promise: nil) } }
    }

    func rate(of client: UInt64) -> ByteRate {
        sessions.withLockedValue { $0[client]?.rate } ?? ByteRate(bytesPerSecond: configuration.clientBytesPerSecond)
    }

    func splice(_ a: Channel, _ b: Channel, token: [UInt8], tunnel: RelayBook.Tunnel) {
        metrics.update { $0.tunnelsOpened += 1 }
        // The ends cannot tell which client each is (the token is shared); both count against the
        // initiator's rate, the one who asked for the tunnel.
        let rateA = rate(of: tunnel.initiator)
        let onBytes: @Sendable (Int) -> Void = { [weak self] n in self?.metrics.update { $0.bytesRelayed += n } }
        let closed = NIOLockedValueBox(false)
        let onClose: @Sendable () -> Void = { [weak self] in
            guard closed.withLockedValue({ c -> Bool in defer { c = true }; return !c }) else { return }
            self?.book.withLockedValue { $0.dropTunnel(token) }
        }
        let queue = configuration.tunnelQueueBytes
        // In three steps, so no byte reaches an end before its own answer: both ends get their
        // splice handler (reading off), then both get 0x00, then both start reading.
        let added = [(a, b), (b, a)].map { me, partner in
            me.eventLoop.submit {
                try me.pipeline.syncOperations.addHandler(SpliceHandler(partner: partner, rate: rateA, queueLimit: queue,
                                                                        onBytes: onBytes, onClose: onClose))
            }
        }
        added[0].and(added[1]).flatMap { _ in
            let answered = [a, b].map { ch in
                ch.writeAndFlush(ch.allocator.buffer(bytes: [TunnelJoin.Answer.joined.rawValue]))
            }
            return answered[0].and(answered[1])
        }.whenComplete { result in
            switch result {
            case .success:
                for ch in [a, b] { ch.pipeline.fireUserInboundEventTriggered(SpliceStart()) }
            case .failure:
                a.close(promise: nil)
                b.close(promise: nil)
            }
        }
    }

    /// TUNNEL_OPEN: a token for both ends, TUNNEL_INCOMING to the target, the token to the asker.
    func openTunnel(_ m: Tandem_V1_TunnelOpen, session: Session, connection: UInt64) {
        let token = Sodium.randomBytes(TunnelJoin.tokenLength)
        let result = book.withLockedValue { $0.openTunnel(from: connection, to: Array(m.target), token: token, nowMs: now()) }
        switch result {
        case .ready(let target):
            guard let t = sessions.withLockedValue({ $0[target] }) else {
                book.withLockedValue { $0.dropTunnel(token) }
                return reply(session.link, m.requestID, .offline, "the target is not connected")
            }
            var incoming = Tandem_V1_TunnelIncoming()
            incoming.from = Data(session.key)
            incoming.token = Data(token)
            t.link.sendSigned(type: .tunnelIncoming, payload: (try? incoming.serializedBytes()) ?? [])
            reply(session.link, m.requestID, .ok, token: token)
        case .offline:
            metrics.update { $0.tunnelsRefused += 1 }
            reply(session.link, m.requestID, .offline, "the target is not connected to this relay")
        case .limit(let why):
            metrics.update { $0.tunnelsRefused += 1 }
            reply(session.link, m.requestID, .limit, why)
        case .badRequest(let why):
            reply(session.link, m.requestID, .badRequest, why)
        }
    }
}

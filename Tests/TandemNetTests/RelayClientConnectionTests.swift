import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import SwiftProtobuf
import TandemNet
import TandemProtocol
import XCTest

/// `RelayClientConnection` against a scripted relay on loopback: every wait ends by the relay's
/// answer, by its own time limit, by cancellation, or by the link closing; what the relay sends
/// unasked reaches the delegate.
final class RelayClientConnectionTests: XCTestCase {
    var group: MultiThreadedEventLoopGroup!
    let logger = Logger(label: "test")

    override func setUp() { group = MultiThreadedEventLoopGroup(numberOfThreads: 1) }
    override func tearDown() { try? group.syncShutdownGracefully() }

    /// How the scripted relay answers TUNNEL_OPEN.
    enum TunnelAnswer: Sendable {
        case token([UInt8])
        case silence
        case goodbye(String)
    }

    /// A relay that answers RELAY_REGISTER (then sends a TUNNEL_INCOMING and a MAILBOX_ITEM), answers
    /// TUNNEL_OPEN as told, and notes the MAILBOX_ACKs it gets.
    final class ScriptedRelay: PeerLinkDelegate, Sendable {
        let tunnelAnswer: TunnelAnswer
        let acks = NIOLockedValueBox<[UInt64]>([])
        init(tunnelAnswer: TunnelAnswer) { self.tunnelAnswer = tunnelAnswer }

        func link(_ link: PeerLink, received envelope: Envelope) {
            switch envelope.type {
            case .relayRegister:
                var r = Tandem_V1_RelayRegistered()
                r.mailboxItems = 1
                send(link, .relayRegistered, r)
                var incoming = Tandem_V1_TunnelIncoming()
                incoming.from = Data(repeating: 7, count: 32)
                incoming.token = Data(repeating: 8, count: TunnelJoin.tokenLength)
                send(link, .tunnelIncoming, incoming)
                var item = Tandem_V1_MailboxItem()
                item.itemID = 41
                item.sealed = Data([1, 2, 3])
                send(link, .mailboxItem, item)
            case .tunnelOpen:
                guard let m = try? Tandem_V1_TunnelOpen(serializedBytes: envelope.payload) else { return }
                switch tunnelAnswer {
                case .token(let token):
                    var reply = Tandem_V1_RelayReply()
                    reply.requestID = m.requestID
                    reply.status = .ok
                    reply.token = Data(token)
                    send(link, .relayReply, reply)
                case .silence:
                    break
                case .goodbye(let reason):
                    var g = Tandem_V1_RelayGoodbye()
                    g.reason = reason
                    g.retryAfterMs = 5_000
                    send(link, .relayGoodbye, g).whenComplete { _ in link.close() }
                }
            case .mailboxAck:
                guard let m = try? Tandem_V1_MailboxAck(serializedBytes: envelope.payload) else { return }
                acks.withLockedValue { $0 += m.itemIds }
            default:
                break
            }
        }

        @discardableResult
        func send(_ link: PeerLink, _ type: MessageType, _ m: some SwiftProtobuf.Message) -> EventLoopFuture<Void> {
            do {
                return link.send(type: type, payload: try m.serializedBytes())
            } catch {
                XCTFail("cannot serialize \(type): \(error)")
                return link.channel.eventLoop.makeFailedFuture(error)
            }
        }
    }

    /// What the connection handed to its delegate.
    final class Heard: RelayClientConnectionDelegate {
        struct Log {
            var incoming: [(from: [UInt8], token: [UInt8])] = []
            var mail: [(UInt64, [UInt8])] = []
            var ending: RelayClientSession.Ending?
        }
        let log = NIOLockedValueBox(Log())

        func relayConnection(_ connection: RelayClientConnection, tunnelIncomingFrom from: [UInt8], token: [UInt8]) {
            log.withLockedValue { $0.incoming.append((from, token)) }
        }

        func relayConnection(_ connection: RelayClientConnection, mail itemID: UInt64, sealed: [UInt8]) {
            log.withLockedValue { $0.mail.append((itemID, sealed)) }
            connection.acknowledge(itemID)
        }

        func relayConnectionClosed(_ connection: RelayClientConnection, ending: RelayClientSession.Ending) {
            log.withLockedValue { $0.ending = ending }
        }
    }

    /// Starts the scripted relay on loopback and connects to it.
    func connect(_ relay: ScriptedRelay, delegate: Heard? = nil) async throws -> (RelayClientConnection, Channel) {
        let relayKey = SigningKeyPair.generate()
        let relayGate = FrameGate(localPublicKey: relayKey.publicKey, metrics: TransportMetrics())
        let logger = self.logger
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { ch in
                ch.eventLoop.makeCompletedFuture {
                    _ = try PeerPipeline.configure(channel: ch, identity: relayKey, serverPublicKey: nil, gate: relayGate,
                                                   delegate: relay, options: .init(), logger: logger)
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let address = RelayAddress(id: NodeID(publicKey: relayKey.publicKey), host: "127.0.0.1", port: server.localAddress!.port!)
        let me = SigningKeyPair.generate()
        let connection = try await RelayClientConnection.connect(
            to: address, identity: me, gate: FrameGate(localPublicKey: me.publicKey, metrics: TransportMetrics()),
            group: group, logger: logger, delegate: delegate)
        return (connection, server)
    }

    func testRegistrationRequestsAndWhatTheRelaySendsUnasked() async throws {
        let token = [UInt8](repeating: 9, count: TunnelJoin.tokenLength)
        let relay = ScriptedRelay(tunnelAnswer: .token(token))
        let heard = Heard()
        let (connection, server) = try await connect(relay, delegate: heard)
        defer { server.close(promise: nil) }
        let waiting = try await connection.register(agent: "test", timeout: .seconds(10))
        XCTAssertEqual(waiting, 1)
        XCTAssertTrue(connection.isRegistered)
        do {
            _ = try await connection.register(agent: "test", timeout: .seconds(10))
            XCTFail("a link registers once")
        } catch let error as RelayClientError {
            XCTAssertFalse(error.isClosed || error.isTimeout, "\(error)")
        }
        let reply = try await connection.request(.tunnelOpen(target: [UInt8](repeating: 3, count: 32)), timeout: .seconds(10))
        XCTAssertEqual(reply, .tunnel(token: token))
        // The announcements came before the reply (the relay sent them first, on one link).
        let log = heard.log.withLockedValue { $0 }
        XCTAssertEqual(log.incoming.map(\.from), [[UInt8](repeating: 7, count: 32)])
        XCTAssertEqual(log.mail.map(\.0), [41])
        XCTAssertEqual(log.mail.map(\.1), [[1, 2, 3]])
        for _ in 0..<200 where relay.acks.withLockedValue({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(relay.acks.withLockedValue { $0 }, [41], "the delegate's acknowledgement reached the relay")

        connection.close()
        for _ in 0..<200 where heard.log.withLockedValue({ $0.ending == nil }) { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(heard.log.withLockedValue { $0.ending?.wasRegistered }, true)
        do {
            _ = try await connection.request(.tunnelOpen(target: [UInt8](repeating: 3, count: 32)), timeout: .seconds(10))
            XCTFail("no request on a closed link")
        } catch let error as RelayClientError {
            XCTAssertTrue(error.isClosed, "\(error)")
        }
    }

    func testASilentRelayTimesOutAndTheLinkStaysUsable() async throws {
        let relay = ScriptedRelay(tunnelAnswer: .silence)
        let (connection, server) = try await connect(relay)
        defer { server.close(promise: nil) }
        let started = ContinuousClock.now
        do {
            _ = try await connection.request(.tunnelOpen(target: [UInt8](repeating: 3, count: 32)), timeout: .milliseconds(200))
            XCTFail("the relay never answers")
        } catch let error as RelayClientError {
            XCTAssertTrue(error.isTimeout, "\(error)")
            XCTAssertTrue(error.description.contains("did not answer within 200 ms"), error.description)
        }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(5))
        XCTAssertTrue(connection.isOpen)
        let waiting = try await connection.register(agent: "test", timeout: .seconds(10))
        XCTAssertEqual(waiting, 1)
        connection.close()
    }

    func testACancelledRequestEndsAtOnce() async throws {
        let relay = ScriptedRelay(tunnelAnswer: .silence)
        let (connection, server) = try await connect(relay)
        defer { server.close(promise: nil) }
        let waiting = Task {
            try await connection.request(.tunnelOpen(target: [UInt8](repeating: 3, count: 32)), timeout: .seconds(30))
        }
        try await Task.sleep(for: .milliseconds(100))
        let cancelledAt = ContinuousClock.now
        waiting.cancel()
        let result = await waiting.result
        XCTAssertLessThan(ContinuousClock.now - cancelledAt, .seconds(2))
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        connection.close()
    }

    func testAGoodbyeEndsTheWaitWithTheRelaysReason() async throws {
        let relay = ScriptedRelay(tunnelAnswer: .goodbye("the relay is full"))
        let heard = Heard()
        let (connection, server) = try await connect(relay, delegate: heard)
        defer { server.close(promise: nil) }
        do {
            _ = try await connection.request(.tunnelOpen(target: [UInt8](repeating: 3, count: 32)), timeout: .seconds(10))
            XCTFail("the relay said goodbye")
        } catch let error as RelayClientError {
            XCTAssertTrue(error.isClosed, "\(error)")
            XCTAssertTrue(error.saidGoodbye)
            XCTAssertEqual(error.reason, "the relay is full")
        }
        XCTAssertEqual(connection.goodbye?.reason, "the relay is full")
        XCTAssertEqual(connection.goodbye?.retryAfterMs, 5_000)
        XCTAssertFalse(connection.isOpen)
        // The delegate hears of the end right after the waits are answered.
        for _ in 0..<200 where heard.log.withLockedValue({ $0.ending == nil }) { try await Task.sleep(for: .milliseconds(10)) }
        let ending = heard.log.withLockedValue { $0.ending }
        XCTAssertEqual(ending?.reason, "the relay is full")
        XCTAssertEqual(ending?.retryAfterMs, 5_000)
        XCTAssertEqual(ending?.unanswered.count, 1, "the request was waiting when the link closed")
    }
}

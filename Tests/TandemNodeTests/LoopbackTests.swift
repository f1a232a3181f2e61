import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycleTestKit
import Sodium
import TandemNet
import TandemProtocol
import TandemTestSupport
import XCTest
@testable import TandemNode
@testable import TandemNodeCore

/// In-process nodes on loopback: real sockets, real handshakes, one process.
final class LoopbackTests: XCTestCase {
    var logger: Logger = TestSupport.quietLogger

    private func withNode<R>(handshakeTimeout: TimeAmount = .seconds(10), maxFrame: Int = TandemConstants.maximumEnvelopeLength,
                             _ body: (NodeRuntime, Int) async throws -> R) async throws -> R {
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.link.handshakeTimeout = handshakeTimeout
        config.link.maximumEnvelopeLength = maxFrame
        let node = try NodeRuntime(identity: .generate(), configuration: config, logger: logger)
        let task = Task { try await node.run(signals: false) }
        defer { task.cancel() }
        let port = try await node.listener.boundAddress.port!
        let result = try await body(node, port)
        task.cancel()
        _ = await task.result
        return result
    }

    private func client() -> NodeRuntime {
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        return try! NodeRuntime(identity: .generate(), configuration: config, logger: logger)
    }

    /// Polls `condition` for up to `seconds`.
    private func eventually(_ seconds: Double = 5, _ condition: () -> Bool) async -> Bool {
        await TestSupport.eventually(seconds, condition)
    }

    func testPingPongOverAnAuthenticatedLink() async throws {
        try await withNode { server, port in
            let c = client()
            let (link, waiter) = try await c.connect(host: "127.0.0.1", port: port, to: server.id)
            XCTAssertEqual(link.remotePublicKey, server.identity.publicKey)
            for _ in 0..<3 {
                let (rtt, pong) = try await waiter.ping()
                XCTAssertGreaterThan(rtt, .zero)
                XCTAssertGreaterThan(pong.receivedAtMs, 0)
            }
            link.close()
            let m = server.metrics.snapshot
            XCTAssertEqual(m.handshakesSucceeded, 1)
            XCTAssertEqual(m.framesAccepted, 3)
        }
    }

    func testWrongServerKeyFailsTheHandshake() async throws {
        try await withNode { server, port in
            let c = client()
            do {
                _ = try await c.connect(host: "127.0.0.1", port: port, to: NodeID(publicKey: SigningKeyPair.generate().publicKey))
                XCTFail("handshake with the wrong key succeeded")
            } catch let e as TandemError {
                XCTAssertEqual(e.exitCode, TandemError.authenticationExitCode)
            }
            let failed = await eventually { server.metrics.snapshot.handshakesFailed == 1 }
            XCTAssertTrue(failed)
        }
    }

    func testSilentConnectionIsDroppedAfterTheHandshakeTimeout() async throws {
        try await withNode(handshakeTimeout: .milliseconds(300)) { server, port in
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: port).get()
            let start = ContinuousClock.now
            try await channel.closeFuture.get()
            let waited = ContinuousClock.now - start
            XCTAssertGreaterThanOrEqual(waited, .milliseconds(250))
            XCTAssertLessThan(waited, .seconds(5))
            let failed = await eventually { server.metrics.snapshot.handshakesFailed == 1 }
            XCTAssertTrue(failed)
        }
    }

    func testGarbageDuringTheHandshakeIsDroppedAndCounted() async throws {
        try await withNode { server, port in
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: port).get()
            try await channel.writeAndFlush(channel.allocator.buffer(bytes: Sodium.randomBytes(64))).get()
            try await channel.closeFuture.get()
            let failed = await eventually { server.metrics.snapshot.handshakesFailed == 1 }
            XCTAssertTrue(failed)
            // Still serving.
            let (link, waiter) = try await client().connect(host: "127.0.0.1", port: port, to: server.id)
            _ = try await waiter.ping()
            link.close()
        }
    }

    func testOversizedLengthClosesTheLinkBeforeTheBody() async throws {
        try await withNode(maxFrame: 4096) { server, port in
            let (link, _) = try await client().connect(host: "127.0.0.1", port: port, to: server.id)
            // Below the frame encoder: a bare length prefix announcing more than the limit, no body.
            try await link.channel.eventLoop.submit {
                let ctx = try link.channel.pipeline.syncOperations.context(handlerType: MessageToByteHandler<FrameByteEncoder>.self)
                var b = link.channel.allocator.buffer(capacity: 4)
                b.writeInteger(UInt32(4097))
                ctx.writeAndFlush(NIOAny(b), promise: nil)
            }.get()
            try await link.channel.closeFuture.get()
            let counted = await eventually { server.metrics.snapshot.framesRejected["FRAME_TOO_LARGE"] == 1 }
            XCTAssertTrue(counted)
        }
    }

    /// A burst far larger than one turn's share of frames (`LinkLimits.node.framesPerTurn`) arrives
    /// in a few reads: every frame is still checked, in order, over later turns, and the link stays up.
    func testABurstBeyondOneTurnsShareIsCheckedOverLaterTurns() async throws {
        let share = try XCTUnwrap(LinkLimits.node.framesPerTurn)
        try await withNode { server, port in
            let c = client()
            let (link, waiter) = try await c.connect(host: "127.0.0.1", port: port, to: server.id)
            let before = server.metrics.snapshot.framesAccepted
            let count = share * 40
            for i in 0..<count {
                var ping = Tandem_V1_Ping()
                ping.nonce = UInt64(i)
                let env = Envelope.sign(type: .ping, author: c.identity, recipient: server.identity.publicKey,
                                        createdAt: wallClockMilliseconds(), payload: try ping.serializedBytes())
                link.send(env, flush: false)
            }
            link.channel.flush()
            let all = await eventually(10) { server.metrics.snapshot.framesAccepted - before == count }
            XCTAssertTrue(all, "accepted \(server.metrics.snapshot.framesAccepted - before) of \(count)")
            XCTAssertTrue(server.metrics.snapshot.framesRejected.isEmpty)
            _ = try await waiter.ping() // the link is still up and read again
            link.close()
        }
    }

    /// Backpressure: a consumer that pauses a link gets no further frame from it until it resumes
    /// the link; the frames wait (unread ones in the socket), none is lost or reordered.
    func testAPausedLinkHandsOnNothingUntilResumed() async throws {
        try await withNode { server, port in
            let c = client()
            let recorder = PausingRecorder()
            let (link, _) = try await c.connect(host: "127.0.0.1", port: port, to: server.id, delegate: recorder)
            // The node answers each CLOCK_PROBE with a CLOCK_REPLY echoing its t1.
            let count = 20
            let base = UInt64(wallClockMicros())
            for i in 0..<count {
                var probe = Tandem_V1_ClockProbe()
                probe.t1Us = base + UInt64(i)
                link.send(type: .clockProbe, payload: try probe.serializedBytes())
            }
            // The first reply pauses the link: nothing more arrives while it is paused.
            let first = await eventually { recorder.nonces.count == 1 }
            XCTAssertTrue(first)
            try await Task.sleep(for: .milliseconds(300))
            XCTAssertEqual(recorder.nonces.count, 1, "a paused link must hand on nothing")
            XCTAssertTrue(link.isReadingPaused)
            // Each resume lets exactly one more through (the recorder pauses again on it).
            link.resumeReading()
            let second = await eventually { recorder.nonces.count == 2 }
            XCTAssertTrue(second)
            try await Task.sleep(for: .milliseconds(200))
            XCTAssertEqual(recorder.nonces.count, 2)
            // Stop pausing: everything that waited arrives, in order.
            recorder.pausing = false
            link.resumeReading()
            let all = await eventually { recorder.nonces.count == count }
            XCTAssertTrue(all, "got \(recorder.nonces.count) of \(count)")
            XCTAssertEqual(recorder.nonces, (0..<UInt64(count)).map { base + $0 })
            link.close()
        }
    }

    func testRejectedFramesGetTypedErrorsAndTheLinkStaysUp() async throws {
        try await withNode { server, port in
            let c = client()
            let (link, waiter) = try await c.connect(host: "127.0.0.1", port: port, to: server.id)
            let codes = Codes()
            waiter.onError = { codes.add($0.code) }
            let now = wallClockMilliseconds()
            let unknown = Envelope.sign(type: MessageType(rawValue: 0x7777), author: c.identity,
                                        recipient: server.identity.publicKey, createdAt: now, payload: [])
            let wrongRecipient = Envelope.sign(type: .ping, author: c.identity, recipient: c.identity.publicKey,
                                               createdAt: now, payload: [])
            let future = Envelope.sign(type: .ping, author: c.identity, recipient: server.identity.publicKey,
                                       createdAt: now + 3_600_000, payload: [])
            for env in [unknown, wrongRecipient, future, unknown] { try await link.send(env).get() }
            let all = await eventually { codes.count == 4 }
            XCTAssertTrue(all)
            XCTAssertEqual(Set(codes.all), [.unknownType, .wrongRecipient, .fromTheFuture, .replayed])
            _ = try await waiter.ping() // the link is still up
            link.close()
            let m = server.metrics.snapshot
            XCTAssertEqual(m.framesRejected["UNKNOWN_TYPE"], 1)
            XCTAssertEqual(m.framesRejected["REPLAYED"], 1)
        }
    }

    func testGracefulShutdownSaysGoodbye() async throws {
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        let node = try NodeRuntime(identity: .generate(), configuration: config, logger: logger)
        let task = Task { try await node.run(signals: false) }
        let port = try await node.listener.boundAddress.port!
        let (link, waiter) = try await client().connect(host: "127.0.0.1", port: port, to: node.id)
        _ = try await waiter.ping()
        // Watches the top of the client's pipeline: a goodbye is the peer's box-stream goodbye header
        // (Protocol 4.3), read and authenticated, before the connection closes; a bare TCP close or an
        // abort shows only the close.
        let seen = LinkEndRecorder()
        try await link.channel.pipeline.addHandler(seen).get()
        task.cancel()
        _ = await task.result
        try await link.channel.closeFuture.get()
        XCTAssertEqual(seen.events, ["goodbye", "inactive"], "the node's shutdown must end the link with a box-stream goodbye")
    }

    /// A graceful shutdown through the service lifecycle (what SIGTERM does): every service ends
    /// within the node's shutdown limit, each link ends with a box-stream goodbye, and
    /// `node.stopping` is the last event subscribers get.
    func testGracefulShutdownThroughTheLifecycleIsBoundedAndSaysGoodbye() async throws {
        try await testGracefulShutdown { trigger in
            var config = NodeConfiguration()
            config.host = "127.0.0.1"
            config.port = 0
            let node = try NodeRuntime(identity: .generate(), configuration: config, logger: logger)
            let events = node.eventBus.subscribe(since: nil)
            let run = Task { try await node.run(signals: false) }
            let port = try await node.listener.boundAddress.port!
            let (link, waiter) = try await client().connect(host: "127.0.0.1", port: port, to: node.id)
            _ = try await waiter.ping()
            let seen = LinkEndRecorder()
            try await link.channel.pipeline.addHandler(seen).get()
            let asked = ContinuousClock.now
            trigger.triggerGracefulShutdown()
            try await run.value
            let took = ContinuousClock.now - asked
            XCTAssertLessThan(took, NodeRuntime.shutdownLimit + .seconds(1), "shutdown took \(took)")
            try await link.channel.closeFuture.get()
            XCTAssertEqual(seen.events, ["goodbye", "inactive"])
            var types: [String] = []
            for await e in events {
                types.append(e.type)
                if e.type == "node.stopping" { break }
            }
            XCTAssertEqual(types.first, "node.started")
            XCTAssertEqual(types.last, "node.stopping")
        }
    }
}

/// Records the CLOCK_REPLYs a link hands on (their echoed t1), pausing the link after each while `pausing`.
final class PausingRecorder: PeerLinkDelegate, @unchecked Sendable {
    private let lock = NIOLockedValueBox<(nonces: [UInt64], pausing: Bool)>(([], true))
    var nonces: [UInt64] { lock.withLockedValue { $0.nonces } }
    var pausing: Bool {
        get { lock.withLockedValue { $0.pausing } }
        set { lock.withLockedValue { $0.pausing = newValue } }
    }

    func link(_ link: PeerLink, received envelope: Envelope) {
        guard envelope.type == .clockReply, let reply = try? Tandem_V1_ClockReply(serializedBytes: envelope.payload) else { return }
        let pause = lock.withLockedValue { s -> Bool in
            s.nonces.append(reply.t1Us)
            return s.pausing
        }
        if pause { link.pauseReading() }
    }
}

/// Records how a link ended, as seen at the top of its pipeline.
final class LinkEndRecorder: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = NIOAny
    private let lock = NSLock()
    private var seen: [String] = []
    var events: [String] { lock.lock(); defer { lock.unlock() }; return seen }
    private func note(_ s: String) { lock.lock(); seen.append(s); lock.unlock() }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SecureChannelGoodbye { note("goodbye") }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        note("inactive")
        context.fireChannelInactive()
    }
}

final class Codes: @unchecked Sendable {
    private let lock = NSLock()
    private var codes: [Tandem_V1_ErrorCode] = []
    func add(_ c: Tandem_V1_ErrorCode) { lock.lock(); codes.append(c); lock.unlock() }
    var all: [Tandem_V1_ErrorCode] { lock.lock(); defer { lock.unlock() }; return codes }
    var count: Int { all.count }
}

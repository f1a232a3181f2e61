import Logging
import NIOCore
import NIOEmbedded
import Sodium
import TandemNet
import TandemProtocol
import XCTest

/// Two `SecureChannelHandler`s wired together in memory: empty boxes, splitting, goodbye.
final class SecureChannelHandlerTests: XCTestCase {
    /// Records what the secure channel hands up.
    final class Collector: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        var bodies: [ByteBuffer] = []
        var established = false
        var goodbyes = 0

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            bodies.append(unwrapInboundIn(data))
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if event is SecureChannelEstablished { established = true }
            if event is SecureChannelGoodbye { goodbyes += 1 }
        }
    }

    /// Stands in for TCP half-close, which EmbeddedChannel does not model: swallows
    /// close(mode: .output) at the bottom of the pipeline.
    final class HalfCloseSwallower: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var outputClosed = false

        func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
            if mode == .output {
                outputClosed = true
                promise?.succeed(())
            } else {
                context.close(mode: mode, promise: promise)
            }
        }
    }

    struct Pair {
        let client: EmbeddedChannel
        let server: EmbeddedChannel
        let clientSeen = Collector()
        let serverSeen = Collector()
        let swallower = HalfCloseSwallower()
        let serverMetrics = TransportMetrics()
    }

    func makePair() throws -> Pair {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let clientKey = SigningKeyPair.generate()
        let serverKey = SigningKeyPair.generate()
        let pair = Pair(client: EmbeddedChannel(), server: EmbeddedChannel())
        try pair.client.pipeline.syncOperations.addHandlers([
            pair.swallower,
            SecureChannelHandler(client: clientKey, serverPublicKey: serverKey.publicKey, metrics: TransportMetrics(), logger: logger),
            pair.clientSeen,
        ])
        try pair.server.pipeline.syncOperations.addHandlers([
            SecureChannelHandler(server: serverKey, metrics: pair.serverMetrics, logger: logger),
            pair.serverSeen,
        ])
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: 1)
        try pair.server.connect(to: address).wait()
        try pair.client.connect(to: address).wait()
        try pump(pair)
        XCTAssertTrue(pair.clientSeen.established)
        XCTAssertTrue(pair.serverSeen.established)
        return pair
    }

    /// Moves bytes both ways until both sides are quiet; returns the bytes moved client→server
    /// and server→client.
    @discardableResult
    func pump(_ pair: Pair) throws -> (toServer: Int, toClient: Int) {
        var moved = (toServer: 0, toClient: 0)
        var busy = true
        while busy {
            busy = false
            while let bytes = try pair.client.readOutbound(as: ByteBuffer.self) {
                moved.toServer += bytes.readableBytes
                busy = true
                if pair.server.isActive { try pair.server.writeInbound(bytes) }
            }
            while let bytes = try pair.server.readOutbound(as: ByteBuffer.self) {
                moved.toClient += bytes.readableBytes
                busy = true
                if pair.client.isActive { try pair.client.writeInbound(bytes) }
            }
        }
        return moved
    }

    func testEmptyWriteIsOneEmptyBox() throws {
        let pair = try makePair()
        try pair.client.writeAndFlush(ByteBuffer()).wait()
        let moved = try pump(pair)
        // One header and no body on the wire; the receiver passes a byte stream on, so an empty
        // box adds nothing to it and the link stays up.
        XCTAssertEqual(moved.toServer, BoxStream.headerLength)
        XCTAssertEqual(pair.serverSeen.bodies.reduce(0) { $0 + $1.readableBytes }, 0)
        XCTAssertTrue(pair.server.isActive)
    }

    func testWritesAreSplitIntoBoxesOfAtMost4096Bytes() throws {
        let pair = try makePair()
        let data = (0..<4097).map { UInt8(truncatingIfNeeded: $0 * 7) }
        try pair.client.writeAndFlush(ByteBuffer(bytes: data)).wait()
        let moved = try pump(pair)
        // Two boxes on the wire (4096 + 1 bytes of body); the receiver may hand them on in one read.
        XCTAssertEqual(moved.toServer, 4097 + 2 * BoxStream.headerLength)
        XCTAssertEqual(pair.serverSeen.bodies.flatMap { Array($0.readableBytesView) }, data)
    }

    func testGoodbyeIsAnsweredWithGoodbyeThenClose() throws {
        let pair = try makePair()
        pair.client.pipeline.close(mode: .all, promise: nil)
        let moved = try pump(pair)
        XCTAssertEqual(moved.toServer, BoxStream.headerLength) // the client's goodbye
        XCTAssertEqual(moved.toClient, BoxStream.headerLength) // the server's answer
        XCTAssertEqual(pair.serverSeen.goodbyes, 1)
        XCTAssertFalse(pair.server.isActive)
    }

    /// Protocol 4.3: bytes after a goodbye are never read (not decrypted, not a stream error); the
    /// goodbye is answered with a goodbye, exactly as a goodbye alone.
    func testGoodbyeFollowedByDataIsAnsweredWithGoodbye() throws {
        let pair = try makePair()
        pair.client.pipeline.close(mode: .all, promise: nil)
        var goodbye = try XCTUnwrap(pair.client.readOutbound(as: ByteBuffer.self))
        XCTAssertEqual(goodbye.readableBytes, BoxStream.headerLength)
        // Bytes after the goodbye, in the same read (the server closes once its answer is written,
        // so nothing later can arrive).
        goodbye.writeBytes([UInt8](repeating: 0xA5, count: 40))
        try pair.server.writeInbound(goodbye)
        let answer = try XCTUnwrap(pair.server.readOutbound(as: ByteBuffer.self))
        XCTAssertEqual(answer.readableBytes, BoxStream.headerLength, "the server's goodbye")
        XCTAssertNil(try pair.server.readOutbound(as: ByteBuffer.self))
        XCTAssertEqual(pair.serverSeen.goodbyes, 1)
        XCTAssertTrue(pair.serverSeen.bodies.allSatisfy { $0.readableBytes == 0 })
        XCTAssertEqual(pair.serverMetrics.snapshot.streamsFailed, 0, "data after a goodbye is not a stream error")
        XCTAssertFalse(pair.server.isActive)
    }

    func testHalfCloseSaysGoodbyeAndKeepsReading() throws {
        let pair = try makePair()
        try pair.client.pipeline.close(mode: .output).wait()
        XCTAssertTrue(pair.swallower.outputClosed)
        // Nothing may follow the goodbye: the write fails, nothing crashes, nothing is sent.
        XCTAssertThrowsError(try pair.client.writeAndFlush(ByteBuffer(bytes: [1])).wait()) { error in
            XCTAssertEqual(error as? ChannelError, ChannelError.outputClosed)
        }
        let clientGoodbye = try XCTUnwrap(pair.client.readOutbound(as: ByteBuffer.self))
        XCTAssertEqual(clientGoodbye.readableBytes, BoxStream.headerLength)
        XCTAssertNil(try pair.client.readOutbound(as: ByteBuffer.self))
        // The server still sends; the half-closed client still reads.
        try pair.server.writeAndFlush(ByteBuffer(bytes: [9, 8, 7])).wait()
        try pump(pair)
        XCTAssertEqual(pair.clientSeen.bodies.map { Array($0.readableBytesView) }, [[9, 8, 7]])
        // The client's goodbye reaches the server: it answers and closes; the client, having said
        // goodbye already, closes without another one.
        try pair.server.writeInbound(clientGoodbye)
        XCTAssertEqual(pair.serverSeen.goodbyes, 1)
        let moved = try pump(pair)
        XCTAssertEqual(moved.toClient, BoxStream.headerLength)
        XCTAssertEqual(moved.toServer, 0)
        XCTAssertEqual(pair.clientSeen.goodbyes, 1)
        XCTAssertFalse(pair.server.isActive)
        XCTAssertFalse(pair.client.isActive)
    }
}

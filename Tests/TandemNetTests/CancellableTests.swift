import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemProtocol
import XCTest

/// A cancelled service must not wait on the network: waits on connects, handshakes and relay
/// joins end at once when their task is cancelled, and what arrives later is closed.
final class CancellableTests: XCTestCase {
    var group: MultiThreadedEventLoopGroup!

    override func setUp() { group = MultiThreadedEventLoopGroup(numberOfThreads: 1) }
    override func tearDown() { try? group.syncShutdownGracefully() }

    func testCancelledWaitEndsAtOnceAndTheLateValueIsAbandoned() async throws {
        let promise = group.next().makePromise(of: Int.self)
        let abandoned = NIOLockedValueBox<[Int]>([])
        let waiting = Task { try await promise.futureResult.valueUnlessCancelled { v in abandoned.withLockedValue { $0.append(v) } } }
        try await Task.sleep(for: .milliseconds(50))
        waiting.cancel()
        let result = await waiting.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        promise.succeed(7)
        // Its callbacks run in order: `abandoned` has its value by the time this wait ends.
        let late = try await promise.futureResult.get()
        XCTAssertEqual(late, 7)
        XCTAssertEqual(abandoned.withLockedValue { $0 }, [7], "a value nobody waits for any more goes to `abandoned`")
    }

    func testValueAndErrorPassThroughWhenNotCancelled() async throws {
        let ok = group.next().makeSucceededFuture(3)
        let value = try await ok.valueUnlessCancelled { _ in XCTFail("not abandoned") }
        XCTAssertEqual(value, 3)
        struct Boom: Error {}
        let failing: EventLoopFuture<Int> = group.next().makeFailedFuture(Boom())
        do {
            _ = try await failing.valueUnlessCancelled()
            XCTFail("the error passes through")
        } catch {
            XCTAssertTrue(error is Boom, "\(error)")
        }
    }

    func testAlreadyCancelledTaskDoesNotWait() async throws {
        let promise = group.next().makePromise(of: Int.self)
        let waiting = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await promise.futureResult.valueUnlessCancelled()
        }
        let result = await waiting.result
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        promise.succeed(1)
    }

    /// A peer that accepts TCP but never answers the handshake: the dial would wait out the
    /// handshake timeout (10 s); cancelled, it ends within a fraction of that and closes its socket.
    func testCancelledDialToASilentPeerEndsAndClosesItsSocket() async throws {
        let accepted = NIOLockedValueBox<[Channel]>([])
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { ch in
                accepted.withLockedValue { $0.append(ch) }
                return ch.eventLoop.makeSucceededVoidFuture()
            }
            .bind(host: "127.0.0.1", port: 0).get()
        defer { server.close(promise: nil) }
        let identity = SigningKeyPair.generate()
        let gate = FrameGate(localPublicKey: identity.publicKey, metrics: TransportMetrics())
        let port = server.localAddress!.port!
        let group = self.group!
        let dial = Task {
            try await PeerConnector.connect(host: "127.0.0.1", port: port, remote: SigningKeyPair.generate().publicKey,
                                            identity: identity, gate: gate, group: group, logger: Logger(label: "test"))
        }
        for _ in 0..<200 where accepted.withLockedValue({ $0.isEmpty }) { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(accepted.withLockedValue { $0.count }, 1, "the dial reached the silent peer")
        let cancelledAt = ContinuousClock.now
        dial.cancel()
        let result = await dial.result
        XCTAssertLessThan(ContinuousClock.now - cancelledAt, .seconds(2), "a cancelled dial does not wait for the handshake timeout")
        XCTAssertThrowsError(try result.get()) { XCTAssertTrue($0 is CancellationError, "\($0)") }
        // The dialled socket is closed: the silent peer sees its end close.
        let serverSide = accepted.withLockedValue { $0[0] }
        try await serverSide.closeFuture.get()
    }
}

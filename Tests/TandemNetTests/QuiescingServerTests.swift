import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import TandemNet
import XCTest

/// The one TCP server helper: accepts with the caller's initializer, and on shutdown stops
/// accepting and asks every open connection to quiesce (each closes in its own protocol).
final class QuiescingServerTests: XCTestCase {
    var group: MultiThreadedEventLoopGroup!

    override func setUp() { group = MultiThreadedEventLoopGroup(numberOfThreads: 1) }
    override func tearDown() { try? group.syncShutdownGracefully() }

    /// On a server's connection: counts quiesce requests and closes when asked.
    final class Quiescer: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let asked = NIOLockedValueBox(0)
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if event is ChannelShouldQuiesceEvent {
                asked.withLockedValue { $0 += 1 }
                context.close(promise: nil)
            }
        }
    }

    func connect(_ address: SocketAddress) async throws -> Channel {
        try await ClientBootstrap(group: group).connect(to: address).get()
    }

    func testShutdownQuiescesOpenConnectionsAndStopsAccepting() async throws {
        let handlers = NIOLockedValueBox<[Quiescer]>([])
        let server = try await QuiescingServer.bind(.init(host: "127.0.0.1", port: 0), group: group) { ch in
            let h = Quiescer()
            handlers.withLockedValue { $0.append(h) }
            try ch.pipeline.syncOperations.addHandler(h)
        }
        XCTAssertNotEqual(server.localAddress.port, 0)
        let clients = [try await connect(server.localAddress), try await connect(server.localAddress)]
        // Wait until the server side has both.
        for _ in 0..<200 where handlers.withLockedValue({ $0.count }) < 2 { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertEqual(handlers.withLockedValue { $0.count }, 2)

        await server.shutdown()
        // Each open connection was asked once and closed: the clients see the close.
        for c in clients { try await c.closeFuture.get() }
        XCTAssertEqual(handlers.withLockedValue { $0.map { $0.asked.withLockedValue { $0 } } }, [1, 1])
        do {
            let late = try await connect(server.localAddress)
            late.close(promise: nil)
            XCTFail("a connection was accepted after shutdown")
        } catch {}
    }

    func testCancellingRunShutsDownOnceAndReturns() async throws {
        let server = try await QuiescingServer.bind(.init(host: "127.0.0.1", port: 0), group: group) { ch in
            try ch.pipeline.syncOperations.addHandler(Quiescer())
        }
        let client = try await connect(server.localAddress)
        let calls = NIOLockedValueBox(0)
        let running = Task { try await server.run { calls.withLockedValue { $0 += 1 } } }
        try await Task.sleep(for: .milliseconds(50))
        running.cancel()
        try await running.value
        try await client.closeFuture.get()
        XCTAssertEqual(calls.withLockedValue { $0 }, 1)
    }

    func testAFailingInitializerClosesThatConnectionOnly() async throws {
        struct Refused: Error {}
        let count = NIOLockedValueBox(0)
        let server = try await QuiescingServer.bind(.init(host: "127.0.0.1", port: 0), group: group) { ch in
            let n = count.withLockedValue { $0 += 1; return $0 }
            if n == 1 { throw Refused() }
            try ch.pipeline.syncOperations.addHandler(Quiescer())
        }
        let refused = try await connect(server.localAddress)
        try await refused.closeFuture.get()
        let kept = try await connect(server.localAddress)
        try await Task.sleep(for: .milliseconds(50))
        XCTAssertTrue(kept.isActive)
        await server.shutdown()
        try await kept.closeFuture.get()
    }

    func testBindingAPortInUseThrows() async throws {
        let first = try await QuiescingServer.bind(.init(host: "127.0.0.1", port: 0), group: group) { _ in }
        do {
            _ = try await QuiescingServer.bind(.init(host: "127.0.0.1", port: first.localAddress.port!), group: group) { _ in }
            XCTFail("bound a port that is in use")
        } catch {
            XCTAssertEqual(describe(error), "address already in use")
        }
        await first.shutdown()
    }
}

/// Addresses as operators type them, and the address a local client dials for a bound one.
final class HostPortTests: XCTestCase {
    func testWildcardBindsAreReachedOnLoopbackForIPv4AndIPv6Alike() {
        // `tandem-relay id` and the running relay both print this; `id` used to map only 0.0.0.0.
        XCTAssertEqual(HostPort.reachable(fromBound: "0.0.0.0"), "127.0.0.1")
        XCTAssertEqual(HostPort.reachable(fromBound: "::"), "127.0.0.1")
        XCTAssertEqual(HostPort.reachable(fromBound: "10.0.0.7"), "10.0.0.7")
        XCTAssertEqual(HostPort.reachable(fromBound: "::1"), "::1")
        XCTAssertEqual(HostPort.reachable(fromBound: "relay.example.org"), "relay.example.org")
    }

    func testParse() throws {
        XCTAssertTrue(try HostPort.parse("[::]:7820") == ("::", 7820))
        XCTAssertTrue(try HostPort.parse(":7821") == ("0.0.0.0", 7821))
        XCTAssertTrue(try HostPort.parse("7822", defaultHost: "127.0.0.1") == ("127.0.0.1", 7822))
        for bad in ["[::1", "[::1]7820", "host:65536", "host:-1", "host:x", ""] {
            XCTAssertThrowsError(try HostPort.parse(bad), bad)
        }
    }
}

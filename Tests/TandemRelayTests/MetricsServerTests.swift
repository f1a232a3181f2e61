import Logging
import Foundation
import NIOCore
import NIOPosix
import XCTest
@testable import TandemRelay

final class MetricsServerTests: XCTestCase {
    private var group: MultiThreadedEventLoopGroup!
    private let logger: Logger = {
        var logger = Logger(label: "metrics-test")
        logger.logLevel = .warning
        return logger
    }()

    override func setUp() {
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    }

    override func tearDown() async throws {
        try await group.shutdownGracefully()
    }

    private func startServer(connectionTimeout: TimeAmount = .seconds(10),
                             render: @escaping @Sendable () -> String = { "tandem_relay_clients 3\n" }) async throws
        -> (MetricsServer, Int) {
        let server = MetricsServer(host: "127.0.0.1", port: 0, group: group, logger: logger,
                                   connectionTimeout: connectionTimeout, render: render)
        let address = try await server.start()
        return (server, try XCTUnwrap(address.port))
    }

    /// Sends `request` as raw bytes and returns everything the server sends before it closes.
    private func exchange(port: Int, _ request: String) async throws -> String {
        let received = group.next().makePromise(of: String.self)
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(Collector(received)) }
                }
                .connect(host: "127.0.0.1", port: port).get()
        } catch {
            received.fail(error)
            throw error
        }
        channel.writeAndFlush(ByteBuffer(string: request), promise: nil)
        let deadline = channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
        defer { deadline.cancel() }
        return try await received.futureResult.get()
    }

    /// Gathers what the peer sends; hands it over when the connection closes.
    private final class Collector: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let done: EventLoopPromise<String>
        private var text = ""

        init(_ done: EventLoopPromise<String>) { self.done = done }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            text += String(buffer: unwrapInboundIn(data))
        }

        func channelInactive(context: ChannelHandlerContext) {
            done.succeed(text)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: Error) {
            context.close(promise: nil)
        }
    }

    /// A counter `render` closures may share.
    private final class Calls: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        func next() -> Int { lock.withLock { count += 1; return count } }
    }

    /// Status line, lower-cased header names → values, body.
    private func parse(_ response: String) throws -> (status: String, headers: [String: String], body: String) {
        let parts = response.components(separatedBy: "\r\n\r\n")
        let head = try XCTUnwrap(parts.first).components(separatedBy: "\r\n")
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            let pair = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if pair.count == 2 { headers[pair[0].lowercased()] = pair[1] }
        }
        return (head[0], headers, parts.dropFirst().joined(separator: "\r\n\r\n"))
    }

    func testMetricsEndpoint() async throws {
        let (server, port) = try await startServer()
        let response = try parse(try await exchange(port: port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
        XCTAssertEqual(response.status, "HTTP/1.1 200 OK")
        XCTAssertEqual(response.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8")
        XCTAssertEqual(response.headers["content-length"], "\("tandem_relay_clients 3\n".utf8.count)")
        XCTAssertEqual(response.headers["connection"], "close")
        XCTAssertEqual(response.body, "tandem_relay_clients 3\n")

        let withQuery = try parse(try await exchange(port: port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n"))
        XCTAssertEqual(withQuery.body, "tandem_relay_clients 3\n")
        await server.stop()
    }

    func testRenderIsCalledPerRequest() async throws {
        let calls = Calls()
        let (server, port) = try await startServer(render: { "n \(calls.next())\n" })
        let first = try parse(try await exchange(port: port, "GET /metrics HTTP/1.1\r\n\r\n"))
        let second = try parse(try await exchange(port: port, "GET /metrics HTTP/1.1\r\n\r\n"))
        XCTAssertEqual(first.body, "n 1\n")
        XCTAssertEqual(second.body, "n 2\n")
        await server.stop()
    }

    func testHealthAndOtherPaths() async throws {
        let (server, port) = try await startServer()
        for path in ["/", "/healthz"] {
            let r = try parse(try await exchange(port: port, "GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n"))
            XCTAssertEqual(r.status, "HTTP/1.1 200 OK", path)
            XCTAssertEqual(r.body, "ok\n", path)
        }
        for path in ["/nope", "/metrics/", "/metricsx"] {
            let r = try parse(try await exchange(port: port, "GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n"))
            XCTAssertEqual(r.status, "HTTP/1.1 404 Not Found", path)
        }
        await server.stop()
    }

    func testOtherMethodsAreRefused() async throws {
        let (server, port) = try await startServer()
        let post = try parse(try await exchange(port: port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"))
        XCTAssertEqual(post.status, "HTTP/1.1 405 Method Not Allowed")
        XCTAssertEqual(post.headers["allow"], "GET")
        let delete = try parse(try await exchange(port: port, "DELETE / HTTP/1.1\r\n\r\n"))
        XCTAssertEqual(delete.status, "HTTP/1.1 405 Method Not Allowed")
        await server.stop()
    }

    func testMalformedRequestGets400() async throws {
        let (server, port) = try await startServer()
        let r = try parse(try await exchange(port: port, "this is not http\r\n\r\n"))
        XCTAssertEqual(r.status, "HTTP/1.1 400 Bad Request")
        await server.stop()
    }

    func testOversizedRequestHeadIsClosedUnanswered() async throws {
        let (server, port) = try await startServer()
        let big = "GET /metrics HTTP/1.1\r\nX-Padding: " + String(repeating: "a", count: 9 * 1024) + "\r\n\r\n"
        let response = try await exchange(port: port, big)
        XCTAssertEqual(response, "")
        // The server still answers others.
        let health = try parse(try await exchange(port: port, "GET /healthz HTTP/1.1\r\n\r\n"))
        XCTAssertEqual(health.body, "ok\n")
        await server.stop()
    }

    func testSilentClientIsClosedAfterTheTimeout() async throws {
        let (server, port) = try await startServer(connectionTimeout: .milliseconds(200))
        let started = ContinuousClock.now
        let response = try await exchange(port: port, "GET /metrics HTTP/1.1\r\n")  // head never finished
        XCTAssertEqual(response, "")
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(3))
        await server.stop()
    }

    func testStopClosesTheListener() async throws {
        let (server, port) = try await startServer()
        await server.stop()
        do {
            _ = try await exchange(port: port, "GET / HTTP/1.1\r\n\r\n")
            XCTFail("connected after stop")
        } catch {}
        await server.stop()  // twice is harmless
    }

    func testStopBeforeStartRefusesStart() async throws {
        let server = MetricsServer(host: "127.0.0.1", port: 0, group: group, logger: logger) { "" }
        await server.stop()
        do {
            _ = try await server.start()
            XCTFail("started after stop")
        } catch {}
    }

    func testBindFailureIsReported() async throws {
        let (server, port) = try await startServer()
        let second = MetricsServer(host: "127.0.0.1", port: port, group: group, logger: logger) { "" }
        do {
            _ = try await second.start()
            XCTFail("bound a port already in use")
        } catch {
            XCTAssertTrue("\(error)".hasPrefix("cannot serve metrics on 127.0.0.1:\(port)"), "\(error)")
        }
        await server.stop()
    }

    // MARK: - Exposition format

    func testPrometheusCounterAndGauge() {
        XCTAssertEqual(PrometheusText.counter("tandem_relay_frames_total", help: "Frames relayed.", value: 42), """
            # HELP tandem_relay_frames_total Frames relayed.
            # TYPE tandem_relay_frames_total counter
            tandem_relay_frames_total 42

            """)
        XCTAssertEqual(PrometheusText.gauge("tandem_relay_clients", help: "Clients now.", value: -1), """
            # HELP tandem_relay_clients Clients now.
            # TYPE tandem_relay_clients gauge
            tandem_relay_clients -1

            """)
    }

    func testPrometheusLabelledSamplesAreSortedAndEscaped() {
        let text = PrometheusText.counter("tandem_relay_refused_total", help: "Refused \\ connections\nby reason.", samples: [
            (labels: ["reason": "full", "kind": "client"], value: 3),
            (labels: ["reason": #"say "no" \ now"# + "\n"], value: 1),
            (labels: [:], value: 0),
        ])
        XCTAssertEqual(text, """
            # HELP tandem_relay_refused_total Refused \\\\ connections\\nby reason.
            # TYPE tandem_relay_refused_total counter
            tandem_relay_refused_total{kind="client",reason="full"} 3
            tandem_relay_refused_total{reason="say \\"no\\" \\\\ now\\n"} 1
            tandem_relay_refused_total 0

            """)
        XCTAssertEqual(PrometheusText.gauge("g", help: "", samples: []), "# HELP g\n# TYPE g gauge\n")
    }

    func testPrometheusNames() {
        XCTAssertTrue(PrometheusText.isValidName("a_b:c9", colonAllowed: true))
        XCTAssertFalse(PrometheusText.isValidName("a_b:c9", colonAllowed: false))
        XCTAssertFalse(PrometheusText.isValidName("9a", colonAllowed: true))
        XCTAssertFalse(PrometheusText.isValidName("a-b", colonAllowed: true))
        XCTAssertFalse(PrometheusText.isValidName("", colonAllowed: true))
    }
}

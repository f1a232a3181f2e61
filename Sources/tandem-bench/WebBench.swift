import ArgumentParser
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NodeWeb
import TandemNet
import TandemNode
import TandemNodeCore
import Sodium

/// `tandem-bench web`: the dashboard on loopback (issue 36). One node in this process, its
/// dashboard on 127.0.0.1:0, a plain HTTP/1.1 client in this process.
/// - first paint: a new connection, then the page (`/`), its CSS and its script, one after the
///   other (what a browser needs before it paints), p50/p99; the HTML alone too;
/// - SSE latency: an event (`name.set` through the control method) until its line arrives on an open
///   `/events` stream, beside the same event's latency to a control-socket subscriber (what
///   `tandem events --follow` sees); goal p50 ≤ 2×;
/// - tabs: the node's RSS growth with 50 open event streams (goal ≤ 10 MB).
struct WebBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "web",
        abstract: "The dashboard on loopback: first paint p50, SSE latency beside the control socket's, RSS of 50 open tabs.")

    @Option(help: "Page loads measured.") var rounds: Int = 200
    @Option(help: "Events measured.") var events: Int = 100
    @Option(help: "Open tabs (event streams) for the memory figure.") var tabs: Int = 50
    @Option(help: "The page whose first paint is measured (/, /vault, …).") var page: String = "/"

    func validate() throws {
        guard (5...10_000).contains(rounds) else { throw ValidationError("--rounds must be between 5 and 10000") }
        guard (5...10_000).contains(events) else { throw ValidationError("--events must be between 5 and 10000") }
        guard (1...60).contains(tabs) else { throw ValidationError("--tabs must be between 1 and 60") }
        guard page.hasPrefix("/"), page.count <= 200, !page.contains(" ") else { throw ValidationError("--page is a path on the dashboard, like /vault") }
    }

    func run() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        var config = NodeConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.web = WebConfiguration(host: "127.0.0.1", port: 0)
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tandem-web-bench-\(getpid())")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = DataDirectory(url: root.appendingPathComponent("node"))
        let node = try NodeRuntime(identity: SigningKeyPair.generate(), configuration: config, dataDirectory: directory, logger: logger)
        var paint: [Double] = [], html: [Double] = [], sse: [Double] = [], control: [Double] = []
        var rssBefore = 0.0, rssAfter = 0.0
        let clock = ContinuousClock()

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await node.run(signals: false) }
            let login = try await node.router.call("web.login")
            guard let url = login["url"]?.stringValue, let address = login["address"]?.stringValue,
                  let port = Int(address.split(separator: ":").last ?? "") else { throw TandemError("no login URL") }
            let path = String(url.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" })
            let loginAnswer = try await BenchHTTP.with(port: port) { try await $0.get(path, cookie: nil) }
            guard let cookie = loginAnswer.setCookie?.split(separator: ";").first.map(String.init) else {
                throw TandemError("the login did not set a cookie (status \(loginAnswer.status))")
            }

            for round in 0..<(rounds + 5) {
                let start = clock.now
                let (page, htmlDone, done) = try await BenchHTTP.with(port: port) { c in
                    let page = try await c.get(self.page, cookie: cookie)
                    let htmlDone = clock.now
                    _ = try await c.get("/static/dashboard.css", cookie: cookie)
                    _ = try await c.get("/static/dashboard.js", cookie: cookie)
                    if self.page == "/vault" { _ = try await c.get("/static/vault.js", cookie: cookie) }
                    return (page, htmlDone, clock.now)
                }
                guard page.status == 200, page.body.contains("id=\"live\"") else { throw TandemError("the page did not load (\(page.status))") }
                if round >= 5 {
                    paint.append((done - start).milliseconds)
                    html.append((htmlDone - start).milliseconds)
                }
            }

            // One stream to the page (SSE) and one to the control socket, both open during the events.
            try await BenchHTTP.with(port: port) { stream in
            try await stream.open("/events", cookie: cookie)
            let socket = try await ControlClient.connect(dataDirectory: directory)
            let subscription = BenchIterator(socket.stream(method: "events.subscribe", params: ["types": ["name.changed"]]).makeAsyncIterator())
            try await Task.sleep(for: .milliseconds(200))
            for i in 0..<(events + 3) {
                let name = "bench \(i)"
                let start = clock.now
                // Both readers wait before the event exists; each notes when its copy arrived.
                let (viaPage, viaControl) = try await withThrowingTaskGroup(of: (Bool, Duration).self) { group in
                    group.addTask { (true, try await stream.waitForLine(containing: "\"\(name)\"") - start) }
                    group.addTask {
                        while let item = try await subscription.next() {
                            if item["fields"]?["name"]?.stringValue == name { return (false, clock.now - start) }
                        }
                        throw TandemError("the control stream ended")
                    }
                    _ = try await node.router.call("name.set", ["name": .string(name)])
                    var page = Duration.zero, control = Duration.zero
                    for try await (isPage, d) in group { if isPage { page = d } else { control = d } }
                    return (page, control)
                }
                if i >= 3 {
                    sse.append(viaPage.milliseconds)
                    control.append(viaControl.milliseconds)
                }
            }
            socket.close()
            }

            rssBefore = residentMB(getpid())
            // `tabs` event streams open at once (each scoped inside the one before), measured inside.
            func holdTabs(_ n: Int) async throws -> Double {
                guard n > 0 else {
                    try await Task.sleep(for: .milliseconds(300))
                    return residentMB(getpid())
                }
                return try await BenchHTTP.with(port: port) { tab in
                    try await tab.open("/events", cookie: cookie)
                    return try await holdTabs(n - 1)
                }
            }
            rssAfter = try await holdTabs(tabs)
            tasks.cancelAll()
        }
        let p = Percentiles(paint), h = Percentiles(html), s = Percentiles(sse), c = Percentiles(control)
        let report: [String: Any] = [
            "benchmark": "web",
            "environment": environment(),
            "rounds": rounds,
            "page": page,
            "first_paint_ms": p.json,
            "first_paint_goal_p50_ms": 100,
            "first_paint_goal_met": p.p50 <= 100,
            "html_only_ms": h.json,
            "sse_event_latency_ms": s.json,
            "control_socket_event_latency_ms": c.json,
            "sse_goal_p50_ms": 2 * c.p50,
            "sse_goal_met": s.p50 <= 2 * c.p50,
            "tabs": tabs,
            "rss_growth_mb": rssAfter - rssBefore,
            "rss_goal_mb": 10,
            "rss_goal_met": rssAfter - rssBefore <= 10,
            "note": "first paint = new loopback connection + page + CSS + script, sequential, as a browser needs them before painting (no rendering time); SSE latency = control call name.set until the event's line on an open /events stream, beside a control-socket events.subscribe",
        ]
        let data = try JSONSerialization.data(withJSONObject: report, options: [.sortedKeys, .prettyPrinted])
        print(String(decoding: data, as: UTF8.self))
        say(String(format: "web: first paint p50 %.2f ms p99 %.2f ms (goal ≤ 100); SSE p50 %.2f ms vs control socket %.2f ms (goal ≤ 2×); %d tabs +%.1f MB RSS (goal ≤ 10)",
                   p.p50, p.p99, s.p50, c.p50, tabs, rssAfter - rssBefore))
    }
}

/// A minimal HTTP/1.1 client on NIO for the bench: one connection, requests one at a time, or one
/// long response read line by line (an event stream).
final class BenchHTTP: Sendable {
    struct Answer {
        var status: Int
        var setCookie: String?
        var body: String
    }

    let outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>
    let port: Int
    private let iterator: BenchIterator<NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator>

    init(inbound: NIOAsyncChannelInboundStream<HTTPClientResponsePart>, outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>, port: Int) {
        self.outbound = outbound
        self.port = port
        self.iterator = BenchIterator(inbound.makeAsyncIterator())
    }

    /// A connection for the length of `body`, closed after it.
    static func with<T: Sendable>(port: Int, _ body: (BenchHTTP) async throws -> T) async throws -> T {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            try await body(BenchHTTP(inbound: inbound, outbound: outbound, port: port))
        }
    }

    private func send(_ path: String, cookie: String?) async throws {
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path)
        head.headers.add(name: "Host", value: "127.0.0.1:\(port)")
        if let cookie { head.headers.add(name: "Cookie", value: cookie) }
        try await outbound.write(.head(head))
        try await outbound.write(.end(nil))
    }

    func get(_ path: String, cookie: String?) async throws -> Answer {
        try await send(path, cookie: cookie)
        var answer = Answer(status: 0, setCookie: nil, body: "")
        var body = ByteBuffer()
        while let part = try await iterator.next() {
            switch part {
            case .head(let head):
                answer.status = Int(head.status.code)
                answer.setCookie = head.headers["Set-Cookie"].first
            case .body(var chunk):
                body.writeBuffer(&chunk)
            case .end:
                answer.body = String(buffer: body)
                return answer
            }
        }
        throw TandemError("the connection closed mid-answer")
    }

    /// Starts a long answer (an event stream) and returns once its head arrived.
    func open(_ path: String, cookie: String?) async throws {
        try await send(path, cookie: cookie)
        while let part = try await iterator.next() {
            if case .head(let head) = part {
                guard head.status == .ok else { throw TandemError("\(path): status \(head.status.code)") }
                return
            }
        }
        throw TandemError("the connection closed")
    }

    /// Reads the open stream until a chunk contains `text`; the instant it arrived.
    func waitForLine(containing text: String) async throws -> ContinuousClock.Instant {
        while let part = try await iterator.next() {
            if case .body(let chunk) = part, String(buffer: chunk).contains(text) { return ContinuousClock.now }
        }
        throw TandemError("the stream ended")
    }
}

/// An async iterator shared by the bench's tasks, one at a time (the reader of a stream hands over
/// between measurement rounds, never overlapping).
final class BenchIterator<Base: AsyncIteratorProtocol>: @unchecked Sendable {  // @unchecked: one reader at a time, by construction
    private var base: Base

    init(_ base: Base) { self.base = base }

    func next() async throws -> Base.Element? { try await base.next() }
}

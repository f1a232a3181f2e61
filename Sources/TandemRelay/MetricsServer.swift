import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import TandemNet

/// A minimal HTTP/1.1 server for Prometheus: `GET /metrics` answers `render()`, `GET /` and
/// `GET /healthz` answer "ok". One request per connection (`Connection: close`). A connection
/// may send at most `maximumRequestBytes` and lives at most `connectionTimeout`, and at most
/// `maximumConnections` are open at once, so a client cannot make it hold memory or sockets.
public final class MetricsServer: Sendable {
    /// The most a client may send on one connection (its request head; bodies are never read).
    public static let maximumRequestBytes = 8 * 1024
    public static let maximumConnections = 64

    private let host: String
    private let port: Int
    private let group: EventLoopGroup
    private let logger: Logger
    private let connectionTimeout: TimeAmount
    private let render: @Sendable () -> String
    private let state = NIOLockedValueBox<State>(.idle)
    private let openConnections = NIOLockedValueBox(0)

    private enum State {
        case idle
        case starting
        case running(QuiescingServer)
        case stopped
    }

    public init(host: String, port: Int, group: EventLoopGroup, logger: Logger,
                connectionTimeout: TimeAmount = .seconds(10), render: @escaping @Sendable () -> String) {
        self.host = host
        self.port = port
        self.group = group
        self.logger = logger
        self.connectionTimeout = connectionTimeout
        self.render = render
    }

    /// Binds and starts answering; returns the bound address (useful with port 0).
    public func start() async throws -> SocketAddress {
        try state.withLockedValue { state in
            switch state {
            case .idle: state = .starting
            case .starting, .running: preconditionFailure("MetricsServer.start() called twice")
            case .stopped: throw TandemError("the metrics server was stopped before it started")
            }
        }
        let render = render, timeout = connectionTimeout, logger = logger, open = openConnections
        let server: QuiescingServer
        do {
            server = try await QuiescingServer.bind(.init(host: host, port: port, backlog: 64, noDelay: false), group: group) { ch in
                let admitted = open.withLockedValue { count in
                    guard count < Self.maximumConnections else { return false }
                    count += 1
                    return true
                }
                // The bootstrap closes a connection whose initializer fails.
                guard admitted else { throw TandemError("too many metrics connections") }
                ch.closeFuture.whenComplete { _ in open.withLockedValue { $0 -= 1 } }
                try ch.pipeline.syncOperations.addHandlers([
                    ConnectionLimiter(maximumBytes: Self.maximumRequestBytes, timeout: timeout),
                    ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)),
                    HTTPResponseEncoder(),
                    MetricsRequestHandler(render: render, logger: logger),
                ])
            }
        } catch {
            state.withLockedValue { if case .starting = $0 { $0 = .idle } }
            throw TandemError("cannot serve metrics on \(host):\(port): \(error)")
        }
        let stoppedMeanwhile = state.withLockedValue { state -> Bool in
            switch state {
            case .starting:
                state = .running(server)
                return false
            case .stopped:
                return true
            case .idle, .running:
                preconditionFailure("MetricsServer state changed during start()")
            }
        }
        if stoppedMeanwhile {
            await server.shutdown()
            throw TandemError("the metrics server was stopped while starting")
        }
        let address = server.localAddress
        logger.info("serving metrics", metadata: ["address": "\(address)"])
        return address
    }

    /// Stops accepting connections. Open ones end by themselves within `connectionTimeout`.
    public func stop() async {
        let server = state.withLockedValue { state -> QuiescingServer? in
            defer { state = .stopped }
            switch state {
            case .running(let server): return server
            case .idle, .starting, .stopped: return nil
            }
        }
        await server?.shutdown()
    }
}

/// First in the pipeline: closes a connection that sends more than `maximumBytes` in total or
/// is still open after `timeout`.
private final class ConnectionLimiter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let maximumBytes: Int
    private let timeout: TimeAmount
    private var received = 0
    private var deadline: Scheduled<Void>?

    init(maximumBytes: Int, timeout: TimeAmount) {
        self.maximumBytes = maximumBytes
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { armDeadline(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        armDeadline(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        received += buffer.readableBytes
        guard received <= maximumBytes else {
            context.close(promise: nil)
            return
        }
        context.fireChannelRead(data)
    }

    private func armDeadline(context: ChannelHandlerContext) {
        guard deadline == nil else { return }
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
    }
}

/// Answers the one request of a connection, then closes it.
private final class MetricsRequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let render: @Sendable () -> String
    private let logger: Logger
    private var answered = false

    init(render: @escaping @Sendable () -> String, logger: Logger) {
        self.render = render
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data), !answered else { return }
        answered = true
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        switch (head.method, path) {
        case (.GET, "/metrics"):
            respond(context: context, status: .ok, contentType: "text/plain; version=0.0.4; charset=utf-8", body: render())
        case (.GET, "/"), (.GET, "/healthz"):
            respond(context: context, status: .ok, body: "ok\n")
        case (.GET, _):
            respond(context: context, status: .notFound, body: "not found\n")
        default:
            respond(context: context, status: .methodNotAllowed, extraHeaders: [("Allow", "GET")], body: "method not allowed\n")
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // A malformed request: answer 400 if nothing was sent yet, then close.
        if !answered, error is HTTPParserError {
            answered = true
            respond(context: context, status: .badRequest, body: "bad request\n")
        } else {
            context.close(promise: nil)
        }
    }

    private func respond(context: ChannelHandlerContext, status: HTTPResponseStatus,
                         contentType: String = "text/plain; charset=utf-8",
                         extraHeaders: [(String, String)] = [], body: String) {
        var buffer = context.channel.allocator.buffer(capacity: body.utf8.count)
        buffer.writeString(body)
        var headers = HTTPHeaders([
            ("Content-Type", contentType),
            ("Content-Length", "\(buffer.readableBytes)"),
            ("Connection", "close"),
        ])
        headers.add(contentsOf: extraHeaders)
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// Prometheus text exposition format (version 0.0.4).
public enum PrometheusText {
    public typealias Sample = (labels: [String: String], value: Int)

    public static func counter(_ name: String, help: String, value: Int) -> String {
        family(name, type: "counter", help: help, samples: [([:], value)])
    }

    public static func gauge(_ name: String, help: String, value: Int) -> String {
        family(name, type: "gauge", help: help, samples: [([:], value)])
    }

    public static func counter(_ name: String, help: String, samples: [Sample]) -> String {
        family(name, type: "counter", help: help, samples: samples)
    }

    public static func gauge(_ name: String, help: String, samples: [Sample]) -> String {
        family(name, type: "gauge", help: help, samples: samples)
    }

    /// `# HELP`, `# TYPE` and one line per sample; labels in name order.
    static func family(_ name: String, type: String, help: String, samples: [Sample]) -> String {
        precondition(isValidName(name, colonAllowed: true), "invalid Prometheus metric name '\(name)'")
        var out = help.isEmpty ? "# HELP \(name)\n" : "# HELP \(name) \(escapeHelp(help))\n"
        out += "# TYPE \(name) \(type)\n"
        for sample in samples {
            out += name
            if !sample.labels.isEmpty {
                let pairs = sample.labels.sorted { $0.key < $1.key }.map { key, value in
                    precondition(isValidName(key, colonAllowed: false) && !key.hasPrefix("__"),
                                 "invalid Prometheus label name '\(key)'")
                    return "\(key)=\"\(escapeLabelValue(value))\""
                }
                out += "{" + pairs.joined(separator: ",") + "}"
            }
            out += " \(sample.value)\n"
        }
        return out
    }

    /// In HELP text: backslash and newline.
    static func escapeHelp(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }

    /// In label values: backslash, double quote and newline.
    static func escapeLabelValue(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` for metric names, without `:` for label names.
    static func isValidName(_ name: String, colonAllowed: Bool) -> Bool {
        guard let first = name.unicodeScalars.first else { return false }
        func allowed(_ s: Unicode.Scalar, digits: Bool) -> Bool {
            switch s {
            case "a"..."z", "A"..."Z", "_": return true
            case ":": return colonAllowed
            case "0"..."9": return digits
            default: return false
            }
        }
        return allowed(first, digits: false) && name.unicodeScalars.dropFirst().allSatisfy { allowed($0, digits: true) }
    }
}

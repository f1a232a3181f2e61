import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOExtras
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemNode
import TandemProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Hidden developer tools. `tandem dev shs-serve` and `tandem dev shs-connect` speak the bare
/// Secret Handshake and box-stream (no frames on top), so an independent implementation (the
/// PyPI `secret-handshake` package, Tests/interop) can be checked against ours in both roles.
struct Dev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dev",
        abstract: "Developer tools for interoperability tests.",
        shouldDisplay: false,
        subcommands: [ShsServe.self, ShsConnect.self, DevDiscover.self, DevFlood.self, DevKeyFrames.self])
}

// MARK: - shs-serve

struct ShsServe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shs-serve",
        abstract: "Accept Secret Handshake connections and echo every box-stream box back.",
        discussion: """
        Prints {"address":"host:port","id":"tdm1…"} as the first stdout line once listening. Each
        connection: handshake as server with the Tandem network key, then every box received is
        sent back as one box with the same bytes (an empty box too); a goodbye is answered with a
        goodbye. Failed handshakes are logged to stderr (one line each) and counted. Runs until
        SIGINT/SIGTERM, then prints the counters as one JSON line.
        """)

    @OptionGroup var common: CommonOptions

    @Option(help: ArgumentHelp("Address to listen on: host:port (port 0 picks a free port).", valueName: "host:port"))
    var listen: String = "127.0.0.1:0"

    @Option(help: ArgumentHelp("Read the identity passphrase from this file.", valueName: "file"))
    var passphraseFile: String?

    func run() async throws {
        let dir = common.dataDirectory
        let identity = try IdentityFile.load(from: dir, passphrase: try Passphrase.forLoading(dir, file: passphraseFile))
        let (host, port) = try NodeConfiguration.parseHostPort(listen, defaultHost: "127.0.0.1")
        LoggingSystem.bootstrap { StructuredLogHandler(label: $0, format: .text, level: .info) }
        let logger = Logger(label: "tandem.dev.shs-serve")
        let id = NodeID(publicKey: identity.publicKey)
        let metrics = TransportMetrics()
        let stats = EchoStats()
        let server = EchoServer(identity: identity, host: host, port: port, metrics: metrics, stats: stats,
                                group: MultiThreadedEventLoopGroup.singleton, logger: logger) { address in
            printJSON(["address": address.hostPort, "id": id.canonical])
        }
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: server)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        try await group.run()
        let m = metrics.snapshot
        let s = stats.snapshot
        printJSON(["event": "stopped",
                   "handshakes_started": m.handshakesStarted, "handshakes_succeeded": m.handshakesSucceeded,
                   "handshakes_failed": m.handshakesFailed, "streams_failed": m.streamsFailed,
                   "boxes_echoed": s.boxes, "bytes_echoed": s.bytes, "goodbyes": s.goodbyes])
    }
}

/// What the echo server has done, shared by its connections.
final class EchoStats: Sendable {
    struct Snapshot {
        var boxes = 0
        var bytes = 0
        var goodbyes = 0
    }

    private let box = NIOLockedValueBox(Snapshot())

    var snapshot: Snapshot { box.withLockedValue { $0 } }

    func echoed(bytes: Int) { box.withLockedValue { $0.boxes += 1; $0.bytes += bytes } }
    func goodbye() { box.withLockedValue { $0.goodbyes += 1 } }
}

/// Listens; every connection gets a server-side `SecureChannelHandler` with a `BoxEchoHandler`
/// above it. A `Service`: stops accepting on graceful shutdown.
final class EchoServer: Service, Sendable {
    private let identity: SigningKeyPair
    private let host: String
    private let port: Int
    private let metrics: TransportMetrics
    private let stats: EchoStats
    private let group: EventLoopGroup
    private let logger: Logger
    private let onBound: @Sendable (SocketAddress) -> Void

    init(identity: SigningKeyPair, host: String, port: Int, metrics: TransportMetrics, stats: EchoStats,
         group: EventLoopGroup, logger: Logger, onBound: @escaping @Sendable (SocketAddress) -> Void) {
        self.identity = identity
        self.host = host
        self.port = port
        self.metrics = metrics
        self.stats = stats
        self.group = group
        self.logger = logger
        self.onBound = onBound
    }

    func run() async throws {
        let identity = identity, metrics = metrics, stats = stats, logger = logger
        let server: QuiescingServer
        do {
            server = try await QuiescingServer.bind(.init(host: host, port: port, backlog: 64), group: group) { ch in
                let sync = ch.pipeline.syncOperations
                let secure = SecureChannelHandler(server: identity, networkKey: TandemConstants.networkKey,
                                                  metrics: metrics, logger: logger)
                secure.deliversEachBox = true // echo box for box, empty boxes too
                try sync.addHandler(secure)
                try sync.addHandler(BoxEchoHandler(stats: stats, logger: logger))
            }
        } catch {
            throw TandemError("cannot listen on \(host):\(port): \(error)")
        }
        onBound(server.localAddress)
        try await server.run()
    }
}

/// Above a `SecureChannelHandler`: each box body read is written back as one box. No protocol
/// logic here; empty bodies are echoed like any other.
final class BoxEchoHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let stats: EchoStats
    private let logger: Logger

    init(stats: EchoStats, logger: Logger) {
        self.stats = stats
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let body = unwrapInboundIn(data)
        stats.echoed(bytes: body.readableBytes)
        context.write(wrapOutboundOut(body), promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let established = event as? SecureChannelEstablished {
            logger.info("secure channel established",
                        metadata: ["peer": "\(NodeID(publicKey: established.remotePublicKey))"])
        } else if event is SecureChannelGoodbye {
            stats.goodbye()
        } else if event is ChannelShouldQuiesceEvent {
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // SecureChannelHandler has logged and counted it already.
        context.close(promise: nil)
    }
}

// MARK: - shs-connect

struct ShsConnect: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shs-connect",
        abstract: "Handshake with an echo server, send messages of the given sizes, check the echoes.",
        discussion: """
        For each size, sends that many bytes (byte i = (i*31 + size) & 0xff) as box-stream boxes of at
        most 4096 bytes (0 bytes: one empty box), reads until the same bytes came back (0: one empty
        box), checks them and prints one JSON line. Then says goodbye and waits for the server's.
        Exits 4 when unreachable, 5 when the handshake fails, 6 on timeout, 1 on a mismatch.
        """)

    @OptionGroup var common: CommonOptions

    @Argument(help: ArgumentHelp("The server's address.", valueName: "host:port"))
    var address: String

    @Argument(help: ArgumentHelp("The server's Tandem ID (tdm1…) or its public key as 64 hex digits.", valueName: "server"))
    var server: String

    @Option(help: ArgumentHelp("Comma-separated message sizes in bytes (each at most 16777216).", valueName: "n,n,…"))
    var sizes: String = "0,1,4096,4097,1048576"

    @Option(help: ArgumentHelp("Seconds to wait for the handshake and for each echo.", valueName: "seconds"))
    var timeout: Int = 20

    @Option(help: ArgumentHelp("Read the identity passphrase from this file.", valueName: "file"))
    var passphraseFile: String?

    static let maximumSize = 16 << 20

    func validate() throws {
        guard (try? Self.parseSizes(sizes)) != nil else {
            throw ValidationError("--sizes must be comma-separated numbers from 0 to \(Self.maximumSize)")
        }
        guard timeout >= 1 else { throw ValidationError("--timeout must be at least 1 second") }
    }

    static func parseSizes(_ text: String) throws -> [Int] {
        let parts = text.split(separator: ",", omittingEmptySubsequences: false)
        let sizes = parts.compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !parts.isEmpty, sizes.count == parts.count, sizes.allSatisfy({ (0...maximumSize).contains($0) }) else {
            throw ValidationError("bad sizes")
        }
        return sizes
    }

    /// A Tandem ID or 64 hex digits.
    static func parseServerKey(_ text: String) throws -> [UInt8] {
        if text.lowercased().hasPrefix(NodeID.humanReadablePart + "1") {
            do {
                return try NodeID.parse(text)
            } catch {
                throw TandemError("'\(text)' is not a Tandem ID: \(error)", exitCode: TandemError.usageExitCode)
            }
        }
        guard let key = parseHex(text), key.count == 32 else {
            throw TandemError("'\(text)' is neither a Tandem ID (tdm1…) nor a 32-byte public key in hex",
                              exitCode: TandemError.usageExitCode)
        }
        return key
    }

    /// A connection failure in a short phrase ("connection refused").
    static func describe(_ error: Error) -> String {
        if let e = error as? NIOConnectionError, let first = e.connectionErrors.first {
            return describe(first.error)
        }
        if let io = error as? IOError {
            return String(cString: strerror(io.errnoCode)).lowercased()
        }
        if let e = error as? ChannelError, case .connectTimeout = e {
            return "connection timed out"
        }
        return "\(error)"
    }

    /// The message sent for `size`: byte i = (i*31 + size) & 0xff.
    static func message(size: Int) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ size) }
    }

    func run() async throws {
        let sizes = try Self.parseSizes(self.sizes)
        let serverKey = try Self.parseServerKey(server)
        let (host, port) = try NodeConfiguration.parseHostPort(address, defaultHost: "127.0.0.1")
        guard port != 0 else { throw TandemError("the address needs a port", exitCode: TandemError.usageExitCode) }
        let dir = common.dataDirectory
        let identity = try IdentityFile.load(from: dir, passphrase: try Passphrase.forLoading(dir, file: passphraseFile))
        let logger: Logger = {
            var l = Logger(label: "tandem.dev.shs-connect")
            l.logLevel = .critical // failures are reported as one error line instead
            return l
        }()
        let seconds = timeout

        let connection: EchoClientConnection
        do {
            connection = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(Int64(seconds)))
                .channelOption(.tcpOption(.tcp_nodelay), value: 1)
                .connect(host: host, port: port) { ch in
                    ch.eventLoop.makeCompletedFuture {
                        let established = ch.eventLoop.makePromise(of: [UInt8].self)
                        let goodbye = NIOLockedValueBox(false)
                        let sync = ch.pipeline.syncOperations
                        let secure = SecureChannelHandler(client: identity, serverPublicKey: serverKey,
                                                          handshakeTimeout: .seconds(Int64(seconds)),
                                                          metrics: TransportMetrics(), logger: logger)
                        secure.deliversEachBox = true // the echo is checked box for box
                        try sync.addHandler(secure)
                        try sync.addHandler(SecureChannelWatcher(established: established, goodbye: goodbye))
                        let async = try NIOAsyncChannel<ByteBuffer, ByteBuffer>(
                            wrappingChannelSynchronously: ch,
                            configuration: .init(isOutboundHalfClosureEnabled: true))
                        return EchoClientConnection(channel: async, established: established.futureResult, peerSaidGoodbye: goodbye)
                    }
                }
        } catch {
            throw TandemError("cannot connect to \(host):\(port): \(Self.describe(error))", exitCode: TandemError.unreachableExitCode)
        }

        let channel = connection.channel.channel
        try await connection.channel.executeThenClose { inbound, outbound in
            do {
                _ = try await withDeadline(seconds, closing: channel, what: "the handshake") {
                    try await connection.established.get()
                }
            } catch let error as TandemError {
                throw error
            } catch {
                throw TandemError("handshake with \(host):\(port) failed: \(error)", exitCode: TandemError.authenticationExitCode)
            }

            var boxes = inbound.makeAsyncIterator()
            for size in sizes {
                let message = Self.message(size: size)
                let clock = ContinuousClock()
                let start = clock.now
                let received = try await withDeadline(seconds, closing: channel, what: "the echo of \(size) bytes") {
                    try await outbound.write(channel.allocator.buffer(bytes: message))
                    return try await Self.readEcho(of: message, from: &boxes)
                }
                let elapsed = clock.now - start
                let ms = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
                printJSON(["size": size, "ok": true, "boxes_received": received, "ms": (ms * 1000).rounded() / 1000])
            }

            // Goodbye (half-close), then wait for the server's goodbye or its close.
            outbound.finish()
            try await withDeadline(seconds, closing: channel, what: "the server's goodbye") {
                if let extra = try await boxes.next() {
                    throw TandemError("the server sent \(extra.readableBytes) more bytes after the last echo")
                }
            }
            printJSON(["goodbye": connection.peerSaidGoodbye.withLockedValue { $0 } ? "answered" : "closed"])
        }
    }

    /// Reads boxes until `message` has come back; returns how many boxes it took. An empty message
    /// comes back as exactly one empty box.
    static func readEcho(of message: [UInt8],
                         from boxes: inout NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator) async throws -> Int {
        let size = message.count
        var received = 0
        var count = 0
        repeat {
            guard let box = try await boxes.next() else {
                throw TandemError("echo of \(size) bytes: the server closed the connection after \(received) bytes")
            }
            count += 1
            let n = box.readableBytes
            if size == 0 {
                guard n == 0 else { throw TandemError("echo of 0 bytes: expected one empty box, got \(n) bytes") }
                return count
            }
            guard n > 0 else { throw TandemError("echo of \(size) bytes: unexpected empty box after \(received) bytes") }
            guard received + n <= size else {
                throw TandemError("echo of \(size) bytes: received \(received + n) bytes, more than sent")
            }
            let mismatch = box.withUnsafeReadableBytes { got in
                message.withUnsafeBytes { sent in
                    memcmp(got.baseAddress!, sent.baseAddress! + received, n) == 0
                        ? nil : zip(got, sent[received...]).prefix { $0 == $1 }.count
                }
            }
            if let offset = mismatch {
                throw TandemError("echo of \(size) bytes: mismatch at byte \(received + offset)")
            }
            received += n
        } while received < size
        return count
    }
}

/// What `shs-connect`'s channel initializer hands back.
struct EchoClientConnection: Sendable {
    let channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>
    /// The server's proven key once the handshake has finished; fails if the channel errs or closes first.
    let established: EventLoopFuture<[UInt8]>
    let peerSaidGoodbye: NIOLockedValueBox<Bool>
}

/// Sits above a `SecureChannelHandler` and reports its events to async code.
final class SecureChannelWatcher: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let established: EventLoopPromise<[UInt8]>
    private let goodbye: NIOLockedValueBox<Bool>

    init(established: EventLoopPromise<[UInt8]>, goodbye: NIOLockedValueBox<Bool>) {
        self.established = established
        self.goodbye = goodbye
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let e = event as? SecureChannelEstablished {
            established.succeed(e.remotePublicKey)
        } else if event is SecureChannelGoodbye {
            goodbye.withLockedValue { $0 = true }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        established.fail(error) // ignored once the handshake has finished
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        established.fail(TandemError("the server closed the connection during the handshake"))
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // A channel that never became active (connection refused) is torn down without
        // channelInactive; the promise must not be left pending.
        established.fail(TandemError("the connection was not established"))
    }
}

/// Runs `body`; if it has not finished within `seconds`, closes `channel` (which ends every wait
/// on it) and reports a timeout instead of whatever error the close caused.
func withDeadline<T>(_ seconds: Int, closing channel: Channel, what: String,
                     _ body: () async throws -> T) async throws -> T {
    let fired = NIOLockedValueBox(false)
    let timer = channel.eventLoop.scheduleTask(in: .seconds(Int64(seconds))) {
        fired.withLockedValue { $0 = true }
        channel.close(promise: nil)
    }
    defer { timer.cancel() }
    do {
        return try await body()
    } catch {
        if fired.withLockedValue({ $0 }) {
            throw TandemError("no answer for \(what) within \(seconds) s", exitCode: TandemError.timeoutExitCode)
        }
        throw error
    }
}

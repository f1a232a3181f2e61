import ArgumentParser
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Sodium
import TandemNet
import TandemNode
import TandemNodeCore
import TandemProtocol

#if canImport(Glibc)
import Glibc
#endif

enum ServeMode: String, ExpressibleByArgument, CaseIterable, Sendable {
    case handshake
    case frames
    case bulk
}

/// The hidden child: listens on 127.0.0.1:0 with a fresh identity, prints
/// `{"port": …, "public_key": "…"}`, then serves until stdin closes or the timeout passes.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Benchmark peer (started by tandem-bench itself).", shouldDisplay: false)

    @Option(help: "What to serve: handshake, frames or bulk.")
    var mode: ServeMode

    @Option(help: "Exit after this many seconds whatever happens.")
    var timeout: Int = 300

    func run() async throws {
        let metrics = TransportMetrics()
        Watchdog.start(timeoutSeconds: timeout) {
            let m = metrics.snapshot
            return ["frames_accepted": m.framesAccepted, "frames_rejected": m.framesRejected,
                    "handshakes_succeeded": m.handshakesSucceeded, "handshakes_failed": m.handshakesFailed,
                    "streams_failed": m.streamsFailed, "bulk_bytes_received": Int(BulkSink.received.withLockedValue { $0 }),
                    "cpu_seconds": processCPUSeconds()]
        }
        let identity = SigningKeyPair.generate()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let logger = quietLogger("tandem-bench.serve")
        switch mode {
        case .handshake, .frames:
            // The node's own listener and pipeline: handshake as server, frame gate, PONG replies.
            let gate = FrameGate(localPublicKey: identity.publicKey, metrics: metrics,
                                 replayCapacity: FramesBenchmark.childReplayCapacity)
            var config = NodeConfiguration()
            config.host = "127.0.0.1"
            config.port = 0
            let listener = NodeListener(identity: identity, host: config.host, port: config.port, link: config.link, gate: gate,
                                        delegate: nil, group: group, logger: logger)
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await listener.run() }
                let address = try await listener.boundAddress
                announce(port: address.port ?? 0, identity: identity)
                try await tasks.next()
            }
        case .bulk:
            let channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
                .childChannelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture {
                        let sync = ch.pipeline.syncOperations
                        try sync.addHandler(SecureChannelHandler(server: identity, metrics: metrics, logger: logger))
                        try sync.addHandler(BulkSink())
                    }
                }
                .bind(host: "127.0.0.1", port: 0).get()
            announce(port: channel.localAddress?.port ?? 0, identity: identity)
            try await channel.closeFuture.get()
        }
    }

    private func announce(port: Int, identity: SigningKeyPair) {
        printJSONLine(["port": port, "public_key": hexString(identity.publicKey), "mode": mode.rawValue])
    }
}

/// Ends the child when the parent closes its stdin, or after a timeout: a benchmark peer never
/// outlives its benchmark. Each newline on stdin asks for one stats line on stdout.
enum Watchdog {
    static func start(timeoutSeconds: Int, stats: @escaping @Sendable () -> [String: Any]) {
        Thread.detachNewThread {
            var byte: UInt8 = 0
            while true {
                let n = read(0, &byte, 1)
                if n == 0 || (n < 0 && errno != EINTR) { exit(0) }
                if n == 1, byte == UInt8(ascii: "\n") { printJSONLine(stats()) }
            }
        }
        Thread.detachNewThread {
            sleep(UInt32(max(1, timeoutSeconds)))
            FileHandle.standardError.write(Data("tandem-bench serve: timeout, exiting\n".utf8))
            exit(0)
        }
    }
}

/// The receiving end of the bulk benchmark: counts plaintext bytes coming out of box-stream and
/// acknowledges every full MiB with its cumulative count (8 bytes, big-endian).
final class BulkSink: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Bytes received on all links, for the stats line.
    static let received = NIOLockedValueBox<UInt64>(0)
    private var received: UInt64 = 0
    private var acknowledged: UInt64 = 0

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        received += UInt64(buffer.readableBytes)
        Self.received.withLockedValue { $0 += UInt64(buffer.readableBytes) }
        let boundary = received / BulkBenchmark.ackEvery * BulkBenchmark.ackEvery
        if boundary > acknowledged {
            acknowledged = boundary
            var ack = context.channel.allocator.buffer(capacity: 8)
            ack.writeInteger(boundary)
            context.writeAndFlush(wrapOutboundOut(ack), promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}

/// User + system CPU time of this process so far.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// One JSON object on one stdout line, written at once.
func printJSONLine(_ object: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
    output(String(decoding: data, as: UTF8.self))
}

import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import TandemBlocking
import TandemNodeCore

/// The node's resolver for a locked mode's sites (`tandem node --dns HOST:PORT`, Protocol/focus.md
/// 4.2): it answers every name at or under a blocked site itself (0.0.0.0 / ::, NXDOMAIN for other
/// types) and forwards every other query to the upstream resolver, relaying its answer. A child
/// task of `FocusService.run`; the blocked zones follow the enforcer's target.
///
/// Bounds: queries over 512 bytes, responses, and anything that is not one plain question are
/// dropped unanswered (never reflected); at most `maximumPending` forwarded queries wait (the
/// oldest is forgotten past that, and any after 5 s).
final class FocusResolver: Sendable {
    struct Configuration: Sendable {
        var listenHost: String
        var listenPort: Int
        var upstreamHost: String
        var upstreamPort: Int
    }

    static let maximumPending = 1_024
    static let forwardTimeoutMs: Int64 = 5_000

    let configuration: Configuration
    let zones: NIOLockedValueBox<DNSBlockList>
    private let logger: Logger
    /// The address actually bound (port 0 picks one), once bound.
    let bound = NIOLockedValueBox<SocketAddress?>(nil)

    private struct Pending {
        var client: SocketAddress
        var clientID: UInt16
        var atMs: Int64
    }

    init(configuration: Configuration, zones: NIOLockedValueBox<DNSBlockList>, logger: Logger) {
        self.configuration = configuration
        self.zones = zones
        self.logger = logger
    }

    typealias Datagrams = NIOAsyncChannel<AddressedEnvelope<ByteBuffer>, AddressedEnvelope<ByteBuffer>>

    func run() async {
        do {
            let group = MultiThreadedEventLoopGroup.singleton
            let server: Datagrams = try await DatagramBootstrap(group: group)
                .channelOption(.socketOption(.so_reuseaddr), value: 1)
                .bind(host: configuration.listenHost, port: configuration.listenPort) { channel in
                    channel.eventLoop.makeCompletedFuture { try Datagrams(wrappingChannelSynchronously: channel) }
                }
            let upstreamAddress = try SocketAddress.makeAddressResolvingHost(configuration.upstreamHost, port: configuration.upstreamPort)
            let upstream: Datagrams = try await DatagramBootstrap(group: group)
                .bind(host: upstreamAddress.protocol == .inet6 ? "::" : "0.0.0.0", port: 0) { channel in
                    channel.eventLoop.makeCompletedFuture { try Datagrams(wrappingChannelSynchronously: channel) }
                }
            bound.withLockedValue { $0 = server.channel.localAddress }
            logger.info("focus resolver listening", metadata: ["address": "\(server.channel.localAddress.map { "\($0)" } ?? "?")",
                                                               "upstream": "\(upstreamAddress)"])
            let pending = NIOLockedValueBox<[UInt16: Pending]>([:])
            try await server.executeThenClose { serverIn, serverOut in
                try await upstream.executeThenClose { upstreamIn, upstreamOut in
                    try await withThrowingDiscardingTaskGroup { tasks in
                        tasks.addTask {
                            for try await reply in upstreamIn {
                                guard reply.remoteAddress == upstreamAddress, reply.data.readableBytes >= 12,
                                      var data = Optional(reply.data), let id = data.getInteger(at: data.readerIndex, as: UInt16.self),
                                      let p = pending.withLockedValue({ $0.removeValue(forKey: id) }) else { continue }  // not ours: dropped
                                data.setInteger(p.clientID, at: data.readerIndex)
                                try await serverOut.write(AddressedEnvelope(remoteAddress: p.client, data: data))
                            }
                        }
                        for try await query in serverIn {
                            let bytes = Array(query.data.readableBytesView)
                            guard let q = try? DNSQuery(packet: bytes) else { continue }  // not a plain query: no answer at all
                            if zones.withLockedValue({ $0.blocks(q.labels) }) {
                                try await serverOut.write(AddressedEnvelope(remoteAddress: query.remoteAddress,
                                                                            data: ByteBuffer(bytes: q.blockedAnswer())))
                                continue
                            }
                            let now = Int64(Date().timeIntervalSince1970 * 1000)
                            let id = pending.withLockedValue { table -> UInt16 in
                                table = table.filter { now - $0.value.atMs < Self.forwardTimeoutMs }
                                if table.count >= Self.maximumPending, let oldest = table.min(by: { $0.value.atMs < $1.value.atMs }) {
                                    table.removeValue(forKey: oldest.key)
                                }
                                var id = UInt16.random(in: .min ... .max)
                                while table[id] != nil { id = UInt16.random(in: .min ... .max) }
                                table[id] = Pending(client: query.remoteAddress, clientID: q.id, atMs: now)
                                return id
                            }
                            var forward = query.data
                            forward.setInteger(id, at: forward.readerIndex)
                            try await upstreamOut.write(AddressedEnvelope(remoteAddress: upstreamAddress, data: forward))
                        }
                        tasks.cancelAll()
                    }
                }
            }
        } catch is CancellationError {
            return
        } catch {
            if Task.isCancelled { return }
            logger.error("focus resolver stopped", metadata: ["error": "\(error)"])
        }
    }

}

/// Reading the system's resolver settings for `tandem node --dns`.
public enum FocusResolverConfig {
    /// The first `nameserver` of a resolv.conf that is not `exclude` (the resolver itself), or nil.
    public static func upstream(fromResolvConf text: String, excluding exclude: String) -> String? {
        for line in text.split(whereSeparator: \.isNewline) {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if words.count >= 2, words[0] == "nameserver", words[1] != exclude { return String(words[1]) }
        }
        return nil
    }
}

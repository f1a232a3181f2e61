import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Sodium
import TandemNet
import TandemProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A node seen on the LAN, from a beacon that passed every check. The address is the datagram's
/// source: a hint to connect to, not a proof (the Secret Handshake proves who answers).
public struct PeerSighting: Sendable, Equatable {
    public var publicKey: [UInt8]
    public var host: String
    public var port: Int
    /// From open beacons only.
    public var displayName: String?
    /// A private beacon: the sender is a friend who made it for this node.
    public var isFriendBeacon: Bool
    public var seenAtMs: UInt64

    public init(publicKey: [UInt8], host: String, port: Int, displayName: String?, isFriendBeacon: Bool, seenAtMs: UInt64) {
        self.publicKey = publicKey
        self.host = host
        self.port = port
        self.displayName = displayName
        self.isFriendBeacon = isFriendBeacon
        self.seenAtMs = seenAtMs
    }
}

/// What the node wants announced; read before every round of beacons.
public struct DiscoveryState: Sendable {
    /// Send open beacons (ID and name, visible to anyone on the LAN).
    public var discoverable: Bool
    public var displayName: String
    /// The node's TCP listener port, announced in the beacons.
    public var tcpPort: Int
    /// Friends' Ed25519 public keys: private beacons are made for them and recognised from them.
    public var friends: [[UInt8]]

    public init(discoverable: Bool, displayName: String, tcpPort: Int, friends: [[UInt8]]) {
        self.discoverable = discoverable
        self.displayName = displayName
        self.tcpPort = tcpPort
        self.friends = friends
    }
}

public struct DiscoveryConfiguration: Sendable {
    public var port = TandemConstants.discoveryPort
    /// Beacons go out at start, when an interface address changes, on `announceNow()`, and this often.
    public var interval: TimeAmount = .seconds(5)
    public var bindHost = "0.0.0.0"
    /// Where beacons go instead of every IPv4 interface's broadcast address (tests).
    public var targets: [SocketAddress]? = nil
    /// How often the interface list is read to notice address changes.
    public var devicePollInterval: TimeAmount = .seconds(3)
    /// At most this many datagrams in a burst, refilled at `sendPerSecond`.
    public var sendBurst: Double = 16
    public var sendPerSecond: Double = 4
    /// Receive limits and replay memory.
    public var receiver = BeaconReceiverConfiguration()
    /// Wall-clock milliseconds since the Unix epoch.
    public var wallClock: @Sendable () -> UInt64 = { UInt64(max(0, Date().timeIntervalSince1970 * 1000)) }

    public init() {}
}

/// Counters of the discovery service.
public final class DiscoveryMetrics: Sendable {
    public struct Snapshot: Sendable, Codable, Equatable {
        /// Datagrams handed to the socket.
        public var sent = 0
        public var sendFailed = 0
        /// Datagrams not sent because of the send limit.
        public var sendRateLimited = 0
        /// Datagrams received on the discovery port.
        public var received = 0
        public var acceptedOpen = 0
        public var acceptedPrivate = 0
        /// Dropped datagrams by `BeaconDropReason` raw value.
        public var dropped: [String: Int] = [:]

        public var droppedTotal: Int { dropped.values.reduce(0, +) }
    }

    private let box = NIOLockedValueBox(Snapshot())

    public init() {}

    public var snapshot: Snapshot { box.withLockedValue { $0 } }

    func update(_ body: (inout Snapshot) -> Void) { box.withLockedValue(body) }
}

/// LAN discovery by UDP broadcast (Protocol/README.md, "LAN discovery"): sends open and private
/// beacons and reports the beacons of others. The beacon rules themselves live in
/// `TandemProtocol` (`OpenBeacon`, `PrivateBeacon`, `BeaconReceiver`); this is the socket.
public final class DiscoveryService: Service, Sendable {
    private enum Trigger: Sendable {
        case start
        case interval
        case poll
        case requested
        /// The socket closed (a send error can close a datagram socket, e.g. when the network goes away).
        case socketClosed
    }

    /// Mutable state shared by the event loop (receive) and the announcing task.
    private struct Core {
        var receiver: BeaconReceiver
        var friends: [[UInt8]]
        var sendBucket: TokenBucket
        var targets: [SocketAddress] = []
    }

    private let identity: SigningKeyPair
    private let configuration: DiscoveryConfiguration
    private let group: EventLoopGroup
    private let logger: Logger
    private let state: @Sendable () -> DiscoveryState
    private let onSighting: @Sendable (PeerSighting) -> Void
    private let onReady: (@Sendable (SocketAddress) -> Void)?
    private let metricsBox = DiscoveryMetrics()
    private let core: NIOLockedValueBox<Core>
    private let triggers: AsyncStream<Trigger>
    private let triggerContinuation: AsyncStream<Trigger>.Continuation

    /// `onReady` is told the bound address once the socket listens (before the first beacon).
    public init(identity: SigningKeyPair, configuration: DiscoveryConfiguration, group: EventLoopGroup, logger: Logger,
                state: @escaping @Sendable () -> DiscoveryState, onSighting: @escaping @Sendable (PeerSighting) -> Void,
                onReady: (@Sendable (SocketAddress) -> Void)? = nil) {
        self.identity = identity
        self.configuration = configuration
        self.group = group
        self.logger = logger
        self.state = state
        self.onSighting = onSighting
        self.onReady = onReady
        let now = configuration.wallClock()
        core = NIOLockedValueBox(Core(
            receiver: BeaconReceiver(keyring: BeaconKeyring(identity: identity, friends: []),
                                     configuration: configuration.receiver, now: now),
            friends: [],
            sendBucket: TokenBucket(capacity: configuration.sendBurst, refillPerSecond: configuration.sendPerSecond, now: now)))
        (triggers, triggerContinuation) = AsyncStream.makeStream(of: Trigger.self, bufferingPolicy: .bufferingNewest(16))
    }

    public var metrics: DiscoveryMetrics.Snapshot { metricsBox.snapshot }

    /// The state changed: send beacons now (still within the send limit).
    public func announceNow() {
        triggerContinuation.yield(.requested)
    }

    public func run() async throws {
        refreshKeyring(state()) // friends are recognised from the first datagram on
        let stopping = NIOLockedValueBox(false)
        let current = NIOLockedValueBox<Channel?>(nil)
        let stop: @Sendable () -> Void = {
            stopping.withLockedValue { $0 = true }
            current.withLockedValue { $0 }?.close(promise: nil)
        }
        var firstBind = true
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                while !stopping.withLockedValue({ $0 }) {
                    let channel: Channel
                    do {
                        channel = try await bind()
                    } catch {
                        if firstBind { logger.error("\(error)") }
                        firstBind = false
                        try? await Task.sleep(for: .seconds(2))  // cancelled: the loop ends
                        continue
                    }
                    firstBind = false
                    current.withLockedValue { $0 = channel }
                    if stopping.withLockedValue({ $0 }) { channel.close(promise: nil) }
                    await serve(channel)
                    current.withLockedValue { $0 = nil }
                    if !stopping.withLockedValue({ $0 }) {
                        logger.notice("discovery socket closed; reopening it")
                        try? await Task.sleep(for: .seconds(1))  // cancelled: the loop ends
                    }
                }
            } onGracefulShutdown: { stop() }
        } onCancel: { stop() }
        logger.info("discovery stopped")
    }

    private func bind() async throws -> Channel {
        let channel: Channel
        do {
            channel = try await DatagramBootstrap(group: group)
                .channelOption(.socketOption(.so_reuseaddr), value: 1)
                .channelOption(.socket(SocketOptionLevel(SOL_SOCKET), SocketOptionName(SO_REUSEPORT)), value: 1)
                .channelOption(.socketOption(.so_broadcast), value: 1)
                // One byte more than a beacon may have: a longer datagram arrives cut to 513 bytes
                // and is dropped as oversized.
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: BeaconFormat.maximumLength + 1))
                .channelInitializer { [self] ch in
                    ch.eventLoop.makeCompletedFuture {
                        try ch.pipeline.syncOperations.addHandler(DiscoveryInboundHandler { [self] data, source in
                            self.receive(data, from: source)
                        })
                    }
                }
                .bind(host: configuration.bindHost, port: configuration.port).get()
        } catch {
            throw NodeError.failed("cannot bind the discovery port \(configuration.bindHost):\(configuration.port): \(error)")
        }
        if let address = channel.localAddress {
            logger.info("discovery listening", metadata: ["address": "\(address)"])
            onReady?(address)
        }
        return channel
    }

    /// Beacons on `channel` until it closes.
    private func serve(_ channel: Channel) async {
        let continuation = triggerContinuation
        core.withLockedValue { $0.targets = [] } // announce to the current interfaces at once
        continuation.yield(.start)
        await withTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await Self.tick(every: self.configuration.interval, .interval, continuation) }
            if self.configuration.targets == nil {
                tasks.addTask { await Self.tick(every: self.configuration.devicePollInterval, .poll, continuation) }
            }
            tasks.addTask {
                try? await channel.closeFuture.get()  // closed either way
                continuation.yield(.socketClosed)
            }
            for await trigger in self.triggers {
                if case .socketClosed = trigger { break }
                self.handle(trigger, channel: channel)
            }
            channel.close(promise: nil)
            tasks.cancelAll()
        }
    }

    private static func tick(every amount: TimeAmount, _ trigger: Trigger, _ continuation: AsyncStream<Trigger>.Continuation) async {
        let duration = Duration.nanoseconds(max(amount.nanoseconds, 1_000_000))
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: duration)
            } catch {
                return
            }
            if case .terminated = continuation.yield(trigger) { return }
        }
    }

    // MARK: sending

    private func handle(_ trigger: Trigger, channel: Channel) {
        let state = state()
        refreshKeyring(state)
        let targets = configuration.targets ?? Self.broadcastTargets(port: configuration.port)
        let changed = core.withLockedValue { core -> Bool in
            defer { core.targets = targets }
            return core.targets != targets
        }
        switch trigger {
        case .start, .interval, .requested:
            announce(state, to: targets, channel: channel)
        case .socketClosed:
            break
        case .poll:
            if changed {
                logger.info("interface addresses changed", metadata: ["targets": "\(targets.map(Self.describe))"])
                announce(state, to: targets, channel: channel)
            }
        }
    }

    /// Brings the pairwise keys up to date with the friends in `state`. Keys are derived only when
    /// the friends change (one X25519 per friend), for receiving as well as sending.
    private func refreshKeyring(_ state: DiscoveryState) {
        guard core.withLockedValue({ $0.friends != state.friends }) else { return }
        let keyring = BeaconKeyring(identity: identity, friends: state.friends)
        if !keyring.rejected.isEmpty {
            logger.warning("ignoring \(keyring.rejected.count) friend key(s) unusable for beacons")
        }
        core.withLockedValue {
            $0.receiver.setKeyring(keyring)
            $0.friends = state.friends
        }
    }

    private func announce(_ state: DiscoveryState, to targets: [SocketAddress], channel: Channel) {
        guard !targets.isEmpty else { return }
        guard let tcpPort = UInt16(exactly: state.tcpPort), tcpPort != 0 else {
            logger.warning("not announcing: TCP port \(state.tcpPort) is not 1…65535")
            return
        }
        let now = configuration.wallClock()
        var datagrams: [[UInt8]] = []
        if state.discoverable {
            do {
                datagrams.append(try OpenBeacon.make(identity: identity, tcpPort: tcpPort, createdAt: now,
                                                     displayName: OpenBeacon.fittingName(state.displayName)).bytes)
            } catch {
                logger.warning("cannot make an open beacon: \(error)")
            }
        }
        let epoch = BeaconFormat.epoch(atMilliseconds: now)
        let allowed = core.withLockedValue { core -> Int in
            for beacon in PrivateBeacon.makeAll(keyring: core.receiver.keyring, tcpPort: tcpPort, epoch: epoch) {
                core.receiver.noteSent(beacon)
                datagrams.append(beacon.bytes)
            }
            var allowed = 0
            for _ in 0..<(datagrams.count * targets.count) {
                guard core.sendBucket.tryTake(now: now) else { break }
                allowed += 1
            }
            return allowed
        }
        let wanted = datagrams.count * targets.count
        if allowed < wanted {
            metricsBox.update { $0.sendRateLimited += wanted - allowed }
        }
        var budget = allowed
        for target in targets {
            for bytes in datagrams where budget > 0 {
                budget -= 1
                let envelope = AddressedEnvelope(remoteAddress: target, data: channel.allocator.buffer(bytes: bytes))
                let promise = channel.eventLoop.makePromise(of: Void.self)
                promise.futureResult.whenComplete { [metricsBox, logger] result in
                    switch result {
                    case .success:
                        metricsBox.update { $0.sent += 1 }
                    case .failure(let error):
                        metricsBox.update { $0.sendFailed += 1 }
                        logger.debug("beacon not sent", metadata: ["target": "\(Self.describe(target))", "error": "\(error)"])
                    }
                }
                channel.writeAndFlush(envelope, promise: promise)
            }
        }
    }

    /// The broadcast address of every IPv4 interface except loopback, on `port`.
    public static func broadcastTargets(port: Int) -> [SocketAddress] {
        guard let devices = try? System.enumerateDevices() else { return [] }  // no interfaces listed: no broadcast this round
        var seen = Set<String>()
        var out: [SocketAddress] = []
        for device in devices {
            guard let broadcast = device.broadcastAddress, case .v4 = broadcast,
                  let ip = broadcast.ipAddress, ip != "0.0.0.0",
                  let address = device.address, case .v4 = address,
                  !(address.ipAddress ?? "").hasPrefix("127."), device.name != "lo" else { continue }
            guard seen.insert(ip).inserted, let target = try? SocketAddress(ipAddress: ip, port: port) else { continue }  // not an address: skipped
            out.append(target)
        }
        return out.sorted { describe($0) < describe($1) }
    }

    static func describe(_ address: SocketAddress) -> String {
        "\(address.ipAddress ?? "?"):\(address.port ?? 0)"
    }

    // MARK: receiving

    /// On the event loop, for each datagram.
    private func receive(_ data: ByteBuffer, from source: SocketAddress) {
        let now = configuration.wallClock()
        let host = source.ipAddress ?? "?"
        // At most 513 bytes (the receive allocator's size), so the copy is bounded.
        let bytes = Array(data.readableBytesView)
        let verdict = core.withLockedValue { $0.receiver.receive(bytes, from: host, now: now) }
        switch verdict {
        case .accepted(let s):
            metricsBox.update {
                $0.received += 1
                if s.isFriendBeacon { $0.acceptedPrivate += 1 } else { $0.acceptedOpen += 1 }
            }
            onSighting(PeerSighting(publicKey: s.publicKey, host: host, port: Int(s.tcpPort), displayName: s.displayName,
                                    isFriendBeacon: s.isFriendBeacon, seenAtMs: now))
        case .dropped(let reason):
            metricsBox.update {
                $0.received += 1
                $0.dropped[reason.rawValue, default: 0] += 1
            }
            switch reason {
            case .own, .unrecognised:
                break
            case .oversized, .malformed, .rateLimited, .tooManySources, .stale, .future, .badSignature, .replayed,
                 .replayMemoryFull:
                logger.debug("beacon dropped", metadata: ["reason": "\(reason.rawValue)", "source": "\(host)"])
            }
        }
    }
}

/// Hands each received datagram to the service. Errors (an ICMP error for an earlier send, say)
/// are logged by the service's counters, never fatal: the socket stays open.
private final class DiscoveryInboundHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>

    private let onDatagram: (ByteBuffer, SocketAddress) -> Void

    init(onDatagram: @escaping (ByteBuffer, SocketAddress) -> Void) {
        self.onDatagram = onDatagram
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        onDatagram(envelope.data, envelope.remoteAddress)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // Datagram sockets report errors of earlier sends here; nothing to close.
    }
}

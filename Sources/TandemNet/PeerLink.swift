import NIOConcurrencyHelpers
import NIOCore
import Sodium
import Synchronization
import TandemProtocol

/// What the application above a peer link sees.
public protocol PeerLinkDelegate: AnyObject, Sendable {
    /// The link is authenticated; `send` may be used from now on.
    func linkEstablished(_ link: PeerLink)
    /// A frame that passed every rule and is not handled by the link itself (ping is).
    func link(_ link: PeerLink, received envelope: Envelope)
    /// The peer answered with an ERROR frame.
    func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope)
    func linkClosed(_ link: PeerLink, error: Error?)
}

extension PeerLinkDelegate {
    public func linkEstablished(_ link: PeerLink) {}
    public func link(_ link: PeerLink, received envelope: Envelope) {}
    public func link(_ link: PeerLink, receivedError error: Tandem_V1_Error, envelope: Envelope) {}
    public func linkClosed(_ link: PeerLink, error: Error?) {}
}

/// An authenticated, encrypted connection to one peer, carrying signed frames.
public final class PeerLink: Sendable {
    public let channel: Channel
    public let identity: SigningKeyPair
    /// The relay whose tunnel carries this link (nil: a direct TCP connection).
    public let relay: [UInt8]?
    /// Unique among this process's links (the outbox writes each frame once per link).
    public let serial: UInt64
    private let remote = NIOLockedValueBox<[UInt8]?>(nil)
    private let remoteHost = NIOLockedValueBox<String?>(nil)
    /// Set by whoever consumes the link's frames when its queue is full (backpressure): the link
    /// then hands on no further frame and reads nothing until `resumeReading()`.
    private let consumerPaused = Atomic<Bool>(false)
    private let trusted = Atomic<Bool>(false)
    private let acksTaken = Atomic<Bool>(false)
    private let linkAuthenticatedTaken = Atomic<Bool>(false)
    private static let serials = NIOLockedValueBox<UInt64>(0)

    /// Bytes read from the link per turn of its event loop: `.plain` for anyone, `.trusted` once it
    /// is a friend's (`LinkLimits.maximumReadBytes`, `trustedMaximumReadBytes`).
    let readBytes: (plain: Int, trusted: Int)

    init(channel: Channel, identity: SigningKeyPair, relay: [UInt8]? = nil,
         readBytes: (plain: Int, trusted: Int) = (LinkLimits().maximumReadBytes, LinkLimits().trustedMaximumReadBytes)) {
        self.channel = channel
        self.identity = identity
        self.relay = relay
        self.readBytes = readBytes
        self.serial = Self.serials.withLockedValue { $0 += 1; return $0 }
    }

    /// The peer's address as seen on the socket, or nil for a tunnel (the socket's far end is the relay).
    /// Kept from the handshake on, so frames still being handled after the link closed are charged
    /// to the same address (a closed channel no longer knows it).
    public var directRemoteHost: String? {
        guard relay == nil else { return nil }
        return remoteHost.withLockedValue { $0 } ?? channel.remoteAddress?.ipAddress
    }

    /// The peer's proven key (nil before the handshake finishes).
    public var remotePublicKey: [UInt8]? { remote.withLockedValue { $0 } }
    func setRemote(_ key: [UInt8]) {
        let host = channel.remoteAddress?.ipAddress
        remote.withLockedValue { $0 = key }
        remoteHost.withLockedValue { $0 = host }
    }

    /// Signs and sends a message to the link peer.
    @discardableResult
    public func send(type: MessageType, payload: [UInt8], messageID: MessageID = .random(),
                     createdAt: UInt64 = wallClockMilliseconds()) -> EventLoopFuture<Void> {
        guard let recipient = remotePublicKey else {
            return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        let env = Envelope.sign(type: type, messageID: messageID, author: identity, recipient: recipient,
                                createdAt: createdAt, payload: payload)
        return channel.writeAndFlush(env)
    }

    /// Sends an envelope as it is (already signed, perhaps by someone else).
    @discardableResult
    public func send(_ envelope: Envelope, flush: Bool = true) -> EventLoopFuture<Void> {
        flush ? channel.writeAndFlush(envelope) : channel.write(envelope)
    }

    public func close() {
        channel.close(promise: nil)
    }

    /// Stops handing frames on, and reading, after the frame being handled now (callable from any
    /// thread). The frames of reads already done wait in the link, the socket's in the kernel, and
    /// TCP's flow control reaches the sender.
    public func pauseReading() {
        consumerPaused.store(true, ordering: .releasing)
    }

    /// Undoes `pauseReading()`: the frames that waited are handed on, then reading goes on.
    public func resumeReading() {
        guard consumerPaused.exchange(false, ordering: .acquiringAndReleasing) else { return }
        channel.pipeline.fireUserInboundEventTriggered(ConsumerResumed())
    }

    /// Read for every frame on the link's event loop: an atomic load, no lock.
    public var isReadingPaused: Bool { consumerPaused.load(ordering: .acquiring) }

    /// Set by the node while the link's peer is its friend: the link then has a frame budget of
    /// its own instead of its address's, which is sized for strangers, and a friend's REPLAYED
    /// copies do not count towards closing it (`LinkLimits.trustedFramesPerSecond`, 5.12).
    /// A friend's link is also read in larger pieces per turn (a 256 KiB file chunk in 4 turns, not 64):
    /// its frames per turn stay bounded (`LinkLimits.framesPerTurn`), so the links sharing the loop
    /// still get their turns.
    public func setTrusted(_ on: Bool) {
        guard trusted.exchange(on, ordering: .acquiringAndReleasing) != on else { return }
        channel.setOption(ChannelOptions.recvAllocator, value: Self.reads(upTo: on ? readBytes.trusted : readBytes.plain))
            .whenFailure { _ in }  // a closed channel reads nothing more anyway
    }

    /// Whether the peer announced, in a PRESENCE on this link, that it takes ACKS (README 12.5):
    /// the frames it sends here may then be acknowledged several to one signed frame. False until
    /// then (an older node, or no PRESENCE yet): single ACKs.
    public var takesAcks: Bool { acksTaken.load(ordering: .acquiring) }
    /// The peer announced that it takes MESSAGEs with the zero signature on this link (README 5.4).
    public var takesLinkAuthenticated: Bool { linkAuthenticatedTaken.load(ordering: .acquiring) }
    public func setTakesLinkAuthenticated(_ on: Bool) { linkAuthenticatedTaken.store(on, ordering: .releasing) }
    public func setTakesAcks(_ on: Bool) { acksTaken.store(on, ordering: .releasing) }

    /// What a link reads per turn of its loop, at most `maximum` bytes.
    static func reads(upTo maximum: Int) -> AdaptiveRecvByteBufferAllocator {
        AdaptiveRecvByteBufferAllocator(minimum: 64, initial: min(2048, maximum), maximum: maximum)
    }
    public var isTrusted: Bool { trusted.load(ordering: .acquiring) }
}

/// Sent down a link's pipeline when its consumer has room again.
struct ConsumerResumed: Sendable {}

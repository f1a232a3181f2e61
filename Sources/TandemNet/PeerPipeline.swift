import Logging
import NIOCore
import Sodium
import TandemProtocol

/// Builds a link's pipeline: secure channel, frame decoder/encoder, link handler.
public enum PeerPipeline {
    public struct Options: Sendable {
        public var maximumEnvelopeLength = TandemConstants.maximumEnvelopeLength
        public var handshakeTimeout: TimeAmount = .seconds(TandemConstants.handshakeTimeoutSeconds)
        public var networkKey = TandemConstants.networkKey
        public init() {}
    }

    /// Adds the handlers; `serverPublicKey` nil makes the server side.
    @discardableResult
    public static func configure(channel: Channel, identity: SigningKeyPair, serverPublicKey: [UInt8]?,
                                 gate: FrameGate, delegate: PeerLinkDelegate?, options: Options,
                                 logger: Logger, relay: [UInt8]? = nil) throws -> PeerLink {
        let secure: SecureChannelHandler
        if let serverPublicKey {
            secure = SecureChannelHandler(client: identity, serverPublicKey: serverPublicKey, networkKey: options.networkKey,
                                          handshakeTimeout: options.handshakeTimeout, metrics: gate.metrics, logger: logger)
        } else {
            secure = SecureChannelHandler(server: identity, networkKey: options.networkKey,
                                          handshakeTimeout: options.handshakeTimeout, metrics: gate.metrics, logger: logger)
        }
        let limits = gate.limits
        let link = PeerLink(channel: channel, identity: identity, relay: relay,
                            readBytes: (limits.maximumReadBytes, max(limits.maximumReadBytes, limits.trustedMaximumReadBytes)))
        // Past the high-water mark the channel turns unwritable: WritabilityGuard stops reading it.
        try? channel.syncOptions?.setOption(.writeBufferWaterMark,
                                            value: .init(low: limits.outboundLowWater, high: limits.outboundHighWater))
        // One read of at most `maximumReadBytes` per turn of the event loop (more once the link is a
        // friend's: `PeerLink.setTrusted`): a flooding link yields the loop to the links sharing it
        // after a few hundred frames at most.
        try? channel.syncOptions?.setOption(.maxMessagesPerRead, value: 1)
        try? channel.syncOptions?.setOption(.recvAllocator, value: PeerLink.reads(upTo: limits.maximumReadBytes))
        let sync = channel.pipeline.syncOperations
        let readGate = LinkReadGate(timeoutMs: limits.unwritableTimeoutMs, metrics: gate.metrics, logger: logger)
        try sync.addHandler(readGate)
        try sync.addHandler(secure)
        try sync.addHandler(ByteToMessageHandler(FrameByteDecoder(maximumEnvelopeLength: options.maximumEnvelopeLength,
                                                                  budget: gate.frameBudget)))
        try sync.addHandler(MessageToByteHandler(FrameByteEncoder()))
        try sync.addHandler(PeerLinkHandler(link: link, gate: gate, delegate: delegate, logger: logger,
                                            readGate: (readGate, try sync.context(handler: readGate))))
        return link
    }
}

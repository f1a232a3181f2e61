import NIOConcurrencyHelpers
import NIOCore
import TandemProtocol

/// A link closed by one of the node's limits (5.12); no ERROR reply is sent for it.
public struct LinkLimitExceeded: Error, CustomStringConvertible {
    /// The metric label: "rejections", "unwritable", "frame_budget".
    public let reason: String
    public let description: String
}

/// The node-wide budget of partly received frame bytes, shared by every link's decoder.
public final class FrameBudget: Sendable {
    private let budget: NIOLockedValueBox<ByteBudget>

    public init(capacity: Int) {
        budget = NIOLockedValueBox(ByteBudget(capacity: capacity))
    }

    public var used: Int { budget.withLockedValue { $0.used } }
    func reserve(_ bytes: Int) -> Bool { budget.withLockedValue { $0.reserve(bytes) } }
    func release(_ bytes: Int) { budget.withLockedValue { $0.release(bytes) } }
}

/// Splits the plaintext stream into envelope bytes; the size limit is applied to the length
/// field before any body byte is kept. A frame that does not arrive whole in one read is charged
/// to the node-wide `budget` (its announced length) until it is complete or the link closes; a
/// frame that does not fit closes the link.
public struct FrameByteDecoder: ByteToMessageDecoder {
    public typealias InboundOut = [UInt8]
    let decoder: FrameDecoder
    let budget: FrameBudget?
    private var reserved = 0

    public init(maximumEnvelopeLength: Int, budget: FrameBudget? = nil) {
        decoder = FrameDecoder(maximumEnvelopeLength: maximumEnvelopeLength)
        self.budget = budget
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let envelope = try decoder.read(&buffer) else {
            // A partial frame: its length (already checked against the limit) is charged once.
            if let budget, reserved == 0, let n = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) {
                let need = Int(n) + 4
                guard budget.reserve(need) else {
                    throw LinkLimitExceeded(reason: "frame_budget",
                                            description: "the node's budget for partly received frames is spent")
                }
                reserved = need
            }
            return .needMoreData
        }
        releaseReservation()
        context.fireChannelRead(wrapInboundOut(envelope))
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }

    public mutating func decoderRemoved(context: ChannelHandlerContext) {
        releaseReservation()
    }

    private mutating func releaseReservation() {
        if reserved > 0 {
            budget?.release(reserved)
            reserved = 0
        }
    }
}

/// Writes envelopes as frames (u32 length, envelope).
public struct FrameByteEncoder: MessageToByteEncoder {
    public typealias OutboundIn = Envelope
    public init() {}
    public func encode(data: Envelope, out: inout ByteBuffer) throws {
        data.writeFrame(to: &out)
    }
}

import NIOConcurrencyHelpers
import TandemProtocol

/// Counters a node keeps about its transport; read by logs, `tandem` status and tests.
public final class TransportMetrics: Sendable {
    public struct Snapshot: Sendable, Codable, Equatable {
        public var handshakesStarted = 0
        public var handshakesSucceeded = 0
        public var handshakesFailed = 0
        public var streamsFailed = 0
        public var framesAccepted = 0
        /// Of those, MESSAGEs that came with the zero signature on their author's link (README 5.4).
        public var linkMessagesAccepted = 0
        /// Rejected frames by error code name (e.g. "BAD_SIGNATURE").
        public var framesRejected: [String: Int] = [:]
        /// Rejections not answered because the link's ERROR budget was spent (5.12).
        public var errorRepliesSuppressed = 0
        /// Optional replies (PONG, ERROR) not written because the link was not reading (5.12).
        public var repliesDroppedUnwritable = 0
        /// Links closed by the node's limits (5.12), by reason: "rejections", "unwritable",
        /// "frame_budget".
        public var linksClosed: [String: Int] = [:]
        /// Inbound connections refused because too many handshakes were pending (5.12).
        public var handshakesRefused = 0
        /// Times a link's reading was held because its address was over its frame budget (5.12).
        public var readsPaused = 0
    }

    private let box = NIOLockedValueBox(Snapshot())

    public init() {}

    public var snapshot: Snapshot { box.withLockedValue { $0 } }

    package func handshakeStarted() { box.withLockedValue { $0.handshakesStarted += 1 } }
    package func handshakeSucceeded() { box.withLockedValue { $0.handshakesSucceeded += 1 } }
    package func handshakeFailed() { box.withLockedValue { $0.handshakesFailed += 1 } }
    package func streamFailed() { box.withLockedValue { $0.streamsFailed += 1 } }
    package func frameAccepted(linkMessage: Bool = false) {
        box.withLockedValue {
            $0.framesAccepted += 1
            if linkMessage { $0.linkMessagesAccepted += 1 }
        }
    }
    package func frameRejected(_ code: Tandem_V1_ErrorCode) {
        box.withLockedValue { $0.framesRejected[code.name, default: 0] += 1 }
    }
    package func errorReplySuppressed() { box.withLockedValue { $0.errorRepliesSuppressed += 1 } }
    package func replyDroppedUnwritable() { box.withLockedValue { $0.repliesDroppedUnwritable += 1 } }
    package func linkClosed(_ reason: String) { box.withLockedValue { $0.linksClosed[reason, default: 0] += 1 } }
    package func handshakeRefused() { box.withLockedValue { $0.handshakesRefused += 1 } }
    package func readPaused() { box.withLockedValue { $0.readsPaused += 1 } }
}

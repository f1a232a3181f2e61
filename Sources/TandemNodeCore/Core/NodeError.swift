/// Why a node operation did not happen, in the protocol layer's style: a struct over a kind that
/// only the node sees. Domain code says what went wrong; what a CLI exit code or a control-socket
/// error code it becomes is decided at the boundary (`ControlError.from`, the `tandem` command).
public struct NodeError: Error, Sendable, Equatable, CustomStringConvertible {
    package enum Kind: Sendable, Equatable {
        /// The request itself is wrong: a malformed ID, a missing or out-of-range parameter.
        case invalidArgument
        /// What it would act on is not there: no pending request, not a friend, not blocked.
        case nothingToActOn
        /// The node's state forbids it now: already friends, blocked, a session already running.
        case refused
        /// A peer or relay could not be reached, or did not answer in time.
        case unavailable
        /// Anything else (the store failed, a link closed).
        case failed
        /// The node (or a peer) did not answer within the time allowed.
        case timedOut
        /// No node runs for the data directory.
        case noNode
    }

    package let kind: Kind
    public let message: String

    public var description: String { message }

    package init(kind: Kind, message: String) { (self.kind, self.message) = (kind, message) }

    public static func invalidArgument(_ message: String) -> NodeError { NodeError(kind: .invalidArgument, message: message) }
    public static func nothingToActOn(_ message: String) -> NodeError { NodeError(kind: .nothingToActOn, message: message) }
    public static func refused(_ message: String) -> NodeError { NodeError(kind: .refused, message: message) }
    public static func unavailable(_ message: String) -> NodeError { NodeError(kind: .unavailable, message: message) }
    public static func failed(_ message: String) -> NodeError { NodeError(kind: .failed, message: message) }
    public static func timedOut(_ message: String) -> NodeError { NodeError(kind: .timedOut, message: message) }
    public static func noNode(_ message: String) -> NodeError { NodeError(kind: .noNode, message: message) }
}

extension Tandem_V1_ErrorCode {
    /// The name used in Protocol/README.md and in logs.
    public var name: String {
        switch self {
        case .unspecified: return "UNSPECIFIED"
        case .unsupportedVersion: return "UNSUPPORTED_VERSION"
        case .unknownType: return "UNKNOWN_TYPE"
        case .badSignature: return "BAD_SIGNATURE"
        case .wrongRecipient: return "WRONG_RECIPIENT"
        case .replayed: return "REPLAYED"
        case .fromTheFuture: return "FROM_THE_FUTURE"
        case .malformed: return "MALFORMED"
        case .frameTooLarge: return "FRAME_TOO_LARGE"
        case .stale: return "STALE"
        case .UNRECOGNIZED(let n): return "UNRECOGNIZED_\(n)"
        }
    }
}

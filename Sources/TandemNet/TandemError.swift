/// An error a user can act on: one line, no stack trace.
public struct TandemError: Error, CustomStringConvertible, Sendable {
    public let message: String
    /// Process exit code (documented in README.md).
    public let exitCode: Int32
    /// The node's error code, when the error came from the control socket (`vault_locked`, …).
    public let code: String?

    public init(_ message: String, exitCode: Int32 = 1, code: String? = nil) {
        self.message = message
        self.exitCode = exitCode
        self.code = code
    }

    public var description: String { message }

    public static let usageExitCode: Int32 = 2
    public static let notInitializedExitCode: Int32 = 3
    public static let unreachableExitCode: Int32 = 4
    public static let authenticationExitCode: Int32 = 5
    public static let timeoutExitCode: Int32 = 6
    /// The thing to act on is not there: no pending request, not a friend, not blocked.
    public static let nothingToActOnExitCode: Int32 = 8
}

#if canImport(Glibc)
import Glibc
#endif

/// Blocking while a mode is locked (issue 14): the managed hosts-file block (`HostsBlock`,
/// `HostsFile`), the app guard (`AppGuard`), hooks (`HookRunner`) and what the current rights
/// allow (`BlockingCapabilities`). Linux; no node, no store.
public enum TandemBlocking {}

/// What went wrong while blocking, as one clear line (`description`).
///
/// A struct over a private kind, so new kinds do not break callers; ask `needsPermission` when the
/// answer is "give the node the right to do this" rather than "something is broken".
public struct BlockingError: Error, CustomStringConvertible, Equatable, Sendable {
    private enum Kind: Equatable, Sendable {
        case notWritable
        case io
        case invalidInput
        case tooLarge
    }

    private let kind: Kind
    /// One line, no trailing newline.
    public let description: String

    private init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.description = BlockingError.oneLine(message)
    }

    /// True when the operation failed for lack of rights (write access, a capability).
    public var needsPermission: Bool { kind == .notWritable }

    static func notWritable(path: String, errno code: Int32) -> BlockingError {
        BlockingError(.notWritable,
            "site blocking needs write access to \(path) (\(errorText(code))): run the node with the "
            + "systemd drop-in in Deploy/systemd (tandem-node.service.d/blocking.conf), or give it a "
            + "hosts file it may write with --hosts-file PATH")
    }

    static func io(_ what: String, path: String, errno code: Int32) -> BlockingError {
        BlockingError(.io, "\(what) \(path): \(errorText(code))")
    }

    static func invalid(_ message: String) -> BlockingError {
        BlockingError(.invalidInput, message)
    }

    static func tooLarge(path: String, limit: Int) -> BlockingError {
        BlockingError(.tooLarge, "\(path) is larger than \(limit) bytes; refusing to rewrite it")
    }

    /// `strerror` text plus the symbolic-ish number, e.g. "Permission denied (errno 13)".
    static func errorText(_ code: Int32) -> String {
        guard let text = strerror(code) else { return "errno \(code)" }
        return "\(String(cString: text)) (errno \(code))"
    }

    /// Control characters (newlines included) become spaces, so a message stays one line.
    static func oneLine(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value)
                || scalar.value == 0x2028 || scalar.value == 0x2029 {
                out.append(" ")
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }
}

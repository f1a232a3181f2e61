import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging
import TandemProtocol

/// A swift-log backend writing one line per record to stderr: logfmt (`ts=… level=… msg="…" k=v`)
/// for people, or JSON objects for machines.
public struct StructuredLogHandler: LogHandler {
    public enum Format: String, Sendable, CaseIterable {
        case text
        case json
    }

    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    private let label: String
    private let format: Format

    public init(label: String, format: Format, level: Logger.Level) {
        self.label = label
        self.format = format
        self.logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let level = event.level, message = event.message
        var all = metadata
        if let explicit = event.metadata { all.merge(explicit) { $1 } }
        // An error passed to the logger itself (`logger.error(…, error: e)`) is shown like the
        // `error` metadata the project's own calls add, unless a call gives both.
        if let error = event.error, all["error"] == nil { all["error"] = "\(error)" }
        let ts = Self.timestamp()
        var out: String
        switch format {
        case .text:
            out = "ts=\(ts) level=\(level) logger=\(label) msg=\(Self.quote(message.description))"
            for (k, v) in all.sorted(by: { $0.key < $1.key }) { out += " \(k.terminalSafe)=\(Self.quote(v.description))" }
        case .json:
            var obj: [String: String] = ["ts": ts, "level": level.rawValue, "logger": label, "msg": message.description]
            for (k, v) in all { obj[k] = v.description }
            let data = (try? JSONSerialization.data(withJSONObject: obj, options: [.sortedKeys])) ?? Data()
            // JSONSerialization escapes U+0000–U+001F; DEL, C1 and bidi controls need this.
            out = String(decoding: data, as: UTF8.self).jsonTerminalSafe
        }
        out += "\n"
        FileHandle.standardError.write(Data(out.utf8))
    }

    /// A logfmt value: bare when it is one plain word, else quoted with `\\`, `\"` and `\n`
    /// escaped, and every other control or bidi character shown as a visible escape
    /// (`String.terminalSafe`): a peer's name or message must not drive the terminal that shows
    /// the log, nor forge a line of it.
    package static func quote(_ s: String) -> String {
        if !s.isEmpty, s.allSatisfy({ $0.isLetter || $0.isNumber || "-_./:@[]".contains($0) }), s.terminalSafe == s {
            return s
        }
        let escaped = s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
        return "\"" + escaped.terminalSafe + "\""
    }

    static func timestamp() -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: Date())
    }
}

/// Writes a line to stdout at once (unbuffered), so scripts reading a pipe see it immediately.
/// Writes what it is given: text from peers must already be escaped (`String.terminalSafe`), JSON
/// must already be `jsonTerminalSafe`.
///
/// A reader that went away (`tandem … | head -1`) ends the command as it ends any Unix tool: by
/// SIGPIPE, quietly, even when SwiftNIO has set SIGPIPE to be ignored (Foundation's
/// `FileHandle.write` would trap on the EPIPE instead).
public func output(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { write(1, $0.baseAddress! + offset, $0.count - offset) }
        if n > 0 {
            offset += n
        } else if n < 0 && errno == EINTR {
            continue
        } else {
            if errno == EPIPE {
                signal(SIGPIPE, SIG_DFL)
                raise(SIGPIPE)
            }
            exit(74)  // EX_IOERR: stdout cannot be written
        }
    }
}

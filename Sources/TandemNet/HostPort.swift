import NIOCore

/// Addresses as operators type them.
public enum HostPort {
    /// Parses "host:port", ":port", "port" or "[v6]:port".
    public static func parse(_ text: String, defaultHost: String = "0.0.0.0") throws -> (String, Int) {
        var host = defaultHost
        var portText = text
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw TandemError("malformed address '\(text)': expected [v6]:port", exitCode: TandemError.usageExitCode) }
            host = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw TandemError("malformed address '\(text)': expected [v6]:port", exitCode: TandemError.usageExitCode) }
            portText = String(rest.dropFirst())
        } else if let colon = text.lastIndex(of: ":") {
            let h = String(text[..<colon])
            if !h.isEmpty { host = h }
            portText = String(text[text.index(after: colon)...])
        }
        guard let port = Int(portText), (0...65535).contains(port) else {
            throw TandemError("malformed address '\(text)': the port must be a number from 0 to 65535", exitCode: TandemError.usageExitCode)
        }
        return (host, port)
    }

    /// The host a local client dials to reach a socket bound to `host`: a wildcard bind
    /// ("0.0.0.0" or "::") is reached on the loopback address, any other host as it is.
    public static func reachable(fromBound host: String) -> String {
        host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host
    }
}

extension SocketAddress {
    /// "host:port" (IPv6 in brackets).
    public var hostPort: String {
        let host = ipAddress ?? "?"
        let p = port ?? 0
        if case .v6 = self { return "[\(host)]:\(p)" }
        return "\(host):\(p)"
    }
}

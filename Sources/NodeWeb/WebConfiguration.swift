import Foundation
import TandemNodeCore
import TandemNet

/// Where the dashboard listens (`tandem node --web 127.0.0.1:PORT|off`).
public struct WebConfiguration: Sendable, Equatable {
    /// The default: loopback, port 7812.
    public static let defaultPort = 7812
    public static let defaultAddress = "127.0.0.1:\(defaultPort)"

    public var host: String
    /// 0 picks a free port; the bound one is in `node.status` and the `web.listening` event.
    public var port: Int
    /// Login links and sessions: how long an unused login token lives, and a session.
    public var loginTokenLifetimeMs: Int64 = 5 * 60 * 1000
    public var sessionLifetimeMs: Int64 = 12 * 60 * 60 * 1000
    /// Live-event streams served at once (each an open tab).
    public var maximumStreams = 64

    public init(host: String = "127.0.0.1", port: Int = WebConfiguration.defaultPort) {
        self.host = host
        self.port = port
    }

    /// Parses `--web`: "off" (nil), or host:port on a loopback address. A non-loopback address is
    /// refused: serving the dashboard to a network needs TLS, which the node does not offer yet.
    public static func parse(_ text: String) throws -> WebConfiguration? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased() == "off" { return nil }
        let (host, port) = try HostPort.parse(trimmed, defaultHost: "127.0.0.1")
        guard (0...65535).contains(port) else { throw NodeError.invalidArgument("--web: the port must be between 0 and 65535") }
        guard WebHostPolicy.isLoopbackAddress(host) else {
            throw NodeError.invalidArgument(
                "--web: \(host) is not a loopback address; the dashboard serves only 127.0.0.1, ::1 or localhost (another interface would need TLS, which is not offered yet)")
        }
        return WebConfiguration(host: host == "localhost" ? "127.0.0.1" : host, port: port)
    }
}

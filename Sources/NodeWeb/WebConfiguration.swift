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
    /// HTTPS instead of HTTP (required off loopback): `WebTLS.swift`.
    public var tls: TLS?

    /// Where the certificate comes from: the person's files, or one made on first use and kept.
    public struct TLS: Sendable, Equatable {
        public var certificatePath: String?
        public var keyPath: String?
        /// Where a self-signed certificate is made on first use and kept (DATA/web-tls) when no files are given.
        public var selfSignedDirectory: String

        public init(certificatePath: String? = nil, keyPath: String? = nil, selfSignedDirectory: String) {
            self.certificatePath = certificatePath
            self.keyPath = keyPath
            self.selfSignedDirectory = selfSignedDirectory
        }
    }

    public init(host: String = "127.0.0.1", port: Int = WebConfiguration.defaultPort) {
        self.host = host
        self.port = port
    }

    /// Parses `--web`: "off" (nil), or host:port. A non-loopback address is refused unless `tls`
    /// is given: the dashboard reaches a network only over HTTPS.
    public static func parse(_ text: String, tls: TLS? = nil) throws -> WebConfiguration? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased() == "off" { return nil }
        let (host, port) = try HostPort.parse(trimmed, defaultHost: "127.0.0.1")
        guard (0...65535).contains(port) else { throw NodeError.invalidArgument("--web: the port must be between 0 and 65535") }
        guard WebHostPolicy.isLoopbackAddress(host) || tls != nil else {
            throw NodeError.invalidArgument(
                "--web: \(host) is not a loopback address; the dashboard serves another interface only over TLS: add --web-tls (a self-signed certificate) or --web-tls-cert FILE --web-tls-key FILE")
        }
        var c = WebConfiguration(host: host == "localhost" ? "127.0.0.1" : host, port: port)
        c.tls = tls
        return c
    }
}

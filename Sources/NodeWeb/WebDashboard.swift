import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import TandemNodeCore
import TandemProtocol

/// The local web dashboard (issue 36, Protocol/web.md): one more service in the node's group.
///
/// Served on loopback only. Every page is built from the same control methods the CLI calls
/// (`ControlRouter.call`, in-process), so what a page may do is what the control socket allows; the
/// live view is the `events.subscribe` stream as server-sent events. A browser gets in with a
/// one-time login token (`tandem web` asks for it with the control method `web.login`), which opens
/// a session cookie (HttpOnly, SameSite=Strict); every POST carries the session's CSRF token; Host,
/// Origin and Sec-Fetch-Site are checked on every request (`WebGuard`).
///
/// A dashboard that cannot bind its port does not stop the node: it logs, emits `web.failed`, and
/// `tandem web` says why.
public final class WebDashboard: Service, Sendable {
    public let configuration: WebConfiguration
    let router: ControlRouter
    let events: EventBus
    let sessions: WebSessions
    let logger: Logger
    let pages: WebPages
    /// The vault's bytes (thumbnails, downloads, uploads) for the vault page; nil: that page shows no grid.
    let vault: (any VaultMedia)?

    enum Binding: Sendable, Equatable {
        case starting
        case listening(port: Int)
        case failed(String)
        case stopped
    }

    private let binding = NIOLockedValueBox(Binding.starting)
    private let ready: EventLoopPromise<Int>
    let openStreams = NIOLockedValueBox(0)
    /// The TLS certificate's SHA-256 fingerprint, once loaded (nil over plain HTTP).
    let fingerprint = NIOLockedValueBox<String?>(nil)

    package init(configuration: WebConfiguration, router: ControlRouter, events: EventBus, vault: (any VaultMedia)? = nil, logger: Logger) {
        self.configuration = configuration
        self.vault = vault
        self.router = router
        self.events = events
        self.logger = logger
        self.sessions = WebSessions(tokenLifetimeMs: configuration.loginTokenLifetimeMs,
                                    sessionLifetimeMs: configuration.sessionLifetimeMs)
        self.pages = WebPages()
        self.ready = MultiThreadedEventLoopGroup.singleton.next().makePromise()
    }

    deinit {
        ready.fail(NodeError.failed("the dashboard was never started"))
    }

    /// The host as it goes into a URL ("[::1]" for IPv6; loopback for an any-address binding).
    var urlHost: String {
        switch configuration.host {
        case "0.0.0.0": return "127.0.0.1"
        case "::": return "[::1]"
        case let h: return h.contains(":") ? "[\(h)]" : h
        }
    }

    /// "https" over TLS, else "http".
    var scheme: String { configuration.tls == nil ? "http" : "https" }

    /// The dashboard's address without a token, once it listens ("http://127.0.0.1:7812/").
    public var url: String? {
        guard case .listening(let port) = binding.withLockedValue({ $0 }) else { return nil }
        return "\(scheme)://\(urlHost):\(port)/"
    }

    /// What `node.status` says about the dashboard.
    public var statusJSON: JSONValue {
        switch binding.withLockedValue({ $0 }) {
        case .starting: return ["state": "starting"]
        case .listening(let port):
            var o: [String: JSONValue] = ["state": "listening", "url": .string("\(scheme)://\(urlHost):\(port)/"), "port": .int(Int64(port))]
            if let f = fingerprint.withLockedValue({ $0 }) { o["tls_fingerprint"] = .string(f) }
            return .object(o)
        case .failed(let reason): return ["state": "failed", "reason": .string(reason)]
        case .stopped: return ["state": "stopped"]
        }
    }

    /// The Host/Origin policy for the bound port (nil before the server listens).
    var hostPolicy: WebHostPolicy? {
        guard case .listening(let port) = binding.withLockedValue({ $0 }) else { return nil }
        let host = configuration.host.lowercased()
        let named: Set<String> = WebHostPolicy.isAddressLiteral(host) || host.contains(":") ? [] : [host]
        return WebHostPolicy(port: port, tls: configuration.tls != nil, names: named)
    }

    /// The session cookie's name: per port, since browsers share cookies between ports of a host.
    var cookieName: String {
        guard case .listening(let port) = binding.withLockedValue({ $0 }) else { return "tandem_session" }
        return "tandem_session_\(port)"
    }

    /// `web.login`: a one-time login URL (the CLI's `tandem web`).
    public func registerControlMethods(on router: ControlRouter) {
        // Weak: the dashboard holds the router, so a strong capture would keep both alive for ever.
        router.register("web.login") { [weak self] _ in
            guard let self else {
                throw ControlError(code: "unavailable", message: "the dashboard has stopped", exitCode: ControlError.unreachableExitCode)
            }
            let port: Int
            do {
                port = try await ready.futureResult.get()
            } catch {
                throw ControlError(code: "unavailable", message: "the dashboard is not running: \(Self.describe(error))",
                                   exitCode: ControlError.unreachableExitCode)
            }
            let token = sessions.newLoginToken(nowMs: webNowMs())
            var answer: [String: JSONValue] = [
                "url": .string("\(scheme)://\(urlHost):\(port)/login?token=\(token)"),
                "address": .string("\(urlHost):\(port)"),
                "expires_in_s": .int(configuration.loginTokenLifetimeMs / 1000)]
            if let f = fingerprint.withLockedValue({ $0 }) { answer["tls_fingerprint"] = .string(f) }
            return .object(answer)
        }
    }

    /// The `web.login` answer of a node that runs without a dashboard (`--web off`).
    public static func registerDisabled(on router: ControlRouter) {
        router.register("web.login") { _ in
            throw ControlError(code: "unavailable",
                               message: "this node runs without the dashboard (started with --web off); restart it with --web 127.0.0.1:\(WebConfiguration.defaultPort)",
                               exitCode: ControlError.unreachableExitCode)
        }
    }

    static func describe(_ error: Error) -> String {
        if let e = error as? NodeError { return e.message }
        if let e = error as? IOError { return String(cString: strerror(e.errnoCode)) }
        return "\(error)"
    }

    public func run() async throws {
        let server: HTTPServerBuilder
        do {
            server = try serverBuilder()
        } catch {
            let reason = Self.describe(error)
            ready.fail(NodeError.failed(reason))
            binding.withLockedValue { $0 = .failed(reason) }
            logger.warning("dashboard not started", metadata: ["reason": "\(reason)"])
            await events.emit("web.failed", ["address": .string("\(urlHost):\(configuration.port)"), "reason": .string(reason)])
            try? await gracefulShutdown()
            return
        }
        let app = Application(
            router: buildRouter(),
            server: server,
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
            onServerRunning: { [self] channel in
                let port = channel.localAddress?.port ?? configuration.port
                binding.withLockedValue { $0 = .listening(port: port) }
                ready.succeed(port)
                let address = "\(urlHost):\(port)"
                logger.info("dashboard listening", metadata: ["url": "\(scheme)://\(address)/"])
                await events.emit("web.listening", ["address": .string(address), "url": .string("\(scheme)://\(address)/")])
            },
            logger: logger)
        do {
            try await app.run()
            binding.withLockedValue { $0 = .stopped }
        } catch {
            let wasListening = binding.withLockedValue { b -> Bool in
                if case .listening = b { b = .stopped; return true }
                b = .failed(Self.describe(error))
                return false
            }
            if wasListening {
                logger.warning("dashboard stopped", metadata: ["error": "\(error)"])
                return
            }
            let reason = "cannot listen on \(urlHost):\(configuration.port): \(Self.describe(error))"
            ready.fail(NodeError.failed(reason))
            binding.withLockedValue { $0 = .failed(reason) }
            logger.warning("dashboard not started", metadata: ["reason": "\(reason)"])
            await events.emit("web.failed", ["address": .string("\(urlHost):\(configuration.port)"), "reason": .string(reason)])
            // The node goes on without it; a service that returns would end the whole group.
            try? await gracefulShutdown()  // throws only when cancelled: the node is stopping anyway
        }
    }
}

extension WebDashboard {
    /// HTTP/1.1, over TLS when configured (the certificate loaded, or made on first use).
    func serverBuilder() throws -> HTTPServerBuilder {
        guard let tls = configuration.tls else { return .http1() }
        let material = try WebTLSMaterial.load(tls, host: configuration.host)
        fingerprint.withLockedValue { $0 = material.fingerprint }
        logger.info("dashboard TLS", metadata: ["sha256": "\(material.fingerprint)"])
        return try .tls(.http1(), tlsConfiguration: material.configuration)
    }
}

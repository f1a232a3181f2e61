import Foundation
import NIOConcurrencyHelpers
import Sodium
import TandemNodeCore
import TandemProtocol

/// Which `Host` and `Origin` headers the dashboard answers: loopback names and addresses with the
/// port it is bound to, nothing else (a DNS name that resolves to 127.0.0.1 — DNS rebinding — is
/// refused by name). Pure: headers in, a verdict out. Protocol/web.md.
public struct WebHostPolicy: Sendable, Equatable {
    /// The port the dashboard is bound to.
    public var port: Int
    /// "https" when the dashboard is served over TLS (then it may face a network).
    public var scheme: String
    /// Over TLS: any IP address literal is a Host the dashboard answers (a browser that typed the
    /// address; DNS rebinding needs a name), and so are `names` (the host named in --web).
    public var names: Set<String>

    public init(port: Int, tls: Bool = false, names: Set<String> = []) {
        self.port = port
        self.scheme = tls ? "https" : "http"
        self.names = Set(names.map { $0.lowercased() })
    }

    /// An IPv4 literal, or an IPv6 one in brackets.
    static func isAddressLiteral(_ name: String) -> Bool {
        if name.hasPrefix("[") && name.hasSuffix("]") {
            let inner = name.dropFirst().dropLast()
            return !inner.isEmpty && inner.count <= 45 && inner.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." }
        }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isASCII) && UInt8($0) != nil }
    }

    /// Names a browser on this machine may use for the dashboard.
    static let loopbackNames: Set<String> = ["127.0.0.1", "localhost", "[::1]"]

    /// True for the addresses `--web` may bind: 127.0.0.0/8, ::1, localhost.
    public static func isLoopbackAddress(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h == "::1" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts.allSatisfy({ !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isASCII) && UInt8($0) != nil })
        else { return false }
        return parts[0] == "127"
    }

    /// `Host: 127.0.0.1:7812`, `localhost:7812` or `[::1]:7812` (the port is required unless it is 80);
    /// over TLS also an address literal or a name from --web.
    public func allowsHost(_ value: String?) -> Bool {
        guard let value, value.utf8.count <= 255 else { return false }
        let v = value.lowercased()
        let name: Substring
        let portText: Substring?
        if v.hasPrefix("[") {
            guard let close = v.firstIndex(of: "]") else { return false }
            name = v[...close]
            let rest = v[v.index(after: close)...]
            if rest.isEmpty { portText = nil } else {
                guard rest.hasPrefix(":") else { return false }
                portText = rest.dropFirst()
            }
        } else if let colon = v.firstIndex(of: ":") {
            name = v[..<colon]
            portText = v[v.index(after: colon)...]
        } else {
            name = v[...]
            portText = nil
        }
        let isLoopback = Self.loopbackNames.contains(String(name)) || Self.isLoopbackAddress(String(name))
        let overTLS = scheme == "https" && (Self.isAddressLiteral(String(name)) || names.contains(String(name)))
        guard isLoopback || overTLS else { return false }
        if let portText {
            guard portText.count <= 5, portText.allSatisfy(\.isASCII), let p = Int(portText) else { return false }
            return p == port
        }
        return port == (scheme == "https" ? 443 : 80)
    }

    /// `Origin: http://<an allowed host>`. A missing Origin is allowed only on safe requests (GET,
    /// HEAD): a state-changing request must say where it comes from. "null" is never allowed.
    public func allowsOrigin(_ value: String?, stateChanging: Bool) -> Bool {
        guard let value else { return !stateChanging }
        let prefix = scheme + "://"
        guard value.hasPrefix(prefix) else { return false }
        let rest = value.dropFirst(prefix.count)
        guard !rest.contains("/") else { return false }
        return allowsHost(String(rest))
    }

    /// `Sec-Fetch-Site`, where the browser sends it: only same-origin requests and ones the person
    /// started (typed URL, bookmark: "none") are served.
    public func allowsFetchSite(_ value: String?) -> Bool {
        guard let value else { return true }
        return value == "same-origin" || value == "none"
    }
}

/// One-time login tokens and the sessions they open, each with its CSRF token. Tokens and session
/// ids are 32 random bytes; only their BLAKE2b hashes are kept, so a lookup's timing says nothing
/// about a secret. Thread-safe (a locked value).
public final class WebSessions: Sendable {
    public struct Session: Sendable, Equatable {
        public var csrf: String
        public var expiresAtMs: Int64
        /// A notice to show once on the next page (what the last action did).
        public var flash: String?
    }

    struct State {
        var tokens: [String: Int64] = [:]       // hash → expiry
        var sessions: [String: Session] = [:]   // hash → session
    }

    public static let maximumTokens = 16
    public static let maximumSessions = 32

    private let state = NIOLockedValueBox(State())
    let tokenLifetimeMs: Int64
    let sessionLifetimeMs: Int64

    public init(tokenLifetimeMs: Int64, sessionLifetimeMs: Int64) {
        self.tokenLifetimeMs = tokenLifetimeMs
        self.sessionLifetimeMs = sessionLifetimeMs
    }

    static func secret() -> String { base64URL(Sodium.randomBytes(32)) }

    static func hash(_ secret: String) -> String {
        var h = Blake2b(outputLength: 32)
        h.update(Array(secret.utf8))
        return hexString(h.finalize())
    }

    /// A new one-time login token (the oldest pending ones are dropped past the limit).
    public func newLoginToken(nowMs: Int64) -> String {
        let token = Self.secret()
        state.withLockedValue { s in
            s.tokens = s.tokens.filter { $0.value > nowMs }
            while s.tokens.count >= Self.maximumTokens, let oldest = s.tokens.min(by: { $0.value < $1.value }) {
                s.tokens[oldest.key] = nil
            }
            s.tokens[Self.hash(token)] = nowMs.addingReportingOverflow(tokenLifetimeMs).partialValue
        }
        return token
    }

    /// Spends a login token: a new session id, or nil when the token is unknown, used or expired.
    public func redeem(_ token: String, nowMs: Int64) -> String? {
        guard token.utf8.count <= 128 else { return nil }
        let key = Self.hash(token)
        return state.withLockedValue { s -> String? in
            guard let expiry = s.tokens.removeValue(forKey: key), expiry > nowMs else { return nil }
            s.sessions = s.sessions.filter { $0.value.expiresAtMs > nowMs }
            while s.sessions.count >= Self.maximumSessions,
                  let oldest = s.sessions.min(by: { $0.value.expiresAtMs < $1.value.expiresAtMs }) {
                s.sessions[oldest.key] = nil
            }
            let id = Self.secret()
            s.sessions[Self.hash(id)] = Session(csrf: Self.secret(),
                                                expiresAtMs: nowMs.addingReportingOverflow(sessionLifetimeMs).partialValue)
            return id
        }
    }

    /// The session a cookie names, if it is live.
    public func session(_ id: String?, nowMs: Int64) -> Session? {
        guard let id, id.utf8.count <= 128 else { return nil }
        let key = Self.hash(id)
        return state.withLockedValue { s in
            guard let session = s.sessions[key] else { return nil }
            guard session.expiresAtMs > nowMs else {
                s.sessions[key] = nil
                return nil
            }
            return session
        }
    }

    /// True when `presented` is the session's CSRF token (compared in constant time).
    public func checkCSRF(_ id: String?, _ presented: String?, nowMs: Int64) -> Bool {
        guard let session = session(id, nowMs: nowMs), let presented else { return false }
        return Sodium.constantTimeEqual(Array(session.csrf.utf8), Array(presented.utf8))
    }

    public func setFlash(_ id: String?, _ text: String) {
        guard let id else { return }
        let key = Self.hash(id)
        state.withLockedValue { $0.sessions[key]?.flash = text }
    }

    /// The session's notice, once.
    public func takeFlash(_ id: String?) -> String? {
        guard let id else { return nil }
        let key = Self.hash(id)
        return state.withLockedValue { s in
            defer { s.sessions[key]?.flash = nil }
            return s.sessions[key]?.flash
        }
    }

    public func end(_ id: String?) {
        guard let id else { return }
        let key = Self.hash(id)
        _ = state.withLockedValue { $0.sessions.removeValue(forKey: key) }
    }
}

func base64URL(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString()
        .replacingOccurrences(of: "+", with: "-")
        .replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// Wall-clock milliseconds, as session expiry counts them.
func webNowMs() -> Int64 { Int64(clamping: NodeEvent.nowMs()) }

import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import TandemNodeCore

extension HTTPField.Name {
    static let secFetchSite = HTTPField.Name("Sec-Fetch-Site")!
    static let tandemLive = HTTPField.Name("X-Tandem-Live")!
}

/// Checks every request before a route sees it (Protocol/web.md "Requests"): the Host is a
/// loopback name with the dashboard's port, the Origin (required on POST) is the dashboard's own,
/// Sec-Fetch-Site is same-origin or none. Every answer is `Cache-Control: no-store`, framed by no
/// one, and under a strict content security policy.
struct WebGuard: RouterMiddleware {
    typealias Context = BasicRequestContext
    let dashboard: WebDashboard

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        if let refusal = refusal(request) {
            dashboard.logger.notice("dashboard request refused", metadata: ["reason": "\(refusal)", "path": "\(request.uri.path)"])
            response = WebPages.plain(.forbidden, "Refused: \(refusal).")
        } else {
            do {
                response = try await next(request, context)
            } catch let error as HTTPError {
                response = WebPages.plain(error.status, error.status == .notFound ? "Not found." : "\(error.status.reasonPhrase).")
            } catch {
                dashboard.logger.error("dashboard request failed", metadata: ["error": "\(error)"])
                response = WebPages.plain(.internalServerError, "Internal error.")
            }
        }
        response.headers[.cacheControl] = "no-store"
        response.headers[.contentSecurityPolicy] =
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        response.headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        response.headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        // same-origin: a POST from the page still carries its Origin; other sites get no referrer (the login token).
        response.headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
        return response
    }

    /// Why a request is refused, or nil.
    func refusal(_ request: Request) -> String? {
        guard let policy = dashboard.hostPolicy else { return "the dashboard is not ready" }
        let host = request.head.authority
        guard policy.allowsHost(host) else { return "Host is not this dashboard's loopback address" }
        let stateChanging = !(request.method == .get || request.method == .head)
        guard policy.allowsOrigin(request.headers[.origin], stateChanging: stateChanging) else {
            return "Origin is not this dashboard"
        }
        guard policy.allowsFetchSite(request.headers[.secFetchSite]) else { return "a cross-site request" }
        return nil
    }
}

extension WebDashboard {
    func buildRouter() -> Router<BasicRequestContext> {
        let r = Router(context: BasicRequestContext.self)
        r.add(middleware: WebGuard(dashboard: self))
        r.get("/login") { [self] request, _ in login(request) }
        r.post("/logout") { [self] request, _ in try await action(request) { _ in ("Signed out.", nil) } }
        r.get("/static/dashboard.css") { _, _ in WebPages.asset(WebAssets.css + WebTemplatesMore.css + WebVaultAssets.css, type: "text/css; charset=utf-8") }
        r.get("/static/dashboard.js") { _, _ in WebPages.asset(WebAssets.js, type: "text/javascript; charset=utf-8") }
        r.get("/events") { [self] request, _ in eventStream(request) }
        for page in WebPage.allCases {
            r.get(RouterPath(page.path)) { [self] request, _ in try await show(page, request) }
        }
        for action in WebAction.allCases {
            r.post(RouterPath(action.path)) { [self] request, _ in try await perform(action, request) }
        }
        registerUploads(on: r)
        addVaultRoutes(to: r)
        return r
    }

    func sessionID(_ request: Request) -> String? { request.cookies[cookieName]?.value }

    /// `/login?token=…`: spends the token, sets the session cookie, and goes to the first page.
    func login(_ request: Request) -> Response {
        let token = request.uri.queryParameters["token"].map(String.init) ?? ""
        guard let id = sessions.redeem(token, nowMs: webNowMs()) else {
            return WebPages.plain(.forbidden,
                                  "This login link is not valid: it was used already or has expired. Run `tandem web` for a new one.")
        }
        var response = Response(status: .seeOther, headers: [.location: "/"])
        response.setCookie(Cookie(name: cookieName, value: id, path: "/", secure: configuration.tls != nil, httpOnly: true, sameSite: .strict))
        return response
    }

    /// A page, for a signed-in browser; a page that says how to sign in otherwise.
    func show(_ page: WebPage, _ request: Request) async throws -> Response {
        let id = sessionID(request)
        guard let session = sessions.session(id, nowMs: webNowMs()) else { return WebPages.signIn() }
        // A live refresh (the page's script) leaves the one-time notice for the page the person sees.
        let flash = request.headers[.tandemLive] == nil ? sessions.takeFlash(id) : nil
        var query: [String: String] = [:]
        for (k, v) in request.uri.queryParameters where query[String(k)] == nil { query[String(k)] = String(v) }
        let html = await pages.render(page, dashboard: self, csrf: session.csrf, flash: flash, query: query)
        return WebPages.html(html)
    }

    /// A POST: the session, its CSRF token, then the action; back to the page with a notice.
    func perform(_ action: WebAction, _ request: Request) async throws -> Response {
        try await self.action(request) { form in
            do {
                return (try await action.run(form, dashboard: self), action.next(form))
            } catch {
                return (ControlError.from(error).message.capitalizedFirst, action.next(form))
            }
        }
    }

    /// Checks the session and the CSRF token of a form post, runs `body` (a notice and where to go:
    /// nil signs out).
    func action(_ request: Request, _ body: ([String: String]) async throws -> (String, String?)) async throws -> Response {
        let id = sessionID(request)
        var request = request
        let bytes = try await request.collectBody(upTo: WebForm.maximumBodyBytes)
        let form = WebForm.parse(String(buffer: bytes))
        guard sessions.session(id, nowMs: webNowMs()) != nil else {
            return WebPages.plain(.unauthorized, "Not signed in. Run `tandem web` for a login link.")
        }
        guard sessions.checkCSRF(id, form["csrf"], nowMs: webNowMs()) else {
            return WebPages.plain(.forbidden, "Refused: the form's CSRF token is missing or wrong. Reload the page and try again.")
        }
        let (notice, next) = try await body(form)
        guard let next else {
            sessions.end(id)
            var response = WebPages.plain(.ok, notice)
            response.setCookie(Cookie(name: cookieName, value: "", maxAge: 0, path: "/", httpOnly: true, sameSite: .strict))
            return response
        }
        sessions.setFlash(id, notice)
        return Response(status: .seeOther, headers: [.location: next])
    }

    /// `/events`: the node's events as server-sent events (`event: node`, data = the event's JSON),
    /// live from now, with a comment every 15 s so a closed tab is noticed.
    func eventStream(_ request: Request) -> Response {
        guard sessions.session(sessionID(request), nowMs: webNowMs()) != nil else {
            return WebPages.plain(.unauthorized, "Not signed in.")
        }
        let admitted = openStreams.withLockedValue { n -> Bool in
            guard n < configuration.maximumStreams else { return false }
            n += 1
            return true
        }
        guard admitted else { return WebPages.plain(.serviceUnavailable, "Too many open dashboard tabs.") }
        let router = self.router
        let logger = self.logger
        let streams = openStreams
        let body = ResponseBody { writer in
            defer { streams.withLockedValue { $0 -= 1 } }
            let (lines, sink) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(512))
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        try await router.stream("events.subscribe", [:]) { event in
                            sink.yield("event: node\ndata: \(event.compactJSON)\n\n")
                        }
                    } catch {
                        logger.debug("dashboard event stream ended", metadata: ["error": "\(error)"])
                    }
                    sink.finish()
                }
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(15))  // cancelled: the loop ends
                        sink.yield(": keep-alive\n\n")
                    }
                }
                group.addTask {
                    // The node stops: end the stream (the browser reconnects to whatever comes next).
                    try? await gracefulShutdown()  // returns or is cancelled: either way the stream ends
                    sink.finish()
                }
                do {
                    try await writer.write(ByteBuffer(string: "retry: 2000\n: connected\n\n"))
                    for await line in lines {
                        try await writer.write(ByteBuffer(string: line))
                    }
                } catch {
                    // The tab went away.
                }
                group.cancelAll()
            }
            try? await writer.finish(nil)  // the tab may be gone already
        }
        return Response(status: .ok,
                        headers: [.contentType: "text/event-stream; charset=utf-8", HTTPField.Name("X-Accel-Buffering")!: "no"],
                        body: body)
    }
}

/// `application/x-www-form-urlencoded`, bounded.
package enum WebForm {
    package static let maximumBodyBytes = 64 * 1024
    package static let maximumFields = 64

    package static func parse(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&").prefix(maximumFields) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let key = decode(parts[0]) else { continue }
            let value = parts.count > 1 ? decode(parts[1]) ?? "" : ""
            if fields[key] == nil { fields[key] = value }
        }
        return fields
    }

    static func decode(_ s: Substring) -> String? {
        s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}

extension String {
    var capitalizedFirst: String { prefix(1).uppercased() + dropFirst() }
}

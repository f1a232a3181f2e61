import NodeWeb

// What a browser (or anything on this machine that reaches the dashboard's port) controls: the
// Host, Origin and Sec-Fetch-Site headers, a form body, cookies and login tokens; and the `--web`
// option. None may trap; the guard's verdicts agree with each other.
extension FuzzTarget {
    static let web = FuzzTarget(name: "web", summary: "the dashboard's Host/Origin guard, form parser, login tokens and --web parsing",
                                maximumLength: 4096, shortRunShare: 1, run: { input in
        let port = Int(input.u16())
        let policy = WebHostPolicy(port: port)
        func check(_ ok: Bool) {
            if !ok { fatalError("web fuzz target: invariant broken") }
        }
        func text(_ input: inout FuzzInput) -> String {
            String(decoding: input.take(Int(input.u8())), as: UTF8.self)
        }
        switch input.pick(4) {
        case 0:
            let host = text(&input)
            let allowed = policy.allowsHost(host)
            if !host.contains("/") {
                check(policy.allowsOrigin("http://" + host, stateChanging: true) == allowed)
            }
            check(!policy.allowsOrigin("https://" + host, stateChanging: false))
            _ = policy.allowsFetchSite(text(&input))
        case 1:
            let form = WebForm.parse(String(decoding: input.rest(), as: UTF8.self))
            check(form.count <= WebForm.maximumFields)
        case 2:
            let sessions = WebSessions(tokenLifetimeMs: Int64(input.u32()), sessionLifetimeMs: Int64(input.u32()))
            let now = Int64(bitPattern: input.u64())
            let token = sessions.newLoginToken(nowMs: now)
            let guess = text(&input)
            if guess != token { check(sessions.redeem(guess, nowMs: now) == nil) }
            if let id = sessions.redeem(token, nowMs: now) {
                check(sessions.redeem(token, nowMs: now) == nil)
                check(!sessions.checkCSRF(id, text(&input) + "\u{0}", nowMs: now))
            }
            _ = sessions.session(text(&input), nowMs: Int64(bitPattern: input.u64()))
        default:
            if let c = try? WebConfiguration.parse(text(&input)) {
                check(WebHostPolicy.isLoopbackAddress(c.host) && (0...65535).contains(c.port))
            }
        }
    })
}

import XCTest
@testable import NodeWeb

final class WebHostPolicyTests: XCTestCase {
    let policy = WebHostPolicy(port: 7812)

    func testHostMustBeLoopbackWithThePort() {
        for ok in ["127.0.0.1:7812", "localhost:7812", "LOCALHOST:7812", "[::1]:7812", "127.0.0.2:7812"] {
            XCTAssertTrue(policy.allowsHost(ok), ok)
        }
        for bad in [nil, "", "evil.example", "evil.example:7812", "localhost.evil.example:7812", "127.0.0.1",
                    "127.0.0.1:7813", "127.0.0.1:07812x", "[::1]", "[::2]:7812", "10.0.0.1:7812", "127.0.0.1:7812:1",
                    "127.0.0.1.evil.example:7812", "0x7f.0.0.1:7812", "127.1:7812", String(repeating: "a", count: 300)] {
            XCTAssertFalse(policy.allowsHost(bad), bad ?? "nil")
        }
        XCTAssertTrue(WebHostPolicy(port: 80).allowsHost("localhost"))
    }

    func testOriginIsRequiredOnPostsAndMustBeOurs() {
        XCTAssertTrue(policy.allowsOrigin(nil, stateChanging: false))
        XCTAssertFalse(policy.allowsOrigin(nil, stateChanging: true))
        XCTAssertTrue(policy.allowsOrigin("http://127.0.0.1:7812", stateChanging: true))
        XCTAssertTrue(policy.allowsOrigin("http://localhost:7812", stateChanging: true))
        for bad in ["null", "http://evil.example", "https://127.0.0.1:7812", "http://127.0.0.1:7812/x", "http://127.0.0.1:1"] {
            XCTAssertFalse(policy.allowsOrigin(bad, stateChanging: true), bad)
            XCTAssertFalse(policy.allowsOrigin(bad, stateChanging: false), bad)
        }
        XCTAssertTrue(policy.allowsFetchSite(nil))
        XCTAssertTrue(policy.allowsFetchSite("same-origin"))
        XCTAssertTrue(policy.allowsFetchSite("none"))
        XCTAssertFalse(policy.allowsFetchSite("cross-site"))
        XCTAssertFalse(policy.allowsFetchSite("same-site"))
    }

    func testWebOptionAcceptsOnlyLoopback() throws {
        XCTAssertNil(try WebConfiguration.parse("off"))
        XCTAssertEqual(try WebConfiguration.parse("127.0.0.1:0")?.port, 0)
        XCTAssertEqual(try WebConfiguration.parse("localhost:9000")?.host, "127.0.0.1")
        XCTAssertEqual(try WebConfiguration.parse("[::1]:9000")?.host, "::1")
        for bad in ["0.0.0.0:7812", "192.168.1.2:7812", "example.com:7812", "[::]:7812", "127.0.0.1:99999"] {
            XCTAssertThrowsError(try WebConfiguration.parse(bad), bad)
        }
    }
}

final class WebSessionsTests: XCTestCase {
    func testTokenWorksOnceAndExpires() {
        let s = WebSessions(tokenLifetimeMs: 1000, sessionLifetimeMs: 10_000)
        let token = s.newLoginToken(nowMs: 0)
        XCTAssertNil(s.redeem("wrong", nowMs: 1))
        guard let id = s.redeem(token, nowMs: 1) else { return XCTFail("a fresh token is refused") }
        XCTAssertNil(s.redeem(token, nowMs: 2), "a token works once")
        XCTAssertNotNil(s.session(id, nowMs: 5))
        XCTAssertNil(s.session(id, nowMs: 10_001), "sessions expire")
        let late = s.newLoginToken(nowMs: 0)
        XCTAssertNil(s.redeem(late, nowMs: 1000), "tokens expire")
    }

    func testCSRFAndFlash() {
        let s = WebSessions(tokenLifetimeMs: 1000, sessionLifetimeMs: 10_000)
        let id = s.redeem(s.newLoginToken(nowMs: 0), nowMs: 0)!
        let csrf = s.session(id, nowMs: 0)!.csrf
        XCTAssertTrue(s.checkCSRF(id, csrf, nowMs: 1))
        XCTAssertFalse(s.checkCSRF(id, csrf + "x", nowMs: 1))
        XCTAssertFalse(s.checkCSRF(id, nil, nowMs: 1))
        XCTAssertFalse(s.checkCSRF("other", csrf, nowMs: 1))
        let other = s.redeem(s.newLoginToken(nowMs: 0), nowMs: 0)!
        XCTAssertFalse(s.checkCSRF(other, csrf, nowMs: 1), "a token is its session's own")
        s.setFlash(id, "done")
        XCTAssertEqual(s.takeFlash(id), "done")
        XCTAssertNil(s.takeFlash(id))
        s.end(id)
        XCTAssertNil(s.session(id, nowMs: 1))
    }

    func testBounded() {
        let s = WebSessions(tokenLifetimeMs: 1_000_000, sessionLifetimeMs: 1_000_000)
        let first = s.newLoginToken(nowMs: 0)
        for i in 1...WebSessions.maximumTokens { _ = s.newLoginToken(nowMs: Int64(i)) }
        XCTAssertNil(s.redeem(first, nowMs: 100), "the oldest pending token is dropped")
        var ids: [String] = []
        for i in 0..<(WebSessions.maximumSessions + 1) {
            ids.append(s.redeem(s.newLoginToken(nowMs: Int64(200 + i)), nowMs: Int64(200 + i))!)
        }
        XCTAssertNil(s.session(ids[0], nowMs: 500), "the oldest session is dropped")
        XCTAssertNotNil(s.session(ids.last!, nowMs: 500))
    }

    func testFormParsing() {
        let f = WebForm.parse("csrf=a%2Bb&id=tdm1+x&empty=&csrf=second&%ZZ=1")
        XCTAssertEqual(f["csrf"], "a+b")
        XCTAssertEqual(f["id"], "tdm1 x")
        XCTAssertEqual(f["empty"], "")
        let many = (0..<200).map { "k\($0)=v" }.joined(separator: "&")
        XCTAssertEqual(WebForm.parse(many).count, WebForm.maximumFields)
    }
}

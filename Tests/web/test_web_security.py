"""The dashboard's security core (Protocol/web.md): a one-time login token opens a session cookie
(HttpOnly, SameSite=Strict); pages need the session, posts the CSRF token too; Host and Origin
must be this dashboard's loopback address; nothing is cached. Real HTTP on loopback."""
import json
import time
import http.client

from conftest import Browserless
from tandem_testkit import cli, cli_json, one_line_error, run


def test_login_token_session_csrf_host_and_origin(make_web_node):
    alice = make_web_node("alice").start()
    port = alice.web_port()
    b = Browserless(port)

    # No session: the pages say how to sign in and show nothing of the node.
    resp, page = b.request("GET", "/")
    assert resp.status == 401
    assert alice.id not in page
    assert resp.getheader("Cache-Control") == "no-store"
    resp, _ = b.request("GET", "/events")
    assert resp.status == 401

    # A made-up token is refused.
    resp, _ = b.request("GET", "/login?token=not-a-token")
    assert resp.status == 403
    assert resp.getheader("Set-Cookie") is None

    # `tandem web`: a one-time link; the cookie it opens is HttpOnly and SameSite=Strict.
    url = alice.login_url()
    assert url.startswith(f"http://127.0.0.1:{port}/login?token=")
    resp = b.login(url)
    cookie = resp.getheader("Set-Cookie")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
    assert resp.getheader("Location") == "/"
    assert resp.getheader("Cache-Control") == "no-store"
    resp, page = b.request("GET", "/")
    assert resp.status == 200 and alice.id in page
    assert resp.getheader("Cache-Control") == "no-store"
    assert "frame-ancestors 'none'" in resp.getheader("Content-Security-Policy")

    # The same token again: refused (one use).
    other = Browserless(port)
    parsed = url.split(f"127.0.0.1:{port}", 1)[1]
    resp, _ = other.request("GET", parsed, cookie=False)
    assert resp.status == 403 and resp.getheader("Set-Cookie") is None

    # DNS rebinding: a page served as evil.example (resolving to 127.0.0.1) gets nothing, even with the cookie.
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", f"localhost.evil.example:{port}"):
        resp, page = b.request("GET", "/", host=host)
        assert resp.status == 403, host
        assert alice.id not in page
    resp, _ = b.request("GET", "/", host=f"localhost:{port}")
    assert resp.status == 200

    csrf = b.csrf()
    same = {"Origin": b.origin}
    # A post without the CSRF token, or with a wrong one: refused, nothing done.
    resp, _ = b.request("POST", "/ledger/verify", body={}, headers=same)
    assert resp.status == 403
    resp, _ = b.request("POST", "/ledger/verify", body={"csrf": csrf + "x"}, headers=same)
    assert resp.status == 403
    # A foreign Origin, or none at all on a post: refused even with the right token.
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {}, {"Origin": f"http://127.0.0.1:{port + 1}"}):
        resp, _ = b.request("POST", "/ledger/verify", body={"csrf": csrf}, headers=headers)
        assert resp.status == 403, headers
    # A cross-site form post as a browser sends it (no cookie under SameSite=Strict, foreign Origin).
    resp, _ = b.request("POST", "/friends/request", body={"id": "tdm1x", "csrf": csrf}, cookie=False,
                        headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert resp.status == 403
    # Even with the cookie, a cross-site fetch is refused by Sec-Fetch-Site.
    resp, _ = b.request("POST", "/ledger/verify", body={"csrf": csrf},
                        headers={"Origin": b.origin, "Sec-Fetch-Site": "cross-site"})
    assert resp.status == 403
    # The right session, token and Origin: done, back to the page with the notice.
    resp, _ = b.request("POST", "/ledger/verify", body={"csrf": csrf}, headers=same)
    assert resp.status == 303 and resp.getheader("Location") == "/ledger"
    resp, page = b.request("GET", "/ledger")
    assert "The ledger checks out: 0 entries" in page

    # A control method's refusal is the page's notice, as the CLI would say it.
    resp, _ = b.request("POST", "/friends/request", body={"csrf": csrf, "id": "tdm1-not-an-id"}, headers=same)
    assert resp.status == 303
    resp, page = b.request("GET", "/")
    assert "is not a Tandem ID" in page

    # Signing out ends the session.
    resp, _ = b.request("POST", "/logout", body={"csrf": csrf}, headers=same)
    assert resp.status == 200
    resp, _ = b.request("GET", "/")
    assert resp.status == 401


def test_events_stream_is_fed_by_the_event_bus(make_web_node):
    alice = make_web_node("alice").start()
    b = Browserless(alice.web_port())
    b.login(alice.login_url())
    conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=20)
    conn.request("GET", "/events", headers={"Host": f"127.0.0.1:{b.port}", "Cookie": b.cookie})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type").startswith("text/event-stream")
    assert resp.getheader("Cache-Control") == "no-store"
    assert resp.readline().startswith(b"retry:")
    cli(alice, "name", "Alice Web")
    # The next event line carries the node's event (stream order: what happened after we connected).
    while True:
        line = resp.readline()
        assert line, "the stream ended"
        if line.startswith(b"data: "):
            event = json.loads(line[6:])
            if event["type"] == "name.changed":
                assert "Alice Web" in json.dumps(event)
                break
    # A node with a tab open still stops at once, and cleanly: the stream ends with it.
    started = time.monotonic()
    assert alice.stop() == 0
    assert time.monotonic() - started < 4.5, "the open event stream held up the node's shutdown"
    assert resp.read() is not None
    conn.close()


def test_web_option_and_command(make_web_node, tmp_path):
    # A non-loopback address is refused with one line (TLS is not offered yet).
    d = tmp_path / "x"
    run("init", "--data-dir", str(d))
    proc = run("node", "--data-dir", str(d), "--listen", "127.0.0.1:0", "--web", "0.0.0.0:7812", check=False)
    assert proc.returncode != 0
    assert "loopback" in proc.stderr
    # A node with the dashboard off (the test harness's default) says so to `tandem web`.
    from tandem_testkit import Node
    plain = Node(tmp_path / "plain").start()
    try:
        assert cli_json(plain, "status")["web"] == {"state": "off"}
        proc = cli(plain, "web", check=False)
        assert proc.returncode == 4
        assert "without the dashboard" in one_line_error(proc)
    finally:
        plain.kill()


def test_a_taken_port_costs_only_the_dashboard(make_web_node, tmp_path):
    alice = make_web_node("alice").start()
    port = alice.web_port()

    bob = type(alice)(tmp_path / "bob", log_path=tmp_path / "bob.log")
    bob.web = f"127.0.0.1:{port}"
    bob.start()
    try:
        web = cli_json(bob, "status")["web"]
        assert web["state"] == "failed" and "Address already in use" in web["reason"], web
        proc = cli(bob, "web", check=False)
        assert proc.returncode == 4
        assert "cannot listen" in one_line_error(proc)
        assert cli_json(bob, "status")["listen"]  # the node itself runs on
    finally:
        bob.kill()

"""The dashboard off loopback (Protocol/web.md "Off loopback"): refused without TLS, served over
HTTPS with a self-signed certificate made on first use, whose fingerprint `tandem web` prints. The
client trusts exactly that certificate (Python's ssl, hostname checked against its IP address)."""
import hashlib
import http.client
import ssl

from conftest import WebNode
from tandem_testkit import cli, cli_json, run


class TLSWebNode(WebNode):
    web = "127.0.0.2:0"

    def command(self):
        return super().command() + ["--web-tls"]


def test_off_loopback_needs_tls(tmp_path):
    d = tmp_path / "x"
    run("init", "--data-dir", str(d))
    proc = run("node", "--data-dir", str(d), "--listen", "127.0.0.1:0", "--web", "0.0.0.0:7812", check=False)
    assert proc.returncode != 0
    assert "only over TLS" in proc.stderr and "--web-tls" in proc.stderr
    proc = run("node", "--data-dir", str(d), "--listen", "127.0.0.1:0", "--web-tls-cert", "c.pem", check=False)
    assert proc.returncode != 0 and "go together" in proc.stderr


def test_https_with_a_self_signed_certificate(tmp_path):
    node = TLSWebNode(tmp_path / "alice", log_path=tmp_path / "alice.log").start()
    try:
        web = cli_json(node, "status")["web"]
        assert web["state"] == "listening" and web["url"].startswith("https://127.0.0.2:"), web
        port = web["port"]
        login = cli_json(node, "web")
        assert login["url"].startswith(f"https://127.0.0.2:{port}/login?token=")
        cert = tmp_path / "alice" / "web-tls" / "certificate.pem"
        der = ssl.PEM_cert_to_DER_cert(cert.read_text())
        assert login["tls_fingerprint"] == ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
        assert oct((tmp_path / "alice" / "web-tls" / "key.pem").stat().st_mode & 0o777) == "0o600"
        human = cli(node, "web", "--no-open").stdout
        assert login["tls_fingerprint"] in human

        ctx = ssl.create_default_context(cafile=str(cert))
        if hasattr(ssl, "VERIFY_X509_STRICT"):
            ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT  # a self-signed leaf is its own anchor
        host = f"127.0.0.2:{port}"

        def request(method, path, headers=None, body=None):
            conn = http.client.HTTPSConnection("127.0.0.2", port, context=ctx, timeout=15)
            conn.request(method, path, body=body, headers={"Host": host, **(headers or {})})
            resp = conn.getresponse()
            data = resp.read().decode(errors="replace")
            conn.close()
            return resp, data

        resp, _ = request("GET", login["url"].split(host, 1)[1])
        assert resp.status == 303
        cookie = resp.getheader("Set-Cookie")
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie
        session = cookie.split(";", 1)[0]
        resp, page = request("GET", "/", headers={"Cookie": session})
        assert resp.status == 200 and node.id in page
        # Over HTTPS the Origin must be https://, and a foreign name is refused as on loopback.
        resp, _ = request("GET", "/", headers={"Cookie": session, "Host": f"evil.example:{port}"})
        assert resp.status == 403
        import re
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        form = {"Cookie": session, "Content-Type": "application/x-www-form-urlencoded"}
        resp, _ = request("POST", "/ledger/verify", headers={**form, "Origin": f"http://{host}"}, body=f"csrf={csrf}")
        assert resp.status == 403
        resp, _ = request("POST", "/ledger/verify", headers={**form, "Origin": f"https://{host}"}, body=f"csrf={csrf}")
        assert resp.status == 303

        # Plain HTTP on the TLS port gets no page.
        conn = http.client.HTTPConnection("127.0.0.2", port, timeout=10)
        try:
            conn.request("GET", "/", headers={"Host": host})
            got = conn.getresponse().status
        except (http.client.HTTPException, ConnectionError, OSError):
            got = None
        assert got is None or got >= 400
    finally:
        node.kill()

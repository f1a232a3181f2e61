"""The dashboard's file forms (Protocol/web.md section 8): multipart posts need the session (checked
before the body is read), the CSRF token and the dashboard's Origin; a key file is a tag's payload
and goes through the same lock methods as a typed tag."""
import http.client
import uuid

from conftest import Browserless
from tandem_testkit import cli, cli_json


def multipart(fields, files):
    boundary = uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    for name, (filename, data) in files.items():
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post(b, path, body, content_type, origin=True, cookie=True):
    conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=15)
    headers = {"Host": f"127.0.0.1:{b.port}", "Content-Type": content_type, "Content-Length": str(len(body))}
    if origin:
        headers["Origin"] = b.origin
    if cookie and b.cookie:
        headers["Cookie"] = b.cookie
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp


def test_key_file_upload_and_its_guards(make_web_node):
    alice = make_web_node("alice").start()
    cli(alice, "key", "enroll", "fob", "--tag", "fob-payload-9")
    cli(alice, "mode", "create", "deep", "--block-site", "example.com", "--main-key", "fob")
    b = Browserless(alice.web_port())

    body, ctype = multipart({"action": "lock", "mode": "deep"}, {"keyfile": ("fob.key", b"fob-payload-9\n")})
    assert post(b, "/focus/key-upload", body, ctype).status == 401  # no session
    b.login(alice.login_url())
    csrf = b.csrf("/focus")
    assert post(b, "/focus/key-upload", body, ctype).status == 403  # no CSRF token
    body, ctype = multipart({"csrf": csrf, "action": "lock", "mode": "deep"}, {"keyfile": ("fob.key", b"fob-payload-9\n")})
    assert post(b, "/focus/key-upload", body, ctype, origin=False).status == 403  # no Origin on a post
    assert post(b, "/focus/key-upload", b"csrf=" + csrf.encode(), "application/x-www-form-urlencoded").status == 400
    assert cli_json(alice, "mode", "status")["locked"] is False

    resp = post(b, "/focus/key-upload", body, ctype)
    assert resp.status == 303 and resp.getheader("Location") == "/focus"
    assert cli_json(alice, "mode", "status")["locked"] is True
    # A key file that is not the key: refused with the lock's own words, still locked.
    body, ctype = multipart({"csrf": csrf, "action": "unlock"}, {"keyfile": ("other.key", b"something else")})
    assert post(b, "/focus/key-upload", body, ctype).status == 303
    _, page = b.request("GET", "/focus")
    assert "matched none" in page
    assert cli_json(alice, "mode", "status")["locked"] is True
    body, ctype = multipart({"csrf": csrf, "action": "unlock"}, {"keyfile": ("fob.key", b"fob-payload-9")})
    assert post(b, "/focus/key-upload", body, ctype).status == 303
    assert cli_json(alice, "mode", "status")["locked"] is False
    # Nothing chosen: said so.
    body, ctype = multipart({"csrf": csrf, "action": "unlock"}, {"qr": ("", b""), "keyfile": ("", b"")})
    assert post(b, "/focus/key-upload", body, ctype).status == 303
    _, page = b.request("GET", "/focus")
    assert "Choose a photo of the key" in page

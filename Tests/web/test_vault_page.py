"""The dashboard's vault page (issue 36): the PIN pad in a real browser (headless Chromium), the
grid of thumbnails decrypted on the fly (the images decode), an upload through the page, lock;
backups at a friend with a push from the page. Without a browser: thumbnails and downloads carry
`Cache-Control: no-store` and are refused once the vault is locked, the PIN guard's lockout rules
the page's attempts, uploads need the CSRF token and are bounded."""
import http.client
import json
import re
import shutil
import subprocess
import uuid

import pytest

from conftest import Browserless
from tandem_testkit import TANDEM, befriend, cli, cli_json, wait_event

CHEAP = {"TANDEM_TEST_CHEAP_PIN_HASH": "1"}
PIN = "2580"


def vault(node, *args, pin=None, timeout=60):
    stdin = None
    if pin is not None:
        stdin = pin + "\n"
        args = (*args, "--pin-stdin")
    proc = subprocess.run([TANDEM, "vault", *args, "--data-dir", node.data_dir], input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"tandem vault {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
    return proc


def items(node):
    out = [l for l in vault(node, "list", "--json", pin=PIN).stdout.splitlines() if l.strip()]
    return json.loads(out[-1])["items"]


def make_photo(path, color):
    from PIL import Image

    img = Image.new("RGB", (640, 480), color)
    img.paste((255, 255, 255), (0, 0, 320, 240))
    img.save(path, "JPEG")
    return path


def vault_with_a_photo(make_web_node, tmp_path, name):
    node = make_web_node(name).start(env=CHEAP)
    vault(node, "init", pin=PIN)
    vault(node, "import", str(make_photo(tmp_path / "red.jpg", (200, 30, 30))), pin=PIN)
    return node


def multipart(fields, files, boundary=None):
    boundary = boundary or "----tandem" + uuid.uuid4().hex
    out = b""
    for k, v in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
    for name, data in files:
        out += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                f"Content-Type: image/jpeg\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post_raw(web, path, body, content_type, origin=True):
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    headers = {"Host": f"127.0.0.1:{web.port}", "Cookie": web.cookie, "Content-Type": content_type,
               "Content-Length": str(len(body))}
    if origin:
        headers["Origin"] = web.origin
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read().decode(errors="replace")
    except (BrokenPipeError, ConnectionResetError):
        return None, {}, ""  # the server stopped reading an upload over its bound
    finally:
        conn.close()


def test_thumbnails_no_store_refused_after_lock_lockout_and_upload_rules(make_web_node, tmp_path):
    node = vault_with_a_photo(make_web_node, tmp_path, "v")
    item = items(node)[0]
    web = Browserless(node.web_port())

    # Not signed in: nothing.
    resp, _ = web.request("GET", f"/vault/thumb/{item['id']}")
    assert resp.status == 401
    web.login(node.login_url())

    # Decrypted per request, never cached: no-store on the thumbnail, the image and the download.
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=15)
    for path, kind in ((f"/vault/thumb/{item['id']}", "image/jpeg"), (f"/vault/item/{item['id']}", "image/jpeg"),
                       (f"/vault/download/{item['id']}", "application/octet-stream")):
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{web.port}", "Cookie": web.cookie})
        r = conn.getresponse()
        body = r.read()
        assert r.status == 200, (path, r.status, body[:200])
        assert r.getheader("Cache-Control") == "no-store", path
        assert r.getheader("Content-Type") == kind, path
        assert body[:3] == b"\xff\xd8\xff", path
    assert 'filename="red.jpg"' in r.getheader("Content-Disposition")
    conn.close()
    # An item reference is a reference, never a path.
    resp, _ = web.request("GET", "/vault/thumb/..%2f..%2fetc")
    assert resp.status in (400, 404)

    # Upload: the CSRF token is needed; a cross-site multipart post is refused before it is read.
    photo = make_photo(tmp_path / "blue.jpg", (20, 40, 220)).read_bytes()
    body, ctype = multipart({"csrf": "wrong"}, [("blue.jpg", photo)])
    status, _, _ = post_raw(web, "/vault/upload", body, ctype)
    assert status == 403
    body, ctype = multipart({"csrf": web.csrf("/vault")}, [("blue.jpg", photo)])
    status, _, _ = post_raw(web, "/vault/upload", body, ctype, origin=False)
    assert status == 403
    # Over the bound (64 MiB): refused, nothing imported.
    big, ctype = multipart({"csrf": web.csrf("/vault")}, [("big.jpg", photo + bytes(65 << 20))])
    status, headers, _ = post_raw(web, "/vault/upload", big, ctype)
    assert status in (None, 303, 413), status
    assert len(items(node)) == 1
    # Through the page: imported like `vault import` (a photo with a thumbnail, in the named album).
    body, ctype = multipart({"csrf": web.csrf("/vault"), "album": "Trips"}, [("blue.jpg", photo)])
    status, headers, _ = post_raw(web, "/vault/upload", body, ctype)
    assert status == 303 and headers.get("Location") == "/vault?album=Trips"
    added = [i for i in items(node) if i["name"] == "blue.jpg"]
    assert len(added) == 1 and added[0]["type"] == "photo" and added[0]["thumbnail"] and added[0]["album"] == "Trips"

    # Lock from the page: every thumbnail request after it is refused.
    resp, _ = web.request("POST", "/vault/lock", body={"csrf": web.csrf("/vault")}, headers={"Origin": web.origin})
    assert resp.status == 303
    for path in (f"/vault/thumb/{item['id']}", f"/vault/item/{added[0]['id']}", f"/vault/download/{item['id']}"):
        resp, text = web.request("GET", path)
        assert resp.status == 403 and "locked" in text, (path, resp.status)
        assert resp.getheader("Cache-Control") == "no-store"

    # The PIN guard rules the page: three wrong PINs, then even the right one waits; the page says how long.
    for _ in range(3):
        resp, _ = web.request("POST", "/vault/unlock", body={"csrf": web.csrf("/vault"), "pin": "0000"},
                              headers={"Origin": web.origin})
        assert resp.status == 303
    resp, page = web.request("GET", "/vault")
    assert re.search(r'id="lockout" data-retry-ms="\d+">Too many wrong PINs \(3 wrong tries in a row\): try again in', page), page
    resp, _ = web.request("POST", "/vault/unlock", body={"csrf": web.csrf("/vault"), "pin": PIN}, headers={"Origin": web.origin})
    _, page = web.request("GET", "/vault")
    assert "Too many wrong PINs: try again in" in page, page
    assert 'id="pinpad"' in page, "still locked"
    status = json.loads(vault(node, "status", "--json").stdout)
    assert status["locked"] and status["failed_attempts"] == 3 and status["retry_in_ms"] > 0


selenium = pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from test_dashboard import browser, check_accessibility, click, flash, live, photograph, text_of, wait  # noqa: E402,F401


def thumbnails_decoded(d, count):
    return d.execute_script(
        "var imgs = document.querySelectorAll('#vault-grid img.thumb');"
        "return imgs.length === arguments[0] && Array.prototype.every.call(imgs, function (i) { return i.complete && i.naturalWidth > 0; });",
        count)


@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                    reason="chromium and chromium-driver are not installed (make test-deps)")
def test_vault_page_pin_pad_grid_upload_lock_and_backups(make_web_node, browser, tmp_path):
    alice = vault_with_a_photo(make_web_node, tmp_path, "alice")
    bob = make_web_node("bob").start()
    cli(alice, "name", "Alice")
    cli(bob, "name", "Bob")
    befriend(alice, bob)
    cli(bob, "backup", "offer", alice.id, "--quota", "1GiB")
    wait_event(alice, "backup.offer.received")
    vault(alice, "lock")
    d = browser

    # The PIN pad, typed with its keys.
    d.get(alice.login_url())
    d.get(f"http://127.0.0.1:{alice.web_port()}/vault")
    live(d)
    assert d.find_elements(By.ID, "pinpad")
    check_accessibility(d, "vault (locked)")
    photograph(d, "vault-locked")
    for digit in PIN:
        d.find_element(By.CSS_SELECTOR, f'#pinpad button.key[data-key="{digit}"]').click()
    assert d.find_element(By.ID, "pin").get_attribute("value") == PIN
    d.find_element(By.ID, "unlock").click()
    wait(d, "the open vault", lambda d: "The vault is open" in flash(d))
    wait(d, "the thumbnail decoded", lambda d: thumbnails_decoded(d, 1))

    # Add a photo through the page: it joins the grid, its thumbnail made by the vault's import.
    d.find_element(By.ID, "upload-file").send_keys(str(make_photo(tmp_path / "green.jpg", (30, 160, 60))))
    d.find_element(By.ID, "upload").click()
    wait(d, "the upload notice", lambda d: "Added 1 item" in flash(d))
    wait(d, "both thumbnails decoded", lambda d: thumbnails_decoded(d, 2))

    # Backups: Bob holds them; a push from the page, followed live to its end.
    holder = f'#backup-holders li[data-id="{bob.id}"]'
    wait(d, "Bob as a holder", lambda d: "Bob" in d.find_element(By.CSS_SELECTOR, holder).text)
    assert "never pushed" in text_of(d, By.CSS_SELECTOR, holder)
    click(d, By.CSS_SELECTOR, f"{holder} form button")
    wait(d, "the push notice", lambda d: "push started" in flash(d))
    live(d)
    wait(d, "the finished push on the page", lambda d: "last push today" in d.find_element(By.CSS_SELECTOR, holder).text,
         timeout=60)
    wait_event(alice, "backup.pushed", f"to={bob.id}")
    check_accessibility(d, "vault")
    photograph(d, "vault")

    # Lock: the PIN pad again, and the thumbnail the page showed is refused now.
    src = d.find_element(By.CSS_SELECTOR, "#vault-grid img.thumb").get_attribute("src")
    d.find_element(By.ID, "lock").click()
    wait(d, "the PIN pad after lock", lambda d: d.find_elements(By.ID, "pinpad"))
    status = d.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {credentials: 'same-origin'}).then(function (r) { done(r.status); }, function () { done(-1); });", src)
    assert status == 403

"""Fixtures for the dashboard tests: nodes that serve the dashboard on a free loopback port."""
import http.client
import json
import pathlib
import re
import sys
import urllib.parse

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))

from tandem_testkit import Node, cli, cli_json, no_lan_discovery  # noqa: E402

no_lan_discovery()


class WebNode(Node):
    """A node with the dashboard on 127.0.0.1, port chosen by the system (reported in `status`)."""

    web = "127.0.0.1:0"

    def command(self):
        # Focus locks write a hosts file of their own here, and stop no processes.
        hosts = pathlib.Path(self.data_dir).with_suffix(".hosts")
        if not hosts.exists():
            hosts.write_text("127.0.0.1 localhost\n")
        return super().command() + ["--web", self.web, "--hosts-file", str(hosts), "--no-app-guard"]

    def web_port(self):
        web = cli_json(self, "status")["web"]
        assert web["state"] == "listening", web
        return web["port"]

    def login_url(self):
        return cli_json(self, "web")["url"]


@pytest.fixture
def make_web_node(tmp_path):
    nodes = []

    def factory(name):
        node = WebNode(tmp_path / name, log_path=tmp_path / f"{name}.log")
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        node.kill()


class Browserless:
    """Raw HTTP to a dashboard, with full control over the headers a browser would send."""

    def __init__(self, port):
        self.port = port
        self.origin = f"http://127.0.0.1:{port}"
        self.cookie = None

    def request(self, method, path, body=None, headers=None, host=None, cookie=True):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        h = {"Host": host or f"127.0.0.1:{self.port}"}
        if cookie and self.cookie:
            h["Cookie"] = self.cookie
        if body is not None:
            body = urllib.parse.urlencode(body)
            h["Content-Type"] = "application/x-www-form-urlencoded"
            h["Content-Length"] = str(len(body.encode()))
        h.update(headers or {})
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in h.items():
            conn.putheader(k, v)
        conn.endheaders(body.encode() if body is not None else None)
        resp = conn.getresponse()
        data = resp.read().decode(errors="replace") if method != "HEAD" else ""
        conn.close()
        return resp, data

    def login(self, url):
        parsed = urllib.parse.urlparse(url)
        resp, _ = self.request("GET", f"{parsed.path}?{parsed.query}", cookie=False)
        assert resp.status == 303, resp.status
        set_cookie = resp.getheader("Set-Cookie")
        self.cookie = set_cookie.split(";", 1)[0]
        return resp

    def csrf(self, path="/"):
        resp, page = self.request("GET", path)
        assert resp.status == 200, (resp.status, page)
        m = re.search(r'name="csrf" value="([^"]+)"', page)
        assert m, page
        return m.group(1)

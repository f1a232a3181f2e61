"""Helpers for tests that drive a real `tandem-relay` and real `tandem node` processes on loopback.

Every node runs without LAN discovery (`--no-discovery`, and TANDEM_NO_DISCOVERY=1 from
clihelpers) and is never told another node's address: whatever reaches it comes through the relay.
Processes log to files in the test's tmp_path (a pipe nobody reads would block them once full).
"""
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "cli"))

import clihelpers  # noqa: E402  (sets TANDEM_NO_DISCOVERY=1)
from clihelpers import TANDEM, free_port, one_line_error, run, wait_control_socket, wait_listening  # noqa: E402,F401

RELAY = os.environ.get("TANDEM_RELAY_BIN", str(REPO / ".build" / "debug" / "tandem-relay"))


def poll(check, timeout=15.0, interval=0.1, what="the condition"):
    """Calls `check()` until it returns something truthy; returns that, or fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s (last: {last!r})")
        time.sleep(interval)


# ---------------------------------------------------------------- the relay


def parse_metrics(text):
    """Prometheus text → {"name": value, 'name{label="v"}': value}."""
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key.strip()] = float(value)
    return out


class Relay:
    """A `tandem-relay` process with its own data dir, on a fixed loopback port (so it can be
    restarted where its clients expect it) and a known metrics port."""

    def __init__(self, root, name="relay", config=None, args=()):
        self.root = pathlib.Path(root)
        self.name = name
        self.data_dir = self.root / name
        self.port = free_port()
        self.metrics_port = free_port()
        self.config = config
        self.args = list(args)
        self.log_path = self.root / f"{name}.log"
        self.proc = None
        self.address = None
        self.id = None
        self._log = None

    def command(self):
        cmd = [RELAY, "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
               "--metrics", f"127.0.0.1:{self.metrics_port}"]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        return cmd + self.args

    def start(self, timeout=15.0):
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=self._log)
        line = self._read_line(timeout)
        prefix = "tandem-relay listening: "
        assert line.startswith(prefix), f"unexpected first line from the relay: {line!r}"
        self.address = line[len(prefix):].strip()
        self.id = self.address.split("@", 1)[0]
        assert self.address.endswith(f"@127.0.0.1:{self.port}"), self.address
        poll(self._metrics_up, timeout, what="the relay's metrics endpoint")
        return self

    def _read_line(self, timeout):
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the relay printed no address within {timeout} s; log:\n{self.log()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    self.proc.wait(timeout=5)
                    raise AssertionError(f"the relay exited ({self.proc.returncode}) before listening; log:\n{self.log()}")
                buf += chunk
        return buf.split(b"\n", 1)[0].decode()

    def _metrics_up(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"the relay exited ({self.proc.returncode}); log:\n{self.log()}")
        try:
            self.metrics()
            return True
        except OSError:
            return False

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def metrics_text(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            assert r.status == 200
            return r.read().decode()

    def metrics(self):
        return parse_metrics(self.metrics_text())

    def metric(self, name, **labels):
        key = name
        if labels:
            key += "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        m = self.metrics()
        assert key in m, f"no metric {key} in {sorted(m)}"
        return m[key]

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Signals the relay and waits; returns (exit code, seconds it took)."""
        if not self.running():
            return (self.proc.returncode if self.proc else None), 0.0
        start = time.monotonic()
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the relay did not stop within {timeout} s of signal {sig}")
        finally:
            self._close_files()
        return rc, time.monotonic() - start

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._close_files()

    def _close_files(self):
        if self.proc is not None and self.proc.stdout is not None and not self.proc.stdout.closed:
            self.proc.stdout.close()
        if self._log is not None and not self._log.closed:
            self._log.close()


# ---------------------------------------------------------------- nodes


class RelayNode(clihelpers.Node):
    """A `tandem node` that logs to a file and can be restarted on the same port."""

    def __init__(self, data_dir):
        super().__init__(data_dir)
        self.log_path = pathlib.Path(self.data_dir).with_suffix(".log")
        self._log = None

    def start(self, port=None):
        self.port = port or self.port or free_port()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [TANDEM, "node", "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}", "--no-discovery"],
            stdout=subprocess.DEVNULL, stderr=self._log)
        try:
            wait_listening(self.port, self.proc)
            wait_control_socket(self.control_socket, self.proc)
        except AssertionError as e:
            raise AssertionError(f"{e}; log:\n{self.log()}")
        return self

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=10):
        try:
            return super().stop(sig, timeout)
        finally:
            if self._log is not None and not self._log.closed:
                self._log.close()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self._log is not None and not self._log.closed:
            self._log.close()


def cli(node, *args, check=True, timeout=30):
    return run(*args, "--data-dir", node.data_dir, check=check, timeout=timeout)


def cli_json(node, *args):
    return json.loads(cli(node, *args, "--json").stdout)


def events(node, type_=None, **fields):
    """The node's stored events (oldest first), optionally of one type with matching fields."""
    out = [json.loads(l) for l in cli(node, "events", "--json").stdout.splitlines() if l.strip()]
    return [e for e in out if (type_ is None or e["type"] == type_)
            and all(str(e.get(k)) == str(v) for k, v in fields.items())]


def last_seq(node):
    evs = events(node)
    return evs[-1]["seq"] if evs else 0


def wait_event(node, type_, *matches, since=0, timeout="20s"):
    """`tandem wait TYPE --since SINCE --match ...`: the first matching event after `since`."""
    args = ["wait", type_, "--since", str(since), "--timeout", timeout, "--json"]
    for m in matches:
        args += ["--match", m]
    proc = cli(node, *args, check=False, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{node.data_dir}: no {type_} {list(matches)} since #{since} within {timeout} "
                             f"(exit {proc.returncode}: {proc.stderr.strip()}); events:\n"
                             + "\n".join(json.dumps(e) for e in events(node)[-25:]))
    return json.loads(proc.stdout)


def relay_status(node, relay):
    for r in cli_json(node, "relay", "list")["relays"]:
        if r["address"] == relay.address:
            return r
    return None


def wait_relay_connected(node, relay, timeout=15.0):
    return poll(lambda: (s := relay_status(node, relay)) is not None and s["connected"] and s,
                timeout, what=f"{node.data_dir} connected to {relay.address}")


def add_relay(node, relay, timeout=15.0):
    cli(node, "relay", "add", relay.address)
    return wait_relay_connected(node, relay, timeout)


def share_code(node):
    return cli(node, "id", "--share").stdout.strip()


def friend(node, other):
    """`node`'s friend-list entry for `other`, or None."""
    for f in cli_json(node, "friend", "list")["friends"]:
        if f["id"] == other.id:
            return f
    return None


def befriend_via_relay(a, b, message="hi"):
    """A asks B (by B's share code, naming B's home relay), B accepts; both see each other online.
    Both must already be registered at their home relay."""
    code = share_code(b)
    assert "?relay=" in code, code
    sa, sb = last_seq(a), last_seq(b)
    cli(a, "friend", "request", code, "--message", message)
    got = wait_event(b, "friend.request.received", f"id={a.id}", since=sb)
    cli(b, "friend", "accept", a.id)
    wait_event(a, "friend.accepted", f"id={b.id}", since=sa)
    wait_event(a, "peer.online", f"id={b.id}", since=sa)
    wait_event(b, "peer.online", f"id={a.id}", since=sb)
    return got


def challenge_ids(node):
    return [c["id"] for c in cli_json(node, "challenge", "list")["challenges"]]

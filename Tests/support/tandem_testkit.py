"""The one Python helper module of the multi-process test suites (Tests/cli, Tests/relay,
Tests/adversarial, Tests/lan, Tests/interop): starting `tandem node` and `tandem-relay` processes,
running the CLI, waiting for events and polling, allocating ports.

Each suite's conftest.py puts this folder on sys.path (`sys.path.insert`), so test modules and
suite helpers import it as `tandem_testkit`. Suite-specific helpers (a node under libfaketime, a
hostile target with a low descriptor limit, the namespace LAN) stay in their suite and build on
what is here.

A *node* argument is anything with a data directory: a `Node`, or a LAN test's dict with "dir".
"""
import glob
import json
import os
import pathlib
import random
import select
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
TANDEM = os.environ.get("TANDEM_BIN", str(REPO / ".build" / "debug" / "tandem"))
RELAY = os.environ.get("TANDEM_RELAY_BIN", str(REPO / ".build" / "debug" / "tandem-relay"))
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)


# Many nodes run at once under the tests: none serves the web dashboard on its default port unless a
# test asks for one (`--web 127.0.0.1:0`, Tests/web). A port clash would only cost the dashboard.
os.environ.setdefault("TANDEM_WEB", "off")


def no_lan_discovery():
    """Loopback suites must not broadcast on the machine's real interfaces: every node they start
    runs without LAN discovery (the namespace tests in Tests/lan turn it on inside their own network)."""
    os.environ["TANDEM_NO_DISCOVERY"] = "1"
    # Nor a lock keeper (a process that outlives its node to hold a locked mode): a test that kills
    # a node mid-lock would leave one behind. The test of the keeper turns it on for its node.
    os.environ["TANDEM_NO_LOCK_KEEPER"] = "1"


def realtime_prefix():
    """`chrt --fifo 10` with TANDEM_TEST_REALTIME=1 when we may use it (root), else nothing.

    The skew bounds of the challenge tests are about the nodes: how well they agree on an instant
    and arm their timers. On a small machine busy with other work (two CPUs and a compiler, say) a
    thread that sleeps until a deadline is routinely woken 10-40 ms late by the kernel, whatever the
    node does, so the node asks for the real-time class for its challenge timer thread itself (where
    allowed), and TANDEM_TEST_REALTIME=1 puts the whole node there for a machine busier still. Never
    for a node under libfaketime: it can make a dispatch thread spin, which the real-time class would
    let starve the machine."""
    if os.environ.get("TANDEM_TEST_REALTIME", "0") != "1" or shutil.which("chrt") is None:
        return []
    try:
        ok = subprocess.run(["chrt", "--fifo", "10", "true"], capture_output=True, timeout=10).returncode == 0
    except OSError:
        ok = False
    return ["chrt", "--fifo", "10"] if ok else []


# ---------------------------------------------------------------- the CLI


def data_dir_of(node):
    """The data directory of a Node, of a LAN test's node dict ("dir"), or a path."""
    if isinstance(node, dict):
        return str(node["dir"])
    if isinstance(node, (str, pathlib.Path)):
        return str(node)
    return node.data_dir


def run(*args, check=True, timeout=30, env=None, environ=None):
    """Runs `tandem ARGS`, returns the CompletedProcess (text). `env` adds to this process's
    environment; `environ` replaces it."""
    base = os.environ if environ is None else environ
    proc = subprocess.run([TANDEM, *args], capture_output=True, text=True, timeout=timeout, env={**base, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"tandem {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def cli(node, *args, check=True, timeout=30, environ=None):
    """`tandem ARGS --data-dir DIR` for `node`."""
    return run(*args, "--data-dir", data_dir_of(node), check=check, timeout=timeout, environ=environ)


def cli_json(node, *args, timeout=30, environ=None):
    """`tandem ARGS --json` for `node`, parsed."""
    return json.loads(cli(node, *args, "--json", timeout=timeout, environ=environ).stdout)


def one_line_error(proc, program="tandem"):
    """Bad input: one clear line on stderr, no stack trace (a node's structured log records aside)."""
    lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith("ts=")]
    assert len(lines) == 1, f"expected one stderr line, got: {proc.stderr!r}"
    assert lines[0].startswith(f"{program}: error: "), lines[0]
    assert "Backtrac" not in proc.stderr and "Fatal error" not in proc.stderr
    return lines[0]


def init_identity(data_dir, environ=None):
    """`tandem init` then `tandem id --json`: the new identity's JSON (id, public_key, …)."""
    run("init", "--data-dir", str(data_dir), environ=environ)
    return json.loads(run("id", "--json", "--data-dir", str(data_dir), environ=environ).stdout)


def control_call(node, method, params=None, timeout=10):
    """One request on the node's control socket (Protocol/control.md): the answer object,
    `{"id", "ok", "result"}` or `{"id", "ok": false, "error"}`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(os.path.join(data_dir_of(node), "control.sock"))
        s.sendall(json.dumps({"id": 1, "method": method, "params": params or {}}).encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise AssertionError(f"the node closed the control connection without answering {method}")
            buf += chunk
    return json.loads(buf.partition(b"\n")[0])


# ---------------------------------------------------------------- events, waiting, polling


def events(node, type_=None, environ=None, **fields):
    """The node's stored events (oldest first), optionally of one type with matching fields."""
    out = [json.loads(l) for l in cli(node, "events", "--json", environ=environ).stdout.splitlines() if l.strip()]
    return [e for e in out if (type_ is None or e["type"] == type_)
            and all(str(e.get(k)) == str(v) for k, v in fields.items())]


def last_seq(node):
    evs = events(node)
    return evs[-1]["seq"] if evs else 0


def wait_event(node, type_, *matches, since=0, timeout="20s", environ=None):
    """`tandem wait TYPE --since SINCE --match ...`: the first matching event after `since`. On a
    timeout it fails with the node's last events."""
    args = ["wait", type_, "--since", str(since), "--timeout", timeout, "--json"]
    for m in matches:
        args += ["--match", m]
    proc = cli(node, *args, check=False, timeout=300, environ=environ)
    if proc.returncode != 0:
        raise AssertionError(f"{data_dir_of(node)}: no {type_} {list(matches)} since #{since} within {timeout} "
                             f"(exit {proc.returncode}: {proc.stderr.strip()}); events:\n"
                             + "\n".join(json.dumps(e) for e in events(node, environ=environ)[-25:]))
    return json.loads(proc.stdout)


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


def until(predicate, timeout=15.0, step=0.2):
    """Like `poll`, but returns the last value (falsy) instead of failing: for callers that assert
    on it themselves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


# ---------------------------------------------------------------- ports and processes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_wildcard_port():
    """A port a test can bind on the IPv4 and the IPv6 wildcard. It comes from below the kernel's
    ephemeral range (32768-60999 here), so no outgoing connection of a parallel test holds it as
    its local port: a wildcard bind collides with those, where a loopback bind of free_port()
    would not (seen in CI: EADDRINUSE on 0.0.0.0 while tests ran -n 3)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        try:
            # One after the other: an IPv6 wildcard socket is dual-stack and would collide with
            # the IPv4 one held open beside it.
            for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                with socket.socket(family) as s:
                    s.bind((host, port))
            return port
        except OSError:
            continue
    raise AssertionError("no free port below the ephemeral range for a wildcard listener")


def _exited(proc):
    err = proc.stderr.read() if proc.stderr is not None else ""
    return AssertionError(f"node exited early ({proc.returncode}): {err}")


def wait_listening(port, proc, timeout=15.0, host="127.0.0.1"):
    """Waits until something accepts TCP connections on host:port (failing if `proc` exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _exited(proc)
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"node did not listen on {port} within {timeout}s")


def wait_control_socket(path, proc, timeout=15.0):
    """Waits until the node accepts connections on its control socket."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _exited(proc)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                s.connect(path)
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"no control socket at {path} within {timeout}s")


def read_line(proc, timeout, what="the process"):
    """The first line `proc` writes to its stdout pipe (bytes up to the newline, decoded)."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{what} printed no line within {timeout} s")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                proc.wait(timeout=5)
                raise AssertionError(f"{what} exited ({proc.returncode}) before printing a line")
            buf += chunk
    return buf.split(b"\n", 1)[0].decode()


def rss_kib(pid):
    """Resident set size from /proc (KiB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS line")


# ---------------------------------------------------------------- nodes


class Node:
    """A `tandem node` process with its own data dir, on loopback, without LAN discovery.

    `log_path`: where its stderr goes (a file the test can show); without one, stderr is a pipe
    read when it exits early. `keeps_port`: whether `start()` without a port restarts it where it
    was (peers remember that address), or on a fresh port."""

    keeps_port = False

    def __init__(self, data_dir, log_path=None):
        self.data_dir = str(data_dir)
        self.info = init_identity(self.data_dir)
        self.id = self.info["id"]
        self.port = None
        self.proc = None
        self.env = None
        self.log_path = pathlib.Path(log_path) if log_path else None
        self._log = None

    def command(self):
        return [TANDEM, "node", "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}", "--no-discovery"]

    def start(self, port=None, env=None, prefix=(), preexec_fn=None):
        """Starts the node (extra environment `env`, kept for restarts; `prefix`: a command that
        execs it, e.g. chrt or env) and waits until it listens and its control socket answers."""
        self.port = port or (self.port if self.keeps_port else None) or free_port()
        self.env = env if env is not None else self.env
        if self.log_path is not None:
            self._log = open(self.log_path, "ab")
            output = {"stderr": self._log}
        else:
            output = {"stderr": subprocess.PIPE, "text": True}
        self.proc = subprocess.Popen([*prefix, *self.command()], stdout=subprocess.DEVNULL,
                                     env={**os.environ, **(self.env or {})}, preexec_fn=preexec_fn, **output)
        try:
            wait_listening(self.port, self.proc)
            wait_control_socket(self.control_socket, self.proc)
        except AssertionError as e:
            if self.log_path is None:
                raise
            raise AssertionError(f"{e}; log:\n{self.log()}")
        return self

    @property
    def control_socket(self):
        return os.path.join(self.data_dir, "control.sock")

    def control(self):
        """A raw connection to the node's control socket (the caller closes it)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.control_socket)
        return s

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def public_key(self):
        return bytes.fromhex(self.info["public_key"])

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def rss_kib(self):
        return rss_kib(self.pid)

    def log(self):
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Signals the node and waits; returns its exit code (fails if it does not stop in time)."""
        try:
            if self.proc is None or self.proc.poll() is not None:
                return self.proc.returncode if self.proc else None
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("node did not stop within the timeout after the signal")
        finally:
            self._close_log()

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._close_log()

    def _close_log(self):
        if self._log is not None and not self._log.closed:
            self._log.close()


class LoggedNode(Node):
    """A node that logs to DATA_DIR.log and restarts on the same port (relay and adversarial tests)."""

    keeps_port = True

    def __init__(self, data_dir):
        super().__init__(data_dir, log_path=pathlib.Path(str(data_dir)).with_suffix(".log"))


def befriend(a, b, message=None, online=True):
    """A asks B over B's address, B accepts; with `online`, both also see each other online."""
    args = ["friend", "request", b.id] + (["--message", message] if message is not None else []) + ["--addr", b.address]
    cli(a, *args)
    wait_event(b, "friend.request.received", f"id={a.id}")
    cli(b, "friend", "accept", a.id)
    wait_event(a, "friend.accepted", f"id={b.id}")
    if online:
        wait_event(a, "peer.online", f"id={b.id}")
        wait_event(b, "peer.online", f"id={a.id}")


def friend(node, other, environ=None):
    """`node`'s friend-list entry for `other` (a Node or a LAN node dict), or None."""
    other_id = other["id"] if isinstance(other, dict) else other.id
    return next((f for f in cli_json(node, "friend", "list", environ=environ)["friends"] if f["id"] == other_id), None)


# ---------------------------------------------------------------- relays


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
    restarted where its clients expect it) and a known metrics port. Logs to ROOT/NAME.log."""

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
        try:
            line = read_line(self.proc, timeout, what="the relay")
        except AssertionError as e:
            raise AssertionError(f"{e}; log:\n{self.log()}")
        prefix = "tandem-relay listening: "
        assert line.startswith(prefix), f"unexpected first line from the relay: {line!r}"
        self.address = line[len(prefix):].strip()
        self.id = self.address.split("@", 1)[0]
        assert self.address.endswith(f"@127.0.0.1:{self.port}"), self.address
        poll(self._metrics_up, timeout, what="the relay's metrics endpoint")
        return self

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
        return rss_kib(self.pid)

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

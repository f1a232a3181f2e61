"""Shared helpers for tests that drive real `tandem` processes on loopback."""
import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import time


REPO = pathlib.Path(__file__).resolve().parents[2]
# Loopback tests must not broadcast on the machine's real interfaces: every node they start runs
# without LAN discovery (the namespace tests in Tests/lan turn it on inside their own network).
os.environ["TANDEM_NO_DISCOVERY"] = "1"

TANDEM = os.environ.get("TANDEM_BIN", str(REPO / ".build" / "debug" / "tandem"))


def run(*args, check=True, timeout=30, env=None):
    """Runs `tandem ARGS`, returns the CompletedProcess (text)."""
    proc = subprocess.run([TANDEM, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"tandem {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"node exited early ({proc.returncode}): {proc.stderr.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"node did not listen on {port} within {timeout}s")


def wait_control_socket(path, proc, timeout=15.0):
    """Waits until the node accepts connections on its control socket."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"node exited early ({proc.returncode}): {proc.stderr.read()}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                s.connect(path)
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"no control socket at {path} within {timeout}s")


class Node:
    """A `tandem node` process with its own data dir."""

    def __init__(self, data_dir):
        self.data_dir = str(data_dir)
        run("init", "--data-dir", self.data_dir)
        self.info = json.loads(run("id", "--json", "--data-dir", self.data_dir).stdout)
        self.id = self.info["id"]
        self.port = None
        self.proc = None

    def start(self):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [TANDEM, "node", "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}", "--no-discovery"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_listening(self.port, self.proc)
        wait_control_socket(self.control_socket, self.proc)
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

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("node did not stop within the timeout after the signal")


def one_line_error(proc):
    """Bad input: one clear line on stderr, no stack trace (a node's structured log records aside)."""
    lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith("ts=")]
    assert len(lines) == 1, f"expected one stderr line, got: {proc.stderr!r}"
    assert lines[0].startswith("tandem: error: "), lines[0]
    assert "Backtrac" not in proc.stderr and "Fatal error" not in proc.stderr
    return lines[0]

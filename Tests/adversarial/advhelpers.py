"""Helpers for the adversarial tests: real `tandem node` processes on loopback (started as the CLI
and relay tests start them, TANDEM_BIN), their memory, and whether `tandem status` still answers."""
import json
import pathlib
import resource
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "relay"))
sys.path.insert(0, str(REPO / "Tests" / "cli"))

from clihelpers import TANDEM, free_port, run, wait_control_socket, wait_listening  # noqa: E402,F401
from relayhelpers import RelayNode, cli, cli_json, events, friend, last_seq, poll, wait_event  # noqa: E402,F401

# Source addresses on loopback (Linux routes all of 127/8 to lo): attackers and the honest peer
# come from different addresses, as they would on a network.
HONEST = "127.0.0.1"
ATTACKER = "127.0.0.2"


class HostileTarget(RelayNode):
    """A `tandem node` (logging to a file, restartable on its port) that hostile peers attack."""

    def start(self, port=None, nofile=None):
        """Starts the node; `nofile` lowers its file-descriptor limit (RLIMIT_NOFILE soft limit)."""
        if nofile is None:
            return super().start(port)
        self.port = port or self.port or free_port()
        self._log = open(self.log_path, "ab")
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        self.proc = subprocess.Popen(
            [TANDEM, "node", "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}", "--no-discovery"],
            stdout=subprocess.DEVNULL, stderr=self._log,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard)))
        wait_listening(self.port, self.proc)
        wait_control_socket(self.control_socket, self.proc)
        return self

    @property
    def public_key(self):
        return bytes.fromhex(self.info["public_key"])

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def rss_kib(self):
        """Resident set size from /proc (KiB)."""
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    def status(self, timeout=10):
        """`tandem status --json` → (the object, seconds it took). Fails if it does not answer."""
        start = time.monotonic()
        proc = run("status", "--json", "--data-dir", self.data_dir, timeout=timeout)
        return json.loads(proc.stdout), time.monotonic() - start

    def transport(self):
        """The node's transport counters (`tandem status --json`, member "transport"; {} from a
        node that does not report them)."""
        return self.status()[0].get("transport", {})

    def links_closed(self, reason):
        return self.transport().get("links_closed", {}).get(reason, 0)

    def assert_healthy(self, status_within=5.0):
        """Alive, and `tandem status` answers within `status_within` seconds."""
        assert self.alive(), f"the node died (exit {self.proc.returncode}); log:\n{self.log()[-4000:]}"
        status, took = self.status()
        assert took < status_within, f"tandem status took {took:.1f} s"
        assert status["id"] == self.id
        return status

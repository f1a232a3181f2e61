"""Helpers for the adversarial tests: real `tandem node` processes on loopback (started as the CLI
and relay tests start them, TANDEM_BIN), their memory, and whether `tandem status` still answers."""
import json
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "relay"))
sys.path.insert(0, str(REPO / "Tests" / "cli"))

from clihelpers import TANDEM, run  # noqa: E402,F401  (sets TANDEM_NO_DISCOVERY=1)
from relayhelpers import RelayNode, cli, cli_json, events, friend, last_seq, poll, wait_event  # noqa: E402,F401


class HostileTarget(RelayNode):
    """A `tandem node` (logging to a file, restartable on its port) that hostile peers attack."""

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
        """The node's transport counters (`tandem status --json`, member "transport")."""
        return self.status()[0]["transport"]

    def assert_healthy(self, status_within=5.0):
        """Alive, and `tandem status` answers within `status_within` seconds."""
        assert self.alive(), f"the node died (exit {self.proc.returncode}); log:\n{self.log()[-4000:]}"
        status, took = self.status()
        assert took < status_within, f"tandem status took {took:.1f} s"
        assert status["id"] == self.id
        return status

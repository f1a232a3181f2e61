"""Helpers for the adversarial tests: the node hostile peers attack (a `tandem node` on loopback,
started as every suite starts one: Tests/support/tandem_testkit.py), its memory, and whether
`tandem status` still answers."""
import json
import resource
import time

from tandem_testkit import LoggedNode, run

# Source addresses on loopback (Linux routes all of 127/8 to lo): attackers and the honest peer
# come from different addresses, as they would on a network.
HONEST = "127.0.0.1"
ATTACKER = "127.0.0.2"


class HostileTarget(LoggedNode):
    """A `tandem node` (logging to a file, restartable on its port) that hostile peers attack."""

    def start(self, port=None, nofile=None):
        """Starts the node; `nofile` lowers its file-descriptor limit (RLIMIT_NOFILE soft limit)."""
        if nofile is None:
            return super().start(port)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        return super().start(port, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard)))

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

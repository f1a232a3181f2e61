"""A LAN in network namespaces, shared by the tests in this folder.

A "switch" namespace holds a bridge; three host namespaces each have a veth into it with
10.77.0.{1,2,3}/24 (broadcast 10.77.0.255). Nothing is created in, or sent to, the host's own
network namespace: every datagram stays on that bridge. Needs root (`ip netns`); skipped otherwise.
"""
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TANDEM_BIN = os.environ.get("TANDEM_BIN", str(REPO / ".build/debug/tandem"))
SUBNET = "10.77.0"
BROADCAST = f"{SUBNET}.255"


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True, timeout=20)


def make_lan():
    """A context manager would hide the skip reasons; this generator is driven by the fixture."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed")
    if not Path(TANDEM_BIN).exists():
        pytest.skip(f"no tandem binary at {TANDEM_BIN} (run `swift build` or set TANDEM_BIN)")
    tag = secrets.token_hex(3)
    switch = f"tdsw{tag}"
    hosts = [f"tdh{tag}{i}" for i in (1, 2, 3)]
    bridge = f"tdbr{tag}"
    made = []
    try:
        try:
            ip("netns", "add", switch)
        except (subprocess.CalledProcessError, OSError) as e:
            pytest.skip(f"`ip netns add` failed: {getattr(e, 'stderr', e)}")
        made.append(switch)
        ip("-n", switch, "link", "set", "lo", "up")
        ip("-n", switch, "link", "add", bridge, "type", "bridge")
        ip("-n", switch, "link", "set", bridge, "up")
        for i, host in enumerate(hosts, 1):
            ip("netns", "add", host)
            made.append(host)
            port_name = f"tdv{tag}{i}"
            # Both ends are created straight in their namespaces: nothing in the root namespace.
            ip("-n", switch, "link", "add", port_name, "type", "veth", "peer", "name", "eth0", "netns", host)
            ip("-n", switch, "link", "set", port_name, "master", bridge)
            ip("-n", switch, "link", "set", port_name, "up")
            ip("-n", host, "link", "set", "lo", "up")
            ip("-n", host, "addr", "add", f"{SUBNET}.{i}/24", "brd", BROADCAST, "dev", "eth0")
            ip("-n", host, "link", "set", "eth0", "up")
        yield hosts
    finally:
        for ns in reversed(made):
            ip("netns", "del", ns, check=False)



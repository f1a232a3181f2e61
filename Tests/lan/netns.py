"""A LAN in network namespaces, shared by the tests in this folder, and the CLI as those tests drive
it (Tests/support/tandem_testkit.py, in the environment of a node that wants discovery).

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

import tandem_testkit
from tandem_testkit import REPO, until  # noqa: F401

TANDEM_BIN = tandem_testkit.TANDEM
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




# ---------------------------------------------------------------- the CLI on the namespace LAN

# LAN tests want discovery: drop the loopback suites' switch.
NODE_ENV = {k: v for k, v in os.environ.items() if k != "TANDEM_NO_DISCOVERY"}


def cli(node, *args, timeout=30):
    """`tandem ARGS --data-dir DIR` for a LAN node (a dict with "dir"): its stdout."""
    return tandem_testkit.cli(node, *args, timeout=timeout, environ=NODE_ENV).stdout


def cli_json(node, *args, timeout=30):
    return tandem_testkit.cli_json(node, *args, timeout=timeout, environ=NODE_ENV)


def wait_event(node, event, *matches, timeout="20s"):
    """The first event of that type since the node's first event (`tandem wait --since 0`)."""
    return tandem_testkit.wait_event(node, event, *matches, since=0, timeout=timeout, environ=NODE_ENV)


def init_node(data_dir):
    """A fresh identity in `data_dir`: its `tandem id --json`."""
    return tandem_testkit.init_identity(data_dir, environ=NODE_ENV)


def answers(node):
    """Whether the LAN node's process runs and its control socket answers `tandem status`."""
    return node["proc"].poll() is None and tandem_testkit.cli(
        node, "status", check=False, environ=NODE_ENV).returncode == 0

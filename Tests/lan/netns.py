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


def skip_unless_namespaces(binaries=(("tandem", TANDEM_BIN),)):
    """Skips the test unless it can make namespaces (root, `ip`) and each (name, path) binary exists."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed")
    for what, path in binaries:
        if not Path(path).exists():
            variable = "TANDEM_BIN" if what == "tandem" else "TANDEM_RELAY_BIN"
            pytest.skip(f"no {what} binary at {path} (run `swift build` or set {variable})")


def make_lan():
    """A context manager would hide the skip reasons; this generator is driven by the fixture."""
    skip_unless_namespaces()
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


def start_node(ns, data_dir, *node_args, prefix=(), env=NODE_ENV):
    """`tandem node` for `data_dir` in namespace `ns`: on 0.0.0.0:7810 with fast beacons (every
    0.3 s), then `node_args`. `prefix` goes between `ip netns exec NS` and the binary (a scheduler,
    or libfaketime through env(1)). Its stderr is a pipe, read when it does not come up."""
    command = ["ip", "netns", "exec", ns, *prefix, TANDEM_BIN, "node", "--data-dir", str(data_dir),
               "--listen", "0.0.0.0:7810", "--discovery-interval", "0.3", *node_args]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)

"""Fixtures for the namespace LAN tests."""
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))

from netns import NODE_ENV, SUBNET, answers, cli, init_node, make_lan, start_node, until  # noqa: E402


@pytest.fixture(scope="module")
def lan():
    yield from make_lan()


@pytest.fixture
def lan_nodes(lan, tmp_path):
    """start(names, *node_args, env=NODE_ENV, named=False, prefixes=None) -> a running node per name.

    The i-th name gets a fresh identity in tmp_path/<name, lower case> and a `tandem node` in the
    i-th namespace of `lan` (10.77.0.i:7810, `start_node` with `node_args`, prefixes[i] before the
    binary), and is returned once its control socket answers, as a dict: dir, id, public_key, ip,
    name, ns, proc. With `named`, each node is also given its name (`tandem name`). Every node
    started is stopped after the test; one started under libfaketime has its shared memory removed."""
    started = []

    def start(names, *node_args, env=NODE_ENV, named=False, prefixes=None):
        prefixes = list(prefixes or [()] * len(names))
        assert len(names) <= len(lan) and len(prefixes) == len(names)
        nodes = []
        for i, (ns, name, prefix) in enumerate(zip(lan, names, prefixes), 1):
            d = tmp_path / name.lower()
            info = init_node(d)
            proc = start_node(ns, d, *node_args, prefix=prefix, env=env)
            started.append((proc, prefix))
            nodes.append({"dir": str(d), "id": info["id"], "public_key": info["public_key"], "ip": f"{SUBNET}.{i}",
                          "name": name, "ns": ns, "proc": proc})
        for node in nodes:
            assert until(lambda: answers(node)), node["proc"].stderr.read()
            if named:
                cli(node, "name", node["name"])
        return nodes

    yield start
    for proc, _ in started:
        proc.terminate()
    for proc, prefix in started:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if any(str(word).startswith("LD_PRELOAD=") for word in prefix):
            for name in (f"faketime_shm_{proc.pid}", f"sem.faketime_sem_{proc.pid}"):
                pathlib.Path("/dev/shm", name).unlink(missing_ok=True)

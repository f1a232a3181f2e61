"""Backups on a namespace LAN: two real nodes that found each other by broadcast (no address is ever
given) push a vault with --lan-only, and a third host restores the whole node from the holder over
the LAN, byte for byte."""
import json
import os
import subprocess

import pytest

from netns import NODE_ENV, TANDEM_BIN, cli, cli_json, until, wait_event

CHEAP = {**NODE_ENV, "TANDEM_TEST_CHEAP_PIN_HASH": "1"}


def tandem(node, *args, stdin=None, ns=None, timeout=120):
    cmd = ([] if ns is None else ["ip", "netns", "exec", ns]) + [TANDEM_BIN, *args, "--data-dir", node["dir"]]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=CHEAP)
    assert proc.returncode == 0, f"tandem {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
    return proc


@pytest.fixture
def pair(lan_nodes):
    return lan_nodes(["Alice", "Bob"], env=CHEAP)


def test_lan_only_push_and_restore_on_a_third_host(pair, lan, tmp_path):
    alice, bob = pair
    assert until(lambda: bob["id"] in {p["id"] for p in cli_json(alice, "peers")["peers"]})
    cli(alice, "friend", "request", bob["id"])
    wait_event(bob, "friend.request.received", f"id={alice['id']}")
    cli(bob, "friend", "accept", alice["id"])
    wait_event(alice, "friend.accepted", f"id={bob['id']}")

    tandem(alice, "vault", "init", "--pin-stdin", stdin="2580\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "scan.pdf").write_bytes(os.urandom(5 * 1024 * 1024 + 3))
    tandem(alice, "vault", "import", str(src), "--pin-stdin", stdin="2580\n")
    code = json.loads(tandem(alice, "recovery", "show", "--pin-stdin", "--json", stdin="2580\n").stdout)["code"]
    tandem(bob, "backup", "offer", alice["id"], "--quota", "1GiB")
    wait_event(alice, "backup.offer.received", f"from={bob['id']}")
    pushed = json.loads(tandem(alice, "backup", "push", "--lan-only", "--json").stdout.splitlines()[-1])
    assert pushed["pushes"][0]["to"] == bob["id"] and pushed["bytes_sent"] > 5 * 1024 * 1024, pushed

    # A fresh machine on the same LAN (the third namespace) gets the whole node back from Bob.
    fresh = {"dir": str(tmp_path / "alice-again")}
    proc = subprocess.run(["ip", "netns", "exec", lan[2], TANDEM_BIN, "restore", "--from", f"{bob['id']}@{bob['ip']}:7810",
                           "--code-stdin", "--json", "--data-dir", fresh["dir"]], input=code + "\n", capture_output=True,
                          text=True, timeout=300, env=CHEAP)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["id"] == alice["id"], report
    packs = lambda d: {p: open(os.path.join(r, p), "rb").read() for r, _, fs in os.walk(os.path.join(d, "vault", "packs")) for p in fs}
    assert packs(fresh["dir"]) == packs(alice["dir"])

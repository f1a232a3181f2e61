"""Messages between two real `tandem node` processes on a namespace LAN (Protocol/messages.md 2):
the friends found each other by broadcast alone, Bob writes, Alice's network goes down in the
middle of his burst and comes back; every message reaches her exactly once and in order, over the
LAN link, and Bob sees each one delivered."""
import subprocess

import pytest
import tandem_testkit

from netns import NODE_ENV, cli, cli_json, until, wait_event


@pytest.fixture
def pair(lan_nodes):
    return lan_nodes(["Alice", "Bob"], "--heartbeat", "2")


def test_messages_on_a_lan_across_a_partition(pair):
    alice, bob = pair
    assert until(lambda: alice["id"] in {p["id"] for p in cli_json(bob, "peers")["peers"]}, timeout=20)
    cli(bob, "friend", "request", alice["id"])
    wait_event(alice, "friend.request.received", f"id={bob['id']}")
    cli(alice, "friend", "accept", bob["id"])
    wait_event(bob, "peer.online", f"id={alice['id']}")
    assert cli_json(bob, "friend", "list")["friends"][0]["via"] == "lan"

    first = cli_json(bob, "message", "send", alice["id"], "on the lan", "--wait", "delivered", "--timeout", "20s")["id"]
    wait_event(alice, "message.received", f"id={first}")
    ids = [cli_json(bob, "message", "send", alice["id"], f"burst {i}")["id"] for i in range(10)]
    subprocess.run(["ip", "-n", alice["ns"], "link", "set", "eth0", "down"], check=True)
    try:
        ids += [cli_json(bob, "message", "send", alice["id"], f"burst {i}")["id"] for i in range(10, 20)]
    finally:
        subprocess.run(["ip", "-n", alice["ns"], "link", "set", "eth0", "up"], check=True)
    wait_event(alice, "message.received", f"id={ids[-1]}", timeout="90s")
    shown = cli_json(alice, "message", "list", bob["id"], "--limit", "100")["messages"]
    assert [m["text"] for m in shown] == ["on the lan"] + [f"burst {i}" for i in range(20)]
    received = [e["id"] for e in tandem_testkit.events(alice, "message.received", environ=NODE_ENV)]
    assert sorted(received) == sorted([first] + ids) and len(received) == 21, "each message exactly once"
    assert until(lambda: all(m["state"] in ("delivered", "read")
                             for m in cli_json(bob, "message", "list", alice["id"], "--limit", "100")["messages"]), timeout=30)

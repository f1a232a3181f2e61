"""Three real `tandem node` processes on a namespace LAN find each other by broadcast (no address
is ever given) and two of them become friends through the CLI. After that they beacon privately:
the friend keeps recognising them, the third host stops seeing them."""
import subprocess
import time

import pytest

from netns import cli, cli_json, until, wait_event


@pytest.fixture
def nodes(lan_nodes):
    """A node in each of the three namespaces, named, listening on 7810 with fast beacons."""
    return lan_nodes(["Alice", "Bob", "Carol"], "--heartbeat", "2", named=True)


def peers(node):
    return {p["id"]: p for p in cli_json(node, "peers")["peers"]}


def test_discover_and_befriend_on_a_lan(nodes):
    alice, bob, carol = nodes
    # Everyone is discoverable at first (no friends yet): each sees the other two, by broadcast alone.
    for me in nodes:
        others = [n for n in nodes if n is not me]
        seen = until(lambda: all(o["id"] in peers(me) for o in others))
        assert seen, f"{me['name']} saw {list(peers(me))}"
        for o in others:
            p = peers(me)[o["id"]]
            assert p["address"] == f"{o['ip']}:7810" and p["friend"] is False
    assert until(lambda: peers(bob)[alice["id"]]["name"] == "Alice")

    # Bob asks Alice without knowing any address: the LAN sighting is enough.
    cli(bob, "friend", "request", alice["id"], "--message", "study together?")
    got = wait_event(alice, "friend.request.received", f"id={bob['id']}")
    assert got["address"] == bob["ip"] and got["message"] == "study together?"
    cli(alice, "friend", "accept", bob["id"])
    wait_event(bob, "friend.accepted", f"id={alice['id']}")
    wait_event(bob, "peer.online", f"id={alice['id']}")
    friend = until(lambda: next(iter(cli_json(bob, "friend", "list")["friends"]), None))
    assert friend["id"] == alice["id"] and friend["online"] is True and friend["via"] == "lan"

    # With a friend, "auto" turns open beacons off: from now on only private beacons go out.
    assert cli_json(alice, "discoverable")["discoverable"] is False
    assert cli_json(bob, "discoverable")["discoverable"] is False
    time.sleep(1.0)  # let the last open beacons drain
    mark = time.time() * 1000

    def last_seen_ms(node, other):
        p = peers(node).get(other["id"])
        if not p:
            return 0
        from datetime import datetime
        return datetime.fromisoformat(p["last_seen"].replace("Z", "+00:00")).timestamp() * 1000

    # Bob keeps recognising Alice (private beacons, marked as a friend's) …
    assert until(lambda: last_seen_ms(bob, alice) > mark + 500, timeout=10)
    assert peers(bob)[alice["id"]]["friend"] is True
    # … while Carol, a stranger on the same LAN, hears nothing she can tie to Alice or Bob.
    time.sleep(2.0)
    assert last_seen_ms(carol, alice) < mark and last_seen_ms(carol, bob) < mark
    # Carol is still discoverable and both still see her.
    assert until(lambda: last_seen_ms(alice, carol) > mark)


def test_partition_and_heal(nodes):
    """Taking a host's link down makes its friend go offline; bringing it back reconnects."""
    alice, bob, _ = nodes
    cli(bob, "friend", "request", alice["id"])
    wait_event(alice, "friend.request.received", f"id={bob['id']}")
    cli(alice, "friend", "accept", bob["id"])
    wait_event(bob, "peer.online", f"id={alice['id']}")
    ns_alice = alice["ns"]
    subprocess.run(["ip", "-n", ns_alice, "link", "set", "eth0", "down"], check=True)
    try:
        # Silence is noticed by the heartbeat (3 × 2 s here) or the broken connection, whichever is first.
        offline = wait_event(bob, "peer.offline", f"id={alice['id']}", timeout="30s")
    finally:
        subprocess.run(["ip", "-n", ns_alice, "link", "set", "eth0", "up"], check=True)
    # Both nodes survive the outage (a send error on a vanished network must not stop discovery).
    assert all(n["proc"].poll() is None for n in nodes)
    out = cli_json(bob, "wait", "peer.online", "--match", f"id={alice['id']}", "--since", str(offline["seq"]),
                   "--timeout", "60s", timeout=90)
    assert out["id"] == alice["id"]

"""Relay-specific helpers for tests that drive a real `tandem-relay` and real `tandem node` processes
on loopback (the generic ones, nodes and relays included, are in Tests/support/tandem_testkit.py).

Every node runs without LAN discovery (`--no-discovery`, and TANDEM_NO_DISCOVERY=1 from the suite's
conftest) and is never told another node's address: whatever reaches it comes through the relay.
Processes log to files in the test's tmp_path (a pipe nobody reads would block them once full).
"""
from tandem_testkit import cli, cli_json, last_seq, poll, wait_event


def relay_status(node, relay):
    for r in cli_json(node, "relay", "list")["relays"]:
        if r["address"] == relay.address:
            return r
    return None


def wait_relay_connected(node, relay, timeout=15.0):
    return poll(lambda: (s := relay_status(node, relay)) is not None and s["connected"] and s,
                timeout, what=f"{node.data_dir} connected to {relay.address}")


def add_relay(node, relay, timeout=15.0):
    cli(node, "relay", "add", relay.address)
    return wait_relay_connected(node, relay, timeout)


def share_code(node):
    return cli(node, "id", "--share").stdout.strip()


def befriend_via_relay(a, b, message="hi"):
    """A asks B (by B's share code, naming B's home relay), B accepts; both see each other online.
    Both must already be registered at their home relay."""
    code = share_code(b)
    assert "?relay=" in code, code
    sa, sb = last_seq(a), last_seq(b)
    cli(a, "friend", "request", code, "--message", message)
    got = wait_event(b, "friend.request.received", f"id={a.id}", since=sb)
    cli(b, "friend", "accept", a.id)
    wait_event(a, "friend.accepted", f"id={b.id}", since=sa)
    wait_event(a, "peer.online", f"id={b.id}", since=sa)
    wait_event(b, "peer.online", f"id={a.id}", since=sb)
    return got


def challenge_ids(node):
    return [c["id"] for c in cli_json(node, "challenge", "list")["challenges"]]

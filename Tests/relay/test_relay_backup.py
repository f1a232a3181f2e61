"""A vault pushed to a friend through a real tandem-relay: the two nodes never learn each other's
address (discovery off, no --addr), so every byte of the push crosses the relay's tunnel."""
import json
import os
import pathlib
import subprocess

from relayhelpers import add_relay, befriend_via_relay
from tandem_testkit import TANDEM, poll, wait_event

CHEAP = {"TANDEM_TEST_CHEAP_PIN_HASH": "1"}


def tandem(node, *args, stdin=None, timeout=300):
    proc = subprocess.run([TANDEM, *args, "--data-dir", node.data_dir], input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"tandem {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
    return proc


def tandem_json(node, *args, stdin=None):
    return json.loads([l for l in tandem(node, *args, "--json", stdin=stdin).stdout.splitlines() if l.strip()][-1])


def test_push_and_verify_through_a_relay(make_relay, make_node, tmp_path):
    relay = make_relay()
    a, b = make_node("a", start=False), make_node("b", start=False)
    for n in (a, b):
        n.start(env=CHEAP)
        add_relay(n, relay)
    poll(lambda: relay.metric("tandem_relay_registered_clients") == 2, what="two registered clients")
    befriend_via_relay(a, b)

    tandem(a, "vault", "init", "--pin-stdin", stdin="2580\n")
    src = tmp_path / "src"
    src.mkdir()
    payload = os.urandom(9 * 1024 * 1024)
    (src / "film.mov").write_bytes(payload)
    tandem(a, "vault", "import", str(src), "--pin-stdin", stdin="2580\n")
    tandem(b, "backup", "offer", a.id, "--quota", "100MB")
    wait_event(a, "backup.offer.received", f"from={b.id}")

    relayed = relay.metric("tandem_relay_bytes_relayed_total")
    pushed = tandem_json(a, "backup", "push")
    assert pushed["pushes"][0]["to"] == b.id and pushed["bytes_sent"] >= len(payload), pushed
    # Every byte went through the relay's tunnel (nothing else connects the two nodes).
    assert relay.metric("tandem_relay_bytes_relayed_total") - relayed >= len(payload)
    held = pathlib.Path(b.data_dir) / "backup-held" / a.info["public_key"] / "blobs"
    packs = [p for p in (pathlib.Path(a.data_dir) / "vault" / "packs").rglob("*") if p.is_file()]
    assert packs and all((held / p.name).read_bytes() == p.read_bytes() for p in packs)
    assert tandem_json(a, "backup", "verify", "--all")["ok"] is True
    # --lan-only refuses a friend reachable only through a relay, clearly.
    proc = subprocess.run([TANDEM, "backup", "push", "--lan-only", "--data-dir", a.data_dir], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "LAN" in proc.stderr, proc.stderr

"""Relay-starved KIT_GET (issue 34): strangers reaching a holder through a relay must not use up the
KIT_GET budget of every restorer tunnelled through that relay. Before, the budget was per source
address and a relay is one address ("relay:…"): a dozen stranger keys asking twice each took it, and
a restore through the same relay got no kit. The holder now budgets KIT_GET per requesting key as
well, and the tunnel carries the initiator's key (backup.md 7, Protocol/README.md 14.7)."""
import asyncio
import json
import os
import pathlib
import subprocess
import sys

from relayhelpers import add_relay, befriend_via_relay, share_code
from relayproto import JOINED, RelayLink, join, pb_bytes, pb_decode, pb_uint, read_exactly
from tandem_testkit import TANDEM, wait_event

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "adversarial"))
from hostile import HostilePeer  # noqa: E402

CHEAP = {"TANDEM_TEST_CHEAP_PIN_HASH": "1"}
PIN = "2580"
STRANGER = "127.0.0.31"
BACKUP_KIT_GET, BACKUP_KIT = 0x040F, 0x0410
KIT_NOT_FOUND = 12


def tandem(node, *args, stdin=None, timeout=300):
    proc = subprocess.run([TANDEM, *args, "--data-dir", node.data_dir], input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"tandem {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
    return proc


async def stranger_asks(relay, holder_key, asks):
    """One throwaway key, from STRANGER: a tunnel to the holder through the relay, the handshake
    inside it, then `asks` KIT_GETs for locators nobody uses. Returns the answers' statuses."""
    link = await RelayLink(relay, source=STRANGER).open()
    sock = None
    try:
        reply = await link.open_tunnel(holder_key)
        assert reply.get(2) == 1, reply                  # OK
        sock = join(relay.port, reply[4])
        assert await asyncio.to_thread(read_exactly, sock, 1) == bytes([JOINED])
        peer = await HostilePeer(holder_key, relay.port, key=link.key).open(sock=sock)
        for _ in range(asks):
            peer.send(BACKUP_KIT_GET, pb_bytes(1, os.urandom(16)) + pb_bytes(2, os.urandom(32)) + pb_uint(3, 0))
        statuses = []
        for _ in range(asks):
            env = await peer.expect(BACKUP_KIT, timeout=15)
            statuses.append(pb_decode(env.payload).get(2))
        peer.close()
        return statuses
    finally:
        if sock is not None:
            sock.close()
        link.close()


def test_strangers_through_the_relay_do_not_starve_a_tunnelled_restore(make_relay, make_node, tmp_path):
    relay = make_relay()
    alice, bob = make_node("alice", start=False), make_node("bob", start=False)
    for n in (alice, bob):
        n.start(env=CHEAP)
        add_relay(n, relay)
    befriend_via_relay(alice, bob)
    tandem(alice, "vault", "init", "--pin-stdin", stdin=PIN + "\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "note.txt").write_bytes(b"kept by bob, reached through the relay\n" * 1000)
    tandem(alice, "vault", "import", str(src), "--pin-stdin", stdin=PIN + "\n")
    tandem(bob, "backup", "offer", alice.id, "--quota", "100MB")
    wait_event(alice, "backup.offer.received", f"from={bob.id}")
    tandem(alice, "backup", "push")
    code = json.loads(tandem(alice, "recovery", "show", "--json", "--pin-stdin", stdin=PIN + "\n").stdout)["code"]
    alice.kill()

    # Twelve stranger keys, two KIT_GETs each: 24 through one relay, over the 10 a minute one
    # address gets. Each key's own budget (5 a minute) answers both.
    loop = asyncio.new_event_loop()
    try:
        answered = [loop.run_until_complete(stranger_asks(relay, bytes.fromhex(bob.info["public_key"]), 2)) for _ in range(12)]
    finally:
        loop.close()
    assert all(a == [KIT_NOT_FOUND, KIT_NOT_FOUND] for a in answered), answered

    # The restorer comes through the same relay, with alice's share-code form of bob.
    fresh = tmp_path / "fresh"
    proc = subprocess.run([TANDEM, "restore", "--from", share_code(bob), "--code-stdin", "--json", "--data-dir", str(fresh)],
                          input=code + "\n", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads([l for l in proc.stdout.splitlines() if l.strip()][-1])
    assert report["id"] == alice.id and report["items"] == 1, report

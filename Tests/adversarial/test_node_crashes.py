"""Remote crashes and crash loops (issue 11: "Remote crashes", "Crash loops that survive a restart",
"Ledger integrity", "Strangers grow the disk"; Protocol/README.md 5.9.1, 12.4, 13.9).

Each test sends what a hostile peer written from Protocol/ can send: integers at the edge of their
wire type. On the old node each of these frames trapped the process (several again at every start);
now each is refused as MALFORMED or quarantined, and the node keeps serving an honest peer.
"""
import json
from pathlib import Path
import sqlite3
import time

import pytest

from advhelpers import ATTACKER, HONEST
from hostile import (ACK, CLOCK_REPLY, CONTACT_UPDATE, ERROR_CODES, FRIEND_ACCEPT, FRIEND_REMOVE, FRIEND_REQUEST,
                     enc_contact, enc_friend_request, now_ms, pb_bytes, pb_decode, pb_uint)
from tandem_testkit import cli, cli_json, events, poll, wait_event

from nacl.signing import SigningKey

U64_MAX = 2 ** 64 - 1
I64_MAX = 2 ** 63 - 1
CHALLENGE_INVITE, CHALLENGE_ANSWER, CHALLENGE_START, CHALLENGE_OUTCOME = 0x0201, 0x0202, 0x0203, 0x0206


def honest_still_served(node, peers, source=HONEST):
    """The node is alive, answers `tandem status` and an honest new peer's signed PING."""
    node.assert_healthy()
    honest = peers.open(node, source=source)
    assert peers.run(honest.ping()) < 5


def malformed_answers(peer):
    return [e for e in peer.errors if ERROR_CODES.get(e.get(1)) == "MALFORMED"]


def wait_malformed(peers, peer, mid, timeout=10):
    """Waits for the node's ERROR MALFORMED about message `mid`."""
    env = peers.run(peer.expect(0x0001, timeout=timeout, match=lambda e: pb_decode(e.payload).get(3) == mid))
    assert ERROR_CODES.get(pb_decode(env.payload).get(1)) == "MALFORMED", pb_decode(env.payload)


def befriend(node, peers, source=HONEST):
    """A hostile peer that the node's user accepted as a friend: its link stays open."""
    peer = peers.open(node, source=source)
    peer.send(FRIEND_REQUEST, enc_friend_request(peer.key, "let's focus", name="mallory"))
    got = wait_event(node, "friend.request.received")
    peer_id = got.get("fields", got)["id"]
    cli(node, "friend", "accept", peer_id)
    # The node's FRIEND_ACCEPT comes on our link; acknowledge it so it is not resent.
    acc = peers.run(peer.expect(FRIEND_ACCEPT, timeout=15))
    peer.send(ACK, pb_bytes(1, acc.message_id))
    return peer, peer_id


def test_clock_reply_with_extreme_timestamps_from_a_stranger(make_node, peers):
    node = make_node()
    stranger = peers.open(node, source=ATTACKER)
    # t1 = 0, t2 = t3 = 2^64-1: the old node trapped in the offset arithmetic.
    stranger.send(CLOCK_REPLY, pb_uint(1, 0) + pb_uint(2, U64_MAX) + pb_uint(3, U64_MAX))
    stranger.send(CLOCK_REPLY, pb_uint(1, U64_MAX) + pb_uint(2, 0) + pb_uint(3, 0))
    peers.run(stranger.ping())          # the frames before it were handled
    honest_still_served(node, peers)


def test_contact_record_versions_at_2_63_from_a_stranger(make_node, peers):
    node = make_node()
    stranger = peers.open(node, source=ATTACKER)
    for type_, payload in [
        (FRIEND_REQUEST, pb_bytes(1, "hi") + pb_bytes(2, enc_contact(stranger.key, name="x", version=2 ** 63))),
        (FRIEND_REQUEST, pb_bytes(1, "hi") + pb_bytes(2, enc_contact(stranger.key, name="x", version=U64_MAX))),
        (FRIEND_ACCEPT, pb_bytes(1, enc_contact(stranger.key, version=2 ** 63))),
        (CONTACT_UPDATE, pb_bytes(1, enc_contact(stranger.key, version=2 ** 63))),
    ]:
        mid = stranger.send(type_, payload)
        wait_malformed(peers, stranger, mid)
    honest_still_served(node, peers)
    assert cli_json(node, "friend", "requests")["received"] == [], "nothing was stored"


def invite_payload(challenge_id, participants, start_at_us, duration_ms=60_000, expires_at_us=None):
    out = pb_bytes(1, challenge_id)
    for p in participants:
        out += pb_bytes(2, p)
    return (out + pb_uint(3, duration_ms) + pb_uint(4, start_at_us)
            + pb_uint(5, expires_at_us if expires_at_us is not None else start_at_us) + pb_bytes(6, "go"))


def test_a_friends_invite_starting_at_2_63_is_refused_and_the_node_restarts(make_node, peers):
    node = make_node()
    mallory, _ = befriend(node, peers)
    cid = bytes(range(16))
    # The old node stored it and trapped on every tick, before and after a restart.
    mid = mallory.send(CHALLENGE_INVITE, invite_payload(cid, [mallory.public, node.public_key], I64_MAX))
    wait_malformed(peers, mallory, mid)
    time.sleep(1.0)                      # several challenge ticks
    honest_still_served(node, peers, source=ATTACKER)
    assert cli_json(node, "challenge", "list")["challenges"] == []
    node.stop()
    node.start(node.port)
    honest_still_served(node, peers)


def test_a_start_at_2_63_from_the_inviter_is_refused(make_node, peers):
    node = make_node()
    mallory, _ = befriend(node, peers)
    cid = bytes(range(1, 17))
    start = (now_ms() + 600_000) * 1000
    mallory.send(CHALLENGE_INVITE, invite_payload(cid, [mallory.public, node.public_key], start))
    wait_event(node, "challenge.invited")
    cli(node, "challenge", "accept", cid.hex()[:8])
    peers.run(mallory.expect(CHALLENGE_ANSWER))
    # A START with a huge start: the old node overflowed computing the end.
    mid = mallory.send(CHALLENGE_START, pb_bytes(1, cid) + pb_uint(2, I64_MAX) + pb_bytes(3, mallory.public)
                       + pb_bytes(3, node.public_key))
    wait_malformed(peers, mallory, mid)
    time.sleep(1.0)
    honest_still_served(node, peers, source=ATTACKER)
    node.stop()
    node.start(node.port)
    honest_still_served(node, peers)


def outcome_record(cid, start_at_us, duration_ms, inviter, outcomes):
    """A canonical OutcomeRecord (13.6): outcomes sorted by key, defaults omitted."""
    out = pb_bytes(1, cid) + pb_uint(2, start_at_us) + pb_uint(3, duration_ms)
    for key, result, elapsed in sorted(outcomes):
        out += pb_bytes(4, pb_bytes(1, key) + pb_uint(2, result) + pb_uint(3, elapsed))
    return out + pb_bytes(5, inviter)


def test_an_outcome_claiming_a_quit_of_2_64_ms_is_refused(make_node, peers):
    node = make_node()
    mallory, mallory_id = befriend(node, peers)
    cli(node, "challenge", "invite", mallory_id, "--duration", "3s")
    inv = peers.run(mallory.expect(CHALLENGE_INVITE))
    mallory.send(ACK, pb_bytes(1, inv.message_id))
    cid = pb_decode(inv.payload)[1]
    mallory.send(CHALLENGE_ANSWER, pb_bytes(1, cid) + pb_uint(2, 1))
    start = peers.run(mallory.expect(CHALLENGE_START))
    start_at = pb_decode(start.payload)[2]
    # Before the end: mallory's own record says she quit after 2^64-1 ms. The old node kept it and
    # trapped when its challenge ended, then again at every start.
    rec = outcome_record(cid, start_at, 3000, node.public_key,
                         [(node.public_key, 1, 0), (mallory.public, 2, U64_MAX)])
    sig = mallory.key.sign(b"tandem/outcome/v1\x00" + rec).signature
    mid = mallory.send(CHALLENGE_OUTCOME, pb_bytes(1, rec) + pb_bytes(2, sig))
    wait_malformed(peers, mallory, mid)
    ended = wait_event(node, "challenge.ended", timeout="15s")
    assert ended
    honest_still_served(node, peers, source=ATTACKER)
    node.stop()
    node.start(node.port)
    honest_still_served(node, peers)


OLD_CHALLENGES = Path(__file__).resolve().parent.parent / "fixtures" / "challenge-v1.json"


@pytest.mark.parametrize("written_by", ["this version", "an older version"])
def test_a_stored_row_that_would_crash_the_node_is_quarantined(make_node, peers, written_by):
    """A challenge row with a start of 2^63-1, in today's stored form (Protocol/store.proto) or as
    the JSON an older node wrote (or someone by hand): the node starts, sets the row aside, says so
    in `tandem status`, and keeps its other data."""
    node = make_node()
    cli(node, "focus", "start", "--duration", "1h")
    node.stop()
    db = sqlite3.connect(f"{node.data_dir}/node.sqlite")
    (cid, state, kind), = db.execute("SELECT id, state, typeof(state) FROM challenge").fetchall()
    assert kind == "blob", "today's node writes the stored form"
    if written_by == "this version":
        # A later field wins in protobuf: the row now says start_at_us (field 7) = 2^63-1.
        db.execute("UPDATE challenge SET state = ? WHERE id = ?", (state + pb_uint(7, I64_MAX), cid))
    else:
        old = json.loads(OLD_CHALLENGES.read_text())["solo-running"]
        old["startAtUs"] = I64_MAX
        db.execute("INSERT INTO challenge(id, phase, solo, createdAtMs, updatedAtMs, state) VALUES (?, 'running', 1, 1, 1, ?)",
                   (bytes(old["id"]), json.dumps(old)))
    db.commit()
    db.close()
    node.start(node.port)
    honest_still_served(node, peers)
    status = node.status()[0]
    assert status["quarantined"] == 1
    assert status["quarantine"][0]["kind"] == "challenge"
    assert "start" in status["quarantine"][0]["reason"]
    assert events(node, "store.quarantined")
    # The session this node started is the bad row itself, or is still on beside the old bad row.
    session = cli_json(node, "focus", "status")["session"]
    assert (session is None) == (written_by == "this version"), session
    node.stop()
    node.start(node.port)                # and again: it stays set aside
    assert node.status()[0]["quarantined"] == 1


def test_strangers_cannot_grow_the_disk(make_node, peers):
    """A request then a removal leaves no row; unrelated frames from strangers write nothing; a
    record's unknown fields are not stored."""
    node = make_node()
    stranger = peers.open(node, source=ATTACKER)
    padding = pb_bytes(15, b"\x41" * 12_000)      # an unknown field inside the contact record
    keys = [SigningKey.generate() for _ in range(20)]
    for i, key in enumerate(keys):
        req = pb_bytes(1, "hi") + pb_bytes(2, enc_contact(key, name=f"s{i}", version=now_ms()) + padding)
        stranger.send(FRIEND_REQUEST, req, key=key)
    db = sqlite3.connect(f"file:{node.data_dir}/node.sqlite?mode=ro", uri=True)
    # The flows run off the event loop: a PONG can come back before the requests are stored.
    poll(lambda: db.execute("SELECT COUNT(*) FROM contact").fetchone()[0] == 20, 20, what="20 pending requests")
    sizes = [r[0] for r in db.execute("SELECT length(record) FROM contact")]
    assert len(sizes) == 20 and max(sizes) < 4096, sizes
    # Each one takes its request back: nothing of them stays (the old node kept a `none` row and
    # its record forever).
    for key in keys:
        stranger.send(FRIEND_REMOVE, b"", key=key)
    poll(lambda: db.execute("SELECT COUNT(*) FROM contact").fetchone()[0] == 0, 20, what="no contact row left")
    # Unrelated durable frames from many strangers: nothing written.
    before = db.execute("SELECT COUNT(*) FROM seenMessage").fetchone()[0]
    for i in range(600):
        key = SigningKey.generate()
        stranger.send([FRIEND_REMOVE, CONTACT_UPDATE, CHALLENGE_ANSWER][i % 3],
                      [b"", pb_bytes(1, enc_contact(key, version=1)), pb_bytes(1, bytes(16))][i % 3], key=key)
    peers.run(stranger.ping(timeout=30))
    time.sleep(2.0)                      # the flows queue drains
    after = db.execute("SELECT COUNT(*) FROM seenMessage").fetchone()[0]
    assert after - before < 10, f"{after - before} handled-id rows for frames that changed nothing"
    db.close()
    honest_still_served(node, peers)

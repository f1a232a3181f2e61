"""Hostile message frames (Protocol/messages.md), from a peer written from Protocol/ alone: a friend
whose node sends malformed, oversized and out-of-range MESSAGEs, skips sequence numbers, and a
stranger who writes at all. The node stores only what the rules allow, answers what they say
(ACK after the commit, MALFORMED, GAP_REQUEST on the link), and keeps serving."""
import json

from advhelpers import HONEST
from hostile import ACK, ERROR, FRIEND_REQUEST, PING, PONG, enc_friend_request, enc_ping, now_ms, pb_bytes, pb_decode, pb_uint
from tandem_testkit import cli, cli_json, wait_event

MESSAGE, GAP_REQUEST = 0x0501, 0x0507
MAX_COUNTER = (1 << 53) - 1


def chat(seq, text, lamport=None, sent_at=None):
    return (pb_uint(2, seq) + pb_uint(3, lamport if lamport is not None else seq) + pb_bytes(4, text)
            + pb_uint(6, sent_at if sent_at is not None else now_ms() - 1000))


def hex_id(mid):
    return bytes(mid).hex()


def befriended_peer(node, peers):
    """A hostile peer that became the node's friend: its FRIEND_REQUEST, accepted with the CLI."""
    peer = peers.open(node, source=HONEST)
    peer.send(FRIEND_REQUEST, enc_friend_request(peer.key, "hi", name="Mallory"))
    got = wait_event(node, "friend.request.received")
    cli(node, "friend", "accept", got["id"])
    return peer, got["id"]


def acked(peers, peer, mid):
    return peers.run(peer.expect(ACK, match=lambda env: pb_decode(env.payload).get(1) == bytes(mid)))


def test_hostile_messages_from_a_friend(make_node, peers):
    node = make_node()
    peer, peer_id = befriended_peer(node, peers)
    # A good one is stored, then acknowledged.
    first = peer.send(MESSAGE, chat(1, "hello"))
    acked(peers, peer, first)
    assert [m["text"] for m in cli_json(node, "message", "list", peer_id)["messages"]] == ["hello"]
    # Out of range, malformed, oversized: MALFORMED on the link, acknowledged (so an honest sender
    # stops), nothing stored.
    bad = [
        chat(MAX_COUNTER + 1, "seq past 2^53 - 1"),
        chat(0, "seq 0"),
        chat(2, "sent after it was signed", sent_at=now_ms() + 3_600_000),
        chat(2, "x" * 16_385),
        chat(2, "nul \x00 inside"),
        b"\xff\xff\xff",
        chat(2, "y" * 30_000),
    ]
    for payload in bad:
        mid = peer.send(MESSAGE, payload)
        err = peers.run(peer.expect(ERROR, match=lambda env: pb_decode(env.payload).get(3) == bytes(mid)))
        assert pb_decode(err.payload).get(1) == 7, "MALFORMED"
        acked(peers, peer, mid)
    assert [m["text"] for m in cli_json(node, "message", "list", peer_id)["messages"]] == ["hello"]
    # A gap: seq 5 is held (acknowledged, not shown) and the node asks for 2-4 on the link.
    held = peer.send(MESSAGE, chat(5, "five"))
    gap = peers.run(peer.expect(GAP_REQUEST))
    request = pb_decode(gap.payload)
    assert request.get(2) == peer.public
    assert pb_decode(request[3]) == {1: 2, 2: 4}, "one range: 2 to 4"
    acked(peers, peer, held)
    assert [m["text"] for m in cli_json(node, "message", "list", peer_id)["messages"]] == ["hello"]
    # Far past the window above the gap: refused, not acknowledged (no ACK for it before the PONG
    # of a PING sent after it).
    far = peer.send(MESSAGE, chat(5 + 1025, "far ahead"))
    peer.send(PING, enc_ping(99))

    async def acks_until_pong():
        ids = []
        while True:
            env = await peer.next_frame()
            if env.type == PONG:
                return ids
            if env.type == ACK:
                ids.append(pb_decode(env.payload).get(1))

    assert bytes(far) not in peers.run(acks_until_pong())
    # The gap filled, in any order: all released, in seq order; a copy of 3 under a new id is a duplicate.
    for seq in (3, 2, 4, 3):
        acked(peers, peer, peer.send(MESSAGE, chat(seq, f"m{seq}")))
    texts = [m["text"] for m in cli_json(node, "message", "list", peer_id)["messages"]]
    assert texts == ["hello", "m2", "m3", "m4", "five"]
    node.assert_healthy()


def test_a_stranger_cannot_write(make_node, peers):
    node = make_node()
    stranger = peers.open(node, source=HONEST)
    for seq in range(1, 6):
        stranger.send(MESSAGE, chat(seq, "buy now"))
    peers.run(stranger.ping())
    status = node.assert_healthy()
    assert status["friends"] == 0
    listed = cli(node, "message", "list", "tdm1" + "q" * 10, check=False)
    assert listed.returncode != 0
    events = [json.loads(l) for l in cli(node, "events", "--json").stdout.splitlines() if l.strip()]
    assert not [e for e in events if e["type"].startswith("message.")], "nothing of it was stored or announced"

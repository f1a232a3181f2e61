"""Hostile file transfers (Protocol/messages.md 7), from a peer written from Protocol/ alone: a friend
whose node offers a file and then sends forged, oversized, signed and unasked-for FILE_CHUNKs, and an
offer it never completes; a stranger who offers a file. The node keeps only chunks whose hash-tree
path verifies, drops the rest without answering, gives the never-ending offer up at its deadline
(FILE_CANCEL EXPIRED, partial file removed), stores nothing of the stranger's, and keeps serving."""
import hashlib
import os

from hostile import ACK, ERROR, pb_bytes, pb_decode, pb_uint
from tandem_testkit import cli_json, events, poll, wait_event
from test_hostile_messages import befriended_peer

FILE_OFFER, FILE_REQUEST, FILE_CHUNK, FILE_CANCEL = 0x0509, 0x050A, 0x050B, 0x050C
CHUNK = 262_144
EXPIRED = 5


def h(data):
    return hashlib.blake2b(data, digest_size=32).digest()


def leaf(chunk):
    return h(b"\x00" + chunk)


def node_hash(left, right):
    return h(b"\x01" + left + right)


def offer(file_id, name, data, root):
    return (pb_bytes(1, file_id) + pb_bytes(2, name.encode()) + pb_uint(3, len(data)) + pb_bytes(4, h(data))
            + pb_uint(5, CHUNK) + pb_bytes(6, root))


def chunk(file_id, index, data, proof):
    return pb_bytes(1, file_id) + pb_uint(2, index) + pb_bytes(3, data) + b"".join(pb_bytes(4, p) for p in proof)


def offered(peers, peer, payload, file_id):
    """Sends FILE_OFFER; returns once the node acknowledged it and asked for chunks (in either order)."""
    mid = bytes(peer.send(FILE_OFFER, payload))

    async def both():
        acked = requested = False
        while not (acked and requested):
            env = await peer.next_frame()
            acked = acked or (env.type == ACK and pb_decode(env.payload).get(1) == mid)
            requested = requested or (env.type == FILE_REQUEST and pb_decode(env.payload).get(1) == file_id)
    peers.run(both())


def test_forged_and_oversized_chunks_an_offer_that_never_ends_and_a_strangers_offer(make_node, peers):
    node = make_node(start=False)
    node.env = {"TANDEM_TEST_FILE_OFFER_LIFETIME_MS": "6000"}
    node.start()
    peer, peer_id = befriended_peer(node, peers)
    # A two-chunk file the peer offers; the node accepts it at once (under the auto-accept limit)
    # and asks for the chunks on the link.
    data = os.urandom(CHUNK + 1000)
    parts = [data[:CHUNK], data[CHUNK:]]
    leaves = [leaf(p) for p in parts]
    root = node_hash(*leaves)
    fid = os.urandom(16)
    offered(peers, peer, offer(fid, "plan.pdf", data, root), fid)
    # Forged content under a good path: refused (no answer on the link, an event, nothing kept).
    peer.send(FILE_CHUNK, chunk(fid, 0, bytes([parts[0][0] ^ 1]) + parts[0][1:], [leaves[1]]), zero_signature=True)
    bad = wait_event(node, "message.file_bad_chunk", f"file_id={fid.hex()}")
    assert bad["index"] == 0 and bad["bad_chunks"] == 1
    # Oversized (a 300 KiB chunk, a payload over 257 KiB), an index past the file, a wrong length:
    # dropped silently; a FILE_CHUNK with a real signature instead of 64 zero bytes: BAD_SIGNATURE.
    peer.send(FILE_CHUNK, chunk(fid, 0, os.urandom(300 * 1024), [leaves[1]]), zero_signature=True)
    peer.send(FILE_CHUNK, chunk(fid, 7, parts[1], [leaves[0]]), zero_signature=True)
    peer.send(FILE_CHUNK, chunk(fid, 1, parts[1][:-1], [leaves[0]]), zero_signature=True)
    signed = peer.send(FILE_CHUNK, chunk(fid, 1, parts[1], [leaves[0]]))
    err = peers.run(peer.expect(ERROR, match=lambda env: pb_decode(env.payload).get(3) == bytes(signed)))
    assert pb_decode(err.payload).get(1) == 3, "BAD_SIGNATURE"
    node.assert_healthy()
    # The good chunks (0 is asked again after the refusal): the file arrives byte for byte.
    peer.send(FILE_CHUNK, chunk(fid, 0, parts[0], [leaves[1]]), zero_signature=True)
    peer.send(FILE_CHUNK, chunk(fid, 1, parts[1], [leaves[0]]), zero_signature=True)
    got = wait_event(node, "message.file_received", f"file_id={fid.hex()}")
    assert open(got["path"], "rb").read() == data and got["bytes_received"] == len(data)
    assert len(events(node, "message.file_bad_chunk")) == 1, "only the hash check counts as a bad chunk"
    # An offer the peer never serves: given up at its deadline (6 s here; 8 days by default), its
    # partial file removed, and FILE_CANCEL EXPIRED comes back through the outbox.
    never = os.urandom(16)
    offered(peers, peer, offer(never, "never.bin", data, root), never)
    failed = wait_event(node, "message.file_failed", f"file_id={never.hex()}", timeout="40s")
    assert failed["reason"] == "expired"
    cancel = peers.run(peer.expect(FILE_CANCEL, timeout=40, match=lambda env: pb_decode(env.payload).get(1) == never))
    assert pb_decode(cancel.payload).get(2) == EXPIRED
    assert not os.path.exists(os.path.join(node.data_dir, "files", ".partial", never.hex() + ".part"))
    # A stranger's offer: acknowledged within the stranger budget, nothing stored.
    stranger = peers.open(node)
    sid = os.urandom(16)
    stranger.send(FILE_OFFER, offer(sid, "gift.exe", data, root))
    stranger_ping = peers.run(stranger.ping())
    assert stranger_ping >= 0
    assert not events(node, "message.file_offered", file_id=sid.hex())
    listed = cli_json(node, "message", "list", peer_id)["messages"]
    assert all((m.get("file") or {}).get("file_id") != sid.hex() for m in listed)
    node.assert_healthy()
    poll(lambda: node.alive(), what="the node stays up")

"""Quota amplification (issue 34): a friend the node holds backups for sends many 2-byte blobs. Before,
each took a file (a 4 KiB block and its directory entry) but was charged 2 bytes, so 10 000 of them
took 535 times the quota on disk. The holder now charges what a blob costs on disk (its payload rounded
up to 4 096 bytes, plus 512; backup.md 9), so what lands on disk stays within the quota."""
import hashlib
import os
import pathlib

from advhelpers import HONEST
from hostile import BACKUP_PIECE, BACKUP_REPLY, FRIEND_REQUEST, enc_friend_request, pb_bytes, pb_decode, pb_uint
from tandem_testkit import cli, wait_event

BACKUP_COMPLETE, BACKUP_OVER_QUOTA, BACKUP_BUSY = 2, 4, 13
QUOTA = 200_000


def disk_bytes(root):
    """What the files and folders under `root` take on disk (allocated blocks)."""
    return sum(p.lstat().st_blocks * 512 for p in pathlib.Path(root).rglob("*"))


def test_tiny_blobs_from_a_friend_stay_within_the_quota_on_disk(make_node, peers):
    node = make_node()
    peer = peers.open(node, source=HONEST)
    peer.send(FRIEND_REQUEST, enc_friend_request(peer.key, "hi", name="Mallory"))
    got = wait_event(node, "friend.request.received")
    cli(node, "friend", "accept", got["id"])
    cli(node, "backup", "offer", got["id"], "--quota", f"{QUOTA}B")

    statuses = []
    for i in range(60):
        data = i.to_bytes(2, "big")
        rid = os.urandom(16)
        peer.send(BACKUP_PIECE, pb_bytes(1, rid) + pb_bytes(2, hashlib.blake2b(data, digest_size=32).digest())
                  + pb_uint(3, len(data)) + pb_uint(4, 0) + pb_bytes(5, data), zero_signature=True)
        reply = peers.run(peer.expect(BACKUP_REPLY, match=lambda env, rid=rid: pb_decode(env.payload).get(1) == rid))
        statuses.append(pb_decode(reply.payload).get(2))
    complete = statuses.count(BACKUP_COMPLETE)
    assert statuses.count(BACKUP_OVER_QUOTA) > 0, statuses
    assert complete * (4096 + 512) <= QUOTA, f"{complete} blobs of 2 bytes stored under a quota of {QUOTA} bytes"
    held = pathlib.Path(node.data_dir) / "backup-held" / peer.public.hex()
    on_disk = disk_bytes(held)
    # The blobs' blocks and their folders: within the quota (the folders' own blocks, a few KiB, aside).
    assert on_disk <= QUOTA + 64 * 1024, f"{on_disk} bytes on disk for a quota of {QUOTA} ({complete} blobs)"
    peers.run(peer.ping())
    node.assert_healthy()

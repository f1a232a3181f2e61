"""Replay-cache poisoning (issue 11, item 4; Protocol/README.md 5.6 and section 10).

The attack: frames dated as far in the future as rule 8 allows fill the node's replay cache;
on the old node, eviction then raised the one shared watermark past "now" and every honest frame
was refused STALE for about ten minutes. PONGs are never answered, so one stranger could do it
silently. Now each author fills only its own share, the largest shares shrink first, and the
shared watermark never moves past now − 10 min.
"""
import asyncio
import time

from advhelpers import ATTACKER, HONEST
import pytest
from hostile import PONG, PingRefused, enc_pong, envelope, frame, now_ms


FLOOD = 104_000          # more than the old node's 100,000-entry cache
PER_KEY = 4_000          # below a share (4,096), so no frame of the flood is refused
LINKS = 26               # one key per link, each from its own address (the node reads 1,000 frames/s per address)
AHEAD_MS = 9 * 60 * 1000 + 30_000   # within the 10-min skew, with room for clock reading


async def flood_future_pongs(links, per_key):
    """`per_key` PONGs dated now + 9.5 min over each link, signed by the link's own key."""
    for link in links:
        link.write_raw(b"".join(frame(envelope(link.key, PONG, link.node_key, enc_pong(i), created_at=now_ms() + AHEAD_MS))
                                for i in range(per_key)))
    for link in links:
        await link.drain(timeout=120)


def test_future_dated_flood_does_not_make_honest_frames_stale(make_node, peers):
    node = make_node()
    strangers = [peers.open(node, source=f"127.0.1.{i + 1}") for i in range(LINKS)]
    friend = peers.open(node, source=HONEST)
    assert peers.run(friend.ping()) < 5
    assert LINKS * PER_KEY == FLOOD

    before = node.transport().get("frames_accepted")
    start = time.monotonic()
    peers.run(flood_future_pongs(strangers, PER_KEY))
    # Each link is read in order: once a PING sent after its flood is answered, all of it was
    # processed (dated after the flood, so even the old node answers it).
    for stranger in strangers:
        peers.run(stranger.ping(timeout=180, created_at=now_ms() + AHEAD_MS + 10_000))
    flood_seconds = time.monotonic() - start
    if before is not None:
        assert node.transport()["frames_accepted"] >= before + FLOOD, "the flood was accepted (not refused early)"

    # An honest friend: a ping now, and pings from a clock 5 minutes behind, are all answered.
    for behind_ms in (0, 60_000, 5 * 60_000):
        peers.run(friend.ping(created_at=now_ms() - behind_ms))
    assert "STALE" not in friend.error_codes(), friend.error_codes()
    # A new honest peer too.
    newcomer = peers.open(node, source=HONEST)
    peers.run(newcomer.ping())
    assert newcomer.errors == []
    status = node.assert_healthy()
    assert node.rss_kib() < 150 * 1024, f"RSS {node.rss_kib()} KiB after the flood"
    print(f"flood of {FLOOD} future-dated PONGs in {flood_seconds:.1f} s; replay cache "
          f"{status.get('transport', {}).get('replay_cache_entries')} entries; RSS {node.rss_kib()} KiB")


def test_one_strangers_future_frames_only_make_its_own_frames_stale(make_node, peers):
    """A single key past its share: its own floor moves to the future, nobody else's."""
    node = make_node()
    stranger = peers.open(node, source=ATTACKER)
    friend = peers.open(node, source=HONEST)
    key = stranger.key
    blob = b"".join(frame(envelope(key, PONG, node.public_key, enc_pong(i), created_at=now_ms() + AHEAD_MS))
                    for i in range(4_096 + 16))
    stranger.write_raw(blob)
    peers.run(stranger.drain(timeout=60))
    # Its next frames (created now) are at or below its own floor (now + 9.5 min): refused STALE.
    with pytest.raises(PingRefused, match="STALE"):
        peers.run(stranger.ping(timeout=60))
    peers.run(friend.ping())
    assert friend.errors == []
    node.assert_healthy()

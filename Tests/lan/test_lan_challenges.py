"""Focus challenges on a namespace LAN: two hosts find each other by broadcast, become friends
without any address being given, and run a challenge that starts and ends on both at the same
instant, also when one host's wall clock is 5 s off (libfaketime).

Instants are compared with `mono_us` (CLOCK_MONOTONIC) from `challenge.started` / `challenge.ended`:
network namespaces share it with the whole machine, and libfaketime leaves it alone with
FAKETIME_DONT_FAKE_MONOTONIC=1."""
import time

import pytest

from netns import cli, cli_json, until, wait_event
from tandem_testkit import LIBFAKETIME, realtime_prefix

# Together within this (µs of CLOCK_MONOTONIC); the 5 ms goal is `tandem-bench countdown`'s
# (release), see Tests/cli/test_challenges.py.
SKEW_US = 25_000
REALTIME = realtime_prefix()


def clock_prefix(fake=None):
    """What a node is started under: the real-time class where allowed, or libfaketime's `fake`."""
    if not fake:
        return REALTIME
    # env(1) twice: the first sets the variables, the second (with libfaketime loaded) sets up
    # libfaketime's shared memory before it execs the node. Loaded straight into the node,
    # libfaketime's constructor setenv()s FAKETIME_SHARED, which moves `environ` before the
    # Swift runtime finds argv from it, and the node would start without its arguments.
    return ["env", f"LD_PRELOAD={LIBFAKETIME}", f"FAKETIME={fake}", "FAKETIME_DONT_FAKE_MONOTONIC=1", "env"]


@pytest.fixture
def two_hosts(lan_nodes):
    """start(bob_clock=None) -> Alice and Bob, each in a namespace, friends by LAN discovery alone."""

    def start(bob_clock=None):
        alice, bob = lan_nodes(["Alice", "Bob"], named=True, prefixes=[clock_prefix(), clock_prefix(bob_clock)])
        # Found by broadcast, asked without an address.
        assert until(lambda: alice["id"] in {p["id"] for p in cli_json(bob, "peers")["peers"]})
        cli(bob, "friend", "request", alice["id"])
        assert wait_event(alice, "friend.request.received", f"id={bob['id']}")["address"] == bob["ip"]
        cli(alice, "friend", "accept", bob["id"])
        wait_event(bob, "friend.accepted", f"id={alice['id']}")
        wait_event(alice, "peer.online", f"id={bob['id']}")
        wait_event(bob, "peer.online", f"id={alice['id']}")
        return alice, bob

    return start


def run_challenge(alice, bob, duration_s=3):
    out = cli_json(alice, "challenge", "invite", bob["id"], "--duration", f"{duration_s}s")
    cid = out["id"]
    assert wait_event(bob, "challenge.invited", f"id={cid}")["from"] == alice["id"]
    cli(bob, "challenge", "accept", cid)
    for n in (alice, bob):
        wait_event(n, "challenge.scheduled", f"id={cid}")
    # Sleep through the challenge, then read what happened. On a busy machine it may have started
    # already (no `starts_in_ms` once it runs): the waits below allow for that.
    time.sleep(cli_json(alice, "challenge", "show", cid).get("starts_in_ms", 0) / 1000 + duration_s + 0.4)
    started = [wait_event(n, "challenge.started", f"id={cid}") for n in (alice, bob)]
    ended = [wait_event(n, "challenge.ended", f"id={cid}") for n in (alice, bob)]
    for n, s, e in zip((alice, bob), started, ended):
        assert e["result"] == "completed", (n["name"], e)
        assert abs(e["mono_us"] - s["mono_us"] - duration_s * 1_000_000) <= SKEW_US, (n["name"], s, e)
    assert abs(started[0]["mono_us"] - started[1]["mono_us"]) <= SKEW_US, started
    assert abs(ended[0]["mono_us"] - ended[1]["mono_us"]) <= SKEW_US, ended
    appended = [wait_event(n, "ledger.appended", f"challenge_id={cid}", timeout="30s") for n in (alice, bob)]
    assert [a["signers"] for a in appended] == [2, 2] and appended[0]["hash"] == appended[1]["hash"], appended
    for n in (alice, bob):
        assert cli_json(n, "ledger", "verify")["ok"] is True
    return started, ended


def test_challenge_between_two_hosts_on_a_lan(two_hosts):
    alice, bob = two_hosts()
    started, _ = run_challenge(alice, bob)
    # Same wall clock on both hosts: the measured offset is tiny.
    assert abs(started[1]["offset_us"]) <= 5_000, started[1]


@pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime is not installed (apt-get install faketime)")
def test_challenge_with_a_host_whose_clock_is_5_s_ahead(two_hosts):
    alice, bob = two_hosts(bob_clock="+5s")
    started, _ = run_challenge(alice, bob)
    # The fake took, read from what the nodes recorded (not from this test's clock after a wait). At
    # the start each node's timer noted its wall clock (`at_us`) and CLOCK_MONOTONIC (`mono_us`) back
    # to back; the monotonic clock is shared by the namespaces and not faked, so the two nodes'
    # wall-minus-monotonic differ by exactly how far Bob's wall clock is ahead of Alice's (up to the
    # time between two clock reads: within SKEW_US, the bound this file holds a node's instants to).
    wall_minus_mono = [s["at_us"] - s["mono_us"] for s in started]
    assert abs(wall_minus_mono[1] - wall_minus_mono[0] - 5_000_000) <= SKEW_US, started
    # And each node stamps its events (`time_ms`) with that wall clock: the stamp of its
    # challenge.started is not before its `at_us` (the event is written after the timer noted the
    # instant), and not half the 5 s shift after it, where a stamp from the other clock would be.
    for s in started:
        assert 0 <= s["time_ms"] - s["at_us"] // 1000 < 2500, s
    # Alice's clock minus Bob's, measured over the LAN.
    assert abs(started[1]["offset_us"] + 5_000_000) <= 20_000, started[1]
    assert abs((started[1]["at_us"] - started[0]["at_us"]) - 5_000_000) <= 50_000, started

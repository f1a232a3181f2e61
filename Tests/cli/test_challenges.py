"""Focus challenges (issue 4) between real `tandem node` processes on loopback, driven only through
the CLI and `tandem wait`.

Start and end instants are compared with the `mono_us` field of `challenge.started` and
`challenge.ended`: CLOCK_MONOTONIC, which every process on this machine shares and which a faked
wall clock (libfaketime with FAKETIME_DONT_FAKE_MONOTONIC=1) leaves alone. So "started together"
is measured on one clock, whatever each node believes the time is.

Every time asserted here is one the nodes recorded (`mono_us`, `at_us`, `late_ms`, `elapsed_ms`,
`remaining_ms`, an event's `time_ms`), never this test's own clock read after a `tandem` command or a
wait returned: on a busy machine such a read is late by however long the CLI took, which is no error
of the node's. The test's clock only decides how long to sleep.
"""
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tandem_testkit import (LIBFAKETIME, Node, befriend, cli, cli_json, events, last_seq, one_line_error, realtime_prefix,
                            wait_event)

# Start and end on every node within this much of each other (µs of CLOCK_MONOTONIC). Not the goal
# (p99 ≤ 5 ms, release, measured by `tandem-bench countdown`): a debug build on two shared CPUs was
# seen 12.7 ms late once under a full test run; a node that ignored the partner's clock offset (seconds
# under libfaketime) or armed its timer from the wrong instant is off by far more than this.
SKEW_US = 25_000
REALTIME = realtime_prefix()


class ChallengeNode(Node):
    """A node that can be started with extra environment (libfaketime) and again on the same port."""

    keeps_port = True

    def start(self, env=None, port=None):
        env = env if env is not None else self.env
        faked = bool(env and "LD_PRELOAD" in env)
        # Under libfaketime through env(1), which execs the node in place (same pid): libfaketime,
        # loaded first into env, sets up its shared memory and exports FAKETIME_SHARED there. Loaded
        # straight into the node, its constructor setenv()s that variable, which moves `environ` off
        # the stack before the Swift runtime looks for argv next to it: the node would get no
        # arguments. Otherwise in the real-time class when asked (chrt execs in place too).
        return super().start(port=port, env=env, prefix=["env"] if faked else REALTIME)

    def _forget_faketime(self):
        # libfaketime's shared memory and semaphore, named after the process that made them.
        if self.env and "LD_PRELOAD" in self.env and self.proc is not None:
            for name in (f"faketime_shm_{self.proc.pid}", f"sem.faketime_sem_{self.proc.pid}"):
                Path("/dev/shm", name).unlink(missing_ok=True)

    def stop(self, sig=signal.SIGTERM, timeout=10):
        try:
            return super().stop(sig, timeout)
        finally:
            self._forget_faketime()

    def kill(self):
        super().kill()
        self._forget_faketime()


def invite(inviter, *invitees, duration="3s", extra=()):
    """Sends an invite; returns the challenge id after every invitee has it."""
    c = cli_json(inviter, "challenge", "invite", *[n.id for n in invitees], "--duration", duration, *extra)
    cid = c["id"]
    assert len(cid) == 32 and all(ch in "0123456789abcdef" for ch in cid)
    sent = wait_event(inviter, "challenge.invite.sent", f"id={cid}")
    assert sorted(sent["to"]) == sorted(n.id for n in invitees)
    for n in invitees:
        got = wait_event(n, "challenge.invited", f"id={cid}")
        assert got["from"] == inviter.id
        assert sorted(got["participants"]) == sorted([inviter.id] + [m.id for m in invitees])
    return cid


def now_mono_us():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def sleep_until(mono_us):
    time.sleep(max(0.0, (mono_us - now_mono_us()) / 1e6))


def scheduled(nodes, cid):
    """Waits until every node has the challenge scheduled (the inviter first); returns the start
    instant on CLOCK_MONOTONIC (µs) and the challenge as the inviter shows it. Only for sleeping: the
    node computed `starts_in_ms` before the CLI returned, so the instant returned is no earlier than
    the real start (late by at most the CLI's round trip, long on a busy machine): an action meant
    for a running challenge never comes before its start."""
    for n in nodes:
        ev = wait_event(n, "challenge.scheduled", f"id={cid}")
        assert sorted(ev["roster"]) == sorted(m.id for m in nodes), ev
    c = cli_json(nodes[0], "challenge", "show", cid)
    after = now_mono_us()
    assert c["phase"] == "scheduled", c
    return after + c["starts_in_ms"] * 1000, c


def started_and_ended(nodes, cid, start_mono, duration_ms):
    """Sleeps through the challenge (no CLI process competes with the nodes' start and end timers
    on this small machine), then returns each node's challenge.started and challenge.ended."""
    sleep_until(start_mono + duration_ms * 1000 + 400_000)
    started = [wait_event(n, "challenge.started", f"id={cid}") for n in nodes]
    ended = [wait_event(n, "challenge.ended", f"id={cid}") for n in nodes]
    return started, ended


def assert_quit_elapsed_is_from_the_start(quit, started, duration_ms):
    """A quit's `elapsed_ms` (the quitter's timebase now minus the agreed start) against the
    quitter's own record of the start on CLOCK_MONOTONIC: its timer noted `mono_us` `late_ms` after the
    agreed start, and the quit notice noted `mono_us` microseconds after computing `elapsed_ms`. Both
    are the node's clock readings, so they agree within SKEW_US (the bound this file holds a node's
    instants to; truncation to whole ms adds at most 2 ms), however late the `quit` command came."""
    assert 0 < quit["elapsed_ms"] < duration_ms, (quit, started)  # it quit while running
    measured_ms = (quit["mono_us"] - started["mono_us"]) / 1000 + started["late_ms"]
    print(f"quit elapsed_ms {quit['elapsed_ms']}, from the start's mono_us {measured_ms:.1f}")
    assert abs(quit["elapsed_ms"] - measured_ms) <= SKEW_US / 1000, (quit, started, measured_ms)


def mono_skew(evs):
    monos = [e["mono_us"] for e in evs]
    skew = max(monos) - min(monos)
    print(f"{evs[0]['type']} skew {skew} µs", {k: [e.get(k) for e in evs] for k in ("late_ms", "offset_us")})
    return skew


def ledger_entries(nodes, cid, signers):
    """Waits until every node committed the challenge; returns each node's ledger entry for it."""
    appended = [wait_event(n, "ledger.appended", f"challenge_id={cid}", timeout="30s") for n in nodes]
    assert [a["signers"] for a in appended] == [signers] * len(nodes), appended
    assert len({a["hash"] for a in appended}) == 1, appended
    entries = []
    for n, a in zip(nodes, appended):
        mine = [e for e in cli_json(n, "ledger", "list")["entries"] if e.get("challenge_id") == cid]
        assert len(mine) == 1, mine
        assert mine[0]["hash"] == a["hash"] and mine[0]["seq"] == a["entry"]
        assert sorted(mine[0]["signers"]) == sorted(m.id for m in nodes)
        entries.append(mine[0])
    return entries


def results(entry):
    return {o["id"]: o for o in entry["outcomes"]}


def verify_ok(node):
    proc = cli(node, "ledger", "verify", check=False)
    assert proc.returncode == 0, proc.stderr
    r = cli_json(node, "ledger", "verify")
    assert r["ok"] is True
    return r


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Alice and Bob, friends, shared by the tests that do not restart or tamper with a node."""
    root = tmp_path_factory.mktemp("pair")
    nodes = [ChallengeNode(root / "alice").start(), ChallengeNode(root / "bob").start()]
    try:
        befriend(*nodes)
        yield nodes
    finally:
        for n in nodes:
            n.kill()


@pytest.fixture
def make_friends(tmp_path):
    """make_friends(n, env={index: environment}) -> n fresh running nodes; the first is friends with each other one."""
    made = []

    def factory(count, env=None):
        nodes = []
        for i in range(count):
            n = ChallengeNode(tmp_path / f"n{i}")
            made.append(n)
            nodes.append(n.start(env=(env or {}).get(i)))
        for other in nodes[1:]:
            befriend(nodes[0], other)
        return nodes

    yield factory
    for n in made:
        n.kill()


# 1
def test_two_start_and_end_together_and_co_sign_the_ledger(pair):
    alice, bob = pair
    before = [cli_json(n, "stats") for n in pair]
    cid = invite(alice, bob, duration="3s", extra=("--message", "deep work"))
    assert wait_event(bob, "challenge.invited", f"id={cid}")["message"] == "deep work"
    cli(bob, "challenge", "accept", cid[:6])
    assert wait_event(alice, "challenge.accepted", f"id={cid}")["by"] == bob.id
    start, _ = scheduled(pair, cid)
    started, ended = started_and_ended(pair, cid, start, 3000)
    assert mono_skew(started) <= SKEW_US, started
    assert mono_skew(ended) <= SKEW_US, ended
    # Three seconds apart, on the shared clock.
    for s, e in zip(started, ended):
        assert abs(e["mono_us"] - s["mono_us"] - 3_000_000) <= SKEW_US, (s, e)
        assert e["result"] == "completed"
    entries = ledger_entries(pair, cid, signers=2)
    assert all(o["result"] == "completed" for o in entries[0]["outcomes"])
    assert entries[0]["duration_ms"] == 3000
    for n in pair:
        verify_ok(n)
        shown = cli_json(n, "challenge", "show", cid)
        assert shown["phase"] == "ended" and shown["result"] == "completed" and shown["committed"] is True
    for n, b in zip(pair, before):
        stats = cli_json(n, "stats")
        assert stats["challenges_completed"] == b["challenges_completed"] + 1, stats
        assert stats["challenges_failed"] == b["challenges_failed"], stats


# 2
def test_decline_is_told_and_nothing_starts(pair):
    alice, bob = pair
    cid = invite(alice, bob, duration="2s")
    cli(bob, "challenge", "decline", cid)
    declined = wait_event(alice, "challenge.declined", f"id={cid}", f"by={bob.id}")
    assert declined["id"] == cid
    # Well past the 2 s lead a two-person start would have: nothing was scheduled or started.
    time.sleep(3)
    for n in pair:
        for t in ("challenge.scheduled", "challenge.started", "challenge.ended"):
            assert [e for e in events(n, t) if e["id"] == cid] == [], (n.data_dir, t)
        assert cli_json(n, "challenge", "show", cid)["phase"] == "declined"
    # And accepting it now is refused.
    proc = cli(bob, "challenge", "accept", cid, check=False)
    assert proc.returncode == 1
    one_line_error(proc)


# 3
def test_quit_early_is_told_at_once_and_recorded_by_both(pair):
    alice, bob = pair
    cid = invite(alice, bob, duration="5s")
    cli(bob, "challenge", "accept", cid)
    start, _ = scheduled(pair, cid)
    sleep_until(start + 1_500_000)
    cli(bob, "challenge", "quit", cid, "--reason", "phone call")
    quit_b = wait_event(bob, "challenge.quit", f"id={cid}")
    told = wait_event(alice, "challenge.partner.quit", f"id={cid}", f"who={bob.id}", timeout="5s")
    # Told within a second, on the clock both processes share (and on their wall clocks, not faked here).
    assert 0 <= told["mono_us"] - quit_b["mono_us"] <= 1_000_000, (quit_b, told)
    assert told["time_ms"] - quit_b["time_ms"] <= 1000, (quit_b, told)
    print(f"quit notice latency {told['mono_us'] - quit_b['mono_us']} µs")
    assert told["reason"] == "phone call" and quit_b["reason"] == "phone call"
    assert abs(told["elapsed_ms"] - quit_b["elapsed_ms"]) <= 50
    # Alice goes on to the end; Bob's node still ends (and signs) at the same instant.
    started, ended = started_and_ended(pair, cid, start, 5000)
    assert_quit_elapsed_is_from_the_start(quit_b, started[1], 5000)
    assert mono_skew(started) <= SKEW_US, started
    assert mono_skew(ended) <= SKEW_US, ended
    assert ended[0]["result"] == "completed" and ended[1]["result"] == "quit"
    assert abs(ended[1]["mono_us"] - started[1]["mono_us"] - 5_000_000) <= SKEW_US
    entries = ledger_entries(pair, cid, signers=2)
    for entry in entries:
        r = results(entry)
        assert r[alice.id]["result"] == "completed"
        assert r[bob.id]["result"] == "quit" and r[bob.id]["reason"] == "phone call"
        assert r[bob.id]["elapsed_ms"] == quit_b["elapsed_ms"]
    for n in pair:
        verify_ok(n)
    assert cli_json(bob, "stats")["challenges_failed"] >= 1


# 4
def test_group_of_three_with_one_quitter(make_friends):
    alice, bob, carol = make_friends(3)  # Bob and Carol are friends of Alice only
    group = [alice, bob, carol]
    assert [f["id"] for f in cli_json(bob, "friend", "list")["friends"]] == [alice.id]
    assert [f["id"] for f in cli_json(carol, "friend", "list")["friends"]] == [alice.id]
    cid = invite(alice, bob, carol, duration="4s", extra=("--start-in", "5s"))
    for n in (bob, carol):
        cli(n, "challenge", "accept", cid)
    # Everyone hears every answer (Bob and Carol too, who are not friends).
    for n in group:
        for who in (bob, carol):
            if n is not who:
                wait_event(n, "challenge.accepted", f"id={cid}", f"by={who.id}")
    start, _ = scheduled(group, cid)
    sleep_until(start + 1_000_000)
    cli(carol, "challenge", "quit", cid, "--reason", "tired")
    quit_c = wait_event(carol, "challenge.quit", f"id={cid}")
    for n in (alice, bob):
        told = wait_event(n, "challenge.partner.quit", f"id={cid}", f"who={carol.id}", timeout="5s")
        assert 0 <= told["mono_us"] - quit_c["mono_us"] <= 1_000_000, (n.data_dir, told, quit_c)
        assert told["reason"] == "tired" and abs(told["elapsed_ms"] - quit_c["elapsed_ms"]) <= 50
    started, ended = started_and_ended(group, cid, start, 4000)
    assert_quit_elapsed_is_from_the_start(quit_c, started[2], 4000)
    assert mono_skew(started) <= SKEW_US, started
    assert all(sorted(s["roster"]) == sorted(n.id for n in group) for s in started)
    assert mono_skew(ended) <= SKEW_US, ended
    assert [e["result"] for e in ended] == ["completed", "completed", "quit"]
    entries = ledger_entries(group, cid, signers=3)
    for entry in entries:
        r = results(entry)
        assert r[alice.id]["result"] == "completed" and r[bob.id]["result"] == "completed"
        assert r[carol.id]["result"] == "quit" and r[carol.id]["reason"] == "tired"
    for n in group:
        verify_ok(n)


# 5
def test_kill_9_mid_challenge_resumes_and_ends_on_time(make_friends):
    alice, bob = make_friends(2)
    cid = invite(alice, bob, duration="7s")
    cli(bob, "challenge", "accept", cid)
    start, _ = scheduled([alice, bob], cid)
    sleep_until(start + 1_500_000)
    started = [wait_event(n, "challenge.started", f"id={cid}") for n in (alice, bob)]
    assert mono_skew(started) <= SKEW_US, started
    seq = last_seq(alice)
    bob.kill()
    bob.start(port=bob.port)
    resumed = wait_event(bob, "challenge.resumed", f"id={cid}")
    # Resumed from the stored instants, not started over: the remaining time Bob's node computed at
    # its restart is its agreed end minus the time it stamped the event with (`time_ms`), both on
    # Bob's wall clock. The end on that clock: its timer noted the start (`at_us`) `late_ms` after
    # the agreed start, plus the 7 s. Computing `remaining_ms` and stamping the event are microseconds
    # of the node's code apart; SKEW_US is the bound this file holds a node's instants to (whole ms
    # rounding adds at most 3 ms). Started over, it would say about 7000 (some 1.5 s too many).
    bob_end_ms = (started[1]["at_us"] - started[1]["late_ms"] * 1000) / 1000 + 7000
    print(f"resumed remaining_ms {resumed['remaining_ms']}, end minus time_ms {bob_end_ms - resumed['time_ms']:.1f}")
    assert abs(resumed["remaining_ms"] - (bob_end_ms - resumed["time_ms"])) <= SKEW_US / 1000, (resumed, started[1])
    wait_event(alice, "peer.online", f"id={bob.id}", since=seq)
    _, ended = started_and_ended([alice, bob], cid, start, 7000)
    assert mono_skew(ended) <= 50_000, ended
    assert abs(ended[0]["mono_us"] - started[0]["mono_us"] - 7_000_000) <= SKEW_US
    assert [e["result"] for e in ended] == ["completed", "completed"]
    # Bob started (and ended) once: the restart resumed, it did not start again.
    assert len([e for e in events(bob, "challenge.started") if e["id"] == cid]) == 1
    entries = ledger_entries([alice, bob], cid, signers=2)
    assert all(o["result"] == "completed" for o in entries[0]["outcomes"])
    for n in (alice, bob):
        verify_ok(n)


# 6
@pytest.mark.parametrize("shift,offset_us", [("+5s", -5_000_000), ("-5s", 5_000_000)])
@pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime is not installed (apt-get install faketime)")
def test_a_wrong_clock_does_not_matter(make_friends, shift, offset_us):
    fake = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": shift, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    alice, bob = make_friends(2, env={1: fake})  # Bob's wall clock is 5 s off
    cid = invite(alice, bob, duration="3s")
    cli(bob, "challenge", "accept", cid)
    start, _ = scheduled([alice, bob], cid)
    started, ended = started_and_ended([alice, bob], cid, start, 3000)
    # The fake took. At the start each node's timer noted its wall clock (`at_us`) and CLOCK_MONOTONIC
    # (`mono_us`) back to back; the monotonic clock is shared and not faked, so the two nodes'
    # wall-minus-monotonic differ by exactly how far Bob's wall clock is from Alice's (up to the
    # time between two clock reads: within SKEW_US, the bound this file holds a node's instants to).
    wall_minus_mono = [s["at_us"] - s["mono_us"] for s in started]
    print(f"Bob's wall clock minus Alice's {wall_minus_mono[1] - wall_minus_mono[0]} µs; "
          f"time_ms - at_us {[s['time_ms'] - s['at_us'] // 1000 for s in started]} ms")
    assert abs(wall_minus_mono[1] - wall_minus_mono[0] + offset_us) <= SKEW_US, started
    # And each node stamps its events (`time_ms`) with that same wall clock: the stamp of its
    # challenge.started is not before its `at_us` (the event is written after the timer noted the
    # instant), and not half the 5 s shift after it, where a stamp from the other clock would be.
    for s in started:
        assert 0 <= s["time_ms"] - s["at_us"] // 1000 < abs(offset_us) // 2000, s
    assert abs(started[1]["offset_us"] - offset_us) <= 20_000, started[1]
    assert mono_skew(started) <= SKEW_US, started
    assert mono_skew(ended) <= SKEW_US, ended
    # Bob's wall clock says he started 5 s away from Alice.
    assert abs((started[1]["at_us"] - started[0]["at_us"]) + offset_us) <= 50_000
    ledger_entries([alice, bob], cid, signers=2)
    for n in (alice, bob):
        verify_ok(n)


def db_rows(path, table):
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()


def db_keys(path):
    """Every stored row's key, by table (the primary key, or the rowid)."""
    out = {}
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            pk = [r[1] for r in sorted(db.execute(f"PRAGMA table_info({table})"), key=lambda r: r[5]) if r[5] > 0]
            cols = ", ".join(pk) if pk else "rowid"
            out[table] = set(db.execute(f"SELECT {cols} FROM {table}").fetchall())
    return out


def patch_ledger(path, seq, column, offset):
    """Flips one bit of one byte of a ledger blob; returns the original blob."""
    db = sqlite3.connect(path)
    try:
        (blob,) = db.execute(f"SELECT {column} FROM ledger WHERE seq = ?", (seq,)).fetchone()
        changed = bytearray(blob)
        changed[offset] ^= 0x01
        db.execute(f"UPDATE ledger SET {column} = ? WHERE seq = ?", (bytes(changed), seq))
        db.commit()
        return bytes(blob)
    finally:
        db.close()


def restore_ledger(path, seq, column, blob):
    db = sqlite3.connect(path)
    try:
        db.execute(f"UPDATE ledger SET {column} = ? WHERE seq = ?", (blob, seq))
        db.commit()
    finally:
        db.close()


# 7
def test_a_tampered_ledger_is_caught(make_friends):
    alice, bob = make_friends(2)
    cid = invite(alice, bob, duration="2s")
    cli(bob, "challenge", "accept", cid)
    ledger_entries([alice, bob], cid, signers=2)
    # A second entry after it: a solo session.
    cli(alice, "focus", "start", "--duration", "1s")
    wait_event(alice, "ledger.appended", "entry=2")
    verify_ok(alice)
    ledger_before = cli_json(alice, "ledger", "list")["entries"]
    assert [e["seq"] for e in ledger_before] == [1, 2]
    alice.stop()
    db = os.path.join(alice.data_dir, "node.sqlite")
    ledger_rows = db_rows(db, "ledger")
    challenge_rows = db_rows(db, "challenge")
    keys = db_keys(db)
    assert keys["contact"] and keys["event"] and len(keys["challenge"]) == 2

    def broken(expect_seq, *expect_text):
        alice.start()
        try:
            proc = cli(alice, "ledger", "verify", check=False)
            assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
            line = one_line_error(proc)
            assert f"broken at entry {expect_seq}:" in line, line
            assert all(t in line for t in expect_text), line
            assert proc.stdout == ""
            proc = cli(alice, "ledger", "verify", "--json", check=False)
            assert proc.returncode == 1
            r = json.loads(proc.stdout)
            assert r["ok"] is False and r["break"]["seq"] == expect_seq and r["entries"] == 2
            # The node is otherwise fine: its ledger still lists, its friend is still there.
            assert [e["seq"] for e in cli_json(alice, "ledger", "list")["entries"]] == [1, 2]
            assert [f["id"] for f in cli_json(alice, "friend", "list")["friends"]] == [bob.id]
        finally:
            alice.stop()

    # A byte of the first record.
    record = ledger_rows[0][2]
    original = patch_ledger(db, 1, "record", len(record) // 2)
    broken(1)
    restore_ledger(db, 1, "record", original)
    # A byte of the first signature of entry 1 (96 bytes per signer: key, then signature).
    original = patch_ledger(db, 1, "signatures", 32 + 10)
    broken(1, "signature", "does not verify")
    restore_ledger(db, 1, "signatures", original)
    # The link of entry 2 to entry 1.
    original = patch_ledger(db, 2, "previousHash", 0)
    broken(2, "previous hash")
    restore_ledger(db, 2, "previousHash", original)

    # Restored, it holds again, and nothing else was lost.
    assert db_rows(db, "ledger") == ledger_rows
    alice.start()
    verify_ok(alice)
    assert cli_json(alice, "ledger", "list")["entries"] == ledger_before
    assert cli_json(alice, "challenge", "show", cid)["phase"] == "ended"
    alice.stop()
    assert db_rows(db, "challenge") == challenge_rows
    after = db_keys(db)
    for table, rows in keys.items():
        if table != "outbox":  # frames go away when acknowledged
            assert rows <= after[table], table


# 8
def test_bad_input_gets_one_line_and_the_right_exit_code(pair, tmp_path):
    alice, bob = pair
    stranger = Node(tmp_path / "stranger")  # a valid ID, not a friend
    pending = cli_json(alice, "challenge", "invite", bob.id, "--duration", "1m", "--start-in", "1h")["id"]
    cases = [
        (bob, ["challenge", "accept", "zzzz"], 2),
        (bob, ["challenge", "accept", "abc"], 2),                     # too short a prefix
        (bob, ["challenge", "accept", "0123abcd0123abcd"], 8),        # no such challenge
        (bob, ["challenge", "show", "ffffffffffffffffffffffffffffffff"], 8),
        (alice, ["challenge", "invite", stranger.id, "--duration", "3s"], 1),
        (alice, ["challenge", "invite", alice.id, "--duration", "3s"], 2),
        (alice, ["challenge", "invite", bob.id, "--duration", "0s"], 2),
        (alice, ["challenge", "invite", bob.id, "--duration", "soon"], 2),
        (alice, ["challenge", "invite", "tdm1nope", "--duration", "3s"], 2),
        (alice, ["challenge", "invite", bob.id, "--duration", "3s", "--start-in", "1m", "--start-at", "12:00"], 2),
        (alice, ["challenge", "quit", pending], 1),                   # invited, not running
        (alice, ["challenge", "accept", pending], 1),                 # your own invite
        (alice, ["focus", "start", "--duration", "0s"], 2),
        (alice, ["focus", "quit"], 8),
    ]
    for node, args, code in cases:
        proc = cli(node, *args, check=False)
        assert proc.returncode == code, (args, proc.returncode, proc.stderr)
        one_line_error(proc)
        assert proc.stdout == "", (args, proc.stdout)
    # Bob's copy of the pending invite is there; quitting it there is refused as well.
    wait_event(bob, "challenge.invited", f"id={pending}")
    proc = cli(bob, "challenge", "quit", pending, check=False)
    assert proc.returncode == 1
    one_line_error(proc)
    # Nothing above started anything; cancel the pending one and Bob is told.
    cli(alice, "challenge", "cancel", pending)
    wait_event(bob, "challenge.cancelled", f"id={pending}")
    assert cli_json(bob, "challenge", "show", pending)["phase"] == "cancelled"
    invited_to_stranger = [e for e in events(alice, "challenge.invite.sent") if stranger.id in e["to"]]
    assert invited_to_stranger == []

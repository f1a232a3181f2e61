"""Two real `tandem node` processes on loopback become friends through the CLI only."""
import datetime
import json
import signal
import time

from tandem_testkit import befriend as befriend_and_wait, cli, cli_json, free_port, run, wait_event


def befriend(alice, bob):
    """Alice asks with a message, Bob accepts; no wait for the links (the tests here watch those)."""
    befriend_and_wait(alice, bob, message="focus with me?", online=False)


def friend_ids(node):
    return [f["id"] for f in cli_json(node, "friend", "list")["friends"]]


def test_request_accept_and_presence(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    cli(alice, "name", "Alice")
    cli(bob, "name", "Bob")
    cli(alice, "friend", "request", bob.id, "--message", "focus with me?", "--addr", bob.address)
    got = wait_event(bob, "friend.request.received", f"id={alice.id}")
    assert got["message"] == "focus with me?" and got["name"] == "Alice"
    pending = cli_json(bob, "friend", "requests")
    assert [r["id"] for r in pending["received"]] == [alice.id]
    assert [r["id"] for r in cli_json(alice, "friend", "requests")["sent"]] == [bob.id]
    cli(bob, "friend", "accept", alice.id)
    accepted = wait_event(alice, "friend.accepted", f"id={bob.id}")
    assert accepted["by"] == "them" and accepted["name"] == "Bob"
    wait_event(alice, "peer.online", f"id={bob.id}")
    friends = cli_json(alice, "friend", "list")["friends"]
    assert len(friends) == 1
    f = friends[0]
    assert f["id"] == bob.id and f["name"] == "Bob" and f["online"] is True
    assert f["via"] == "direct" and f["status"] == "idle"
    assert friend_ids(bob) == [alice.id]
    # Pending lists are empty afterwards, and the outbox is drained.
    assert cli_json(bob, "friend", "requests")["received"] == []
    assert cli_json(alice, "status")["outbox"] == 0
    # A name change reaches the friend as a contact update.
    cli(bob, "name", "Bobby")
    wait_event(alice, "contact.updated", f"id={bob.id}", "name=Bobby")
    # Offline is noticed when the friend's node stops.
    bob.stop()
    wait_event(alice, "peer.offline", f"id={bob.id}")
    f = cli_json(alice, "friend", "list")["friends"][0]
    assert f["online"] is False and f["status"] == "offline" and f["last_seen"]


def test_decline_is_told(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    cli(alice, "friend", "request", bob.id, "--addr", bob.address)
    wait_event(bob, "friend.request.received", f"id={alice.id}")
    cli(bob, "friend", "decline", alice.id)
    wait_event(alice, "friend.declined", f"id={bob.id}", "by=them")
    assert cli_json(alice, "friend", "requests")["sent"] == []
    assert friend_ids(alice) == [] and friend_ids(bob) == []
    # Accepting a declined request is refused with one line.
    proc = cli(bob, "friend", "accept", alice.id, check=False)
    assert proc.returncode == 8 and "no pending friend request" in proc.stderr


def test_remove_is_told_and_block_drops_silently(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    befriend(alice, bob)
    cli(alice, "friend", "remove", bob.id)
    wait_event(bob, "friend.removed", f"id={alice.id}", "by=them")
    assert friend_ids(alice) == [] and friend_ids(bob) == []
    # Bob blocks Alice; her new request is dropped silently (no request event on Bob's side).
    cli(bob, "friend", "block", alice.id)
    assert cli_json(bob, "status")["friends"] == 0
    cli(alice, "friend", "request", bob.id, "--addr", bob.address)
    wait_event(alice, "outbox.delivered", f"to={bob.id}")  # delivered (and acknowledged) …
    assert cli_json(bob, "friend", "requests")["received"] == []  # … but dropped
    events = [json.loads(l) for l in cli(bob, "events", "--json").stdout.splitlines()]
    assert sum(1 for e in events if e["type"] == "friend.request.received") == 1  # only the one before the block
    assert cli_json(bob, "friend", "list")["blocked"] == [alice.id]
    cli(bob, "friend", "unblock", alice.id)
    assert cli_json(bob, "friend", "list")["blocked"] == []


def test_request_to_offline_peer_survives_kill_9(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob")  # initialised, not running
    bob.port = free_port()
    cli(alice, "friend", "request", bob.id, "--addr", f"127.0.0.1:{bob.port}", "--message", "later")
    time.sleep(0.5)
    assert cli_json(alice, "status")["outbox"] == 1
    alice.proc.send_signal(signal.SIGKILL)
    alice.proc.wait(timeout=10)
    # Bob comes up on the port Alice knows; Alice restarts and delivers the stored request.
    bob.start(port=bob.port)
    alice.start()
    got = wait_event(bob, "friend.request.received", f"id={alice.id}", timeout="30s")
    assert got["message"] == "later"
    wait_event(alice, "outbox.delivered", f"to={bob.id}", timeout="30s")
    assert cli_json(alice, "status")["outbox"] == 0
    # Exactly once: a later restart does not deliver it again.
    events = [json.loads(l) for l in cli(bob, "events", "--json").stdout.splitlines()]
    assert sum(1 for e in events if e["type"] == "friend.request.received") == 1


def test_mutual_requests_make_friends(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    cli(alice, "friend", "request", bob.id, "--addr", bob.address)
    wait_event(bob, "friend.request.received", f"id={alice.id}")
    # Bob asks back instead of accepting: that is an acceptance.
    out = cli(bob, "friend", "request", alice.id)
    assert "friends now" in out.stdout
    wait_event(alice, "friend.accepted", f"id={bob.id}")
    assert friend_ids(alice) == [bob.id] and friend_ids(bob) == [alice.id]


def test_bad_input_gets_one_line(make_node, tmp_path):
    alice = make_node("alice").start()
    for args, code in [
        (["friend", "request", "tdm1nope"], 2),
        (["friend", "request", alice.id], 2),                     # yourself
        (["friend", "request", alice.id[:-1] + ("q" if alice.id[-1] != "q" else "p")], 2),
        (["friend", "accept", make_node("x").id], 8),              # nothing pending
        (["friend", "request", make_node("y").id, "--addr", "nowhere"], 2),
        (["friend", "request", make_node("z").id, "--message", "x" * 300], 2),
        (["discoverable", "maybe"], 2),
    ]:
        proc = cli(alice, *args, check=False)
        assert proc.returncode == code, (args, proc.returncode, proc.stderr)
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("tandem: error: "), (args, proc.stderr)
    # Nothing above was stored.
    status = cli_json(alice, "status")
    assert status["outbox"] == 0 and status["friends"] == 0
    # With no node running, commands say so in one line.
    nobody = make_node("nobody")
    proc = cli(nobody, "friend", "list", check=False)
    assert proc.returncode == 7 and "tandem node" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_discoverable_setting(make_node):
    alice = make_node("alice").start()
    assert cli_json(alice, "discoverable")["mode"] == "auto"
    assert cli_json(alice, "discoverable")["discoverable"] is True
    cli(alice, "discoverable", "off")
    assert cli_json(alice, "discoverable")["discoverable"] is False
    bob = make_node("bob").start()
    cli(alice, "discoverable", "auto")
    befriend(alice, bob)
    # auto turns off once there is a friend.
    assert cli_json(alice, "discoverable")["discoverable"] is False


def test_flood_of_requests_from_throwaway_identities_is_capped(make_node):
    bob = make_node("bob").start()
    before = bob.rss_kib()
    out = json.loads(run("dev", "flood", bob.address, bob.id, "--count", "10000", "--settle", "3", timeout=120).stdout)
    assert out["sent"] == 10000
    # Per-address limits let a few through, far below the flood and below the pending cap.
    status = cli_json(bob, "status")
    assert 0 < status["pending_requests"] <= 100
    # Durable before acknowledged: every ACK is a stored request. The flooder waits for 3 s without
    # an ACK before hanging up; an ACK still on its way then is lost with the link (seen once in CI,
    # 31 acknowledged of 32 stored, on a loaded machine).
    assert out["acknowledged"] <= status["pending_requests"] <= out["acknowledged"] + 2
    # Memory stays bounded and the CLI is answered promptly.
    assert bob.rss_kib() - before < 50_000
    t = time.monotonic()
    cli(bob, "friend", "requests")
    assert time.monotonic() - t < 5
    # The event log got one throttling report, not thousands of lines.
    events = [json.loads(l) for l in cli(bob, "events", "--json").stdout.splitlines()]
    throttled = [e for e in events if e["type"] == "friend.request.throttled"]
    # At most one report per 10 s (by the node's own event times): a flood that lasts longer on a busy
    # machine gets more reports, never more often.
    assert throttled
    stamps = [datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")) for e in throttled]
    assert all((b - a).total_seconds() >= 9.999 for a, b in zip(stamps, stamps[1:])), stamps
    assert sum(e["dropped"] for e in throttled) <= out["sent"]
    # A legitimate request from another address-limited peer still gets through later (the node is healthy).
    alice = make_node("alice").start()
    assert "seq=1" in run("ping", "--data-dir", alice.data_dir, bob.address, bob.id).stdout


def test_new_port_reaches_friends_as_a_contact_update(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    befriend(alice, bob)
    bob.stop()
    offline = wait_event(alice, "peer.offline", f"id={bob.id}")
    bob.start()  # a new free port
    got = json.loads(cli(alice, "wait", "contact.updated", "--match", f"id={bob.id}", "--since", str(offline["seq"]),
                         "--timeout", "30s", "--json", timeout=60).stdout)
    assert got["id"] == bob.id
    wait_event(alice, "peer.online", f"id={bob.id}")
    assert [f["online"] for f in cli_json(alice, "friend", "list")["friends"]] == [True]


def test_friends_named_by_nickname_and_display_name(make_node):
    """A person names friends as they know them: a local nickname or the display name, anywhere an ID
    goes; a name two friends share is refused with both candidates, never guessed."""
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    bob2 = make_node("bob2").start()
    cli(bob, "name", "Bob")
    cli(bob2, "name", "Bob")
    befriend_and_wait(alice, bob, online=False)
    befriend_and_wait(alice, bob2, online=False)
    # Both are "Bob": the name is ambiguous, and the refusal lists both IDs (usage error, exit 2).
    r = run("message", "send", "bob", "hi", "--data-dir", alice.data_dir, check=False)
    assert r.returncode == 2 and bob.id in r.stderr and bob2.id in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # A nickname tells them apart; it is shown in friend list and accepted by every command.
    cli(alice, "friend", "nick", bob2.id, "Bobby")
    listed = {f["id"]: f for f in cli_json(alice, "friend", "list")["friends"]}
    assert listed[bob2.id]["nickname"] == "Bobby" and listed[bob.id]["nickname"] is None
    assert "Bobby (tdm1-" in cli(alice, "friend", "list").stdout
    sent = cli_json(alice, "message", "send", "bobby", "hello Bobby")
    got = wait_event(bob2, "message.received", "text=hello Bobby")
    assert got["from"] == alice.id and sent["id"]
    # The nickname is looked at first: "Bob" still names two friends, "Bobby" one.
    r = run("friend", "nick", "Bobby", bob.id, "--data-dir", alice.data_dir, check=False)
    assert r.returncode != 0 and "names several contacts" not in r.stderr
    r = run("friend", "nick", bob.id, "bobby", "--data-dir", alice.data_dir, check=False)
    assert r.returncode == 2 and "already has the nickname" in r.stderr, r.stderr
    # Nothing matches: a clear line and exit 8; a malformed ID stays a usage error (no node needed).
    r = run("friend", "remove", "Carol", "--data-dir", alice.data_dir, check=False)
    assert r.returncode == 8 and "no contact named 'Carol'" in r.stderr, r.stderr
    r = run("friend", "remove", "tdm1notanid", "--data-dir", alice.data_dir, check=False)
    assert r.returncode == 2, r.stderr
    # Removing the nickname.
    cli(alice, "friend", "nick", "Bobby")
    assert {f["id"]: f for f in cli_json(alice, "friend", "list")["friends"]}[bob2.id]["nickname"] is None


def test_status_in_sentences(make_node):
    alice = make_node("alice").start()
    cli(alice, "name", "Alice")
    text = cli(alice, "status").stdout
    assert text.startswith("Alice is running, listening on 127.0.0.1:"), text
    assert "Friends: 0, 0 open links." in text and "Outbox: empty" in text and "Focus: no mode is locked." in text
    assert "{" not in text, text  # sentences, not JSON fragments
    status = cli_json(alice, "status")
    # Nodes under test run with --no-discovery: no beacon goes out, so the node is not discoverable.
    assert status["discovery"] is False and status["discoverable"] is False and "LAN discovery: off" in text

"""The control socket through real processes: `tandem events`, `wait`, `status` against `tandem node`."""
import json
import os
import signal
import socket
import stat
import subprocess
import time

from tandem_testkit import TANDEM, Node, befriend, control_call, one_line_error, run, wait_event


def read_json_line(sock, buf=b""):
    """Reads one newline-terminated JSON object from a socket; returns (object or None at EOF, rest)."""
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, buf
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    return json.loads(line), rest


def test_commands_without_a_node_say_so_in_one_line(tmp_path):
    node = Node(tmp_path / "alice")  # initialised, not started
    for args in (["events"], ["events", "--follow"], ["wait", "node.started"], ["status"], ["status", "--json"]):
        proc = run(*args, "--data-dir", node.data_dir, check=False)
        assert proc.returncode == 7, (args, proc.returncode, proc.stderr)
        line = one_line_error(proc)
        assert f"no node is running for {node.data_dir}" in line
        assert f"tandem node --data-dir {node.data_dir}" in line
    # Even with no data directory at all.
    empty = str(tmp_path / "nothing")
    proc = run("events", "--data-dir", empty, check=False)
    assert proc.returncode == 7
    one_line_error(proc)


def test_events_and_wait_with_a_node(make_node):
    alice = make_node("alice").start()
    mode = stat.S_IMODE(os.stat(alice.control_socket).st_mode)
    assert mode == 0o600, oct(mode)

    t0 = time.monotonic()
    out = run("wait", "node.started", "--since", "0", "--data-dir", alice.data_dir, "--json", "--timeout", "10s")
    assert time.monotonic() - t0 < 5
    event = json.loads(out.stdout)
    assert event["type"] == "node.started" and event["seq"] == 1
    assert event["address"] == alice.address and event["id"] == alice.id

    matched = run("wait", "node.started", "--since", "0", "--match", f"address={alice.address}",
                  "--data-dir", alice.data_dir)
    assert "node.started" in matched.stdout and matched.stdout.startswith("#1 ")

    lines = run("events", "--json", "--data-dir", alice.data_dir).stdout.splitlines()
    assert lines, "at least node.started"
    events = [json.loads(l) for l in lines]
    for e in events:
        assert {"seq", "type", "time", "time_ms"} <= set(e)
        assert isinstance(e["seq"], int) and isinstance(e["time_ms"], int)
        assert e["time"].endswith("Z")
    assert events[0]["type"] == "node.started"
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)

    text = run("events", "--data-dir", alice.data_dir).stdout
    assert text.startswith("#1 ") and "node.started" in text
    assert run("events", "--since", "1", "--data-dir", alice.data_dir).stdout == ""
    assert run("events", "--type", "nothing.*", "--data-dir", alice.data_dir).stdout == ""


def test_wait_times_out_with_exit_6(make_node):
    alice = make_node("alice").start()
    t0 = time.monotonic()
    proc = run("wait", "x", "--timeout", "500ms", "--data-dir", alice.data_dir, check=False)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 6, proc.stderr
    assert "timed out after 500ms waiting for x" in one_line_error(proc)
    assert elapsed < 5
    # Without --since, events from before the command started do not count.
    proc = run("wait", "node.started", "--timeout", "300ms", "--data-dir", alice.data_dir, check=False)
    assert proc.returncode == 6
    # A non-matching --match does not count either.
    proc = run("wait", "node.started", "--since", "0", "--match", "address=elsewhere", "--timeout", "300ms",
               "--data-dir", alice.data_dir, check=False)
    assert proc.returncode == 6


def test_wait_sees_an_event_that_happens_while_it_waits(make_node):
    alice = make_node("alice").start()
    seq = json.loads(run("events", "--json", "--data-dir", alice.data_dir).stdout.splitlines()[-1])["seq"]
    waiter = subprocess.Popen([TANDEM, "wait", "name.changed", "--since", str(seq), "--timeout", "20s", "--json",
                               "--data-dir", alice.data_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    # Whether the waiter subscribed before or after this (a busy machine decides), --since makes it see it.
    run("name", "Alice", "--data-dir", alice.data_dir)
    out, err = waiter.communicate(timeout=20)
    assert waiter.returncode == 0, err
    assert json.loads(out)["type"] == "name.changed"


def test_follow_waits_for_a_restarted_node_and_goes_on(make_node):
    """`events --follow` outlives a restart of the node: it says so on stderr and prints the new
    node's events after the last one it printed, none twice."""
    alice = make_node("alice").start()
    follower = subprocess.Popen([TANDEM, "events", "--follow", "--json", "--data-dir", alice.data_dir],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(follower.stdout.readline())
        assert first["type"] == "node.started"
        assert alice.stop(signal.SIGTERM) == 0
        alice.start()
        seen = [first]
        while not (seen[-1]["type"] == "node.started" and seen[-1]["seq"] > first["seq"]):
            line = follower.stdout.readline()
            assert line, "the follower ended with the node"
            seen.append(json.loads(line))
        seqs = [e["seq"] for e in seen]
        assert seqs == sorted(set(seqs)), seqs  # in order, none twice
        assert "node.stopping" in [e["type"] for e in seen]
    finally:
        follower.terminate()
    _, err = follower.communicate(timeout=20)
    assert "the node stopped; waiting for it to start again" in err and "running again" in err, err


def test_follow_prints_live_events_and_ends_with_the_node(make_node):
    alice = make_node("alice").start()
    follower = subprocess.Popen([TANDEM, "events", "--follow", "--no-reconnect", "--json", "--data-dir", alice.data_dir],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = json.loads(follower.stdout.readline())
    assert first["type"] == "node.started"
    assert alice.stop(signal.SIGTERM) == 0
    out, err = follower.communicate(timeout=20)
    types = [json.loads(l)["type"] for l in out.splitlines()]
    assert "node.stopping" in types or types == []
    # The node went away: one line, not a crash.
    assert follower.returncode == 1, err
    one_line_error(subprocess.CompletedProcess([], follower.returncode, out, err))


def test_usage_errors(make_node):
    alice = make_node("alice")
    for args in (["wait", "x", "--timeout", "soon"], ["wait", "x", "--match", "novalue"], ["events", "--since", "-1"]):
        proc = run(*args, "--data-dir", alice.data_dir, check=False)
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
        one_line_error(proc)


def test_status_reports_a_missing_method_in_one_line(make_node):
    alice = make_node("alice").start()
    proc = run("status", "--data-dir", alice.data_dir, check=False)
    # node.status is registered by the node later; until then a clean one-line error.
    if proc.returncode != 0:
        assert "node.status" in one_line_error(proc)
    else:
        assert proc.stdout.strip()


def test_garbage_and_huge_lines_do_not_hurt_the_node(make_node):
    alice = make_node("alice").start()

    # Garbage: an error line per bad line, and the connection stays usable.
    with alice.control() as s:
        s.sendall(b"\x00\x01\xff garbage\n{not json}\n[1,2]\n")
        rest = b""
        for _ in range(3):
            response, rest = read_json_line(s, rest)
            assert response["ok"] is False and response["error"]["code"] == "bad_request"
            assert response["id"] is None
        s.sendall(b'{"id":5,"method":"ping"}\n')
        response, rest = read_json_line(s, rest)
        assert response == {"id": 5, "ok": True, "result": {"pong": True}}

    # A 1 MB line: refused with an error, then the connection is closed.
    with alice.control() as s:
        try:
            s.sendall(b"x" * (1024 * 1024) + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node may close before everything is sent
        try:
            response, rest = read_json_line(s)
            if response is not None:
                assert response["error"]["code"] == "line_too_long"
                closed, _ = read_json_line(s, rest)
                assert closed is None
        except ConnectionResetError:
            pass

    # Many connections at once, some never sending anything: still bounded and answering.
    idle = []
    try:
        for _ in range(20):
            idle.append(alice.control())
        # The control socket answers before the core (at a lower priority) has written node.started
        # on a busy machine: wait for the event, then read the log.
        wait_event(alice, "node.started")
        lines = run("events", "--json", "--data-dir", alice.data_dir).stdout.splitlines()
        assert json.loads(lines[0])["type"] == "node.started"
    finally:
        for s in idle:
            s.close()

    lines = run("events", "--json", "--data-dir", alice.data_dir).stdout.splitlines()
    assert json.loads(lines[0])["type"] == "node.started"
    assert alice.proc.poll() is None, "the node is still running"


def test_one_node_per_data_dir_and_stale_socket_after_a_crash(make_node):
    alice = make_node("alice").start()
    second = run("node", "--data-dir", alice.data_dir, "--listen", "127.0.0.1:0", check=False)
    assert second.returncode == 1
    assert f"another node is already running with data dir {alice.data_dir}" in one_line_error(second)
    assert alice.proc.poll() is None

    # SIGKILL leaves the socket file behind; the next node replaces it.
    alice.proc.kill()
    alice.proc.wait()
    assert os.path.exists(alice.control_socket)
    proc = run("events", "--data-dir", alice.data_dir, check=False)
    assert proc.returncode == 7
    one_line_error(proc)
    alice.start()
    # Events persist across restarts: pick this run's start by its address.
    out = run("wait", "node.started", "--since", "0", "--match", f"address={alice.address}", "--json",
              "--data-dir", alice.data_dir)
    assert json.loads(out.stdout)["address"] == alice.address
    # A clean stop removes the socket.
    assert alice.stop(signal.SIGTERM) == 0
    assert not os.path.exists(alice.control_socket)


# The members of each result, exactly as Protocol/control.md documents them.
FRIEND_MEMBERS = {"id", "name", "relationship", "online", "status", "via", "last_seen", "message", "requested_at",
                  "friend_since", "relay", "nickname", "health", "state"}
STATUS_MEMBERS = {"id", "display", "name", "listen", "data_dir", "friends", "pending_requests", "outbox", "links",
                  "discovery", "discoverable", "relays", "quarantined", "quarantine", "store_errors", "frames_dropped_queue_full",
                  "links_paused_queue_full", "frames_waiting", "focus", "web", "transport"}
TRANSPORT_MEMBERS = {"frames_accepted", "link_messages_accepted", "frames_rejected", "error_replies_suppressed", "replies_dropped_unwritable",
                     "links_closed", "handshakes_refused", "reads_paused", "handshakes_pending", "partial_frame_bytes",
                     "replay_cache_entries"}


def result(node, method, **params):
    answer = control_call(node, method, params)
    assert answer["ok"] is True and answer["id"] == 1, (method, answer)
    return answer["result"]


def test_control_results_have_the_documented_members(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    carol = make_node("carol").start()

    sent = result(alice, "friend.request", id=bob.id, message="focus with me?", addr=bob.address)
    assert set(sent) == FRIEND_MEMBERS, sorted(sent)
    assert sent["id"] == bob.id and sent["relationship"] == "requested" and sent["message"] == "focus with me?"
    assert sent["friend_since"] is None and sent["relay"] is None and sent["requested_at"].endswith("Z")
    wait_event(bob, "friend.request.received", f"id={alice.id}")

    requests = result(bob, "friend.requests")
    assert set(requests) == {"received", "sent"} and requests["sent"] == []
    [received] = requests["received"]
    assert set(received) == FRIEND_MEMBERS and received["id"] == alice.id and received["relationship"] == "pending"
    assert received["message"] == "focus with me?"
    assert [set(f) for f in result(alice, "friend.requests")["sent"]] == [FRIEND_MEMBERS]

    accepted = result(bob, "friend.accept", id=alice.id)
    assert set(accepted) == FRIEND_MEMBERS and accepted["relationship"] == "friend"
    assert accepted["friend_since"].endswith("Z")
    wait_event(alice, "peer.online", f"id={bob.id}")
    listed = result(alice, "friend.list")
    assert set(listed) == {"friends", "blocked"} and listed["blocked"] == []
    [friend] = listed["friends"]
    assert set(friend) == FRIEND_MEMBERS and friend["online"] is True and friend["via"] == "direct"
    assert friend["status"] in ("idle", "focusing", "in_challenge")

    befriend(alice, carol)
    assert result(alice, "friend.remove", id=carol.id) == {"id": carol.id, "removed": True}
    assert result(alice, "friend.block", id=carol.id) == {"id": carol.id, "blocked": True}
    assert result(alice, "friend.list")["blocked"] == [carol.id]
    assert result(alice, "friend.unblock", id=carol.id) == {"id": carol.id, "blocked": False}
    declined = control_call(alice, "friend.decline", {"id": carol.id})
    assert declined["ok"] is False and declined["error"]["code"] == "failed" and declined["error"]["exit"] == 8, declined

    assert result(alice, "name.set", name="Alice") == {"name": "Alice"}
    assert result(alice, "name.get") == {"name": "Alice"}
    assert result(alice, "discoverable.set", mode="off") == {"mode": "off", "discoverable": False}
    assert result(alice, "discoverable.get") == {"mode": "off", "discoverable": False}
    assert result(alice, "peers.list") == {"peers": []}  # loopback nodes run without discovery

    status = result(alice, "node.status")
    assert set(status) == STATUS_MEMBERS, sorted(status)
    assert set(status["transport"]) == TRANSPORT_MEMBERS, sorted(status["transport"])
    assert status["focus"] == {"locked": False, "active_mode": None, "mode": None,
                               "blocked": {"sites": [], "apps": [], "open_now": []}}, status["focus"]
    assert status["id"] == alice.id and status["listen"] == alice.address and status["friends"] == 1
    assert status["name"] == "Alice" and status["discoverable"] is False and status["relays"] == []

"""Messages between two real `tandem node` processes, through the CLI only."""
import json
import os
import subprocess

from tandem_testkit import TANDEM, befriend, cli, cli_json, control_call, events, one_line_error, poll, wait_event


def send_stdin(node, friend, data, *args):
    """`tandem message send FRIEND - ARGS` with `data` (bytes) on standard input."""
    return subprocess.run([TANDEM, "message", "send", friend, "-", *args, "--data-dir", node.data_dir],
                          input=data, capture_output=True, timeout=30, env=os.environ)


def test_send_list_and_wait_delivered(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    cli(alice, "name", "Alice")
    cli(bob, "name", "Bob")
    befriend(alice, bob)
    # By name, waiting until Bob's node stored it.
    sent = cli_json(alice, "message", "send", "Bob", "ready? \x1b[2J", "--wait", "delivered", "--timeout", "20s")
    assert set(sent) == {"id", "delivered_at"} and len(sent["id"]) == 32
    received = wait_event(bob, "message.received", f"id={sent['id']}")
    assert received["from"] == alice.id and received["from_name"] == "Alice" and received["text"] == "ready? \x1b[2J"
    # Bob's list: the shape of --json, newest last.
    listed = cli_json(bob, "message", "list", alice.id)
    assert set(listed) == {"conversation", "messages"}
    [m] = listed["messages"]
    assert {"id", "author", "text", "sent_at", "state", "reply_to", "reactions"} <= set(m)
    assert m["id"] == sent["id"] and m["author"] == alice.id and m["text"] == "ready? \x1b[2J"
    assert m["state"] in ("received", "read") and m["reply_to"] is None and m["reactions"] == []
    # sent_at is local time with its offset (ISO 8601).
    assert m["sent_at"][10] == "T" and (m["sent_at"].endswith("Z") or m["sent_at"][-6] in "+-")
    # Text output: the escape sequence is shown, not obeyed.
    text = cli(bob, "message", "list", "Alice").stdout
    assert "\x1b" not in text and "ready? \\x1b[2J" in text
    # A person reads who wrote it by name (a nickname, once given, wins), not by a raw ID.
    assert m["author_name"] == "Alice" and "  Alice [" in text and "tdm1-" not in text
    cli(bob, "friend", "nick", "Alice", "Ali")
    assert "  Ali [" in cli(bob, "message", "list", "Ali").stdout
    # A reply, from standard input, in order after what it answers, on both sides.
    reply = send_stdin(bob, "Alice", "yes, ready\n".encode(), "--reply-to", sent["id"][:8], "--json")
    assert reply.returncode == 0, reply.stderr
    reply_id = json.loads(reply.stdout)["id"]
    wait_event(alice, "message.received", f"id={reply_id}")
    for node, other in ((alice, bob), (bob, alice)):
        msgs = cli_json(node, "message", "list", other.id)["messages"]
        assert [x["id"] for x in msgs] == [sent["id"], reply_id]
        assert msgs[1]["reply_to"] == sent["id"] and msgs[1]["text"] == "yes, ready"
    # Alice's copy is delivered; the node recorded the delivery after Bob's node stored it.
    mine = cli_json(alice, "message", "list", "Bob")["messages"]
    assert mine[0]["state"] == "delivered"
    delivered = wait_event(alice, "message.delivered", f"id={sent['id']}")
    assert delivered["to"] == bob.id
    # Search finds it with a snippet; --limit and --before page back.
    hits = cli_json(bob, "message", "search", "ready", "--friend", "Alice")["hits"]
    assert {h["id"] for h in hits} == {sent["id"], reply_id} and all("[ready]" in h["snippet"] for h in hits)
    assert {h["author_name"] for h in hits} == {"Ali", "Bob"}
    assert [x["id"] for x in cli_json(bob, "message", "list", "Alice", "--limit", "1")["messages"]] == [reply_id]
    assert [x["id"] for x in cli_json(bob, "message", "list", "Alice", "--before", reply_id)["messages"]] == [sent["id"]]
    # A reaction and a retract reach the other side.
    cli(bob, "message", "react", sent["id"][:10], "👍")
    wait_event(alice, "message.reaction", f"id={sent['id']}")
    assert cli_json(alice, "message", "list", "Bob")["messages"][0]["reactions"] == [{"author": bob.id, "emoji": "👍"}]
    cli(alice, "message", "retract", sent["id"])
    wait_event(bob, "message.retracted", f"id={sent['id']}")
    assert cli_json(bob, "message", "list", "Alice")["messages"][0]["state"] == "retracted"


def test_bad_input_is_one_line_and_non_zero(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    befriend(alice, bob, online=False)
    cases = [
        cli(alice, "message", "send", "nobody", "hi", check=False),
        cli(alice, "message", "send", bob.id, "x" * (17 * 1024), check=False),
        send_stdin(alice, bob.id, b"bad \xff\xfe utf-8"),
        send_stdin(alice, bob.id, b"y" * (17 * 1024)),
        cli(alice, "message", "send", bob.id, "", check=False),
        cli(alice, "message", "list", "nobody", check=False),
        cli(alice, "message", "react", "zz", "👍", check=False),
        cli(alice, "message", "retract", "abcdef0123", check=False),
        cli(alice, "message", "send", bob.id, "hi", "--wait", "forever", check=False),
        cli(alice, "friend", "set", bob.id, "--read-receipts", "maybe", check=False),
    ]
    for proc in cases:
        assert proc.returncode != 0, proc.args
        if isinstance(proc.stderr, bytes):
            proc = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())
        one_line_error(proc)
    assert "not valid UTF-8" in send_stdin(alice, bob.id, b"\xc3\x28").stderr.decode()
    assert "16384" in cli(alice, "message", "send", bob.id, "x" * (17 * 1024), check=False).stderr
    # Nothing of it was stored.
    assert cli_json(alice, "message", "list", bob.id)["messages"] == []


def test_read_receipts_setting_and_wait_timeout(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    befriend(alice, bob)
    out = cli(alice, "friend", "set", bob.id, "--read-receipts", "on").stdout
    assert "read receipts on" in out
    assert cli_json(bob, "message", "settings", alice.id, "--read-receipts", "off")["read_receipts"] is False
    got = cli_json(alice, "message", "settings", bob.id, "--disappear", "1h", "--mute", "on")
    assert got == {"friend": bob.id, "read_receipts": True, "muted": True, "disappear_after_ms": 3_600_000}
    wait_event(bob, "message.timer", "disappear_after_ms=3600000")
    assert cli_json(bob, "message", "settings", alice.id)["disappear_after_ms"] == 3_600_000
    one_line_error(cli(alice, "message", "settings", bob.id, "--disappear", "5s", check=False))
    # With Bob's node stopped, --wait delivered times out (exit 6) yet the message stays queued.
    bob.stop()
    proc = cli(alice, "message", "send", bob.id, "later", "--wait", "delivered", "--timeout", "1s", check=False)
    assert proc.returncode == 6, proc.stderr
    one_line_error(proc)
    [m] = cli_json(alice, "message", "list", bob.id)["messages"]
    assert m["state"] == "queued"


class Lines:
    """Reads a process's output (a pipe or a pty master) on a thread, line by line."""

    def __init__(self, fd):
        import queue
        import threading
        self.queue = queue.Queue()
        self.seen = []

        def pump():
            buf = b""
            while True:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self.queue.put(line.decode("utf-8", "replace").rstrip("\r"))
            self.queue.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def wait_for(self, needle, timeout=20):
        import queue
        import time
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {needle!r}; saw {self.seen!r}")
            if line is None:
                raise AssertionError(f"output ended without {needle!r}; saw {self.seen!r}")
            self.seen.append(line)
            if needle in line:
                return line


def chat_session(alice, bob, use_pty):
    """Alice chats with Bob: history, a live message from Bob (with an escape sequence), a line
    typed by Alice, a reaction, then /quit."""
    cli(alice, "message", "send", "Bob", "earlier")
    args = [TANDEM, "chat", "Bob", "--data-dir", alice.data_dir]
    if use_pty:
        import pty
        master, slave = pty.openpty()
        proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=os.environ, close_fds=True)
        os.close(slave)
        out = Lines(master)

        def type_(text):
            os.write(master, text.encode() + b"\n")
    else:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ)
        out = Lines(proc.stdout.fileno())

        def type_(text):
            proc.stdin.write(text.encode() + b"\n")
            proc.stdin.flush()
    try:
        out.wait_for("-- chat with Bob")
        out.wait_for("earlier")
        incoming = cli_json(bob, "message", "send", "Alice", "hi \x1b[31mred")["id"]
        line = out.wait_for(incoming[:8])
        assert "hi \\x1b[31mred" in line and "\x1b" not in line
        type_("hello from the chat")
        got = wait_event(bob, "message.received", "text=hello from the chat")
        assert got["from"] == alice.id
        type_(f"/react {incoming[:8]} 🎉")
        wait_event(bob, "message.reaction", f"id={incoming}")
        type_("/quit")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    # The message shown in the chat counts as read on Alice's side.
    [m] = [x for x in cli_json(alice, "message", "list", "Bob")["messages"] if x["id"] == incoming]
    assert m["state"] == "read"


def test_chat_in_a_pty_and_in_a_pipe(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    cli(alice, "name", "Alice")
    cli(bob, "name", "Bob")
    befriend(alice, bob)
    chat_session(alice, bob, use_pty=True)
    chat_session(alice, bob, use_pty=False)


def test_on_message_hook_runs_for_each_message_not_for_muted(make_node):
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    cli(alice, "name", "Alice")
    befriend(alice, bob)
    hooks = os.path.join(bob.data_dir, "hooks")
    os.makedirs(hooks, exist_ok=True)
    out = os.path.join(bob.data_dir, "hook-output")
    script = os.path.join(hooks, "on-message")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nprintf '%s|%s|%s\\n' \"$TANDEM_FROM_NAME\" \"$TANDEM_TEXT_SAFE\" \"$TANDEM_MESSAGE_ID\" >> " + out + "\n")
    os.chmod(script, 0o755)
    first = cli_json(alice, "message", "send", bob.id, "ping \x1b[1m")["id"]
    wait_event(bob, "message.received", f"id={first}")
    poll(lambda: os.path.exists(out) and first in open(out).read(), what="the hook's output")
    assert open(out).read() == f"Alice|ping \\x1b[1m|{first}\n"
    cli(bob, "message", "settings", alice.id, "--mute", "on")
    second = cli_json(alice, "message", "send", bob.id, "quiet")["id"]
    wait_event(bob, "message.received", f"id={second}", "muted=true")
    cli(bob, "message", "settings", alice.id, "--mute", "off")
    third_after_unmute = cli_json(alice, "message", "send", bob.id, "loud again")["id"]
    poll(lambda: third_after_unmute in open(out).read(), what="the hook after unmuting")
    assert second not in open(out).read()


def test_kill_9_of_either_side_mid_burst_loses_and_repeats_nothing(make_node):
    """300 messages through the control socket; Bob's node is killed (SIGKILL) a third of the way
    and restarted at two thirds; Alice's node is killed right after the last send and restarted.
    Bob ends with each message once, in order; Alice sees each delivered."""
    alice = make_node("alice").start()
    bob = make_node("bob").start()
    befriend(alice, bob)
    ids = []
    for i in range(1, 301):
        answer = control_call(alice, "message.send", {"to": bob.id, "text": f"burst {i}"})
        assert answer["ok"], answer
        ids.append(answer["result"]["id"])
        if i == 100:
            bob.kill()
        if i == 200:
            bob.start(port=bob.port)
    alice.kill()
    alice.start(port=alice.port)

    def all_there():
        got = cli_json(bob, "message", "list", alice.id, "--limit", "1000")["messages"]
        return got if len(got) == 300 else None

    got = poll(all_there, timeout=90, what="all 300 messages at bob")
    assert [m["id"] for m in got] == ids
    assert [m["text"] for m in got] == [f"burst {i}" for i in range(1, 301)]
    received = [e["id"] for e in events(bob, "message.received")]
    assert received == ids, "each announced once, in order"
    poll(lambda: all(m["state"] == "delivered" for m in cli_json(alice, "message", "list", bob.id, "--limit", "1000")["messages"]),
         timeout=60, what="every message delivered at alice")

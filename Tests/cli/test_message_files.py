"""Files between two real `tandem node` processes (Protocol/messages.md 7), through the CLI only: a
few-MiB file offered with `message send --file`, the receiver killed (-9) mid-transfer and started
again, the file completes byte for byte, and what was sent twice stays within the documented bound
(the window in flight: chunks written before the kill are kept, synced or not). Counters come from `--json` and events, not
from timing."""
import hashlib
import os
import signal

from tandem_testkit import befriend, cli, cli_json, events, poll, wait_event

CHUNK = 262_144
CHUNKS = 32            # an 8 MiB file
WINDOW = 32            # chunks a receiver asks for at once (messages.md 7.3)


def test_send_a_file_kill_the_receiver_mid_transfer_and_resume(make_node, tmp_path):
    alice = make_node("alice")
    # Alice serves slowly (a pause per chunk) so the transfer can be interrupted midway.
    alice.start(env={"TANDEM_TEST_FILE_SERVE_DELAY_MS": "40"})
    bob = make_node("bob").start()
    cli(alice, "name", "Alice")
    befriend(alice, bob)
    data = os.urandom(CHUNKS * CHUNK - 1234)
    path = tmp_path / "desk photo.bin"
    path.write_bytes(data)
    sent = cli_json(alice, "message", "send", "--file", str(path), bob.id, "my desk")
    assert set(sent) >= {"id", "file_id", "name", "size"} and sent["size"] == len(data) and sent["name"] == "desk photo.bin"
    file_id = sent["file_id"]
    # The first durable progress on Bob's side (at most half the file: chunks are synced 16 at a
    # time), then Alice is paused so nothing more arrives, and Bob is killed.
    progress = wait_event(bob, "message.file_progress", f"file_id={file_id}", timeout="60s")
    os.kill(alice.pid, signal.SIGSTOP)
    try:
        before = cli_json(bob, "message", "list", alice.id)["messages"]
        [m] = [x for x in before if x["id"] == sent["id"]]
        assert m["text"] == "my desk" and m["file"]["name"] == "desk photo.bin" and m["file"]["size"] == len(data)
        assert m["file"]["state"] == "receiving" and 0 < m["file"]["percent"] < 100, m["file"]
        assert "[file desk photo.bin, 8.0 MiB, receiving" in cli(bob, "message", "list", alice.id).stdout
        durable_at_kill = max(e["bytes_received"] for e in events(bob, "message.file_progress", file_id=file_id))
        assert durable_at_kill >= progress["bytes_received"] > 0
        bob.kill()
        port = bob.port
    finally:
        os.kill(alice.pid, signal.SIGCONT)
    bob.start(port=port)
    got = wait_event(bob, "message.file_received", f"file_id={file_id}", timeout="90s")
    stored = got["path"]
    assert os.path.basename(stored) == "desk photo.bin" and os.path.dirname(stored) == os.path.join(bob.data_dir, "files")
    assert hashlib.sha256(open(stored, "rb").read()).digest() == hashlib.sha256(data).digest()
    assert os.stat(os.path.dirname(stored)).st_mode & 0o777 == 0o700
    # Bob kept what was synced before the kill; only the rest (and what was in flight) came again.
    info = cli_json(bob, "message", "save", sent["id"][:10], str(tmp_path / "copy.bin"))
    assert info["size"] == len(data) and (tmp_path / "copy.bin").read_bytes() == data
    assert got["bytes_received"] == len(data), "every chunk kept once"
    # Alice records a batch once the link took it: her count settles shortly after Bob's event.
    sent_info = poll(lambda: (lambda f: f if f["state"] == "sent" else None)(
        cli_json(alice, "message", "list", bob.id)["messages"][-1]["file"]), timeout=30, what="Alice's file is sent")
    assert sent_info["direction"] == "out"
    resent = sent_info["bytes_sent"] - len(data)
    assert 0 <= resent <= 2 * WINDOW * CHUNK, f"{resent} bytes sent twice"
    # Bounded more tightly: Alice was paused long before the kill, so Bob had written everything
    # that reached him; what he wrote survives a kill -9 (messages.md 7.3: WrittenChunks), synced
    # or not, and only what was still in flight to him (at most the window) came again.
    assert resent <= WINDOW * CHUNK, f"{resent} bytes sent twice: more than the window"
    # Saving again refuses to overwrite; a bad id is one line on stderr.
    again = cli(bob, "message", "save", sent["id"][:10], str(tmp_path / "copy.bin"), check=False)
    assert again.returncode == 2 and again.stderr.startswith("tandem: ") and "exists" in again.stderr
    bad = cli(bob, "message", "save", "zz", str(tmp_path / "x"), check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    # The sender killed mid-transfer: Bob keeps what he has, asks again once Alice is back (on the
    # new link, at once), and the file completes; Alice serves from her stored leaf hashes.
    data2 = os.urandom(CHUNKS * CHUNK // 2 + 77)
    path2 = tmp_path / "notes.txt"
    path2.write_bytes(data2)
    sent2 = cli_json(alice, "message", "send", "--file", str(path2), bob.id)
    wait_event(bob, "message.file_progress", f"file_id={sent2['file_id']}", timeout="60s")
    alice_port = alice.port
    alice.kill()
    alice.start(port=alice_port)
    got2 = wait_event(bob, "message.file_received", f"file_id={sent2['file_id']}", timeout="90s")
    assert open(got2["path"], "rb").read() == data2 and got2["bytes_received"] == len(data2)
    listed = cli_json(bob, "message", "list", alice.id)["messages"]
    assert [m["file"]["state"] for m in listed if m["file"]] == ["received", "received"]
    assert listed[-1]["text"] == "notes.txt", "a file sent without text carries its name"

"""A file in a challenge's group thread between three real `tandem node` processes (Protocol/messages.md
7.7): Alice invites Bob and Carol, who are friends of Alice but not of each other. Carol offers a small
file to the thread; Alice (the hub) fetches it from Carol and forwards Carol's signed offer; Bob, who
never links to Carol, fetches the file from Alice and gets it byte for byte, checked against Carol's
hashes."""
import hashlib
import os

from tandem_testkit import befriend, cli, cli_json, poll, wait_event


def test_a_participant_who_is_no_friend_of_the_author_gets_a_thread_file_through_the_inviter(make_node, tmp_path):
    alice, bob, carol = (make_node(n).start() for n in ("alice", "bob", "carol"))
    befriend(alice, bob)
    befriend(alice, carol)
    cid = cli_json(alice, "challenge", "invite", bob.id, carol.id, "--start-in", "10m", "--duration", "1m")["id"]
    for n in (bob, carol):
        wait_event(n, "challenge.invited", f"id={cid}")
        cli(n, "challenge", "accept", cid)
    poll(lambda: all(len(cli_json(n, "challenge", "show", cid)["participants"]) == 3 for n in (bob, carol)),
         timeout=30, what="the roster at every participant")

    data = os.urandom(262_144 + 5_000)  # two chunks, the second short
    path = tmp_path / "plan.bin"
    path.write_bytes(data)
    sent = cli_json(carol, "message", "send", "--challenge", cid, "--file", str(path), "our plan")
    assert sent["name"] == "plan.bin" and sent["size"] == len(data), sent

    got = wait_event(bob, "message.file_received", f"file_id={sent['file_id']}", timeout="60s")
    assert got["from"] == carol.id and got["via"] == alice.id, got   # Carol's file, fetched from Alice
    assert got["conversation"] == f"challenge:{cid}", got
    assert hashlib.sha256(open(got["path"], "rb").read()).digest() == hashlib.sha256(data).digest()
    assert got["bytes_received"] == len(data)
    # The hub holds its own checked copy (fetched from Carol) and served Bob from it.
    hub = wait_event(alice, "message.file_received", f"file_id={sent['file_id']}", timeout="30s")
    assert hub["from"] == carol.id and hub["via"] == carol.id, hub
    wait_event(alice, "message.file_relayed", f"file_id={sent['file_id']}", timeout="30s")
    assert not any(f["id"] == carol.id for f in cli_json(bob, "friend", "list")["friends"])

    # `message list --challenge` shows the file with its caption, as a direct conversation does.
    listed = cli_json(bob, "message", "list", "--challenge", cid)["messages"]
    [m] = [x for x in listed if x["id"] == sent["id"]]
    assert m["author"] == carol.id and m["text"] == "our plan", m
    assert m["file"]["name"] == "plan.bin" and m["file"]["state"] == "received" and m["file"]["size"] == len(data), m["file"]
    assert "[file plan.bin, 260.9 KiB, received]" in cli(bob, "message", "list", "--challenge", cid).stdout
    saved = cli_json(bob, "message", "save", sent["id"][:10], str(tmp_path / "copy.bin"))
    assert saved["size"] == len(data) and (tmp_path / "copy.bin").read_bytes() == data

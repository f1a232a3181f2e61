"""A challenge's group thread between three real `tandem node` processes (Protocol/messages.md 4):
Alice invites Bob and Carol, who are friends of Alice but not of each other. Each writes to the
thread; every participant gets every message exactly once, the two who are not friends only
through Alice's FORWARD of the author-signed frame, and all three show the same order."""
from tandem_testkit import befriend, cli, cli_json, events, poll, wait_event


def thread(node, cid):
    return [(m["author"], m["text"]) for m in cli_json(node, "message", "list", "--challenge", cid)["messages"]]


def test_three_nodes_in_a_thread_where_two_are_not_friends(make_node):
    alice, bob, carol = (make_node(n).start() for n in ("alice", "bob", "carol"))
    befriend(alice, bob)
    befriend(alice, carol)
    assert not any(f["id"] == carol.id for f in cli_json(bob, "friend", "list")["friends"])
    cid = cli_json(alice, "challenge", "invite", bob.id, carol.id, "--start-in", "10m", "--duration", "1m")["id"]
    for n in (bob, carol):
        wait_event(n, "challenge.invited", f"id={cid}")
        cli(n, "challenge", "accept", cid)
    for n in (bob, carol):
        wait_event(alice, "challenge.accepted", f"id={cid}", f"by={n.id}")
    # Bob's and Carol's nodes learn the whole roster from Alice before they can check each other.
    poll(lambda: all(len(cli_json(n, "challenge", "show", cid)["participants"]) == 3 for n in (bob, carol)),
         timeout=30, what="the roster at every participant")

    first = cli_json(bob, "message", "send", "--challenge", cid, "ready, everyone?")["id"]
    got = wait_event(carol, "message.received", f"id={first}", timeout="30s")
    assert got["from"] == bob.id, got   # the author Carol checked, though Bob is no friend of hers
    second = cli_json(carol, "message", "send", "--challenge", cid, "ready!", "--reply-to", first)["id"]
    wait_event(bob, "message.received", f"id={second}", timeout="30s")
    third = cli_json(alice, "message", "send", "--challenge", cid, "go")["id"]
    for n in (bob, carol):
        wait_event(n, "message.received", f"id={third}", timeout="30s")
    for mid in (first, second):
        wait_event(alice, "message.received", f"id={mid}", timeout="30s")

    want = [(bob.id, "ready, everyone?"), (carol.id, "ready!"), (alice.id, "go")]
    for n in (alice, bob, carol):
        assert thread(n, cid) == want, (n.id, thread(n, cid))
        # Exactly once: one received event per message from someone else.
        mine = {alice: third, bob: first, carol: second}[n]
        for mid in {first, second, third} - {mine}:
            assert len(events(n, "message.received", id=mid)) == 1, (n.id, mid)
    # The authors' own messages are delivered (stored at Alice, the hub).
    for n, mid in ((bob, first), (carol, second)):
        poll(lambda: next(m for m in cli_json(n, "message", "list", "--challenge", cid)["messages"] if m["id"] == mid)["state"]
             in ("delivered", "read"), timeout=30, what="delivered at the hub")

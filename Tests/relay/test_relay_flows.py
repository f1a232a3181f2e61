"""Friends, challenges and mail through a real tandem-relay, between real nodes on loopback that
never learn each other's address: discovery is off and no --addr is ever given, so every frame
between them crosses the relay (a tunnel while both are online, the mailbox while one is not)."""
import json
import signal
import sqlite3
import time

from relayhelpers import add_relay, befriend_via_relay, challenge_ids, relay_status, wait_relay_connected
from tandem_testkit import cli, cli_json, events, friend, last_seq, poll, wait_event
from relayproto import OK


def mailbox_rows(relay):
    """The items in a running relay's durable mailbox (read-only; SQLite WAL allows it)."""
    db = sqlite3.connect(f"file:{relay.data_dir / 'mailbox.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT recipient, sender, sealed FROM item ORDER BY id")]
    finally:
        db.close()


def test_relay_only_flow(make_relay, make_node):
    relay = make_relay()
    a, b = make_node("a"), make_node("b")
    for n in (a, b):
        st = add_relay(n, relay)
        assert st["id"] == relay.id and st["last_error"] is None
    poll(lambda: relay.metric("tandem_relay_registered_clients") == 2, what="two registered clients")

    befriend_via_relay(a, b, message="relay only")
    for me, other in ((a, b), (b, a)):
        f = friend(me, other)
        assert f is not None and f["relationship"] == "friend", f
        assert f["via"] == "relay", f
        assert f["relay"] == relay.address, f
        assert f["online"] is True, f

    # A challenge through the tunnel: invite, accept, both start, B quits, A hears of it.
    sa, sb = last_seq(a), last_seq(b)
    cid = cli_json(a, "challenge", "invite", b.id, "--duration", "8s")["id"]
    invited = wait_event(b, "challenge.invited", f"id={cid}", since=sb)
    assert invited["from"] == a.id
    cli(b, "challenge", "accept", cid)
    wait_event(a, "challenge.accepted", f"id={cid}", f"by={b.id}", since=sa)
    started = [wait_event(n, "challenge.started", f"id={cid}", since=s) for n, s in ((a, sa), (b, sb))]
    assert all(sorted(e["roster"]) == sorted([a.id, b.id]) for e in started), started
    # Both started together (one CLOCK_MONOTONIC on this machine), within 200 ms through the relay
    # (Tests/cli holds the tight bounds; here the clocks were synchronised through a tunnel).
    assert abs(started[0]["mono_us"] - started[1]["mono_us"]) < 200_000, started

    relayed_before_quit = relay.metric("tandem_relay_bytes_relayed_total")
    cli(b, "challenge", "quit", cid)
    wait_event(b, "challenge.quit", f"id={cid}", since=sb)
    quit_seen = wait_event(a, "challenge.partner.quit", f"id={cid}", f"who={b.id}", since=sa)
    assert quit_seen["elapsed_ms"] < 8000
    assert relay.metric("tandem_relay_bytes_relayed_total") > relayed_before_quit  # the notice crossed the relay
    shown = cli_json(a, "challenge", "show", cid)
    them = {p["id"]: p for p in shown["participants"]}
    assert them[b.id]["result"] == "quit", shown
    assert them[b.id]["quit_elapsed_ms"] is not None, shown
    assert them[a.id]["result"] == "running", shown
    assert shown["phase"] == "running", shown

    m = relay.metrics()
    assert m["tandem_relay_tunnels_opened_total"] >= 1, m
    assert m["tandem_relay_bytes_relayed_total"] > 0, m
    assert m["tandem_relay_registered_clients"] == 2, m
    assert m["tandem_relay_clients"] == 2, m
    # Nothing went through the mailbox: both were online all along.
    assert m["tandem_relay_mailbox_stored_total"] == 0, m
    assert not events(a, "outbox.deposited") and not events(b, "mailbox.received")


def test_mailbox_exactly_once_after_relay_restart(make_relay, make_node, links):
    relay = make_relay()  # durable mailbox (mailbox.sqlite in its data dir)
    a, b = make_node("a"), make_node("b")
    add_relay(a, relay)
    add_relay(b, relay)
    befriend_via_relay(a, b)

    sa, sb = last_seq(a), last_seq(b)
    assert b.stop() == 0
    wait_event(a, "peer.offline", f"id={b.id}", since=sa)
    poll(lambda: relay.metric("tandem_relay_registered_clients") == 1, what="B unregistered at the relay")

    cid = cli_json(a, "challenge", "invite", b.id, "--start-in", "5m", "--duration", "1m")["id"]
    sent = wait_event(a, "challenge.invite.sent", f"id={cid}", since=sa)
    deposited = wait_event(a, "outbox.deposited", f"to={b.id}", since=sa)
    assert deposited["relay"] == relay.address
    assert cli_json(a, "status")["outbox"] == 0, "the deposited invite must leave A's outbox"
    m = relay.metrics()
    assert m["tandem_relay_mailbox_items"] == 1, m
    assert m["tandem_relay_mailbox_stored_total"] == 1, m
    # What the relay holds, as anyone with its disk (or the relay itself) could copy it.
    (held,) = mailbox_rows(relay)
    assert held["recipient"] == bytes.fromhex(b.info["public_key"])
    assert held["sender"] == bytes.fromhex(a.info["public_key"])

    # The relay restarts (graceful), on the same port and data dir: the mail is still there.
    rc, took = relay.stop()
    assert rc == 0, relay.log()
    relay.start()
    assert relay.metric("tandem_relay_mailbox_items") == 1, "the durable mailbox lost the item across a restart"
    wait_relay_connected(a, relay, timeout=20)

    b.start()
    connected = wait_event(b, "relay.connected", f"relay={relay.address}", since=sb)
    assert connected["mailbox_items"] == 1, connected
    got = wait_event(b, "challenge.invited", f"id={cid}", since=sb)
    assert got["from"] == a.id
    mail = wait_event(b, "mailbox.received", f"from={a.id}", "message_type=CHALLENGE_INVITE", since=sb)
    assert mail["relay"] == relay.address

    # Acknowledged: the relay forgets it.
    poll(lambda: relay.metric("tandem_relay_mailbox_items") == 0, what="the relay forgetting the acknowledged item")
    assert relay.metric("tandem_relay_mailbox_delivered_total") == 1
    assert len(events(b, "challenge.invited", id=cid)) == 1
    assert challenge_ids(b).count(cid) == 1
    shown = cli_json(b, "challenge", "show", cid)
    assert shown["phase"] == "invited" and shown["inviter"] == a.id, shown

    # B restarts again: nothing is delivered a second time.
    sb = last_seq(b)
    assert b.stop() == 0
    b.start()
    again = wait_event(b, "relay.connected", f"relay={relay.address}", since=sb)
    assert again["mailbox_items"] == 0, again
    wait_event(b, "peer.online", f"id={a.id}", since=sb)
    assert len(events(b, "challenge.invited", id=cid)) == 1, events(b, "challenge.invited")
    assert len(events(b, "mailbox.received")) == 1, events(b, "mailbox.received")
    assert challenge_ids(b).count(cid) == 1
    assert relay.metric("tandem_relay_mailbox_items") == 0
    assert relay.metric("tandem_relay_mailbox_stored_total") == 0  # counters restart with the process
    assert sent["to"] == [b.id]

    # A replay of the same sealed item (deposited again by someone else, as a misbehaving relay
    # or a thief of its disk could) reaches B, opens, and is not handled a second time.
    thief = links.open(relay)
    reply = links.run(thief.put(held["recipient"], held["sealed"]))
    assert reply.get(2) == OK, reply
    poll(lambda: len(events(b, "mailbox.received")) == 2, what="B receiving the replayed item")
    poll(lambda: relay.metric("tandem_relay_mailbox_items") == 0, what="B acknowledging the replayed item")
    assert len(events(b, "challenge.invited", id=cid)) == 1, events(b, "challenge.invited")
    assert challenge_ids(b).count(cid) == 1

    # The JSON forms of the event (`tandem events --json`, `tandem wait --json`) flatten its fields
    # beside "type", which wins: the mailed frame's type must not be lost there.
    mail_json = events(b, "mailbox.received")[0]
    assert "CHALLENGE_INVITE" in json.dumps(mail_json), (
        "mailbox.received names the mailed frame's type in a field called 'type', which the JSON "
        f"form overwrites with the event type: {mail_json}")


def test_relay_graceful_shutdown_tells_clients(make_relay, make_node):
    relay = make_relay()
    n = make_node("n")
    add_relay(n, relay)
    since = last_seq(n)

    rc, took = relay.stop(signal.SIGTERM)
    assert rc == 0, relay.log()
    assert took < 5.0, f"the relay took {took:.1f} s to stop"
    gone = wait_event(n, "relay.disconnected", f"relay={relay.address}", since=since, timeout="5s")
    assert "shutting down" in gone["reason"], gone
    st = relay_status(n, relay)
    assert st["connected"] is False and "shutting down" in (st["last_error"] or ""), st

    # Back on the same port: the node comes back by itself (told to retry after 5 s) ...
    relay.start()
    back = wait_event(n, "relay.connected", f"relay={relay.address}", since=since, timeout="15s")
    assert back["mailbox_items"] == 0
    # ... and not before the 5 s the goodbye asked for, nor long after, on the node's own wall clock
    # (event times, ms), not on this test's clock after `tandem wait` returned.
    assert 4_900 <= back["time_ms"] - gone["time_ms"] <= 15_000, (gone, back)
    assert wait_relay_connected(n, relay)["connected"] is True
    poll(lambda: relay.metric("tandem_relay_registered_clients") == 1, what="the node registered again")


def test_full_relay_refuses_clearly_and_is_not_hammered(make_relay, make_node):
    """A relay at --max-clients says so (goodbye: "the relay is full", retry after 60 s); a node
    turned away shows why it is not connected and waits as told before trying again."""
    relay = make_relay(args=["--max-clients", "1"])
    a = make_node("a")
    add_relay(a, relay)
    # Several nodes, so that a retry that comes too early (a race in the node, it seems) shows every time.
    turned_away = [make_node(n) for n in ("b", "c", "d", "e", "f")]
    seqs = [last_seq(n) for n in turned_away]
    for n in turned_away:
        cli(n, "relay", "add", relay.address)
    for n, since in zip(turned_away, seqs):
        gone = wait_event(n, "relay.disconnected", f"relay={relay.address}", since=since, timeout="10s")
        assert "full" in gone["reason"], gone
        st = poll(lambda: (s := relay_status(n, relay)) and s["last_error"] and s, what="the node's relay error")
        assert st["connected"] is False and "full" in st["last_error"], st
    assert relay.metric("tandem_relay_refusals_total", reason="clients") >= len(turned_away)
    time.sleep(8)
    refused = relay.metric("tandem_relay_refusals_total", reason="clients")
    retries = {n.data_dir.rsplit("/", 1)[1]: [e["time"] + " " + e["reason"] for e in events(n, "relay.disconnected")]
               for n in turned_away}
    assert refused == len(turned_away), (f"{refused - len(turned_away):.0f} more attempt(s) within 8 s by nodes the relay told to retry after "
                          f"60 s; their relay.disconnected events: {retries}")
    assert relay_status(a, relay)["connected"] is True

"""Messages and files between two real nodes that reach each other only through a real
tandem-relay (no --addr, no LAN discovery; Protocol/messages.md 2.2 and 7.4): a message through the
tunnel, then, with the friend stopped, a message and a file offer sealed into the friend's mailbox.
The sender stops too; the friend starts, takes both from the mail, and fetches the file's chunks
only once the sender is back and a tunnel joins them."""
import os

from relayhelpers import add_relay, befriend_via_relay
from tandem_testkit import cli, cli_json, events, last_seq, poll, wait_event


def test_messages_through_a_tunnel_and_a_file_offered_by_mail(make_relay, make_node, tmp_path):
    relay = make_relay()
    a, b = make_node("a"), make_node("b")
    for n in (a, b):
        add_relay(n, relay)
    befriend_via_relay(a, b)

    # Both online: straight through the tunnel, stored on B before A calls it delivered.
    sb = last_seq(b)
    first = cli_json(a, "message", "send", b.id, "through the tunnel", "--wait", "delivered", "--timeout", "30s")["id"]
    got = wait_event(b, "message.received", f"id={first}", since=sb)
    assert got["from"] == a.id and got["text"] == "through the tunnel"
    assert relay.metric("tandem_relay_mailbox_stored_total") == 0

    # B is stopped: the message and the file's offer go into B's mailbox, sealed.
    sb = last_seq(b)
    assert b.stop() == 0
    poll(lambda: relay.metric("tandem_relay_registered_clients") == 1, what="B unregistered at the relay")
    sa = last_seq(a)
    data = os.urandom(3 * 262_144 + 99)
    path = tmp_path / "plan.bin"
    path.write_bytes(data)
    later = cli_json(a, "message", "send", b.id, "while you were away")["id"]
    offered = cli_json(a, "message", "send", b.id, "--file", str(path), "the plan")
    poll(lambda: len(events(a, "outbox.deposited", to=b.id)) >= 3, timeout=30, what="three frames left in B's mailbox")
    assert relay.metric("tandem_relay_mailbox_items") == 3
    assert cli_json(a, "status")["outbox"] == 0

    # A stops as well: B gets the offer from the mail with nobody to fetch the file from.
    assert a.stop() == 0
    b.start()
    for mid in (later, offered["id"]):
        wait_event(b, "message.received", f"id={mid}", since=sb, timeout="30s")
    offer = wait_event(b, "message.file_offered", f"file_id={offered['file_id']}", since=sb)
    assert offer["from"] == a.id and offer["size"] == len(data) and offer["auto_accept"] is True
    mailed = [e.get("message_type") for e in events(b, "mailbox.received") if e.get("from") == a.id]
    assert sorted(mailed) == ["0x0501", "0x0501", "0x0509"], mailed  # two MESSAGEs and the FILE_OFFER
    assert not events(b, "message.file_received")

    # A comes back: a tunnel joins them, B asks for the chunks, the file arrives whole; A hears
    # that the mailed message was stored (DELIVERED).
    a.start()
    done = wait_event(b, "message.file_received", f"file_id={offered['file_id']}", since=sb, timeout="60s")
    assert open(done["path"], "rb").read() == data
    poll(lambda: next(m for m in cli_json(a, "message", "list", b.id)["messages"] if m["id"] == later)["state"]
         in ("delivered", "read"), timeout=30, what="the mailed message delivered at A")
    texts = [m["text"] for m in cli_json(b, "message", "list", a.id)["messages"]]
    assert texts == ["through the tunnel", "while you were away", "the plan"], texts
    assert len(events(b, "message.file_offered", file_id=offered["file_id"])) == 1

"""The relay protocol spoken directly (relayproto.py, an independent Python client): tunnel and
mailbox requests the relay must refuse, with the status the protocol names, its quotas, the join
timeout and the idle timeout."""
import asyncio
import os
import time

import pytest

from tandem_testkit import poll
from relayproto import (BAD_REQUEST, JOIN_TIMEOUT, LIMIT, MAILBOX_ITEM, OFFLINE, OK, PING, RELAY_GOODBYE,
                        TUNNEL_INCOMING, UNKNOWN_RECIPIENT, UNKNOWN_TOKEN, RelayLink, join, pb_uint,
                        read_exactly)


def test_mailbox_quotas_and_unknown_recipients(make_relay, write_config, links):
    """Mail deposited straight through the relay protocol: only a registered recipient has a
    mailbox; per-sender, per-recipient and item-size limits are refused with their status and
    nothing is stored past them; an item reaches its online recipient and is forgotten once acked."""
    relay = make_relay(config=write_config(mailbox_items_per_recipient=20, mailbox_items_per_sender=8,
                                           mailbox_item_bytes=1024))
    x, *senders = links.open(relay, 4)
    run = links.run
    stranger = os.urandom(32)
    reply = run(senders[0].put(stranger, b"s" * 100))
    assert reply.get(2) == UNKNOWN_RECIPIENT, reply
    assert b"never registered" in reply.get(3, b""), reply
    # Connected but not registered is not enough either.
    assert run(senders[0].put(x.public, b"s" * 100)).get(2) == UNKNOWN_RECIPIENT

    run(x.register())
    assert run(senders[0].put(x.public, b"s" * 1025)).get(2) == BAD_REQUEST
    first = run(senders[0].put(x.public, b"hello sealed"))
    assert first.get(2) == OK and first.get(5, 0) > 0, first
    item = run(x.expect(MAILBOX_ITEM))  # x is online: handed over at once
    assert item[1] == first[5] and item[2] == senders[0].public and item[3] == b"hello sealed", item
    # Not acknowledged yet: it still counts. Sender 0 may hold 8 in all.
    codes = [run(senders[0].put(x.public, b"s" * 100)).get(2) for _ in range(8)]
    assert codes == [OK] * 7 + [LIMIT], codes
    codes = [run(senders[1].put(x.public, b"s" * 100)).get(2) for _ in range(9)]
    assert codes == [OK] * 8 + [LIMIT], codes
    # 16 held; the recipient takes 20: sender 2 gets 4 in.
    codes = [run(senders[2].put(x.public, b"s" * 100)).get(2) for _ in range(6)]
    assert codes == [OK] * 4 + [LIMIT] * 2, codes
    m = relay.metrics()
    assert m["tandem_relay_mailbox_items"] == 20, m
    assert m["tandem_relay_mailbox_refused_total"] == 2 + 1 + 1 + 1 + 2, m

    # Acknowledging frees the space; ids of someone else's items are ignored.
    senders[0].ack(first[5])
    time.sleep(0.3)
    assert relay.metric("tandem_relay_mailbox_items") == 20
    x.ack(first[5])
    poll(lambda: relay.metric("tandem_relay_mailbox_items") == 19, what="the acknowledged item forgotten")
    assert relay.metric("tandem_relay_mailbox_delivered_total") == 1
    assert run(senders[2].put(x.public, b"s" * 100)).get(2) == OK


def test_tunnel_refusals_and_join_timeout(make_relay, write_config, links):
    relay = make_relay(config=write_config(max_tunnels_per_client=1, tunnel_join_timeout="1s"))
    x, y, z = links.open(relay, 3)
    run = links.run
    run(x.register())

    assert run(y.open_tunnel(y.public)).get(2) == BAD_REQUEST      # to itself
    assert run(y.open_tunnel(b"\x01" * 31)).get(2) == BAD_REQUEST  # not a key
    assert run(y.open_tunnel(z.public)).get(2) == OFFLINE          # connected, not registered
    assert run(y.open_tunnel(os.urandom(32))).get(2) == OFFLINE    # unknown
    first = run(y.open_tunnel(x.public))
    assert first.get(2) == OK and len(first[4]) == 32, first
    incoming = run(x.expect(TUNNEL_INCOMING))
    assert incoming[1] == y.public and incoming[2] == first[4]
    second = run(y.open_tunnel(x.public))
    assert second.get(2) == LIMIT and b"tunnels" in second.get(3, b""), second  # y holds its one tunnel
    # A waiting tunnel is charged to its initiator, not to its target (14.5): z may still ask for one to x.
    third = run(z.open_tunnel(x.public))
    assert third.get(2) == OK, third
    assert relay.metric("tandem_relay_tunnels_waiting") == 2

    # Only one end joins: after the join timeout it is told so and closed; the tunnel is forgotten.
    started = time.monotonic()
    lonely = join(relay.port, first[4], timeout=5)
    try:
        assert read_exactly(lonely, 2) == bytes([JOIN_TIMEOUT])
    finally:
        lonely.close()
    assert time.monotonic() - started < 3.5
    assert relay.metric("tandem_relay_tunnels_waiting") == 0
    # The token is spent; the slots are free again.
    late = join(relay.port, first[4])
    try:
        assert read_exactly(late, 2) == bytes([0x01])
    finally:
        late.close()
    again = run(y.open_tunnel(x.public))
    assert again.get(2) == OK, again
    m = relay.metrics()
    assert m["tandem_relay_tunnels_refused_total"] == 3, m  # two offline, one over the limit
    assert m["tandem_relay_tunnels_opened_total"] == 0, m


def test_a_waiting_end_is_told_when_the_initiators_link_closes(make_relay, links):
    """A tunnel not spliced yet ends with the initiator's client link (14.3): an end already waiting
    is answered 0x01 and closed at once, not at the join timeout (10 s)."""
    relay = make_relay()
    x, y = links.open(relay, 2)
    run = links.run
    run(x.register())
    opened = run(y.open_tunnel(x.public))
    assert opened.get(2) == OK, opened
    lonely = join(relay.port, opened[4], timeout=8)
    try:
        time.sleep(0.5)  # the relay parks the end (were it later, the token would be unknown anyway)
        started = time.monotonic()
        y.close()
        run(asyncio.sleep(0.05))  # the transport closes on its loop
        assert read_exactly(lonely, 2) == bytes([UNKNOWN_TOKEN])
        assert time.monotonic() - started < 3
    finally:
        lonely.close()
    poll(lambda: relay.metric("tandem_relay_tunnels_waiting") == 0, timeout=5, what="the tunnel forgotten")


def test_idle_links_are_closed(make_relay, write_config, links):
    relay = make_relay(config=write_config(idle_timeout="2s"))
    silent, chatty = links.open(relay, 2)
    run = links.run
    run(silent.register())
    run(chatty.register())
    nonce = 0
    goodbye = None
    deadline = time.monotonic() + 6
    while goodbye is None and time.monotonic() < deadline:
        nonce += 1
        chatty.send(PING, pb_uint(1, nonce) + pb_uint(2, int(time.time() * 1000)))
        try:
            goodbye = run(silent.expect(RELAY_GOODBYE, timeout=0.5))
        except asyncio.TimeoutError:
            pass
    assert goodbye is not None, "a silent link was not told goodbye within 6 s (idle timeout 2 s)"
    assert b"idle" in goodbye.get(1, b""), goodbye
    with pytest.raises(ConnectionError):
        run(silent.expect(RELAY_GOODBYE, timeout=5))  # then closed
    m = relay.metrics()
    assert m["tandem_relay_idle_closed_total"] >= 1, m
    # The link that kept talking is still registered.
    poll(lambda: relay.metric("tandem_relay_registered_clients") == 1, what="only the chatty link left")
    assert relay.metric("tandem_relay_clients") == 1

"""The hostile peer itself against a real node: what it sends is read as Protocol/README.md says,
so the attack tests measure the node and not a broken client."""
import os

from hostile import ERROR, PING, enc_ping, now_ms


def test_signed_ping_is_answered_and_each_rule_is_reported(make_node, peers):
    node = make_node()
    peer = peers.open(node)
    rtt = peers.run(peer.ping())
    assert 0 < rtt < 5
    # Rule 6: a signature that does not verify.
    peer.send(PING, enc_ping(1), bad_signature=True)
    # Rule 8: more than 10 minutes ahead.
    peer.send(PING, enc_ping(2), created_at=now_ms() + 11 * 60 * 1000)
    # Rule 10: the same id twice.
    mid = os.urandom(16)
    peer.send(PING, enc_ping(3), message_id=mid)
    peer.send(PING, enc_ping(4), message_id=mid)
    # Rule 7: addressed to someone else.
    peer.send(PING, enc_ping(5), recipient=os.urandom(32))
    # Rules 4/5: a frame too short to be an envelope.
    peer.write_raw(b"\x00\x00\x00\x05\x01\x00\x02\x00\x00")
    for _ in range(5):
        peers.run(peer.expect(ERROR))
    assert peer.error_codes() == ["BAD_SIGNATURE", "FROM_THE_FUTURE", "REPLAYED", "WRONG_RECIPIENT", "MALFORMED"]
    assert peers.run(peer.ping()) < 5
    node.assert_healthy()

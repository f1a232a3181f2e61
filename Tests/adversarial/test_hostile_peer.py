"""The hostile peer itself against a real node: what it sends is read as Protocol/README.md says,
so the attack tests measure the node and not a broken client."""
import os

from hostile import BACKUP_PIECE, BACKUP_REPLY, ERROR, PING, enc_ping, now_ms, pb_bytes, pb_decode, pb_uint


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


def test_link_authenticated_piece_is_accepted_only_from_the_links_own_key(make_node, peers):
    """BACKUP_PIECE carries no signature (README 5.4): the node takes it only from the key the link's
    handshake proved, with 64 zero bytes where a signature would be. Naming another author, or
    carrying a real signature, is BAD_SIGNATURE; the stranger's own piece passes rule 6 and gets the
    holder's answer (NO_OFFER: it offered this stranger nothing)."""
    from nacl.signing import SigningKey

    node = make_node()
    peer = peers.open(node)
    someone = bytes(SigningKey.generate().verify_key)

    def piece(request_id):
        return (pb_bytes(1, request_id) + pb_bytes(2, os.urandom(32)) + pb_uint(3, 4096) + pb_uint(4, 0)
                + pb_bytes(5, os.urandom(4096)))

    peer.send(BACKUP_PIECE, piece(os.urandom(16)), zero_signature=True, author=someone)
    peer.send(BACKUP_PIECE, piece(os.urandom(16)))   # signed as other types are
    peer.send(BACKUP_PIECE, piece(os.urandom(16)), zero_signature=True, bad_signature=True)
    for _ in range(3):
        peers.run(peer.expect(ERROR))
    assert peer.error_codes() == ["BAD_SIGNATURE"] * 3
    request_id = os.urandom(16)
    peer.send(BACKUP_PIECE, piece(request_id), zero_signature=True)
    reply = peers.run(peer.expect(BACKUP_REPLY))
    fields = pb_decode(reply.payload)
    assert fields[1] == request_id and fields[2] == 3, fields   # BACKUP_NO_OFFER
    assert peer.error_codes() == ["BAD_SIGNATURE"] * 3, "no error for the piece from the link's own key"
    assert peers.run(peer.ping()) < 5
    node.assert_healthy()

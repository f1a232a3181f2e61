"""The stranger reply budget counts signed replies, not frames (Protocol/README.md 12.4, 5.9.2).

Found by an independent peer written from Protocol/ alone: 30 malformed CHALLENGE_ANSWERs from one
stranger key drew 20 ERRORs and 20 ACKs (40 signed replies in ~30 ms), while 12.4 says every reply
signed for a non-friend comes out of a budget of 20 per minute per sender key. Each ACK and each
ERROR is one token now, the ACK first: the same burst draws at most 20 signed frames.
"""
import os
import time

from advhelpers import ATTACKER
from hostile import ACK, ERROR, pb_bytes, pb_decode, pb_uint

CHALLENGE_ANSWER = 0x0202
BUDGET = 20                      # README 12.4: signed replies per minute per sender key
REFILL_PER_SECOND = BUDGET / 60  # tokens come back at 20 per minute


def test_thirty_malformed_answers_draw_at_most_twenty_signed_replies(make_node, peers):
    node = make_node()
    stranger = peers.open(node, source=ATTACKER)
    sent = set()
    start = time.monotonic()
    for i in range(30):
        # A challenge id of 3 bytes (16 required) and an answer code out of range: MALFORMED (5.9.1).
        sent.add(stranger.send(CHALLENGE_ANSWER, pb_bytes(1, os.urandom(3)) + pb_uint(2, 1000 + i)))
    burst = time.monotonic() - start

    acks, errors = [], []

    def read_for(seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and len(acks) + len(errors) < 40:
            try:
                env = peers.run(stranger.next_frame(timeout=max(0.05, deadline - time.monotonic())))
            except TimeoutError:
                return
            fields = pb_decode(env.payload)
            if env.type == ACK and fields.get(1) in sent:
                acks.append(fields[1])
            elif env.type == ERROR and fields.get(3) in sent:
                errors.append(fields[3])

    # The replies come after the core handled the frames: wait until the budget's worth arrived
    # (generous, for a busy machine), then a while longer to see that nothing more comes.
    deadline = time.monotonic() + 30
    while len(acks) + len(errors) < BUDGET and time.monotonic() < deadline:
        read_for(1.0)
    read_for(2.0)
    elapsed = time.monotonic() - start
    total = len(acks) + len(errors)
    # Tokens refill while the test runs; the bound allows exactly what came back meanwhile.
    allowance = int(elapsed * REFILL_PER_SECOND) + 1
    assert BUDGET <= total <= BUDGET + allowance, (
        f"{len(acks)} ACKs and {len(errors)} ERRORs for 30 malformed answers (burst {burst:.2f}s, {elapsed:.1f}s in all)")
    # Pairs: each answered frame got its ACK (charged first), and an ERROR when a token was left.
    assert set(errors) <= set(acks), "an ERROR without the ACK of the same frame"
    assert len(acks) - len(errors) <= 1
    assert len(set(acks)) == len(acks), "one ACK per frame"
    # The stranger's budget is spent, not the node: an honest peer from another address is served.
    honest = peers.open(node)
    assert peers.run(honest.ping()) < 5
    node.assert_healthy()

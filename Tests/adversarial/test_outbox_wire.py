"""What a peer sees of the node's outbox on the wire (issue 12, "Seen from the wire"; Protocol 12.5 and 12.7):
each frame written once per link, and a PRESENCE never before the FRIEND_ACCEPT that makes it
meaningful, on a link the peer opened and on a link the node dialled. The peer here is written from
Protocol/ alone (hostile.py), as client and as server, and never acknowledges what it receives, so a
frame written twice would show."""
import asyncio
import threading
import time

from advhelpers import HONEST
from tandem_testkit import cli, free_port, wait_event
from hostile import (FRIEND_ACCEPT, FRIEND_REQUEST, PRESENCE, accept_handshake, enc_contact, now_ms,
                     parse_envelope, pb_bytes)

from nacl.signing import SigningKey

BECH32_ALPHABET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def node_id(public_key):
    """A key's tdm1 ID: bech32m with the human-readable part "tdm" (Protocol/README.md, "Identity")."""
    def polymod(values):
        gen = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3]
        chk = 1
        for v in values:
            b = chk >> 25
            chk = (chk & 0x1ffffff) << 5 ^ v
            for i in range(5):
                chk ^= gen[i] if (b >> i) & 1 else 0
        return chk
    acc, bits, data = 0, 0, []
    for byte in public_key:
        acc, bits = (acc << 8) | byte, bits + 8
        while bits >= 5:
            bits -= 5
            data.append((acc >> bits) & 31)
    if bits:
        data.append((acc << (5 - bits)) & 31)
    hrp = "tdm"
    expanded = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    check = polymod(expanded + data + [0] * 6) ^ 0x2bc830a3
    return hrp + "1" + "".join(BECH32_ALPHABET[d] for d in data + [(check >> 5 * (5 - i)) & 31 for i in range(6)])


class ListeningPeer:
    """A peer that accepts the node's dial (Secret Handshake as server) and records every envelope
    the node writes, per connection, in order. It acknowledges nothing."""

    def __init__(self, key):
        self.key = key
        self.port = free_port()
        self.links = []         # one list of envelopes per accepted connection
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        assert self.ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()

    async def _client(self, reader, writer):
        received = []
        self.links.append(received)
        try:
            accepted = await accept_handshake(self.key, reader, writer)
            if accepted is None:
                return
            box_in = accepted[0]
            buf = bytearray()
            while True:
                box = await box_in.read()
                if box is None:
                    return
                buf += box
                while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                    n = int.from_bytes(buf[:4], "big")
                    received.append(parse_envelope(bytes(buf[4:4 + n])))
                    del buf[:4 + n]
        except Exception:
            return
        finally:
            writer.close()

    def frames(self):
        return [env for link in list(self.links) for env in list(link)]

    def stop(self):
        async def shut():
            self.server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()
            await asyncio.sleep(0.05)
        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def collect(peers, peer, seconds):
    """Every envelope the node writes to `peer` for `seconds` (nothing is acknowledged)."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            out.append(peers.run(peer.next_frame(timeout=max(0.05, deadline - time.monotonic()))))
        except (asyncio.TimeoutError, TimeoutError):
            break
    return out


def types(frames):
    return [f.type for f in frames]


def test_on_a_link_the_peer_opened_accept_is_written_once_and_presence_follows_it(make_node, peers):
    node = make_node()
    peer = peers.open(node, source=HONEST)
    peer.send(FRIEND_REQUEST, enc_friend_request_from(peer.key))
    got = wait_event(node, "friend.request.received")
    cli(node, "friend", "accept", got.get("fields", got)["id"])
    seen = [f for f in collect(peers, peer, 4.0) if f.type in (FRIEND_ACCEPT, PRESENCE)]
    kinds = types(seen)
    assert kinds.count(FRIEND_ACCEPT) == 1, kinds
    assert PRESENCE in kinds, kinds
    assert kinds.index(FRIEND_ACCEPT) < kinds.index(PRESENCE), kinds


def enc_friend_request_from(key, addresses=()):
    return pb_bytes(1, "wire check") + pb_bytes(2, enc_contact(key, name="wire", addresses=addresses, version=now_ms()))


def test_a_request_on_a_freshly_dialled_link_is_written_once(make_node):
    node = make_node()
    listener = ListeningPeer(SigningKey.generate())
    try:
        cli(node, "friend", "request", node_id(bytes(listener.key.verify_key)), "--addr", f"127.0.0.1:{listener.port}")
        time.sleep(4.0)     # the dial, its write, and the rounds the new link triggers; no ACK comes
        kinds = types(listener.frames())
        assert kinds.count(FRIEND_REQUEST) == 1, kinds
    finally:
        listener.stop()


def test_on_the_dial_back_link_accept_comes_before_presence(make_node, peers):
    node = make_node()
    listener = ListeningPeer(SigningKey.generate())
    try:
        # The peer asks from a link of its own, naming the port it listens on, then goes away.
        asker = peers.open(node, key=listener.key, source=HONEST)
        asker.send(FRIEND_REQUEST, enc_friend_request_from(listener.key, addresses=[f":{listener.port}"]))
        got = wait_event(node, "friend.request.received")
        asker.close()
        peers.run(asyncio.sleep(0.2))    # let the loop close the socket
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and '"online":true' in cli(node, "friend", "requests", "--json").stdout.replace(" ", ""):
            time.sleep(0.1)
        # Accepting makes the node dial back to the address it saw the peer at, with the announced port.
        cli(node, "friend", "accept", got.get("fields", got)["id"])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and PRESENCE not in types(listener.frames()):
            time.sleep(0.1)
        time.sleep(1.0)
        kinds = [t for t in types(listener.frames()) if t in (FRIEND_ACCEPT, PRESENCE)]
        assert kinds.count(FRIEND_ACCEPT) == 1, (kinds, len(listener.links), node.log()[-3000:])
        assert PRESENCE in kinds and kinds.index(FRIEND_ACCEPT) < kinds.index(PRESENCE), kinds
    finally:
        listener.stop()

"""A hostile Tandem peer, written from Protocol/README.md alone (sections 2-5), for tests that do
what no well-behaved node does.

It connects to a node's TCP port with any Ed25519 key (the Secret Handshake of section 3 with the
Tandem network key, from the PyPI `secret-handshake` package's crypto; box-stream, section 4), then
can:
- write arbitrary plaintext into the box-stream (`write_raw`): truncated frames, bogus length
  prefixes, empty frames;
- send correctly signed envelopes of any type, created-at, recipient, author, message id and
  payload (`envelope`, `send`), or envelopes whose signature does not verify (`bad_signature=True`);
- send a signed PING and time the PONG (`ping`);
- never read at all (simply never call `next_frame`; `open(read_limit=...)` and a small receive
  buffer make the kernel stop taking the node's bytes quickly).

Payloads are protobuf, encoded by hand with the helpers of Tests/support/relayproto.py.
"""
import asyncio
import os
import socket
import struct
import time
from collections import namedtuple

from nacl.public import PrivateKey
from nacl.signing import SigningKey
from secret_handshake.boxstream import get_stream_pair
from secret_handshake.crypto import SHSClientCrypto, SHSServerCrypto

from relayproto import NETWORK_KEY, SIGNING_DOMAIN, _varint, pb_bytes, pb_decode, pb_uint  # noqa: F401

# Message types (5.8).
ERROR, PING, PONG, CLOCK_PROBE, CLOCK_REPLY = 0x0001, 0x0002, 0x0003, 0x0004, 0x0005
FRIEND_REQUEST, FRIEND_ACCEPT, FRIEND_DECLINE, FRIEND_REMOVE, CONTACT_UPDATE, PRESENCE, ACK = range(0x0101, 0x0108)
BACKUP_PIECE, BACKUP_REPLY = 0x0404, 0x0405   # backup.md 2; BACKUP_PIECE is link-authenticated (5.4)

# Error codes (5.10).
ERROR_CODES = {1: "UNSUPPORTED_VERSION", 2: "UNKNOWN_TYPE", 3: "BAD_SIGNATURE", 4: "WRONG_RECIPIENT", 5: "REPLAYED",
               6: "FROM_THE_FUTURE", 7: "MALFORMED", 8: "FRAME_TOO_LARGE", 9: "STALE"}

HEADER_LENGTH = 95          # envelope bytes before the payload (5.2)
SIGNATURE_LENGTH = 64
MAX_SKEW_MS = 10 * 60 * 1000
TIMEOUT = 15

Envelope = namedtuple("Envelope", "version type message_id author recipient created_at payload signature")


def now_ms():
    return int(time.time() * 1000)


def envelope(key, type_, recipient, payload=b"", created_at=None, message_id=None, version=1, author=None,
             bad_signature=False, zero_signature=False):
    """A signed envelope (5.2, 5.4) by `key` (a nacl SigningKey). `author` overrides the author field
    (the signature is still `key`'s, so it will not verify unless it is `key`'s public key);
    `bad_signature` flips a bit of an otherwise valid signature; `zero_signature` writes the 64 zero
    bytes of a link-authenticated type (5.4) instead of a signature."""
    created_at = now_ms() if created_at is None else created_at
    message_id = os.urandom(16) if message_id is None else message_id
    author = bytes(key.verify_key) if author is None else author
    body = (struct.pack(">BH", version, type_) + message_id + author + recipient
            + struct.pack(">QI", created_at, len(payload)) + payload)
    signature = bytearray(64) if zero_signature else bytearray(key.sign(SIGNING_DOMAIN + body).signature)
    if bad_signature:
        signature[0] ^= 0x01
    return body + bytes(signature)


def frame(env):
    """A frame (5.1): u32 length, then the envelope."""
    return struct.pack(">I", len(env)) + env


def parse_envelope(data):
    if len(data) < HEADER_LENGTH + SIGNATURE_LENGTH:
        raise ValueError(f"envelope of {len(data)} bytes")
    version, type_ = struct.unpack(">BH", data[:3])
    created_at, length = struct.unpack(">QI", data[83:95])
    return Envelope(version, type_, bytes(data[3:19]), bytes(data[19:51]), bytes(data[51:83]), created_at,
                    bytes(data[95:95 + length]), bytes(data[95 + length:]))


def enc_ping(nonce, sent_at_ms=None):
    return pb_uint(1, nonce) + pb_uint(2, now_ms() if sent_at_ms is None else sent_at_ms)


def enc_pong(nonce, ping_sent_at_ms=0, received_at_ms=0):
    return pb_uint(1, nonce) + pb_uint(2, ping_sent_at_ms) + pb_uint(3, received_at_ms)


def enc_contact(key, name="", addresses=(), home_relay="", version=1):
    out = pb_bytes(1, bytes(key.verify_key)) + pb_bytes(2, name)
    for a in addresses:
        out += pb_bytes(3, a)
    return out + pb_bytes(4, home_relay) + pb_uint(5, version)


def enc_friend_request(key, message="", name="stranger"):
    return pb_bytes(1, message) + pb_bytes(2, enc_contact(key, name=name, version=now_ms()))


async def accept_handshake(key, reader, writer):
    """The server side of the Secret Handshake (section 3) on an accepted connection, as `key`.
    Returns (box_in, box_out, the client's public key), or None when the client's first message does
    not verify (wrong network key)."""
    crypto = SHSServerCrypto(key, PrivateKey.generate(), application_key=NETWORK_KEY)
    if not crypto.verify_challenge(await reader.readexactly(64)):
        return None
    writer.write(crypto.generate_challenge())
    crypto.verify_client_auth(await reader.readexactly(112))
    writer.write(crypto.generate_accept())
    box_in, box_out = get_stream_pair(reader, writer, **crypto.get_box_keys())
    return box_in, box_out, bytes(crypto.remote_pub_key)


class PingRefused(AssertionError):
    pass


class HostilePeer:
    """One authenticated link to a node, under any key. Use from one asyncio event loop."""

    def __init__(self, node_public_key, port, host="127.0.0.1", key=None):
        self.node_key = bytes(node_public_key)
        self.host, self.port = host, port
        self.key = key or SigningKey.generate()
        self.public = bytes(self.key.verify_key)
        self.reader = self.writer = None
        self._in = self._out = None
        self._buffer = bytearray()
        self._nonce = int.from_bytes(os.urandom(6), "big")
        self.errors = []        # ERROR payloads received (decoded dicts), in order
        self.closed = False

    async def open(self, timeout=TIMEOUT, read_limit=2 ** 16, rcvbuf=None, source=None, sock=None):
        """Connects and runs the handshake as client. `read_limit` bounds what asyncio buffers
        before it stops reading the socket; `rcvbuf` sets SO_RCVBUF (a small value with a peer that
        never reads makes the node's writes back up at once); `source` binds the local address
        (any 127.x.y.z on Linux: attackers and honest peers on loopback from different addresses);
        `sock`: a connected socket to run the handshake on instead (a relay tunnel's joined end)."""
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if rcvbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if source is not None:
                sock.bind((source, 0))
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.sock_connect(sock, (self.host, self.port)), timeout)
        else:
            sock.setblocking(False)
        self.reader, self.writer = await asyncio.open_connection(sock=sock, limit=read_limit)
        crypto = SHSClientCrypto(self.key, self.node_key, PrivateKey.generate(), application_key=NETWORK_KEY)
        self.writer.write(crypto.generate_challenge())
        if not crypto.verify_server_challenge(await asyncio.wait_for(self.reader.readexactly(64), timeout)):
            raise ConnectionError("the node's handshake message 2 does not verify")
        self.writer.write(crypto.generate_client_auth())
        if not crypto.verify_server_accept(await asyncio.wait_for(self.reader.readexactly(80), timeout)):
            raise ConnectionError("the node's handshake message 4 does not verify")
        self._in, self._out = get_stream_pair(self.reader, self.writer, **crypto.get_box_keys())
        return self

    # ------------------------------------------------------------ writing

    def write_raw(self, data):
        """Plaintext into the box-stream, as is (one box per 4 KiB)."""
        self._out.write(bytes(data))

    def send_frame(self, env):
        self.write_raw(frame(env))

    def envelope(self, type_, payload=b"", **kw):
        """An envelope from this peer's key, to the node unless `recipient` says otherwise."""
        recipient = kw.pop("recipient", self.node_key)
        key = kw.pop("key", self.key)
        return envelope(key, type_, recipient, payload, **kw)

    def send(self, type_, payload=b"", **kw):
        """Signs and sends; returns the envelope's message id."""
        env = self.envelope(type_, payload, **kw)
        self.send_frame(env)
        return env[3:19]

    async def drain(self, timeout=TIMEOUT):
        """Waits until asyncio's write buffer is below its high-water mark (the node is reading)."""
        await asyncio.wait_for(self.writer.drain(), timeout)

    def write_buffer_size(self):
        return self.writer.transport.get_write_buffer_size()

    # ------------------------------------------------------------ reading

    async def next_frame(self, timeout=TIMEOUT):
        """The next envelope from the node (ERRORs are also collected in `self.errors`)."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self._buffer) >= 4:
                (n,) = struct.unpack(">I", self._buffer[:4])
                if len(self._buffer) >= 4 + n:
                    env = parse_envelope(bytes(self._buffer[4:4 + n]))
                    del self._buffer[:4 + n]
                    if env.type == ERROR:
                        self.errors.append(pb_decode(env.payload))
                    return env
            box = await asyncio.wait_for(self._in.read(), max(0.001, deadline - time.monotonic()))
            if box is None:
                self.closed = True
                raise ConnectionError("the node closed the link")
            self._buffer += box

    async def expect(self, type_, timeout=TIMEOUT, match=lambda env: True):
        """The next envelope of `type_` that `match`es; others are skipped."""
        deadline = time.monotonic() + timeout
        while True:
            env = await self.next_frame(max(0.001, deadline - time.monotonic()))
            if env.type == type_ and match(env):
                return env

    async def ping(self, timeout=TIMEOUT, **kw):
        """Sends a signed PING; returns the seconds until its PONG arrived. Raises PingRefused if
        the node answers it with an ERROR instead."""
        self._nonce += 1
        nonce = self._nonce
        start = time.perf_counter()
        mid = self.send(PING, enc_ping(nonce), **kw)

        def answer(env):
            if env.type == PONG:
                return pb_decode(env.payload).get(1, 0) == nonce
            return env.type == ERROR and pb_decode(env.payload).get(3) == mid

        deadline = time.monotonic() + timeout
        while True:
            env = await self.next_frame(max(0.001, deadline - time.monotonic()))
            if answer(env):
                break
        if env.type == ERROR:
            code = pb_decode(env.payload).get(1, 0)
            raise PingRefused(f"the node refused the PING: {ERROR_CODES.get(code, code)}")
        return time.perf_counter() - start

    async def wait_closed(self, timeout=TIMEOUT):
        """Reads (and drops) until the node closes the link; returns the seconds it took.
        Raises TimeoutError if the link is still open after `timeout`."""
        start = time.monotonic()
        try:
            while True:
                await self.next_frame(max(0.001, start + timeout - time.monotonic()))
        except (ConnectionError, asyncio.IncompleteReadError):
            return time.monotonic() - start

    def error_codes(self):
        return [ERROR_CODES.get(e.get(1, 0), str(e.get(1, 0))) for e in self.errors]

    def close(self):
        if self.writer is not None and not self.writer.is_closing():
            self.writer.transport.abort()


def half_open(port, host="127.0.0.1", send=b"", source=None):
    """A TCP connection that starts no handshake (or sends `send`, e.g. part of message 1, and
    stops): what a handshake flood is made of. The caller closes it."""
    s = socket.create_connection((host, port), timeout=5, source_address=(source, 0) if source else None)
    if send:
        s.sendall(send)
    return s


def percentile(values, p):
    """The p-th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[k]

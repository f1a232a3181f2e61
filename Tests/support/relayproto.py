"""A minimal client of the tandem-relay protocol (Protocol/README.md section 14), written
independently in Python so tests can do what no well-behaved node does: hold a tunnel end that
never reads, deposit mail for anyone, send raw join preambles.

Layers: the Secret Handshake and box-stream from the PyPI package `secret-handshake` (the same one
Tests/interop checks against Tandem), with Tandem's network key; inside, frames of a u32 length
and a signed envelope (section 5); payloads are the protobuf messages of Protocol/tandem.proto,
encoded by hand (only varints and bytes fields are needed).
"""
import asyncio
import json
import os
import socket
import struct
import time

from nacl.signing import SigningKey
from secret_handshake import SHSClient
from secret_handshake.network import get_stream_pair

# TandemConstants.networkKey (Sources/TandemProtocol/NetworkKey.swift).
NETWORK_KEY = bytes.fromhex("0e5f8f965a1761ad80733eb15517806bf8a33cb25304ebaced4db55145dca34d")
SIGNING_DOMAIN = b"tandem-frame-v1\x00"
JOIN_MAGIC = b"TDMJOIN1"

PING, PONG = 0x0002, 0x0003
RELAY_REGISTER, RELAY_REGISTERED, TUNNEL_OPEN, RELAY_REPLY = 0x0301, 0x0302, 0x0303, 0x0304
TUNNEL_INCOMING, MAILBOX_PUT, MAILBOX_ITEM, MAILBOX_ACK, RELAY_GOODBYE = 0x0305, 0x0306, 0x0307, 0x0308, 0x0309

# RelayStatus
OK, OFFLINE, LIMIT, UNKNOWN_RECIPIENT, BAD_REQUEST, UNAVAILABLE = 1, 2, 3, 4, 5, 6
# TunnelJoin.Answer
JOINED, UNKNOWN_TOKEN, JOIN_TIMEOUT, REFUSED = 0x00, 0x01, 0x02, 0x03

TIMEOUT = 15


def relay_public_key(relay):
    """The relay's Ed25519 public key, from identity.key in its data dir."""
    ident = json.loads((relay.data_dir / "identity.key").read_text())
    return bytes.fromhex(ident["public_key"])


# ---------------------------------------------------------------- protobuf, by hand


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_uint(field, n):
    return _varint(field << 3) + _varint(n) if n else b""


def pb_bytes(field, data):
    data = data.encode() if isinstance(data, str) else data
    return _varint((field << 3) | 2) + _varint(len(data)) + data if data else b""


def pb_decode(buf):
    """{field number: value} (last value wins) for varint and length-delimited fields."""
    out = {}
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            out[field], i = _read_varint(buf, i)
        elif wire == 2:
            n, i = _read_varint(buf, i)
            out[field] = bytes(buf[i:i + n])
            i += n
        elif wire == 1:
            out[field] = struct.unpack("<Q", buf[i:i + 8])[0]
            i += 8
        elif wire == 5:
            out[field] = struct.unpack("<I", buf[i:i + 4])[0]
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    return out


def _read_varint(buf, i):
    shift = n = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


# ---------------------------------------------------------------- envelopes


def envelope(key, type_, recipient, payload):
    """A signed envelope (section 5.3) from `key` (a nacl SigningKey) to `recipient`."""
    body = (struct.pack(">BH", 1, type_) + os.urandom(16) + bytes(key.verify_key) + recipient
            + struct.pack(">QI", int(time.time() * 1000), len(payload)) + payload)
    return body + key.sign(SIGNING_DOMAIN + body).signature


def parse_envelope(data):
    version, type_ = struct.unpack(">BH", data[:3])
    assert version == 1, version
    author, recipient = data[19:51], data[51:83]
    (length,) = struct.unpack(">I", data[91:95])
    return type_, author, recipient, data[95:95 + length]


class RelayLink:
    """One authenticated client link to a relay."""

    def __init__(self, relay, key=None, source=None):
        self.relay_key = relay_public_key(relay)
        self.port = relay.port
        self.source = source  # a loopback source address (127.0.0.x) to connect from; None: the default
        self.key = key or SigningKey.generate()
        self.public = bytes(self.key.verify_key)
        self.client = None
        self._buffer = bytearray()
        self._held = []
        self._next_request = 0

    async def open(self):
        self.client = SHSClient("127.0.0.1", self.port, self.key, self.relay_key, application_key=NETWORK_KEY)
        await asyncio.wait_for(self._connect(), TIMEOUT)
        return self

    async def _connect(self):
        """SHSClient.open, but from `self.source` when one is set."""
        c = self.client
        local = (self.source, 0) if self.source else None
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, local_addr=local)
        await c._handshake(reader, writer)
        keys = c.crypto.get_box_keys()
        c.crypto.clean()
        c.read_stream, c.write_stream = get_stream_pair(reader, writer, **keys)
        c.writer = writer
        c.is_connected = True

    def close(self):
        if self.client is not None and self.client.is_connected:
            self.client.writer.close()

    def send(self, type_, payload):
        env = envelope(self.key, type_, self.relay_key, payload)
        self.client.write(struct.pack(">I", len(env)) + env)

    def send_raw(self, frame):
        """Writes `frame` (length prefix included) as it is: for frames the relay must reject."""
        self.client.write(frame)

    async def _frame(self):
        while True:
            if len(self._buffer) >= 4:
                (n,) = struct.unpack(">I", self._buffer[:4])
                if len(self._buffer) >= 4 + n:
                    env = bytes(self._buffer[4:4 + n])
                    del self._buffer[:4 + n]
                    type_, author, recipient, payload = parse_envelope(env)
                    assert author == self.relay_key and recipient == self.public
                    return type_, payload
            box = await self.client.read()
            if box is None:
                raise ConnectionError("the relay closed the link")
            self._buffer += box

    async def expect(self, type_, timeout=TIMEOUT):
        """The next frame of `type_` (others are kept for later; pings are ignored)."""
        for i, (t, p) in enumerate(self._held):
            if t == type_:
                del self._held[i]
                return pb_decode(p)
        deadline = time.monotonic() + timeout
        while True:
            t, p = await asyncio.wait_for(self._frame(), max(0.01, deadline - time.monotonic()))
            if t == type_:
                return pb_decode(p)
            if t not in (PING, PONG):
                self._held.append((t, p))

    async def register(self):
        self.send(RELAY_REGISTER, pb_bytes(1, "relay-tests/0"))
        return await self.expect(RELAY_REGISTERED)

    async def request(self, type_, fields):
        self._next_request += 1
        rid = self._next_request
        self.send(type_, pb_uint(1, rid) + fields)
        while True:
            reply = await self.expect(RELAY_REPLY)
            if reply.get(1, 0) == rid:
                return reply

    async def open_tunnel(self, target):
        return await self.request(TUNNEL_OPEN, pb_bytes(2, target))

    async def put(self, recipient, sealed):
        return await self.request(MAILBOX_PUT, pb_bytes(2, recipient) + pb_bytes(3, sealed))

    def ack(self, *item_ids):
        # repeated uint64 item_ids = 1 (packed).
        packed = b"".join(_varint(i) for i in item_ids)
        self.send(MAILBOX_ACK, _varint((1 << 3) | 2) + _varint(len(packed)) + packed)


def join(port, token, rcvbuf=None, timeout=TIMEOUT):
    """A raw tunnel end: connects, sends the 40-byte preamble; returns the socket (the caller
    reads the relay's one-byte answer)."""
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    s.sendall(JOIN_MAGIC + token)
    return s


def read_exactly(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)

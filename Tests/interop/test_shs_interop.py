"""Interoperability of Tandem's Secret Handshake and box-stream with an independent
implementation: the PyPI package `secret-handshake` (on PyNaCl).

Install: `pip install -r Tests/interop/requirements.txt` and then
`pip install --no-deps secret-handshake` (its own pinned dependencies are outdated; what it
needs at run time is in requirements.txt).

Run from the repository root after `swift build`:
    TANDEM_BIN=$PWD/.build/debug/tandem pytest -q Tests/interop

Python talks to `tandem dev shs-serve` (an echo server) as a client, and `tandem dev
shs-connect` talks to a Python SHSServer echo server, both with the Tandem network key.
Every wait is bounded; only loopback addresses are used; spawned processes are killed in
`finally` blocks. asyncio runs through `asyncio.run` in plain test functions (no plugin).
"""

import asyncio
import hashlib
import json
import math
import os
import select
import signal
import struct
import subprocess
import time

import pytest
from nacl.signing import SigningKey
from secret_handshake import SHSClient, SHSServer
from secret_handshake.crypto import APPLICATION_KEY as SSB_APPLICATION_KEY
from secret_handshake.util import inc_nonce
from tandem_testkit import TANDEM as TANDEM_BIN, init_identity
TIMEOUT = 20  # seconds, for every single wait
HOST = "127.0.0.1"

# TandemConstants.networkKey (Sources/TandemProtocol/NetworkKey.swift).
NETWORK_KEY = bytes.fromhex("0e5f8f965a1761ad80733eb15517806bf8a33cb25304ebaced4db55145dca34d")
SIZES = [0, 1, 4096, 4097, 1048576]
MAX_BOX = 4096


# ---------------------------------------------------------------- helpers

def message(size):
    """The bytes `tandem dev shs-connect` sends for `size`: byte i = (i*31 + size) & 0xff."""
    period = bytes(((i * 31 + size) & 0xFF) for i in range(256))
    return (period * (size // 256 + 1))[:size]


def expected_boxes(size):
    """Box bodies a message of `size` bytes travels in (0 bytes: one empty box)."""
    if size == 0:
        return [0]
    return [MAX_BOX] * (size // MAX_BOX) + ([size % MAX_BOX] if size % MAX_BOX else [])


def write_empty_box(box_stream):
    """Writes one box with a 0-byte body.

    secret_handshake's BoxStream.write(b'') writes nothing (split_chunks yields no chunk for
    empty data), so the box is built here with the same SecretBox and nonce steps that
    BoxStream.write uses: body = secretbox('', nonce+1) (just its 16-byte MAC), header =
    secretbox(len=0 || body MAC, nonce), then the nonce advances by two.
    """
    body = box_stream.box.encrypt(b"", inc_nonce(box_stream.nonce))[24:]
    assert len(body) == 16
    header = struct.pack(">H", 0) + body[:16]
    box_stream.writer.write(box_stream.box.encrypt(header, box_stream.nonce)[24:])
    box_stream.nonce = inc_nonce(inc_nonce(box_stream.nonce))


class EofRecorder:
    """Wraps the StreamReader under an UnboxStream. UnboxStream.read() returns None both for a
    goodbye and for a closed connection; this tells the two apart."""

    def __init__(self, inner):
        self.inner = inner
        self.eof = False

    async def readexactly(self, n):
        try:
            return await self.inner.readexactly(n)
        except asyncio.IncompleteReadError:
            self.eof = True
            raise


def run(cmd, timeout=TIMEOUT):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def make_node(tmp_path, name):
    """A data dir with a fresh Tandem identity; returns (dir, public key bytes, ID)."""
    data_dir = tmp_path / name
    info = init_identity(data_dir)
    public_key = bytes.fromhex(info["public_key"])
    assert len(public_key) == 32
    return data_dir, public_key, info["id"]


class TandemEchoServer:
    """`tandem dev shs-serve` as a context manager. stop() sends SIGTERM and returns its summary."""

    def __init__(self, tmp_path, data_dir):
        self.stderr_path = tmp_path / "shs-serve.stderr"
        self.cmd = [TANDEM_BIN, "dev", "shs-serve", "--data-dir", str(data_dir), "--listen", f"{HOST}:0"]
        self.proc = None
        self.pending = b""

    def __enter__(self):
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self._stderr)
        try:
            first = json.loads(self._read_line())
            host, port = first["address"].rsplit(":", 1)
            assert host == HOST, first
            self.port = int(port)
            self.id = first["id"]
        except BaseException:
            self._kill()
            raise
        return self

    def _read_line(self):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + TIMEOUT
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"shs-serve printed no address within {TIMEOUT} s; stderr: {self.stderr()}")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"shs-serve exited early ({self.proc.wait(TIMEOUT)}); stderr: {self.stderr()}")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def stderr(self):
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def assert_alive(self):
        assert self.proc.poll() is None, f"shs-serve died ({self.proc.returncode}); stderr: {self.stderr()}"

    def stop(self):
        """SIGTERM; returns the final JSON summary after checking a clean exit."""
        self.assert_alive()
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=TIMEOUT)
        assert self.proc.returncode == 0, f"shs-serve exited {self.proc.returncode}; stderr: {self.stderr()}"
        lines = [l for l in (self.pending + out).decode().splitlines() if l.strip()]
        assert lines, "shs-serve printed no summary"
        summary = json.loads(lines[-1])
        assert summary["event"] == "stopped", summary
        return summary

    def _kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT)

    def __exit__(self, *exc):
        self._kill()
        self.proc.stdout.close()
        self._stderr.close()
        return False


async def open_client(port, server_public_key, client_key, application_key=NETWORK_KEY):
    client = SHSClient(HOST, port, client_key, server_public_key, application_key=application_key)
    await asyncio.wait_for(client.open(), TIMEOUT)
    return client


async def read_echo(client, data):
    """Reads box after box until `data` came back; returns the body sizes."""
    sizes = []
    if not data:
        body = await asyncio.wait_for(client.read(), TIMEOUT)
        assert body == b"", f"expected one empty box, got {body!r:.60}"
        return [0]
    got = bytearray()
    while len(got) < len(data):
        body = await asyncio.wait_for(client.read(), TIMEOUT)
        assert body is not None, f"connection ended after {len(got)} of {len(data)} bytes"
        assert 0 < len(body) <= MAX_BOX, len(body)
        sizes.append(len(body))
        got += body
    assert bytes(got) == data, f"echo of {len(data)} bytes differs"
    return sizes


async def echo_round_trips(port, server_public_key, sizes):
    """A correct Python client: each size sent as one message, echo checked, then goodbye
    answered by goodbye and a close."""
    client = await open_client(port, server_public_key, SigningKey.generate())
    recorder = EofRecorder(client.read_stream.reader)
    client.read_stream.reader = recorder
    try:
        for size in sizes:
            data = message(size)
            if size == 0:
                write_empty_box(client.write_stream)
            else:
                client.write(data)
            assert await read_echo(client, data) == expected_boxes(size), size
        client.write_stream.close()  # goodbye
        assert await asyncio.wait_for(client.read(), TIMEOUT) is None, "data after goodbye"
        assert not recorder.eof, "the server closed without answering goodbye"
        assert await asyncio.wait_for(recorder.inner.read(), TIMEOUT) == b"", "server did not close after goodbye"
    finally:
        client.writer.close()


async def expect_dropped(coro):
    """The server must close the connection without a reply, promptly (well before its 10 s
    handshake timeout)."""
    start = time.monotonic()
    with pytest.raises(asyncio.IncompleteReadError) as info:
        await coro
    assert info.value.partial == b"", "the server replied to a failed handshake"
    assert time.monotonic() - start < 5, "the server waited for its timeout instead of dropping"


class PythonEchoServer:
    """A secret_handshake SHSServer whose connection echoes every box it reads.

    SHSServer.listen() discards the asyncio server, so the port cannot be learnt with port 0;
    asyncio.start_server is called here with the library's own handle_connection instead. On
    Python 3.11 a failing connection callback does not close its socket, so a failed handshake
    is caught and closed here."""

    def __init__(self, server_key, application_key=NETWORK_KEY, corrupt=False):
        self.shs = SHSServer(HOST, 0, server_key, application_key=application_key)
        self.corrupt = corrupt  # flip the last byte of every echoed 1-byte body
        self.shs.on_connect(self._echo)
        self.bodies = []
        self.data = bytearray()
        self.goodbye = None
        self.error = None
        self.handshake_error = None
        self.done = asyncio.Event()

    async def start(self):
        self.server = await asyncio.start_server(self._handle, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self):
        self.server.close()
        await asyncio.wait_for(self.server.wait_closed(), TIMEOUT)

    async def _handle(self, reader, writer):
        try:
            await self.shs.handle_connection(reader, writer)
        except Exception as e:
            self.handshake_error = e
            writer.close()
            self.done.set()

    async def _echo(self, conn):
        recorder = EofRecorder(conn.read_stream.reader)
        conn.read_stream.reader = recorder
        try:
            while True:
                body = await conn.read()
                if body is None:
                    break
                self.bodies.append(len(body))
                self.data += body
                if self.corrupt and len(body) == 1:
                    conn.write(bytes([body[0] ^ 0x01]))
                elif body:
                    conn.write(body)
                else:
                    write_empty_box(conn.write_stream)
            self.goodbye = not recorder.eof
            if self.goodbye:
                conn.write_stream.close()  # answer with our goodbye
            conn.write_stream.writer.close()
        except Exception as e:
            self.error = e
        finally:
            self.done.set()


async def run_shs_connect(port, server, data_dir, sizes=SIZES):
    proc = await asyncio.create_subprocess_exec(
        TANDEM_BIN, "dev", "shs-connect", f"{HOST}:{port}", server, "--data-dir", str(data_dir),
        "--sizes", ",".join(map(str, sizes)), "--timeout", str(TIMEOUT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 3 * TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(autouse=True)
def tandem_binary():
    assert os.access(TANDEM_BIN, os.X_OK), f"no tandem binary at {TANDEM_BIN}: run `swift build` or set TANDEM_BIN"


# ---------------------------------------------------------------- tests

def test_network_key_matches_its_definition():
    # "BLAKE2b-256 of ASCII tandem/network-key/v1", and not SSB's key.
    assert hashlib.blake2b(b"tandem/network-key/v1", digest_size=32).digest() == NETWORK_KEY
    assert NETWORK_KEY != SSB_APPLICATION_KEY


def test_python_client_against_tandem_server(tmp_path):
    data_dir, public_key, node_id = make_node(tmp_path, "server")
    with TandemEchoServer(tmp_path, data_dir) as server:
        assert server.id == node_id
        asyncio.run(echo_round_trips(server.port, public_key, SIZES))
        summary = server.stop()
    assert summary["handshakes_succeeded"] == 1, summary
    assert summary["handshakes_failed"] == 0, summary
    assert summary["boxes_echoed"] == sum(len(expected_boxes(s)) for s in SIZES), summary
    assert summary["bytes_echoed"] == sum(SIZES), summary
    assert summary["goodbyes"] == 1, summary


def test_tandem_client_against_python_server(tmp_path):
    data_dir, _, _ = make_node(tmp_path, "client")
    server_key = SigningKey.generate()

    async def scenario():
        server = PythonEchoServer(server_key)
        await server.start()
        try:
            result = await run_shs_connect(server.port, bytes(server_key.verify_key).hex(), data_dir)
            await asyncio.wait_for(server.done.wait(), TIMEOUT)
        finally:
            await server.close()
        return server, result

    server, (code, out, err) = asyncio.run(scenario())
    assert code == 0, f"shs-connect exited {code}: {err}"
    assert server.handshake_error is None, repr(server.handshake_error)
    assert server.error is None, repr(server.error)
    lines = [json.loads(l) for l in out.splitlines()]
    assert [l.get("size") for l in lines[:-1]] == SIZES, out
    for line in lines[:-1]:
        assert line["ok"] is True, line
        assert line["boxes_received"] == len(expected_boxes(line["size"])), line
    assert lines[-1] == {"goodbye": "answered"}, out
    # What Python received: Tandem's boxes (<= 4096 bytes, one empty box for 0), right bytes.
    assert server.bodies == [n for s in SIZES for n in expected_boxes(s)]
    assert bytes(server.data) == b"".join(message(s) for s in SIZES)
    assert server.goodbye is True, "Tandem closed without saying goodbye"


def test_tandem_client_detects_a_corrupted_echo(tmp_path):
    # The checker must be able to fail: a server that echoes a wrong byte makes it exit 1.
    data_dir, _, _ = make_node(tmp_path, "client")
    server_key = SigningKey.generate()

    async def scenario():
        server = PythonEchoServer(server_key, corrupt=True)
        await server.start()
        try:
            result = await run_shs_connect(server.port, bytes(server_key.verify_key).hex(), data_dir, sizes=[4096, 4097])
            await asyncio.wait_for(server.done.wait(), TIMEOUT)
        finally:
            await server.close()
        return result

    code, out, err = asyncio.run(scenario())
    assert code == 1, f"expected exit 1, got {code}: {err}"
    assert [json.loads(l)["size"] for l in out.splitlines()] == [4096]
    assert err.strip() == "tandem: error: echo of 4097 bytes: mismatch at byte 4096", err


def test_tandem_client_against_tandem_server_by_id(tmp_path):
    # Both ends Tandem; the server named by its tdm1 ID rather than hex.
    server_dir, _, server_id = make_node(tmp_path, "server")
    client_dir, _, _ = make_node(tmp_path, "client")
    with TandemEchoServer(tmp_path, server_dir) as server:
        code, out, err = asyncio.run(run_shs_connect(server.port, server_id, client_dir))
        summary = server.stop()
    assert code == 0, err
    lines = [json.loads(l) for l in out.splitlines()]
    assert [l.get("size") for l in lines[:-1]] == SIZES and lines[-1] == {"goodbye": "answered"}, out
    assert summary["bytes_echoed"] == sum(SIZES) and summary["goodbyes"] == 1, summary


@pytest.mark.parametrize("case", ["wrong-server-key", "ssb-network-key"])
def test_tandem_client_rejects_a_mismatched_python_server(tmp_path, case):
    data_dir, _, _ = make_node(tmp_path, "client")
    server_key = SigningKey.generate()
    expected_key = SigningKey.generate().verify_key if case == "wrong-server-key" else server_key.verify_key
    app_key = NETWORK_KEY if case == "wrong-server-key" else SSB_APPLICATION_KEY

    async def scenario():
        server = PythonEchoServer(server_key, application_key=app_key)
        await server.start()
        try:
            result = await run_shs_connect(server.port, bytes(expected_key).hex(), data_dir, sizes=[1])
            await asyncio.wait_for(server.done.wait(), TIMEOUT)
        finally:
            await server.close()
        return server, result

    server, (code, out, err) = asyncio.run(scenario())
    assert code == 5, f"expected exit 5 (authentication), got {code}: {err}"
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("tandem: error: handshake"), err
    assert server.handshake_error is not None, "the Python server accepted the handshake"
    assert server.bodies == []


def test_wrong_network_key_is_dropped_and_server_keeps_serving(tmp_path):
    data_dir, public_key, _ = make_node(tmp_path, "server")
    with TandemEchoServer(tmp_path, data_dir) as server:
        # SSB's default application key instead of Tandem's network key.
        asyncio.run(expect_dropped(open_client(server.port, public_key, SigningKey.generate(),
                                               application_key=SSB_APPLICATION_KEY)))
        server.assert_alive()
        asyncio.run(echo_round_trips(server.port, public_key, [4097]))
        summary = server.stop()
        log = server.stderr()
    assert summary["handshakes_failed"] == 1, summary
    assert summary["handshakes_succeeded"] == 1, summary
    failures = [l for l in log.splitlines() if "handshake failed" in l]
    assert len(failures) == 1 and "network key" in failures[0], log


def test_wrong_expected_server_key_fails_and_server_keeps_serving(tmp_path):
    data_dir, public_key, _ = make_node(tmp_path, "server")
    other_key = bytes(SigningKey.generate().verify_key)
    with TandemEchoServer(tmp_path, data_dir) as server:
        # Right network, but the client expects another server: its authentication box is sealed
        # with a key the server cannot derive, so the server drops it before message 4.
        asyncio.run(expect_dropped(open_client(server.port, other_key, SigningKey.generate())))
        server.assert_alive()
        asyncio.run(echo_round_trips(server.port, public_key, [0, 1]))
        summary = server.stop()
        log = server.stderr()
    assert summary["handshakes_failed"] == 1, summary
    assert summary["handshakes_succeeded"] == 1, summary
    failures = [l for l in log.splitlines() if "handshake failed" in l]
    assert len(failures) == 1 and "client authentication failed" in failures[0], log


def test_garbage_is_dropped_without_crash(tmp_path):
    data_dir, public_key, _ = make_node(tmp_path, "server")

    async def probe(payload):
        """Sends `payload`; returns what the server sent back before closing."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, server.port), TIMEOUT)
        received = b""
        try:
            writer.write(payload)
            await asyncio.wait_for(writer.drain(), TIMEOUT)
            while True:
                chunk = await asyncio.wait_for(reader.read(65536), TIMEOUT)
                if not chunk:
                    break
                received += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed with our bytes unread: also a close
        finally:
            writer.close()
        return received

    with TandemEchoServer(tmp_path, data_dir) as server:
        assert asyncio.run(probe(os.urandom(64))) == b""
        server.assert_alive()
        assert asyncio.run(probe(os.urandom(10 * 1024))) == b""
        server.assert_alive()
        asyncio.run(echo_round_trips(server.port, public_key, [4096]))
        summary = server.stop()
    assert summary["handshakes_failed"] == 2, summary
    assert summary["handshakes_succeeded"] == 1, summary

"""A hostile home relay (issue 11, "Crash loops": a RELAY_GOODBYE with retry_after_ms >= 2^63 trapped the
node on registration; Protocol/README.md 5.9.1, 14.7).

The relay is written here from Protocol/ alone: the Secret Handshake as server (PyPI `secret-handshake`
crypto, Tandem network key), box-stream, and signed frames. Its identity is one `tandem-relay id` made,
so the node can be pointed at it with an ordinary `tandem relay add ID@host:port`.
"""
import asyncio
import json
import os
import subprocess
import threading
import time

from hostile import accept_handshake, envelope, frame, parse_envelope, pb_bytes, pb_uint
from tandem_testkit import RELAY, cli, cli_json, free_port, poll

from nacl.signing import SigningKey

RELAY_REGISTER, RELAY_GOODBYE = 0x0301, 0x0309


class HostileRelay:
    """Accepts nodes, answers every RELAY_REGISTER with a RELAY_GOODBYE carrying `retry_after_ms`."""

    def __init__(self, seed, port, retry_after_ms):
        self.key = SigningKey(seed)
        self.port = port
        self.retry_after_ms = retry_after_ms
        self.registrations = 0
        self.goodbyes = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        assert self.ready.wait(10), "the hostile relay did not start"
        return self

    def _run(self):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self.server = server
        self.ready.set()
        self.loop.run_forever()

    async def _client(self, reader, writer):
        try:
            accepted = await accept_handshake(self.key, reader, writer)
            if accepted is None:
                return
            box_in, box_out, node_key = accepted
            buf = bytearray()
            while True:
                box = await box_in.read()
                if box is None:
                    return
                buf += box
                while len(buf) >= 4:
                    n = int.from_bytes(buf[:4], "big")
                    if len(buf) < 4 + n:
                        break
                    env = parse_envelope(bytes(buf[4:4 + n]))
                    del buf[:4 + n]
                    if env.type == RELAY_REGISTER:
                        self.registrations += 1
                        payload = pb_bytes(1, "go away") + pb_uint(2, self.retry_after_ms)
                        box_out.write(frame(envelope(self.key, RELAY_GOODBYE, node_key, payload)))
                        self.goodbyes += 1
                        await writer.drain()
                        await asyncio.sleep(0.2)
                        return          # a relay closes after its goodbye
        except (asyncio.IncompleteReadError, ConnectionError, AssertionError, Exception):
            return
        finally:
            writer.close()

    def stop(self):
        async def shut():
            self.server.close()
            await self.server.wait_closed()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()
            await asyncio.sleep(0.1)
        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def relay_identity(tmp_path, port):
    """A relay identity and its address, made by `tandem-relay id`."""
    data = tmp_path / "hostile-relay"
    out = subprocess.run([RELAY, "id", "--data-dir", str(data), "--public-address", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    seed = bytes.fromhex(json.loads((data / "identity.key").read_text())["seed"])
    return seed, out


def test_a_goodbye_asking_for_2_63_ms_does_not_crash_the_node(make_node, tmp_path):
    port = free_port()
    seed, address = relay_identity(tmp_path, port)
    relay = HostileRelay(seed, port, retry_after_ms=2 ** 63).start()
    try:
        node = make_node()
        cli(node, "relay", "add", address)
        # The node registers, gets the goodbye, and (before the fix) trapped right there.
        poll(lambda: relay.goodbyes >= 1, 20, what="the node registered at the hostile relay")
        time.sleep(2.0)
        node.assert_healthy()
        relays = cli_json(node, "relay", "list")["relays"]
        assert relays and relays[0]["connected"] is False, relays
        # A goodbye at 2^64-1 and a sane one: still alive, and the sane one is honoured (no
        # reconnect within its minute).
        relay.retry_after_ms = 2 ** 64 - 1
        before = relay.registrations
        poll(lambda: relay.registrations > before, 30, what="the node came back after the malformed goodbye")
        node.assert_healthy()
        relay.retry_after_ms = 60_000
        poll(lambda: relay.registrations > before + 1, 30, what="another registration")
        seen = relay.registrations
        time.sleep(5)
        assert relay.registrations == seen, "a valid retry-after of 60 s is honoured"
        node.assert_healthy()
        node.stop()
        node.start(node.port)
        node.assert_healthy()
    finally:
        relay.stop()

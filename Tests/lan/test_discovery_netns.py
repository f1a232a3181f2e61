"""LAN discovery by real UDP broadcast, in network namespaces.

A "switch" namespace holds a bridge; three host namespaces each have a veth into it with
10.77.0.{1,2,3}/24 (broadcast 10.77.0.255). Nothing is created in, or sent to, the host's own
network namespace: every datagram stays on that bridge. Needs root (`ip netns`); skipped otherwise.

Run:  sudo python3 -m pytest Tests/lan -v -s     (TANDEM_BIN overrides .build/debug/tandem)
"""
import json
import os
import queue
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from netns import BROADCAST, SUBNET, TANDEM_BIN, init_node, ip

PORT = 7811
INTERVAL_MS = "300"


@pytest.fixture(scope="module")
def identities(tmp_path_factory):
    out = {}
    for name in ("a", "b", "c"):
        d = tmp_path_factory.mktemp(f"node-{name}")
        info = init_node(d)
        out[name] = {"dir": str(d), "id": info["id"], "key": info["public_key"]}
    return out


class Discover:
    """One `tandem dev discover` in a namespace; its stdout lines are timestamped as they arrive."""

    def __init__(self, ns, node, *args, seconds=3.0):
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, TANDEM_BIN, "dev", "discover", "--data-dir", node["dir"],
             "--discovery-port", str(PORT), "--interval-ms", INTERVAL_MS, "--seconds", str(seconds), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.seen = []  # (monotonic time, parsed line)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put((time.monotonic(), json.loads(line)))
        self.lines.put(None)

    def wait_for(self, predicate, timeout=10.0, after=0.0):
        """The first line (time, object) that arrived after `after` and satisfies predicate, or None
        after timeout."""
        deadline = time.monotonic() + timeout
        for t, obj in self.seen:
            if t > after and predicate(obj):
                return t, obj
        while (left := deadline - time.monotonic()) > 0:
            try:
                item = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if item is None:
                return None
            self.seen.append(item)
            if item[0] > after and predicate(item[1]):
                return item
        return None

    def finish(self, timeout=20.0):
        """Waits for exit; returns (sightings, metrics, stdout text)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("tandem dev discover did not exit in time")
        self.reader.join(timeout=5)
        while True:
            try:
                item = self.lines.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.seen.append(item)
        stderr = self.proc.stderr.read()
        assert self.proc.returncode == 0, f"exit {self.proc.returncode}: {stderr}"
        objs = [o for _, o in self.seen]
        sightings = [o for o in objs if "event" not in o]
        metrics = [o for o in objs if o.get("event") == "metrics"]
        assert len(metrics) == 1, objs
        return sightings, metrics[0], "\n".join(json.dumps(o) for o in objs)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def spawn():
    procs = []

    def factory(*args, **kw):
        p = Discover(*args, **kw)
        procs.append(p)
        return p

    yield factory
    for p in procs:
        p.kill()


def listening(obj):
    return obj.get("event") == "listening"


def test_open_beacons_are_found_without_addresses(lan, identities, spawn):
    a, b, c = identities["a"], identities["b"], identities["c"]
    # B and C announce nothing (private-only without friends): they only listen.
    pb = spawn(lan[1], b, "--private-only", seconds=4)
    pc = spawn(lan[2], c, "--private-only", seconds=4)
    assert pb.wait_for(listening) and pc.wait_for(listening), "B or C did not bind the discovery port"
    pa = spawn(lan[0], a, "--discoverable", "--name", "Alice", "--tcp-port", "40123", seconds=2)
    ready = pa.wait_for(listening)
    assert ready, "A did not bind the discovery port"
    first = pb.wait_for(lambda o: o.get("id") == a["id"], timeout=5)
    assert first, "B did not see A"
    spawn_to_sighting = first[0] - pa.started
    bind_to_sighting = first[0] - ready[0]
    print(f"\nstart→first sighting: {spawn_to_sighting * 1000:.0f} ms from spawning A "
          f"({bind_to_sighting * 1000:.0f} ms from A's socket being bound)")

    for proc in (pb, pc):
        sightings, metrics, _ = proc.finish()
        of_a = [s for s in sightings if s["id"] == a["id"]]
        assert of_a, sightings
        for s in of_a:
            assert s == {**s, "host": f"{SUBNET}.1", "port": 40123, "name": "Alice", "friend": False}
        assert metrics["accepted_open"] >= 2  # at start, then every interval
    _, ma, _ = pa.finish()
    assert ma["sent"] >= 3 and ma["send_failed"] == 0
    assert ma["dropped"].get("own", 0) >= 1  # its own broadcasts came back and were ignored


def test_private_beacons_only_for_friends(lan, identities, spawn):
    a, b, c = identities["a"], identities["b"], identities["c"]
    # B and A are friends. C knows A's ID and lists A as a friend, but A does not list C.
    pb = spawn(lan[1], b, "--private-only", "--friend", a["id"], seconds=4)
    pc = spawn(lan[2], c, "--private-only", "--friend", a["id"], seconds=4)
    assert pb.wait_for(listening) and pc.wait_for(listening)
    pa = spawn(lan[0], a, "--private-only", "--friend", b["id"], "--tcp-port", "40124", seconds=2.5)
    assert pb.wait_for(lambda o: o.get("id") == a["id"], timeout=5), "B did not recognise A"

    sb, mb, _ = pb.finish()
    sc, mc, out_c = pc.finish()
    sa, ma, _ = pa.finish()
    of_a = [s for s in sb if s["id"] == a["id"]]
    assert of_a and all(s["friend"] is True and s["host"] == f"{SUBNET}.1" and s["port"] == 40124
                        and s["name"] is None for s in of_a), of_a
    assert mb["accepted_private"] >= 2
    # C learns nothing: not A's ID, not A's key, in any form.
    assert a["id"] not in out_c and a["key"] not in out_c
    assert sc == []
    assert mc["dropped"].get("unrecognised", 0) >= 2
    # A recognises B (friends both ways) but not C.
    assert any(s["id"] == b["id"] and s["friend"] is True for s in sa), sa
    assert all(s["id"] != c["id"] for s in sa)
    assert ma["dropped"].get("unrecognised", 0) >= 1


GARBAGE_SCRIPT = r"""
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
dests = [(sys.argv[1], int(sys.argv[3])), (sys.argv[2], int(sys.argv[3]))]
magic = b"TDMB"
payloads = [b"", b"x", b"hello tandem", magic, magic + b"\x01", magic + b"\x01\x01" + os.urandom(60),
            magic + b"\x01\x02" + os.urandom(30), magic + b"\x02\x01" + os.urandom(200),
            magic + b"\x01\x09" + os.urandom(100), os.urandom(511), os.urandom(512)]
oversized = [os.urandom(513), os.urandom(600), magic + b"\x01\x01" + os.urandom(1400)]
for p in payloads + oversized:
    for d in dests:
        s.sendto(p, d)
print(len(payloads) * len(dests), len(oversized) * len(dests))
"""


def test_garbage_is_dropped_and_counted(lan, identities, spawn):
    a, b = identities["a"], identities["b"]
    pb = spawn(lan[1], b, "--private-only", seconds=4)
    assert pb.wait_for(listening)
    pa = spawn(lan[0], a, "--discoverable", "--name", "Alice", seconds=3.5)
    assert pb.wait_for(lambda o: o.get("id") == a["id"], timeout=5)
    r = subprocess.run(["ip", "netns", "exec", lan[2], sys.executable, "-c", GARBAGE_SCRIPT,
                        BROADCAST, f"{SUBNET}.2", str(PORT)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    sent_bad, sent_oversized = map(int, r.stdout.split())
    after = time.monotonic()
    # B keeps working: A's beacons are still accepted after the garbage.
    assert pb.wait_for(lambda o: o.get("id") == a["id"], timeout=5, after=after), "no sighting of A after the garbage"
    sb, mb, _ = pb.finish()
    pa.finish()
    dropped = mb["dropped"]
    # Every garbage datagram was counted (loss inside one bridge is not expected).
    assert dropped.get("oversized", 0) == sent_oversized, dropped
    assert dropped.get("malformed", 0) == sent_bad, dropped
    assert mb["accepted_open"] >= 2


def test_address_change_triggers_beacons(lan, identities, spawn):
    """A node whose interface gets its address late announces itself at once, not an interval later."""
    b, c = identities["b"], identities["c"]
    host_c = lan[2]
    ip("-n", host_c, "addr", "flush", "dev", "eth0")
    try:
        pb = spawn(lan[1], b, "--private-only", seconds=6)
        assert pb.wait_for(listening)
        # One round a minute: only the start and the address change can make C visible in time.
        pc = spawn(host_c, c, "--discoverable", "--name", "Carol", "--interval-ms", "60000", "--poll-ms", "300",
                   seconds=4)
        assert pc.wait_for(listening)
        assert pb.wait_for(lambda o: o.get("id") == c["id"], timeout=1.0) is None, "C was seen without an address"
        changed = time.monotonic()
        ip("-n", host_c, "addr", "add", f"{SUBNET}.3/24", "brd", BROADCAST, "dev", "eth0")
        seen = pb.wait_for(lambda o: o.get("id") == c["id"], timeout=3.0, after=changed)
        assert seen, "C's address change did not trigger a beacon"
        print(f"\naddress added→sighting: {(seen[0] - changed) * 1000:.0f} ms")
        assert seen[1]["host"] == f"{SUBNET}.3"
        pb.finish()
        pc.finish()
    finally:
        ip("-n", host_c, "addr", "flush", "dev", "eth0", check=False)
        ip("-n", host_c, "addr", "add", f"{SUBNET}.3/24", "brd", BROADCAST, "dev", "eth0", check=False)


# An independent implementation of Protocol/README.md section 11 (PyNaCl only), to check that the
# spec alone is enough: beacons made here must be accepted, or dropped for the stated reason.
INDEPENDENT_SENDER = r"""
import json, os, sys, time, socket, random
import nacl.bindings as nb
from nacl.hash import blake2b
from nacl.encoding import RawEncoder
from nacl.signing import SigningKey

dest, port, receiver_pk = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
seed = bytes.fromhex(sys.argv[4])
me = SigningKey(seed)
pk = bytes(me.verify_key)
sk64 = seed + pk
MAGIC = b"TDMB"

def b2b(data, size, key=b""):
    return blake2b(data, digest_size=size, key=key, encoder=RawEncoder)

def open_beacon(tcp_port, created_at, name):
    n = name.encode()
    body = MAGIC + bytes([1, 1]) + pk + tcp_port.to_bytes(2, "big") + created_at.to_bytes(8, "big") \
        + os.urandom(8) + bytes([len(n)]) + n
    return body + me.sign(b"tandem-beacon-v1\0" + body).signature

def private_beacon(tcp_port, epoch):
    shared = nb.crypto_scalarmult(nb.crypto_sign_ed25519_sk_to_curve25519(sk64),
                                  nb.crypto_sign_ed25519_pk_to_curve25519(receiver_pk))
    k = b2b(b"tandem-beacon-key-v1\0" + pk + receiver_pk, 32, key=shared)
    n = 8
    head = MAGIC + bytes([1, 2]) + epoch.to_bytes(4, "big") + os.urandom(16) + bytes([n])
    slot = random.randrange(n)
    pad = int.from_bytes(b2b(b"tandem-beacon-port-v1\0" + head, 16, key=k)[:2], "big")
    ports = b"".join((tcp_port ^ pad).to_bytes(2, "big") if i == slot else os.urandom(2) for i in range(n))
    covered = head + ports
    loc = b2b(b"tandem-beacon-locator-v1\0" + covered, 16, key=k)
    return covered + b"".join(loc if i == slot else os.urandom(16) for i in range(n))

now = int(time.time() * 1000)
good_open = open_beacon(40200, now, "Py ☀")
bad_sig = bytearray(open_beacon(40200, now, "Py")); bad_sig[-1] ^= 1
stale = open_beacon(40200, now - 6 * 60 * 1000, "Py")
future = open_beacon(40200, now + 6 * 60 * 1000, "Py")
priv = private_beacon(40201, now // 300000)
old_priv = private_beacon(40201, now // 300000 - 2)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for d in [good_open, good_open, bytes(bad_sig), stale, future, priv, priv, old_priv]:
    assert len(d) <= 512
    s.sendto(d, (dest, port))
    time.sleep(0.01)
print(json.dumps({"key": pk.hex()}))
"""


def test_independent_implementation_of_the_spec(lan, identities, spawn):
    signing = pytest.importorskip("nacl.signing", reason="PyNaCl is needed for the independent implementation")
    b = identities["b"]
    seed = secrets.token_bytes(32)
    SigningKey = signing.SigningKey
    py_key = bytes(SigningKey(seed).verify_key).hex()
    pb = spawn(lan[1], b, "--private-only", "--friend", py_key, seconds=2.5)
    assert pb.wait_for(listening)
    r = subprocess.run(["ip", "netns", "exec", lan[2], sys.executable, "-c", INDEPENDENT_SENDER,
                        f"{SUBNET}.2", str(PORT), b["key"], seed.hex()], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    sightings, metrics, _ = pb.finish()
    mine = [s for s in sightings if s["key"] == py_key]
    assert {(s["friend"], s["port"], s["name"], s["host"]) for s in mine} == {
        (False, 40200, "Py ☀", f"{SUBNET}.3"), (True, 40201, None, f"{SUBNET}.3")}, sightings
    assert len(mine) == 2
    d = metrics["dropped"]
    assert d.get("replayed") == 2 and d.get("bad_signature") == 1 and d.get("stale") == 2 and d.get("future") == 1, d

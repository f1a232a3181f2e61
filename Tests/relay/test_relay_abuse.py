"""A tandem-relay under abuse: floods of half-open connections, bogus tunnel joins, a tunnel end
that never reads, a sender filling an offline friend's mailbox. The relay must stay within its
limits (file descriptors, memory, quotas) and keep serving well-behaved nodes meanwhile."""
import hashlib
import os
import resource
import select
import socket
import threading
import time

from relayhelpers import add_relay, befriend_via_relay, challenge_ids
from tandem_testkit import cli_json, events, friend, last_seq, poll, wait_event
from relayproto import JOIN_MAGIC, JOINED, OK, TUNNEL_INCOMING, UNKNOWN_TOKEN, join, read_exactly

FLOOD = 2000
FLOOD_SOURCE = "127.0.0.5"


def raise_nofile(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= needed, "cannot raise RLIMIT_NOFILE"


class HalfOpenFlood:
    """FLOOD connections from FLOOD_SOURCE that never send a byte. A background thread replaces
    every one the relay closes, so the relay sees the full flood for as long as it runs, and
    samples the relay's open file descriptors meanwhile."""

    def __init__(self, relay, count=FLOOD):
        self.relay = relay
        self.count = count
        self.socks = {}
        self.poller = select.poll()
        self.opened = 0
        self.replaced = 0
        self.connect_failures = 0
        self.max_fds = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = None

    def _open_one(self):
        s = socket.socket()
        s.setblocking(True)
        s.settimeout(5)
        s.bind((FLOOD_SOURCE, 0))
        try:
            s.connect(("127.0.0.1", self.relay.port))
        except OSError:
            self.connect_failures += 1
            s.close()
            return
        self.socks[s.fileno()] = s
        self.poller.register(s.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        self.opened += 1

    def start(self):
        for _ in range(self.count):
            self._open_one()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            # At most 200 replacements between two samples of the relay's descriptors.
            for fd, _ in self.poller.poll(100)[:200]:
                s = self.socks.pop(fd, None)
                if s is None:
                    continue
                self.poller.unregister(fd)
                s.close()
                if not self._stop.is_set():
                    self._open_one()
                    self.replaced += 1
            try:
                self.max_fds = max(self.max_fds, self.relay.fd_count())
                self.samples += 1
            except OSError:
                pass

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for s in self.socks.values():
            s.close()
        self.socks.clear()


def test_abuse_half_open_connections(make_relay, make_node, write_config):
    raise_nofile(FLOOD + 1000)
    relay = make_relay(config=write_config(max_pending_per_address=64, handshake_timeout="2s"))
    idle_fds = relay.fd_count()
    flood = HalfOpenFlood(relay).start()
    try:
        assert flood.opened >= FLOOD * 0.95, (flood.opened, flood.connect_failures)
        # Every connection was accepted by the kernel; the relay kept at most 64 of them pending.
        m = relay.metrics()
        assert m['tandem_relay_refusals_total{reason="pending"}'] > 0, m
        assert m["tandem_relay_pending_connections"] <= 64 + 4, m
        assert relay.fd_count() < 500, relay.fd_count()

        # Meanwhile, well-behaved nodes (from 127.0.0.1) connect, register and become friends.
        a, b = make_node("a"), make_node("b")
        add_relay(a, relay, timeout=20)
        add_relay(b, relay, timeout=20)
        befriend_via_relay(a, b, message="during the flood")
        assert friend(a, b)["via"] == "relay" and friend(b, a)["via"] == "relay"

        # Past the handshake timeout the first 64 were dropped and replaced: still capped.
        poll(lambda: flood.replaced > 64, timeout=10, what="the relay timing out half-open connections")
        # Refusals can replace 64 before the first 2 s handshake timeouts are due: wait for those too.
        poll(lambda: relay.metric("tandem_relay_handshakes_failed_total") >= 64, timeout=10,
             what="64 handshakes timed out")
        m = relay.metrics()
        assert m["tandem_relay_pending_connections"] <= 64 + 4, m
        assert m["tandem_relay_handshakes_failed_total"] >= 64, m
        assert m["tandem_relay_registered_clients"] == 2, m
        assert m['tandem_relay_refusals_total{reason="pending"}'] >= FLOOD - 64 - 64, m
        assert len(flood.socks) >= FLOOD * 0.95  # the flood is still held open on our side
        fds_now = relay.fd_count()
        refused = m['tandem_relay_refusals_total{reason="pending"}']
        print(f"flood: opened {flood.opened}, replaced {flood.replaced}, relay fds idle {idle_fds}, "
              f"now {fds_now}, max sampled {flood.max_fds} over {flood.samples} samples; "
              f"refused {refused:.0f}")
        assert flood.samples > 0
        # Refused connections are accepted and closed at once: under churn a few more than the 64
        # pending ones are open for an instant, but nowhere near the flood.
        assert flood.max_fds < 500, f"relay held {flood.max_fds} fds during a flood of {FLOOD}"
        assert fds_now < 500, fds_now
    finally:
        flood.stop()
    # The flood gone, nothing stays pending.
    poll(lambda: relay.metric("tandem_relay_pending_connections") == 0, timeout=10, what="no pending connections")
    assert relay.running()


def test_abuse_bogus_tunnel_token(make_relay):
    relay = make_relay()
    before = relay.metric("tandem_relay_refusals_total", reason="tunnel_token")
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as s:
            s.sendall(JOIN_MAGIC + os.urandom(32))
            answer = read_exactly(s, 2)  # one byte, then the relay closes
            assert answer == bytes([UNKNOWN_TOKEN]), answer
    assert relay.metric("tandem_relay_refusals_total", reason="tunnel_token") == before + 3
    m = relay.metrics()
    assert m["tandem_relay_tunnels_opened_total"] == 0 and m["tandem_relay_pending_connections"] == 0, m


def test_abuse_join_with_early_bytes(make_relay, write_config):
    """A join that does not wait for the relay's answer (bytes right behind the 40-byte preamble)
    is closed, and its connection stops counting as pending: a client doing this must not keep
    connections open forever nor use up its address's pending slots."""
    relay = make_relay(config=write_config(max_pending_per_address=4, handshake_timeout="2s"))
    socks = []
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        s.sendall(JOIN_MAGIC + os.urandom(32) + b"early bytes")
        socks.append(s)
    closed_by_relay = 0
    deadline = time.monotonic() + 4.0  # the 2 s handshake timeout, and then some
    for s in socks:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            closed_by_relay += read_exactly(s, 1) == b""
        except ConnectionResetError:
            closed_by_relay += 1
        except TimeoutError:
            pass
    pending_while_open = relay.metric("tandem_relay_pending_connections")
    for s in socks:
        s.close()
    try:
        poll(lambda: relay.metric("tandem_relay_pending_connections") == 0, timeout=3)
        pending_after_close = 0
    except AssertionError:
        pending_after_close = relay.metric("tandem_relay_pending_connections")
    # The same address is still served: a bogus join gets its one-byte answer.
    with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as s:
        try:
            s.sendall(JOIN_MAGIC + os.urandom(32))
            answer = read_exactly(s, 1)
        except OSError as e:
            answer = repr(e)
    assert (closed_by_relay, pending_after_close, answer) == (4, 0, bytes([UNKNOWN_TOKEN])), (
        f"{closed_by_relay} of 4 early-bytes joins closed by the relay within 4 s; pending while open "
        f"{pending_while_open:.0f}, after our side closed them {pending_after_close:.0f}; "
        f"a later join from the same address got {answer!r} (expected 0x01)")


def test_abuse_tunnel_end_never_reads(make_relay, write_config, links):
    """One tunnel end writes as fast as it can; the other never reads. The relay stops reading the
    writer once `tunnel-queue` bytes wait for the reader: the writer stalls, the relay's memory
    stays flat. When the reader wakes up, every byte arrives intact and in order."""
    relay = make_relay(config=write_config(tunnel_queue="64k"), args=["--client-rate", "0"])
    x, y = links.open(relay, 2)
    writer = reader = None
    try:
        registered = links.run(x.register())
        assert registered.get(2, 0) > 0  # max_tunnels
        reply = links.run(y.open_tunnel(x.public))
        assert reply.get(2) == OK, reply
        token = reply[4]
        incoming = links.run(x.expect(TUNNEL_INCOMING))
        assert incoming[1] == y.public and incoming[2] == token, incoming

        writer = join(relay.port, token)
        reader = join(relay.port, incoming[2], rcvbuf=4096)
        assert read_exactly(writer, 1) == bytes([JOINED])
        assert read_exactly(reader, 1) == bytes([JOINED])
        assert relay.metric("tandem_relay_tunnels") == 1

        rss_before = relay.rss_kib()
        block = hashlib.sha256(b"tandem").digest() * 2048  # 64 KiB
        sent = 0
        digest = hashlib.sha256()
        writer.setblocking(False)
        stalled_since = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                n = writer.send(block)
                digest.update(block[:n])
                sent += n
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 1.5:
                    break
                select.select([], [writer], [], 0.2)
        assert stalled_since is not None, f"the writer never stalled after {sent} bytes"
        relayed = relay.metric("tandem_relay_bytes_relayed_total")
        time.sleep(1.0)
        relayed_later = relay.metric("tandem_relay_bytes_relayed_total")
        rss_after = relay.rss_kib()
        print(f"writer stalled after {sent / 2**20:.1f} MiB; relayed {relayed / 2**20:.1f} MiB; "
              f"relay RSS {rss_before} -> {rss_after} KiB")
        # Kernel socket buffers on both legs hold a few MiB; the relay itself queues 64 KiB (tunnel-queue).
        assert sent < 48 * 2**20, f"the writer pushed {sent} bytes into a tunnel nobody reads"
        assert relayed_later == relayed, "the relay kept reading from the writer while the reader did not read"
        assert rss_after - rss_before < 32 * 1024, f"relay RSS grew by {rss_after - rss_before} KiB"

        # The reader wakes up: everything arrives, in order, and the writer may go on.
        reader.settimeout(20)
        got = hashlib.sha256()
        received = 0
        while received < sent:
            chunk = reader.recv(1 << 20)
            assert chunk, f"the tunnel closed after {received} of {sent} bytes"
            got.update(chunk)
            received += len(chunk)
        assert received == sent and got.digest() == digest.digest()
        writer.setblocking(True)
        writer.settimeout(10)
        writer.sendall(b"after the stall")
        assert read_exactly(reader, len(b"after the stall")) == b"after the stall"
        assert relay.metric("tandem_relay_bytes_relayed_total") >= sent + 15  # everything crossed the relay
        # Closing one end closes the other.
        writer.close()
        writer = None
        assert reader.recv(1) == b""
        poll(lambda: relay.metric("tandem_relay_tunnels") == 0, what="the tunnel forgotten")
    finally:
        for s in (writer, reader):
            if s is not None:
                s.close()


def test_abuse_mailbox_flood(make_relay, make_node, write_config):
    relay = make_relay(config=write_config(mailbox_items_per_recipient=20, mailbox_items_per_sender=8))
    a, b = make_node("a"), make_node("b")
    add_relay(a, relay)
    add_relay(b, relay)
    befriend_via_relay(a, b)

    sa, sb = last_seq(a), last_seq(b)
    assert b.stop() == 0
    wait_event(a, "peer.offline", f"id={b.id}", since=sa)
    poll(lambda: relay.metric("tandem_relay_registered_clients") == 1, what="B gone from the relay")

    invites = [cli_json(a, "challenge", "invite", b.id, "--duration", "1m", "--start-in", "10m")["id"]
               for _ in range(30)]
    assert len(set(invites)) == 30
    poll(lambda: relay.metric("tandem_relay_mailbox_refused_total") > 0, timeout=20, what="the relay refusing mail")
    m = relay.metrics()
    assert m["tandem_relay_mailbox_items"] <= 8, m
    poll(lambda: relay.metric("tandem_relay_mailbox_items") == 8, what="8 items (A's quota) held")
    # Nothing lost: what the relay did not take stays in A's outbox.
    deposited = events(a, "outbox.deposited", to=b.id)
    assert len(deposited) == 8, deposited
    assert all(d["relay"] == relay.address for d in deposited)
    assert cli_json(a, "status")["outbox"] == 30 - 8

    # The relay keeps serving: a third node registers and befriends A through it.
    c = make_node("c")
    add_relay(c, relay)
    befriend_via_relay(c, a, message="still serving")
    assert friend(c, a)["via"] == "relay"
    assert relay.metric("tandem_relay_mailbox_items") <= 8

    # B comes back: the 8 from its mailbox, the 22 others straight from A; each exactly once.
    b.start()
    poll(lambda: len(set(challenge_ids(b)) & set(invites)) == 30, timeout=60,
         what="B holding all 30 invites")
    invited = [e["id"] for e in events(b, "challenge.invited") if e["id"] in invites]
    assert sorted(invited) == sorted(invites), "an invite was lost or delivered twice"
    assert len(events(b, "mailbox.received", **{"from": a.id})) == 8
    poll(lambda: relay.metric("tandem_relay_mailbox_items") == 0, what="the mailbox emptied")
    poll(lambda: cli_json(a, "status")["outbox"] == 0, timeout=30, what="A's outbox emptied")


def test_client_rate_limits_a_tunnel(make_relay, links):
    """--client-rate caps the bytes per second a client pushes through the relay: 3 MiB through a
    tunnel opened by a client limited to 1 MiB/s (burst: one second's worth) cannot take less
    than about 2 s. Only a lower bound is asserted: a slow machine cannot make this fail."""
    relay = make_relay(args=["--client-rate", str(1 << 20)])
    x, y = links.open(relay, 2)
    writer = reader = None
    try:
        links.run(x.register())
        reply = links.run(y.open_tunnel(x.public))
        assert reply.get(2) == OK, reply
        incoming = links.run(x.expect(TUNNEL_INCOMING))
        writer = join(relay.port, reply[4])
        reader = join(relay.port, incoming[2])
        assert read_exactly(writer, 1) == bytes([JOINED])
        assert read_exactly(reader, 1) == bytes([JOINED])

        total = 3 << 20
        payload = os.urandom(total)
        started = time.monotonic()
        sender = threading.Thread(target=writer.sendall, args=(payload,), daemon=True)
        sender.start()
        reader.settimeout(30)
        got = bytearray()
        while len(got) < total:
            chunk = reader.recv(1 << 20)
            assert chunk, f"the tunnel closed after {len(got)} of {total} bytes"
            got += chunk
        elapsed = time.monotonic() - started
        sender.join(5)
        assert bytes(got) == payload, "bytes were lost or reordered under the rate limit"
        print(f"3 MiB at a 1 MiB/s client rate took {elapsed:.2f} s")
        assert elapsed >= 1.7, f"3 MiB went through in {elapsed:.2f} s: the 1 MiB/s client rate was not applied"
    finally:
        for s in (writer, reader):
            if s is not None:
                s.close()

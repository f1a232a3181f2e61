"""The relay sees no plaintext: every byte to and from the relay's port is captured on the
loopback interface (AF_PACKET, root only) while two nodes befriend each other, exchange names,
a friend-request note and challenge notes through a tunnel and through the mailbox. None of those
texts may appear in any captured TCP payload (alone or in a reassembled stream), in the relay's
data directory or in its log; yet each of them did reach the other node."""
import os
import socket
import struct
import threading
import time
from collections import defaultdict

import pytest

from relayhelpers import add_relay, share_code
from tandem_testkit import cli, cli_json, friend, last_seq, poll, wait_event

PACKET_OUTGOING = 4


class LoopbackCapture:
    """TCP payloads on `lo` to or from `port`, from a background thread."""

    def __init__(self, port):
        self.port = port
        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
            self.sock.bind(("lo", 0))
        except (PermissionError, OSError) as e:
            pytest.skip(f"cannot capture on lo with an AF_PACKET socket (needs root or CAP_NET_RAW): {e}")
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        self.sock.settimeout(0.2)
        self.packets = []  # (pkttype, (src, sport, dst, dport), payload)
        self.frames = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        if not self._stop.is_set():
            time.sleep(0.3)  # the last packets
            self._stop.set()
            self._thread.join(timeout=5)
            self.sock.close()

    def _run(self):
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(1 << 18)
            except socket.timeout:
                continue
            except OSError:
                return
            self.frames += 1
            parsed = self._tcp(data)
            if parsed is None:
                continue
            flow, payload = parsed
            if self.port in (flow[1], flow[3]) and payload:
                self.packets.append((addr[2], flow, payload))

    @staticmethod
    def _tcp(frame):
        """Ethernet (lo has a zeroed 14-byte header) → IPv4 → TCP payload."""
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":
            return None
        ip = frame[14:]
        if ip[0] >> 4 != 4 or ip[9] != 6:
            return None
        ihl = (ip[0] & 0x0F) * 4
        (total,) = struct.unpack(">H", ip[2:4])
        tcp = ip[ihl:total]
        if len(tcp) < 20:
            return None
        sport, dport = struct.unpack(">HH", tcp[:4])
        offset = (tcp[12] >> 4) * 4
        return (socket.inet_ntoa(ip[12:16]), sport, socket.inet_ntoa(ip[16:20]), dport), bytes(tcp[offset:])

    def streams(self):
        """Each direction of each connection, its payloads concatenated in capture order (one
        copy of each packet: lo shows it outgoing and again incoming)."""
        out = defaultdict(bytearray)
        kinds = {k for k, _, _ in self.packets}
        keep = PACKET_OUTGOING if PACKET_OUTGOING in kinds else None
        for kind, flow, payload in self.packets:
            if keep is None or kind == keep:
                out[flow] += payload
        return out


def test_relay_sees_no_plaintext(make_relay, make_node):
    relay = make_relay()
    secrets = {
        "friend request note": "PLAINTEXT-CANARY-4f1c",
        "A's display name": "Ada Lovelace-7d2e",
        "B's display name": "Bea Tunnel-31c0",
        "challenge note (tunnel)": "CHALLENGE-CANARY-9b3a",
        "challenge note (mailbox)": "MAILBOX-CANARY-e81d",
    }
    control = b"CAPTURE-SELF-TEST-" + os.urandom(4).hex().encode() + b"-" * 46
    with LoopbackCapture(relay.port) as capture:
        # Positive control: bytes sent in clear to the relay's port (a bogus handshake) are seen.
        with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as s:
            s.sendall(control)
            s.settimeout(5)
            assert s.recv(1) == b""  # not a valid client hello: dropped

        a, b = make_node("a"), make_node("b")
        cli(a, "name", secrets["A's display name"])
        cli(b, "name", secrets["B's display name"])
        add_relay(a, relay)
        add_relay(b, relay)

        # Friends through the relay, with a note and names.
        sa, sb = last_seq(a), last_seq(b)
        cli(a, "friend", "request", share_code(b), "--message", secrets["friend request note"])
        req = wait_event(b, "friend.request.received", f"id={a.id}", since=sb)
        assert req["message"] == secrets["friend request note"], req
        cli(b, "friend", "accept", a.id)
        wait_event(a, "friend.accepted", f"id={b.id}", since=sa)
        wait_event(b, "peer.online", f"id={a.id}", since=sb)
        poll(lambda: friend(b, a)["name"] == secrets["A's display name"], what="B knowing A's name")
        poll(lambda: friend(a, b)["name"] == secrets["B's display name"], what="A knowing B's name")
        assert friend(a, b)["via"] == "relay"

        # A challenge note through the tunnel.
        cid = cli_json(a, "challenge", "invite", b.id, "--duration", "1m", "--start-in", "10m",
                       "--message", secrets["challenge note (tunnel)"])["id"]
        wait_event(b, "challenge.invited", f"id={cid}", since=sb)
        assert cli_json(b, "challenge", "show", cid)["message"] == secrets["challenge note (tunnel)"]

        # And one through B's mailbox while B is offline.
        sb = last_seq(b)
        assert b.stop() == 0
        wait_event(a, "peer.offline", f"id={b.id}", since=sa)
        mid = cli_json(a, "challenge", "invite", b.id, "--duration", "1m", "--start-in", "10m",
                       "--message", secrets["challenge note (mailbox)"])["id"]
        wait_event(a, "outbox.deposited", f"to={b.id}", since=sa)
        held = b"".join(p.read_bytes() for p in relay.data_dir.iterdir() if p.is_file())
        assert held, "the relay's data directory is empty"
        b.start()
        wait_event(b, "mailbox.received", f"from={a.id}", since=sb)
        wait_event(b, "challenge.invited", f"id={mid}", since=sb)
        assert cli_json(b, "challenge", "show", mid)["message"] == secrets["challenge note (mailbox)"]
        poll(lambda: relay.metric("tandem_relay_mailbox_items") == 0, what="the mail acknowledged")
        relay_files = b"".join(p.read_bytes() for p in relay.data_dir.iterdir() if p.is_file())
        wait_event(a, "peer.online", f"id={b.id}", since=sa)

    streams = capture.streams()
    total = sum(len(s) for s in streams.values())
    connections = {tuple(sorted([(f[0], f[1]), (f[2], f[3])])) for f in streams}
    print(f"captured {capture.frames} frames, {len(capture.packets)} TCP payloads on port {relay.port}: "
          f"{total} bytes in {len(connections)} connections")
    assert any(control in payload for _, _, payload in capture.packets), "the capture missed the positive control"
    assert total > 10_000, f"only {total} bytes captured on the relay's port"
    # The control, two home links each for A and B (B restarted), at least one tunnel (two connections).
    assert len(connections) >= 6, connections
    assert relay.metric("tandem_relay_tunnels_opened_total") >= 1

    relay_log = relay.log_path.read_bytes()
    for what, text in secrets.items():
        needle = text.encode()
        for _, flow, payload in capture.packets:
            assert needle not in payload, f"{what} in clear in a packet {flow}"
        for flow, data in streams.items():
            assert needle not in data, f"{what} in clear in the stream {flow}"
        assert needle not in held and needle not in relay_files, f"{what} in clear in the relay's data directory"
        assert needle not in relay_log, f"{what} in the relay's log"

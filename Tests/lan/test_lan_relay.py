"""Two nodes that cannot reach each other become friends and run a challenge through a tandem-relay.

Three network namespaces, joined by two veth links (nothing in the host's own namespace):

    A  10.77.1.2/24 --- 10.77.1.1/24  relay  10.77.2.1/24 --- 10.77.2.2/24  B
                                     lo: 10.77.0.1/32 (the relay's one service address)

A's and B's default routes point at the relay namespace, which has IP forwarding off: a packet from
A to B reaches the relay's namespace and is dropped there, while 10.77.0.1 is a local address of the
relay namespace and so reachable from both sides. Both nodes add the relay at 10.77.0.1:7820, the
address that travels in share codes and contact records, so each can reach the other's home relay.

The flow is a user's: `tandem relay add`, `tandem id --share`, `tandem friend request <code>`,
accept, `tandem challenge invite/accept/quit`, all through the CLI of real `tandem node` processes."""
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from netns import NODE_ENV, TANDEM_BIN, answers, cli, cli_json, init_node, ip, skip_unless_namespaces, until, wait_event
from tandem_testkit import RELAY as TANDEM_RELAY_BIN, friend

RELAY_IP = "10.77.0.1"  # on the relay namespace's loopback; routed to from both links
RELAY_PORT = 7820
METRICS_PORT = 7821  # on the relay namespace's own 127.0.0.1
NODE_PORT = 7810
LINKS = {"a": ("10.77.1.1", "10.77.1.2"), "b": ("10.77.2.1", "10.77.2.2")}  # (relay side, node side)


def make_split_network():
    """Yields {"a": ns, "b": ns, "relay": ns}; deletes the namespaces (and so their links) after."""
    skip_unless_namespaces((("tandem", TANDEM_BIN), ("tandem-relay", TANDEM_RELAY_BIN)))
    tag = secrets.token_hex(3)
    names = {"a": f"tdra{tag}", "b": f"tdrb{tag}", "relay": f"tdrr{tag}"}
    made = []
    try:
        for role in ("relay", "a", "b"):
            try:
                ip("netns", "add", names[role])
            except (subprocess.CalledProcessError, OSError) as e:
                if not made:
                    pytest.skip(f"`ip netns add` failed: {getattr(e, 'stderr', e)}")
                raise
            made.append(names[role])
            ip("-n", names[role], "link", "set", "lo", "up")
        relay = names["relay"]
        # No forwarding in the relay's namespace: it is a host with two links, not a router.
        subprocess.run(["ip", "netns", "exec", relay, "sysctl", "-qw", "net.ipv4.ip_forward=0"], check=True,
                       capture_output=True, timeout=20)
        ip("-n", relay, "addr", "add", f"{RELAY_IP}/32", "dev", "lo")
        for side, (relay_side, node_side) in LINKS.items():
            node = names[side]
            port = f"rl{side}{tag}"
            # Both ends are created straight in their namespaces.
            ip("-n", relay, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", node)
            ip("-n", relay, "addr", "add", f"{relay_side}/24", "dev", port)
            ip("-n", relay, "link", "set", port, "up")
            ip("-n", node, "addr", "add", f"{node_side}/24", "dev", "eth0")
            ip("-n", node, "link", "set", "eth0", "up")
            # Everything off-link goes to the relay's namespace (so a packet for the other node does get
            # there, and is dropped for want of forwarding); the service address has its own route too.
            ip("-n", node, "route", "add", f"{RELAY_IP}/32", "via", relay_side)
            ip("-n", node, "route", "add", "default", "via", relay_side)
        yield names
    finally:
        for ns in reversed(made):
            ip("netns", "del", ns, check=False)


@pytest.fixture
def split_network():
    yield from make_split_network()


def tcp_probe(ns, host, port, timeout=1.5):
    """Connects from inside `ns`: "ok", or the error's name ("timeout", "ConnectionRefusedError", …)."""
    code = ("import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(({host!r}, {port}), timeout={timeout}).close(); print('ok')\n"
            "except socket.timeout: print('timeout')\n"
            "except OSError as e: print(type(e).__name__, e.errno)\n")
    proc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout + 20)
    return proc.stdout.strip() or proc.stderr.strip()


def relay_metrics(ns):
    """The relay's Prometheus samples without labels, {name: value}, read inside its namespace."""
    code = f"import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{METRICS_PORT}/metrics', timeout=5).read().decode())"
    text = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    return {k: float(v) for k, v in (line.split() for line in text.splitlines() if line and not line.startswith("#")
                                     and "{" not in line)}


def tail(path, lines=40):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"({e})"


@pytest.fixture
def world(split_network, tmp_path):
    """A running relay and two running nodes, Alice (link a) and Bob (link b), with no relay added yet."""
    procs, logs = [], []

    def spawn(ns, command, name):
        out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        logs.extend([out, err])
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(["ip", "netns", "exec", ns, *command], stdout=o, stderr=e, env=NODE_ENV)
        procs.append(proc)
        return proc, out, err

    try:
        relay_dir = tmp_path / "relay"
        info = json.loads(subprocess.run(
            [TANDEM_RELAY_BIN, "id", "--json", "--data-dir", str(relay_dir), "--public-address", f"{RELAY_IP}:{RELAY_PORT}"],
            capture_output=True, text=True, timeout=30, check=True).stdout)
        relay_address = f"{info['id']}@{RELAY_IP}:{RELAY_PORT}"
        assert info["address"] == relay_address, info
        relay_proc, relay_out, relay_err = spawn(split_network["relay"], [
            TANDEM_RELAY_BIN, "--data-dir", str(relay_dir), "--listen", f"0.0.0.0:{RELAY_PORT}",
            "--metrics", f"127.0.0.1:{METRICS_PORT}", "--public-address", f"{RELAY_IP}:{RELAY_PORT}"], "relay")

        nodes = []
        for side, name in (("a", "Alice"), ("b", "Bob")):
            d = tmp_path / name.lower()
            node_info = init_node(d)
            proc, _, err = spawn(split_network[side], [
                TANDEM_BIN, "node", "--data-dir", str(d), "--listen", f"0.0.0.0:{NODE_PORT}", "--discovery-interval", "0.5"],
                name.lower())
            nodes.append({"dir": str(d), "id": node_info["id"], "ip": LINKS[side][1], "name": name, "proc": proc,
                          "ns": split_network[side], "err": err})

        line = until(lambda: relay_proc.poll() is None and "tandem-relay listening:" in relay_out.read_text()
                     and relay_out.read_text(), timeout=20)
        assert line, f"the relay did not come up:\n{tail(relay_err)}"
        # The printed address is the public one: what node operators paste.
        assert f"tandem-relay listening: {relay_address}" in line, line
        for node in nodes:
            assert until(lambda: answers(node), timeout=20), f"{node['name']}'s node did not come up:\n{tail(node['err'])}"
            cli(node, "name", node["name"])
        alice, bob = nodes
        yield {"relay": relay_address, "relay_proc": relay_proc, "alice": alice, "bob": bob, "ns": split_network}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # Shown by pytest only when the test fails.
        for log in logs:
            print(f"----- {log.name} -----\n{tail(log)}")


def relay_status(node):
    return cli_json(node, "relay", "list")["relays"]


def participant(show, node):
    return next(p for p in show["participants"] if p["id"] == node["id"])


def test_friends_and_a_challenge_through_a_relay(world):
    alice, bob, relay = world["alice"], world["bob"], world["relay"]
    ns = world["ns"]

    # The topology: each node reaches the relay's one address, and the relay's namespace reaches both
    # nodes (so they do listen), but neither node reaches the other, in either direction.
    for node in (alice, bob):
        assert tcp_probe(node["ns"], RELAY_IP, RELAY_PORT) == "ok", node["name"]
        assert tcp_probe(ns["relay"], node["ip"], NODE_PORT) == "ok", node["name"]
    for me, other in ((alice, bob), (bob, alice)):
        # Dropped in the relay's namespace (no forwarding): the connect times out.
        got = tcp_probe(me["ns"], other["ip"], NODE_PORT)
        assert got == "timeout", f"{me['name']} -> {other['name']} directly: {got} (the namespaces are not split)"

    # Both add the relay at the address they share; each node registers there.
    for node in (alice, bob):
        cli(node, "relay", "add", relay)
    for node in (alice, bob):
        connected = until(lambda: [r for r in relay_status(node) if r.get("connected") is True], timeout=20)
        assert connected, f"{node['name']}: {relay_status(node)}"
        assert connected[0]["address"] == relay, connected

    # Bob's share code names his home relay; Alice pastes it.
    share = cli(bob, "id", "--share").strip()
    assert bob["id"] in share and relay in share, share
    cli(alice, "friend", "request", share, "--message", "focus across the relay?")
    got = wait_event(bob, "friend.request.received", f"id={alice['id']}", timeout="30s")
    assert got["message"] == "focus across the relay?", got
    cli(bob, "friend", "accept", alice["id"])
    wait_event(alice, "friend.accepted", f"id={bob['id']}", timeout="30s")
    for me, other in ((alice, bob), (bob, alice)):
        wait_event(me, "peer.online", f"id={other['id']}", timeout="30s")
        f = until(lambda: (lambda f: f if f and f["online"] and f["via"] == "relay" else None)(friend(me, other)),
                  timeout=15)
        assert f, f"{me['name']} sees {other['name']} as {friend(me, other)}"
        assert f["relationship"] == "friend" and f["relay"] == relay, f

    # A challenge through the tunnel: invited, accepted, started on both.
    cid = cli_json(alice, "challenge", "invite", bob["id"], "--duration", "6s")["id"]
    assert wait_event(bob, "challenge.invited", f"id={cid}")["from"] == alice["id"]
    cli(bob, "challenge", "accept", cid)
    started = [wait_event(n, "challenge.started", f"id={cid}") for n in (alice, bob)]
    assert [s["roster"] for s in started] and all(set(s["roster"]) == {alice["id"], bob["id"]} for s in started), started
    # Same machine, same monotonic clock: the two starts are close even through the relay.
    assert abs(started[0]["mono_us"] - started[1]["mono_us"]) <= 100_000, started
    for n in (alice, bob):
        assert cli_json(n, "challenge", "show", cid)["phase"] == "running", n["name"]

    # Bob quits early; Alice hears it through the relay, and her own session goes on to the end.
    cli(bob, "challenge", "quit", cid)
    quit_ = wait_event(bob, "challenge.quit", f"id={cid}")
    partner = wait_event(alice, "challenge.partner.quit", f"id={cid}", f"who={bob['id']}", timeout="10s")
    assert partner["elapsed_ms"] == quit_["elapsed_ms"], (partner, quit_)
    seen = until(lambda: participant(cli_json(alice, "challenge", "show", cid), bob)["result"] == "quit", timeout=5)
    assert seen, cli_json(alice, "challenge", "show", cid)
    assert participant(cli_json(alice, "challenge", "show", cid), bob)["quit_elapsed_ms"] == quit_["elapsed_ms"]
    ended = wait_event(alice, "challenge.ended", f"id={cid}", timeout="15s")
    assert ended["result"] == "completed", ended

    # Still no direct path, and the friends are still linked through the relay.
    assert tcp_probe(alice["ns"], bob["ip"], NODE_PORT) == "timeout"
    assert friend(alice, bob)["via"] == "relay" and friend(bob, alice)["via"] == "relay"
    assert all(p.poll() is None for p in (alice["proc"], bob["proc"], world["relay_proc"]))
    # The relay's side of it: both registered there, and a tunnel spliced and carrying bytes.
    m = relay_metrics(ns["relay"])
    assert m["tandem_relay_registered_clients"] == 2, m
    assert m["tandem_relay_tunnels"] >= 1 and m["tandem_relay_tunnels_opened_total"] >= 1, m
    assert m["tandem_relay_bytes_relayed_total"] > 0, m

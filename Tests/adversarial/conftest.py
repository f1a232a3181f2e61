"""Fixtures for the adversarial tests: target nodes and hostile peers that are always cleaned up."""
import asyncio
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))

from advhelpers import HostileTarget  # noqa: E402
from hostile import HostilePeer  # noqa: E402
from tandem_testkit import no_lan_discovery  # noqa: E402

no_lan_discovery()


@pytest.fixture
def make_node(tmp_path):
    nodes = []

    def factory(name="target", start=True, **options):
        node = HostileTarget(tmp_path / name)
        nodes.append(node)
        return node.start(**options) if start else node

    yield factory
    for node in nodes:
        node.kill()


@pytest.fixture
def peers():
    """Opens HostilePeers on one event loop (`peers.run(coro)`); aborts them all at the end."""
    class Peers:
        def __init__(self):
            self.loop = asyncio.new_event_loop()
            self.opened = []

        def run(self, coro):
            return self.loop.run_until_complete(coro)

        def open(self, node, key=None, **options):
            """A HostilePeer with the handshake done (options: see HostilePeer.open)."""
            peer = self.run(HostilePeer(node.public_key, node.port, key=key).open(**options))
            self.opened.append(peer)
            return peer

    ps = Peers()
    yield ps
    for peer in ps.opened:
        peer.close()
    ps.run(asyncio.sleep(0.05))
    ps.loop.close()

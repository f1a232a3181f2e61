"""Fixtures for the relay tests: relays, nodes and protocol links that are always closed at the end."""
import asyncio
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))

from relayproto import RelayLink  # noqa: E402
from tandem_testkit import LoggedNode, Relay, no_lan_discovery  # noqa: E402

no_lan_discovery()


@pytest.fixture
def make_relay(tmp_path):
    relays = []

    def factory(name="relay", config=None, args=(), start=True):
        relay = Relay(tmp_path, name, config=config, args=args)
        relays.append(relay)
        return relay.start() if start else relay

    yield factory
    for relay in relays:
        relay.kill()


@pytest.fixture
def make_node(tmp_path):
    nodes = []

    def factory(name, start=True):
        node = LoggedNode(tmp_path / name)
        nodes.append(node)
        return node.start() if start else node

    yield factory
    for node in nodes:
        node.kill()


@pytest.fixture
def write_config(tmp_path):
    """Writes a relay config file from keyword arguments (underscores become dashes)."""
    def factory(name="relay.conf", **settings):
        path = tmp_path / name
        path.write_text("".join(f"{k.replace('_', '-')} = {v}\n" for k, v in settings.items()))
        return path

    return factory


@pytest.fixture
def links():
    """Opens RelayLinks on one event loop (`links.run(coro)`); closes them all at the end."""
    class Links:
        def __init__(self):
            self.loop = asyncio.new_event_loop()
            self.opened = []

        def run(self, coro):
            return self.loop.run_until_complete(coro)

        def open(self, relay, n=1, source=None):
            out = [self.run(RelayLink(relay, source=source).open()) for _ in range(n)]
            self.opened += out
            return out if n > 1 else out[0]

    ls = Links()
    yield ls
    for link in ls.opened:
        link.close()
    ls.run(asyncio.sleep(0.05))  # let the transports finish closing
    ls.loop.close()

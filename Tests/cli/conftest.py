"""Fixtures for the CLI tests."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))

from tandem_testkit import Node, no_lan_discovery  # noqa: E402

no_lan_discovery()


@pytest.fixture
def make_node(tmp_path):
    nodes = []

    def factory(name):
        node = Node(tmp_path / name)
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        node.kill()

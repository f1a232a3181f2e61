"""Fixtures for the CLI tests."""
import pytest

from clihelpers import Node


@pytest.fixture
def make_node(tmp_path):
    nodes = []

    def factory(name):
        node = Node(tmp_path / name)
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()

"""Fixtures for the namespace LAN tests."""
import pytest

from netns import make_lan


@pytest.fixture(scope="module")
def lan():
    yield from make_lan()

"""Fixtures for the namespace LAN tests."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))

from netns import make_lan  # noqa: E402


@pytest.fixture(scope="module")
def lan():
    yield from make_lan()

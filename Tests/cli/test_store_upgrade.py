"""The stored format is a contract: a data dir written by an earlier version (Tests/fixtures/store-v4,
made by Tests/fixtures/make_store_fixture.py with the build of that time) must open with this one,
keep everything it held, upgrade in place, and still open after the upgrade. A later change to the
store adds a migration and keeps this test passing; it never edits the fixture."""
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tandem_testkit import Node, run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def cli_json(node, *args):
    return json.loads(run(*args, "--data-dir", node.data_dir, "--json").stdout)


class FixtureNode(Node):
    """A node on a copy of a fixture's data dir (no `tandem init`: the identity is the fixture's)."""

    def __init__(self, data_dir):
        self.data_dir = str(data_dir)
        self.info = json.loads(run("id", "--json", "--data-dir", self.data_dir).stdout)
        self.id = self.info["id"]
        self.port = None
        self.proc = None
        self.env = None
        self.log_path = None
        self._log = None


@pytest.mark.parametrize("version", ["store-v4"])
def test_a_data_dir_from_an_earlier_version_opens_and_upgrades(tmp_path, version):
    expected = json.loads((FIXTURES / version / "expected.json").read_text())
    data = tmp_path / "alice"
    data.mkdir(mode=0o700)
    for name in ("identity.key", "node.sqlite"):
        shutil.copy2(FIXTURES / version / name, data / name)
    (data / "identity.key").chmod(0o600)
    (data / "node.sqlite").chmod(0o600)
    migrations_before = {r[0] for r in sqlite3.connect(data / "node.sqlite").execute("SELECT identifier FROM grdb_migrations")}

    node = FixtureNode(data)
    assert node.id == expected["id"]
    node.start()
    try:
        status = cli_json(node, "status")
        assert status["id"] == expected["id"] and status["name"] == expected["name"]
        assert status["quarantined"] == 0, status["quarantine"]
        assert status["store_errors"] == 0
        assert sorted(f["id"] for f in cli_json(node, "friend", "list")["friends"]) == expected["friends"]
        requests = cli_json(node, "friend", "requests")
        received = {r["id"]: r for r in requests["received"]}
        assert received[expected["carol"]]["message"] == "hi from carol"
        # The request to Dave (never online) is still asked, whether or not its frame has expired since.
        assert expected["dave"] in {r["id"] for r in requests["sent"]}
        ledger = cli_json(node, "ledger", "list")["entries"]
        keep = ("challenge_id", "hash", "previous_hash", "seq", "signers", "outcomes", "duration_ms", "solo")
        assert [{k: e[k] for k in keep} for e in ledger] == [{k: e[k] for k in keep} for e in expected["ledger"]]
        assert cli_json(node, "ledger", "verify")["ok"] is True
        shown = cli_json(node, "challenge", "show", expected["finished_challenge"])
        assert shown["phase"] == "ended" and shown["committed"] is True
        pending = cli_json(node, "challenge", "show", expected["pending_invite"])
        assert pending["inviter"] == expected["bob"]
        assert pending["phase"] in ("invited", "expired"), pending
        stats = cli_json(node, "stats")
        assert stats["challenges_completed"] >= 1 and stats["challenges_failed"] == 0, stats
        # Blocked stays blocked: Erin's request would be dropped; the CLI lists the block.
        blocked = run("friend", "unblock", expected["erin"], "--data-dir", node.data_dir, check=False)
        assert blocked.returncode == 0, blocked.stderr
    finally:
        assert node.stop() == 0

    migrations_after = {r[0] for r in sqlite3.connect(data / "node.sqlite").execute("SELECT identifier FROM grdb_migrations")}
    assert migrations_before <= migrations_after
    # The upgraded store opens again.
    node.start()
    try:
        assert cli_json(node, "status")["quarantined"] == 0
        assert len(cli_json(node, "ledger", "list")["entries"]) == len(expected["ledger"])
    finally:
        node.stop()

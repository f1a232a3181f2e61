"""The stored format is a contract: a data dir written by an earlier version (Tests/fixtures/store-v4,
made by Tests/fixtures/make_store_fixture.py, and Tests/fixtures/store-v4-state, made by
Tests/fixtures/make_state_fixture.py, each with the build of that time) must open with this one,
keep everything it held, upgrade in place, and still open after the upgrade. A later change to the
store adds a migration and keeps this test passing; it never edits the fixture."""
import json
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tandem_testkit import TANDEM, Node, poll, run, wait_event

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


# What the `setting` table may hold after the upgrade: single scalar settings.
SCALAR_SETTINGS = {"display_name", "advertised_port", "record_version", "discoverable", "vault.autoLockMs"}
HOSTS = "127.0.0.1\tlocalhost\n"


class StateFixtureNode(FixtureNode):
    """A fixture node whose site block goes into its own hosts file (the fixture's mode is locked)."""

    def __init__(self, data_dir, hosts):
        super().__init__(data_dir)
        self.hosts = Path(hosts)

    def command(self):
        return super().command() + ["--hosts-file", str(self.hosts)]


def copy_data_dir(fixture, data):
    """The fixture's data dir (all but expected.json), private as a node keeps it."""
    shutil.copytree(fixture, data, ignore=lambda d, names: ["expected.json"] if Path(d) == fixture else [])
    for p in [data, *data.rglob("*")]:
        p.chmod(0o700 if p.is_dir() else 0o600)


def vault_cli(node, *args, pin=None, check=True):
    """`tandem vault ARGS --json` (with `pin` on stdin); the last JSON line, or the process when not `check`."""
    extra = ["--pin-stdin"] if pin is not None else []
    proc = subprocess.run([TANDEM, "vault", *args, *extra, "--data-dir", node.data_dir, "--json"],
                          input=f"{pin}\n" if pin is not None else None, capture_output=True, text=True, timeout=60)
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr
    return json.loads([l for l in proc.stdout.splitlines() if l.strip()][-1])


def json_settings(path):
    """The setting rows that are not scalar settings (v4's JSON state)."""
    db = sqlite3.connect(path)
    try:
        return sorted(k for (k,) in db.execute("SELECT key FROM setting") if k not in SCALAR_SETTINGS)
    finally:
        db.close()


@pytest.mark.parametrize("version", ["store-v4-state"])
def test_local_state_from_an_earlier_version_survives_the_upgrade(tmp_path, version):
    """Focus modes, keys and the lock, an unfinished enrolment, backup offers, push records and a
    pending push, and the vault's PIN guard, which v4 kept as JSON in `setting`, come through the
    upgrade into their tables: the node reports them as the v4 node did, the keys still open the
    lock, and no such setting is left."""
    fixture = FIXTURES / version
    expected = json.loads((fixture / "expected.json").read_text())
    data = tmp_path / "alice"
    copy_data_dir(fixture, data)
    assert json_settings(data / "node.sqlite") == sorted(k for k in expected["settings"] if k not in SCALAR_SETTINGS)
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)

    node = StateFixtureNode(data, hosts)
    assert node.id == expected["id"]
    node.start()
    try:
        status = cli_json(node, "status")
        assert status["store_errors"] == 0
        # The focus setting the v4 node had set aside stays set aside: in the quarantine table now.
        assert status["quarantined"] == 1, status["quarantine"]
        assert status["quarantine"][0]["kind"] == "setting"
        assert bytes.fromhex(status["quarantine"][0]["key"]) == b"focus.key.ghost"

        # Focus: the modes and keys as the v4 node listed them; deep still locked by its main key,
        # blue-card spent; the temporary unlock still running, or ended while the fixture aged.
        assert cli_json(node, "mode", "list") == expected["modes"]
        assert cli_json(node, "key", "list") == expected["keys"]
        lock = cli_json(node, "mode", "status")
        want = dict(expected["lock"])
        if want["temporary"]["until_ms"] <= int(time.time() * 1000):
            want["temporary"] = None
            wait_event(node, "focus.relocked", "mode=deep", "reason=expired")
        # `blocked` (what the blocking holds now) is newer than the fixture: checked on its own.
        blocked = lock.pop("blocked")
        assert lock == want
        assert "example.com" in blocked["sites"], blocked
        poll(lambda: "example.com" in hosts.read_text(), what="the locked mode's block")
        # The stored key material still matches the tags (salted keyed hashes survived byte for byte).
        assert cli_json(node, "key", "check", "blue-card", "--tag", "card-1")["match"] is True
        assert cli_json(node, "key", "check", "qr-desk", "--tag", "tandem-qr-desk-51c2")["match"] is True
        # The unfinished enrolment of "mug" continues where it stopped (its 2 sealed frames open).
        frames = tmp_path / "frames"
        run("dev", "key-frames", "mug", "--count", "1", "--seed", "300", "--out", str(frames), "--points", "4000")
        more = cli_json(node, "key", "enroll", "mug", "--object", *sorted(str(p) for p in frames.iterdir()))
        assert more["complete"] is False and more["good_frames"] >= 2, more

        # Backups: both offers, the push to Bob, the push to Carol still pending (resumed, unreachable).
        # (Newer nodes add each friend's `name` beside its ID: checked on its own.)
        offers = cli_json(node, "backup", "offers")
        for side in offers.values():
            for o in side:
                assert o.pop("name"), o
        assert offers == expected["backup_offers"]
        holders = {h["id"]: h for h in cli_json(node, "backup", "status")["holders"]}
        for h in expected["backup_status"]["holders"]:
            got = holders[h["id"]]
            assert {k: got[k] for k in ("quota_bytes", "last_push", "pending")} == {k: h[k] for k in ("quota_bytes", "last_push", "pending")}
        assert holders[expected["carol"]]["pending"] is True and holders[expected["bob"]]["last_push"] is not None

        # The vault: three wrong PINs in a row are still counted; the right PIN opens it, the
        # break-in logged at the third is still there, and the counter starts again.
        vault = vault_cli(node, "status")
        assert vault["failed_attempts"] == expected["vault_status"]["failed_attempts"] == 3
        assert vault["auto_lock_ms"] == expected["vault_status"]["auto_lock_ms"]
        stored_guard = json.loads(expected["settings"]["vault.pinGuard"])
        if vault["retry_in_ms"] is not None:
            time.sleep(vault["retry_in_ms"] / 1000 + 0.5)
        items = vault_cli(node, "list", pin=expected["pin"])["items"]
        assert sorted(i["name"] for i in items) == expected["vault_items"]
        # The version 1 keys file (358 bytes, no pepper) became version 2 at that unlock (vault.md).
        assert (data / "vault" / "keys").stat().st_size == 518
        log = vault_cli(node, "break-ins")["break_ins"]
        # Store v8 keeps of each old entry its time only (no digit), sealed once the guard is written.
        assert len(log) == len(stored_guard["breakIns"]) and all(set(e) == {"at", "attempt"} for e in log), log
        assert [e["attempt"] for e in log] == [0] * len(log)
        assert vault_cli(node, "status")["failed_attempts"] == 0

        # The lock opens with its main key.
        assert cli_json(node, "unlock", "--tag", "pen-secret")["locked"] is False
    finally:
        assert node.stop() == 0

    # No JSON state is left in `setting`; the new tables hold it.
    assert json_settings(data / "node.sqlite") == []
    db = sqlite3.connect(data / "node.sqlite")
    try:
        counts = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                  for t in ("focusKey", "focusMode", "focusKeyMaterial", "focusEnrolment", "backupHolder", "backupPush", "backupPending")}
        migrations = {r[0] for r in db.execute("SELECT identifier FROM grdb_migrations")}
    finally:
        db.close()
    assert counts == {"focusKey": 4, "focusMode": 3, "focusKeyMaterial": 4, "focusEnrolment": 1, "backupHolder": 2, "backupPush": 1,
                      "backupPending": 1}, counts
    assert {"v5-focus", "v5-backup", "v5-vault"} <= migrations

    # The upgraded store opens again, as it was left.
    node.start()
    try:
        assert cli_json(node, "status")["quarantined"] == 1
        assert cli_json(node, "key", "list") == expected["keys"]
        assert cli_json(node, "mode", "status")["locked"] is False
        assert vault_cli(node, "status")["failed_attempts"] == 0
    finally:
        node.stop()


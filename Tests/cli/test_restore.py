"""`tandem restore` against real node processes: a whole node back from its recovery code and one
friend's backups (identity, friends, ledger, vault with its old PIN), then a challenge with another
friend as the old identity; a holder that flips a byte is caught and named; a restore killed with
kill -9 resumes without fetching again what is in place; bad input is one clear line."""
import json
import os
import pathlib
import shutil
import signal
import sqlite3
import subprocess
import time

import pytest

from tandem_testkit import TANDEM, Node, Relay, befriend, cli, cli_json, free_port, one_line_error, poll, wait_event

CHEAP = {"TANDEM_TEST_CHEAP_PIN_HASH": "1"}
PIN = "2580"


def vault(node, *args, pin=None, check=True, timeout=120):
    stdin = None
    if pin is not None:
        stdin = pin + "\n"
        args = (*args, "--pin-stdin")
    proc = subprocess.run([TANDEM, "vault", *args, "--data-dir", node.data_dir], input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"tandem vault {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def recovery_code(node):
    proc = subprocess.run([TANDEM, "recovery", "show", "--json", "--pin-stdin", "--data-dir", node.data_dir],
                          input=PIN + "\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["code"]


def restore_cmd(data_dir, holder, *extra):
    return [TANDEM, "restore", "--from", f"{holder.id}@{holder.address}", "--code-stdin", "--data-dir", str(data_dir), *extra]


def restore(data_dir, holder, code, *extra, check=True, timeout=300):
    proc = subprocess.run(restore_cmd(data_dir, holder, "--json", *extra), input=code + "\n", capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"tandem restore exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def final_json(proc):
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.strip()]
    return lines[-1], lines


class RestoredNode(Node):
    """A node whose data dir a restore wrote (no `tandem init`)."""

    def __init__(self, data_dir):
        self.data_dir = str(data_dir)
        self.info = json.loads(subprocess.run([TANDEM, "id", "--json", "--data-dir", self.data_dir], capture_output=True,
                                              text=True, check=True).stdout)
        self.id = self.info["id"]
        self.port = None
        self.proc = None
        self.env = None
        self.log_path = None
        self._log = None


@pytest.fixture
def restored_node():
    """Opens a node a restore wrote (`RestoredNode`); each one still running is killed after the test."""
    nodes = []

    def factory(data_dir):
        node = RestoredNode(data_dir)
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        node.kill()


def backed_up(make_node, tmp_path, size=3 * 1024 * 1024 + 17, friends=("bob",)):
    """alice with a vault holding a few files, friends with each of `friends`; the first keeps her
    backup (offer, push). Returns (alice, holders, files, code)."""
    alice = make_node("alice").start(env=CHEAP)
    others = [make_node(n).start(env=CHEAP) for n in friends]
    for o in others:
        befriend(alice, o)
    cli(alice, "name", "Alice")
    vault(alice, "init", pin=PIN)
    src = tmp_path / "src"
    src.mkdir()
    files = {
        "holiday.bin": os.urandom(size),
        "notes.txt": b"Meet at the Zanzibar cafe.\n" * 4000,
    }
    for name, data in files.items():
        (src / name).write_bytes(data)
    vault(alice, "import", *[str(src / n) for n in files], pin=PIN)
    code = recovery_code(alice)
    holder = others[0]
    cli(holder, "backup", "offer", alice.id, "--quota", "1GiB")
    wait_event(alice, "backup.offer.received", f"from={holder.id}", timeout="30s")
    cli(alice, "backup", "push", "--to", holder.id, timeout=300)
    return alice, others, files, code


def test_whole_node_back_from_code_and_one_friend_then_a_challenge_as_the_old_identity(make_node, tmp_path, restored_node):
    alice, (bob, carol), files, code = backed_up(make_node, tmp_path, friends=("bob", "carol"))
    old_port = alice.port
    old_id = alice.id
    alice.kill()
    shutil.rmtree(alice.data_dir)

    # A data dir that is another node is refused, in one line, before anything is written.
    other = make_node("other")
    taken = restore(other.data_dir, bob, code, check=False)
    assert taken.returncode == 1 and "another identity" in one_line_error(taken), taken.stderr
    assert not (pathlib.Path(other.data_dir) / "vault").exists()

    fresh = tmp_path / "alice-restored"
    proc = restore(fresh, bob, code)
    report, lines = final_json(proc)
    assert report["id"] == old_id
    assert report["friends"] == 2
    assert report["vault"] is True and report["items"] == 2
    assert report["bytes"] > 3 * 1024 * 1024
    assert any("progress" in l for l in lines), lines
    # Nothing of the code or the kit key lies in clear but the kit key file the node needs.
    assert not (fresh / "recovery-code").exists()
    assert (fresh / "backup-kit").stat().st_mode & 0o077 == 0

    restored = restored_node(fresh)
    assert restored.id == old_id
    restored.start(port=old_port, env=CHEAP)
    assert cli(restored, "name").stdout.strip() == "Alice"
    friends = {f["id"] for f in cli_json(restored, "friend", "list")["friends"]}
    assert friends == {bob.id, carol.id}
    # The vault keeps its old PIN and gives the files back byte for byte.
    out = tmp_path / "out"
    out.mkdir()
    vault(restored, "export", "holiday.bin", "notes.txt", str(out), pin=PIN)
    for name, data in files.items():
        assert (out / name).read_bytes() == data, name
    check = vault(restored, "check", "--read-data", pin=PIN, check=False)
    assert check.returncode == 0, check.stderr
    assert recovery_code(restored) == code

    # Carol never heard of a restore: she reaches the old identity at its old address, and gets
    # its newer contact record (a restored node's first start announces it).
    wait_event(restored, "peer.online", f"id={carol.id}", timeout="60s")
    assert wait_event(carol, "contact.updated", f"id={old_id}", timeout="60s")["name"] == "Alice"
    inv = cli_json(restored, "challenge", "invite", carol.id, "--duration", "2s")
    cid = inv["id"]
    wait_event(carol, "challenge.invited", f"id={cid}")
    cli(carol, "challenge", "accept", cid[:6])
    assert wait_event(restored, "ledger.appended", f"challenge_id={cid}", timeout="60s")["signers"] == 2
    assert cli_json(restored, "ledger", "verify")["entries"] >= 1


def flip_a_byte_of_the_largest_blob(owner, holder):
    """Stops `holder`, flips one byte in the middle of the largest blob it holds for `owner`, starts
    it again on the same port. Returns the blob's path."""
    held = pathlib.Path(holder.data_dir) / "backup-held" / owner.info["public_key"] / "blobs"
    blobs = sorted((p for p in held.iterdir() if p.is_file() and len(p.name) == 64), key=lambda p: p.stat().st_size)
    assert blobs, list(held.rglob("*"))
    victim = blobs[-1]
    holder.stop()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    holder.start(port=holder.port, env=CHEAP)
    return victim


def test_a_holder_that_flips_a_byte_is_caught_and_named(make_node, tmp_path):
    alice, (bob,), files, code = backed_up(make_node, tmp_path)
    victim = flip_a_byte_of_the_largest_blob(alice, bob)
    alice.kill()

    proc = restore(tmp_path / "fresh", bob, code, check=False)
    assert proc.returncode != 0
    line = one_line_error(proc)
    assert bob.id in line, line
    assert victim.name in line, line
    assert "refused" in line, line
    # Nothing half-fetched stays behind (backup.md 8.2): no staging folder, no unfinished pack.
    vault_dir = tmp_path / "fresh" / "vault"
    assert not (vault_dir / ".restore").exists()
    assert not list(vault_dir.rglob("*.tmp-restore")), list(vault_dir.rglob("*"))
    # Nothing tampered was put in place.
    packs = tmp_path / "fresh" / "vault" / "packs"
    assert not list(packs.rglob(victim.name)), "the tampered blob was renamed into place"


def test_restore_killed_mid_way_resumes(make_node, tmp_path, restored_node):
    alice, (bob,), files, code = backed_up(make_node, tmp_path, size=40 * 1024 * 1024)
    alice.kill()
    fresh = tmp_path / "fresh"
    p = subprocess.Popen(restore_cmd(fresh, bob, "--json"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write(code + "\n")
    p.stdin.close()
    packs = fresh / "vault" / "packs"

    def one_pack_in_place():
        return packs.exists() and any(q.is_file() and len(q.name) == 64 for q in packs.rglob("*"))

    poll(one_pack_in_place, timeout=120, interval=0.01, what="a pack in place")
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    assert p.returncode == -signal.SIGKILL
    placed = {q.name for q in packs.rglob("*") if q.is_file() and len(q.name) == 64}
    assert placed

    report, _ = final_json(restore(fresh, bob, code))
    assert report["blobs_already_here"] >= len(placed), report
    assert report["bytes_fetched"] < report["bytes"], report
    restored = restored_node(fresh).start(env=CHEAP)
    out = tmp_path / "out"
    out.mkdir()
    vault(restored, "export", "holiday.bin", str(out), pin=PIN)
    assert (out / "holiday.bin").read_bytes() == files["holiday.bin"]
    # Finished: a third run refuses to restore over the whole node.
    again = restore(fresh, bob, code, check=False)
    assert again.returncode != 0
    one_line_error(again)


def test_the_decoy_vault_comes_back_behind_its_own_pin(make_node, tmp_path, restored_node):
    alice = make_node("alice").start(env=CHEAP)
    bob = make_node("bob").start(env=CHEAP)
    befriend(alice, bob)
    vault(alice, "init", pin=PIN)
    code = recovery_code(alice)
    subprocess.run([TANDEM, "vault", "decoy", "--pin-stdin", "--data-dir", alice.data_dir], input=f"{PIN}\n1357\n",
                   capture_output=True, text=True, timeout=60, check=True)
    src = tmp_path / "src"
    src.mkdir()
    (src / "real.txt").write_text("the real one\n" * 1000)
    (src / "decoy.txt").write_text("nothing to see\n" * 1000)
    vault(alice, "import", str(src / "real.txt"), pin=PIN)
    vault(alice, "lock")
    vault(alice, "import", str(src / "decoy.txt"), pin="1357")
    vault(alice, "lock")
    cli(bob, "backup", "offer", alice.id, "--quota", "1GiB")
    wait_event(alice, "backup.offer.received", f"from={bob.id}", timeout="30s")
    cli(alice, "backup", "push", "--to", bob.id, timeout=300)
    alice.kill()

    restore(tmp_path / "fresh", bob, code)
    restored = restored_node(tmp_path / "fresh").start(env=CHEAP)

    def names(pin):
        vault(restored, "lock")
        out = subprocess.run([TANDEM, "vault", "list", "--json", "--pin-stdin", "--data-dir", restored.data_dir],
                             input=pin + "\n", capture_output=True, text=True, timeout=60, check=True)
        return [i["name"] for i in json.loads(out.stdout.splitlines()[-1])["items"]]

    assert names(PIN) == ["real.txt"]
    assert names("1357") == ["decoy.txt"]
    vault(restored, "lock")
    assert recovery_code(restored) == code


def home_relay(node, relay):
    cli(node, "relay", "add", relay.address)
    poll(lambda: any(r["address"] == relay.address and r["connected"] for r in cli_json(node, "relay", "list")["relays"]),
         15, what=f"{node.data_dir} registered at the relay")


def test_restore_through_the_holders_relay_brings_home_relays_back(make_node, tmp_path, restored_node):
    alice, (bob,), files, code = backed_up(make_node, tmp_path, size=300_000)
    relay = Relay(tmp_path).start()
    try:
        home_relay(bob, relay)
        home_relay(alice, relay)
        # Alice's kit changed (a home relay): her next push puts it again.
        cli(alice, "backup", "push", "--to", bob.id, timeout=300)
        alice.kill()
        share = cli(bob, "id", "--share").stdout.strip()
        assert "?relay=" in share, share
        proc = subprocess.run([TANDEM, "restore", "--from", share, "--code-stdin", "--json", "--data-dir", str(tmp_path / "fresh")],
                              input=code + "\n", capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        report, _ = final_json(proc)
        assert report["id"] == alice.id and report["items"] == 2 and report["home_relays"] == 1, report
        restored = restored_node(tmp_path / "fresh").start(env=CHEAP)
        assert [r["address"] for r in cli_json(restored, "relay", "list")["relays"]] == [relay.address]
    finally:
        relay.stop()


def test_a_tampered_holder_is_passed_over_for_another_friend_reached_through_its_relay(make_node, tmp_path, restored_node):
    """The holder named with --from gives the kit but a tampered vault; the restore names it and the
    blob, then gets the vault from another friend in the kit, through that friend's home relay (she
    moved to another port since: where the kit last saw her, nobody answers)."""
    alice, (bob, carol), files, code = backed_up(make_node, tmp_path, size=300_000, friends=("bob", "carol"))
    relay = Relay(tmp_path).start()
    try:
        home_relay(carol, relay)
        poll(lambda: any(f["id"] == carol.id and f.get("relay") for f in cli_json(alice, "friend", "list")["friends"]),
             30, what="alice learning carol's home relay from her contact record")
        cli(carol, "backup", "offer", alice.id, "--quota", "1GiB")
        wait_event(alice, "backup.offer.received", f"from={carol.id}", timeout="30s")
        cli(alice, "backup", "push", "--to", carol.id, timeout=300)
        # The kit changed (carol's relay): this push puts it at bob again.
        cli(alice, "backup", "push", "--to", bob.id, timeout=300)
        victim = flip_a_byte_of_the_largest_blob(alice, bob)
        alice.kill()
        old_port = carol.port
        carol.stop()
        carol.start(port=free_port(), env=CHEAP)
        poll(lambda: any(r["address"] == relay.address and r["connected"] for r in cli_json(carol, "relay", "list")["relays"]),
             15, what="carol registered at the relay again")

        proc = restore(tmp_path / "fresh", bob, code)
        report, _ = final_json(proc)
        assert report["id"] == alice.id and report["items"] == 2, report
        assert report["vault_from"] == carol.id, report
        assert any(bob.id in s and victim.name in s for s in report["skipped"]), report["skipped"]
        assert any(f"127.0.0.1:{old_port}: cannot connect" in s for s in report["skipped"]), report["skipped"]
        restored = restored_node(tmp_path / "fresh").start(env=CHEAP)
        dest = tmp_path / "out"
        dest.mkdir()
        vault(restored, "export", "holiday.bin", "notes.txt", str(dest), pin=PIN)
        for name, data in files.items():
            assert (dest / name).read_bytes() == data, name
    finally:
        relay.stop()


def test_a_tampered_holder_is_passed_over_for_a_friend_reached_where_the_old_node_last_reached_it(make_node, tmp_path, restored_node):
    """No relay anywhere: the kit keeps where alice last reached each friend, so the restore finds
    carol at her address when bob's copy is tampered, and the restored node knows where carol is."""
    alice, (bob, carol), files, code = backed_up(make_node, tmp_path, size=300_000, friends=("bob", "carol"))
    cli(carol, "backup", "offer", alice.id, "--quota", "1GiB")
    wait_event(alice, "backup.offer.received", f"from={carol.id}", timeout="30s")
    cli(alice, "backup", "push", "--to", carol.id, timeout=300)
    victim = flip_a_byte_of_the_largest_blob(alice, bob)
    alice.kill()

    proc = restore(tmp_path / "fresh", bob, code)
    report, _ = final_json(proc)
    assert report["id"] == alice.id and report["items"] == 2, report
    assert report["vault_from"] == carol.id, report
    assert any(bob.id in s and victim.name in s for s in report["skipped"]), report["skipped"]
    db = sqlite3.connect(tmp_path / "fresh" / "node.sqlite")
    known = db.execute("SELECT host, port, source FROM address WHERE publicKey = ?", (carol.public_key,)).fetchall()
    db.close()
    assert ("127.0.0.1", carol.port, "kit") in known, known
    restored = restored_node(tmp_path / "fresh").start(env=CHEAP)
    dest = tmp_path / "out"
    dest.mkdir()
    vault(restored, "export", "holiday.bin", "notes.txt", str(dest), pin=PIN)
    for name, data in files.items():
        assert (dest / name).read_bytes() == data, name


def test_a_holder_restarting_mid_restore_is_reconnected(make_node, tmp_path, restored_node):
    alice, (bob,), files, code = backed_up(make_node, tmp_path, size=40 * 1024 * 1024)
    alice.kill()
    fresh = tmp_path / "fresh"
    p = subprocess.Popen(restore_cmd(fresh, bob, "--json"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write(code + "\n")
    p.stdin.close()
    packs = fresh / "vault" / "packs"
    poll(lambda: packs.exists() and any(q.is_file() and len(q.name) == 64 for q in packs.rglob("*")), timeout=120,
         interval=0.01, what="a pack in place")
    bob.kill()
    bob.start(port=bob.port, env=CHEAP)
    out = p.stdout.read()
    err = p.stderr.read()
    p.wait(timeout=300)
    assert p.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    assert report["items"] == 2, report
    restored = restored_node(fresh).start(env=CHEAP)
    dest = tmp_path / "out"
    dest.mkdir()
    vault(restored, "export", "holiday.bin", str(dest), pin=PIN)
    assert (dest / "holiday.bin").read_bytes() == files["holiday.bin"]


def test_bad_input_is_one_clear_line(make_node, tmp_path):
    bob = make_node("bob").start(env=CHEAP)
    target = tmp_path / "empty"

    def attempt(*args, stdin="tdmr1-aaaaa\n"):
        return subprocess.run([TANDEM, "restore", *args, "--data-dir", str(target)], input=stdin, capture_output=True,
                              text=True, timeout=60)

    not_code = attempt("--from", f"{bob.id}@{bob.address}", "--code-stdin", stdin="hello\n")
    assert not_code.returncode == 2 and "recovery code" in one_line_error(not_code)
    no_code = attempt("--from", f"{bob.id}@{bob.address}", "--code-stdin", stdin="")
    assert no_code.returncode == 2
    one_line_error(no_code)
    bad_from = attempt("--from", "nonsense", "--code-stdin")
    assert bad_from.returncode == 2
    one_line_error(bad_from)
    share = attempt("--from", f"tandem:{bob.id}", "--code-stdin")
    assert share.returncode == 2 and "no relay" in one_line_error(share)

    # A valid code nobody has a kit for: one line, exit 8 (nothing to act on).
    code = recovery_code_for_a_fresh_node(make_node)
    none = attempt("--from", f"{bob.id}@{bob.address}", "--code-stdin", stdin=code + "\n")
    assert none.returncode == 8, none.stderr
    assert "no recovery kit" in one_line_error(none)

    # A data dir that already is another node.
    other = make_node("other")
    taken = subprocess.run(restore_cmd(other.data_dir, bob), input=code + "\n", capture_output=True, text=True, timeout=60)
    assert taken.returncode != 0
    one_line_error(taken)


def recovery_code_for_a_fresh_node(make_node):
    n = make_node("codeholder")
    proc = subprocess.run([TANDEM, "recovery", "show", "--json", "--data-dir", n.data_dir], capture_output=True, text=True,
                          timeout=30)
    if proc.returncode == 0:
        return json.loads(proc.stdout)["code"]
    n.start(env=CHEAP)
    code = cli_json(n, "recovery", "show")["code"]
    n.kill()
    return code


def test_a_holder_serving_an_older_copy_redated_cannot_roll_the_restore_back(make_node, tmp_path, restored_node):
    """Freshness (backup.md 8.1): bob holds generation 1 and rewrites its record to look newer
    (a later time and generation 99); carol holds generation 2. Restoring from bob, the restore
    asks carol too, refuses bob's record (not signed so), and brings back generation 2 from carol,
    saying where each copy stands."""
    alice, (bob, carol), files, code = backed_up(make_node, tmp_path, size=200_000, friends=("bob", "carol"))
    cli(carol, "backup", "offer", alice.id, "--quota", "1GiB")
    wait_event(alice, "backup.offer.received", f"from={carol.id}", timeout="30s")
    later = tmp_path / "later"
    later.mkdir()
    (later / "later.txt").write_bytes(b"added after bob's copy\n" * 300)
    vault(alice, "import", str(later / "later.txt"), pin=PIN)
    pushed = [json.loads(l) for l in cli(alice, "backup", "push", "--to", carol.id, "--json", timeout=300).stdout.splitlines() if l.strip()]
    newest = pushed[-1]["pushes"][0]["generation"]
    # The recovery sheet names both friends with the restore line that reaches each.
    sheet = tmp_path / "sheet.txt"
    proc = subprocess.run([TANDEM, "recovery", "sheet", "--out", str(sheet), "--pin-stdin", "--data-dir", alice.data_dir],
                          input=PIN + "\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = sheet.read_text()
    assert oct(sheet.stat().st_mode & 0o777) == "0o600" and code in text, text
    bob_line = f"tandem restore --from '{bob.id}@127.0.0.1:{bob.port}'"
    assert bob_line in text and f"{carol.id}@127.0.0.1:{carol.port}" in text, text
    alice.kill()

    bob.stop()
    records = list((pathlib.Path(bob.data_dir) / "backup-held" / alice.info["public_key"] / "snapshots").glob("*.json"))
    assert len(records) == 1, records
    record = json.loads(records[0].read_text())
    assert record["generation"] == newest - 1, record
    record["generation"] = 99
    record["createdAtMs"] = int(time.time() * 1000)
    records[0].write_text(json.dumps(record))
    bob.start(port=bob.port, env=CHEAP)

    proc = restore(tmp_path / "fresh", bob, code)
    report, _ = final_json(proc)
    assert report["vault_from"] == carol.id and report["generation"] == newest, report
    assert report["items"] == 3, report
    copies = {c["id"]: c for c in report["copies"]}
    assert copies[carol.id]["generation"] == newest, copies
    assert "generation" not in copies[bob.id] and copies[bob.id]["unsigned_snapshots"] == 1, copies
    assert report["freshness"].startswith(f"newest copy: generation {newest} from "), report["freshness"]
    restored = restored_node(tmp_path / "fresh").start(env=CHEAP)
    dest = tmp_path / "out"
    dest.mkdir()
    vault(restored, "export", "later.txt", str(dest), pin=PIN)
    assert (dest / "later.txt").read_bytes() == b"added after bob's copy\n" * 300

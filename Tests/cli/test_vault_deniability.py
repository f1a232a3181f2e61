"""The decoy against someone holding the data directory and one PIN, offline guessing from a copy
of vault/, and `vault init` killed at its steps (Protocol/vault.md "What each party learns",
"Creating a vault"). Real node processes through the CLI."""
import json
import os
import pathlib
import re
import shutil
import subprocess

from tandem_testkit import TANDEM, one_line_error
from test_vault import CHEAP, vault, vault_json

HEX = re.compile(r"^[0-9a-f]{2,}$")


def shape(root):
    """Every file under `root` as 'path size', hex names (random per vault) blanked, sorted."""
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = pathlib.Path(dirpath) / f
            rel = p.relative_to(root).parts
            blanked = "/".join("x" * len(part) if HEX.match(part) else part for part in rel)
            out.append(f"{blanked} {p.stat().st_size}")
    return sorted(out)


def recovery_code(node, pin):
    proc = subprocess.run([TANDEM, "recovery", "show", "--json", "--pin-stdin", "--data-dir", node.data_dir],
                          input=pin + "\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["code"]


def names(node, pin):
    """The items of the vault `pin` opens (an open vault is locked first: a command uses the open one)."""
    vault(node, "lock")
    return sorted(i["name"] for i in vault_json(node, "list", pin=pin)["items"])


def test_the_decoy_leaves_the_same_files_as_a_real_vault_and_answers_for_itself(make_node, tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "beach.jpg").write_bytes(b"\xff\xd8\xff" + os.urandom(150_000))
    (files / "notes.txt").write_text("shopping: bread, milk\n" * 300)

    # A: the real vault gets the files. B: its real vault has an album of its own (index only:
    # packs another vault holds are visible, see vault.md), its decoy gets the same files as A's.
    a = make_node("a").start(env=CHEAP)
    b = make_node("b").start(env=CHEAP)
    vault(a, "init", pin="2468")
    vault(b, "init", pin="2468")
    vault(b, "decoy", pin=["2468", "1357"])
    vault(b, "album", "create", "Taxes and the lawyer", pin="2468")
    vault(a, "lock")
    vault(b, "unlock", pin="1357")
    vault(a, "import", str(files / "beach.jpg"), str(files / "notes.txt"), pin="2468")
    vault(b, "import", str(files / "beach.jpg"), str(files / "notes.txt"))
    assert names(a, "2468") == names(b, "1357") == ["beach.jpg", "notes.txt"]

    # Change-PIN works with either PIN and only for its own vault.
    vault(b, "change-pin", pin=["1357", "8642"])
    vault(b, "change-pin", pin=["2468", "9753"])
    vault(a, "change-pin", pin=["2468", "9753"])
    vault(a, "lock")
    vault(b, "lock")
    for old in ["1357", "2468"]:
        assert vault(b, "unlock", pin=old, check=False).returncode == 5
    assert names(b, "8642") == ["beach.jpg", "notes.txt"]
    assert names(b, "9753") == []

    # Recovery show: each PIN its own code, the same each time, the decoy's as the real's.
    decoy_code = recovery_code(b, "8642")
    assert decoy_code == recovery_code(b, "8642")
    assert decoy_code != recovery_code(b, "9753")
    assert recovery_code(a, "9753").startswith("tdmr1-") and decoy_code.startswith("tdmr1-")

    # Status has the same shape under either PIN.
    vault(b, "unlock", pin="8642")
    decoy_status = vault_json(b, "status")
    vault(b, "unlock", pin="9753")
    assert sorted(vault_json(b, "status")) == sorted(decoy_status)
    guessing = decoy_status["guessing"]
    assert guessing["seconds_per_guess"] >= 0 and guessing["opslimit"] >= 1, guessing
    spaces = guessing["one_core_exhausts_in_s"]
    assert spaces["pin_4_digits"] <= spaces["pin_6_digits"] <= spaces["pin_8_digits"] <= spaces["passphrase_5_diceware_words"]

    # Every file of the two vault folders: same names' shape, same sizes.
    a_vault, b_vault = pathlib.Path(a.data_dir) / "vault", pathlib.Path(b.data_dir) / "vault"
    assert shape(a_vault) == shape(b_vault)
    index_sizes = {p.stat().st_size for p in (b_vault / "index").iterdir()}
    assert len(index_sizes) == 1 and min(index_sizes) >= 4096, index_sizes
    assert (b_vault / "keys").stat().st_size == 518
    for name in ["recovery-code", "backup-kit"]:
        assert (pathlib.Path(a.data_dir) / name).exists() == (pathlib.Path(b.data_dir) / name).exists(), name


def test_a_copy_of_the_vault_folder_does_not_open_with_the_right_pin(make_node, tmp_path):
    """Offline guessing needs the identity key: vault/ copied to another node (another identity)
    does not open with the right PIN; the recovery code still opens it (a restore)."""
    owner = make_node("owner").start(env=CHEAP)
    code = vault_json(owner, "init", pin="4711")["recovery_code"]
    (tmp_path / "doc.txt").write_text("private\n")
    vault(owner, "import", str(tmp_path / "doc.txt"))
    owner.stop()
    thief = make_node("thief")
    shutil.copytree(pathlib.Path(owner.data_dir) / "vault", pathlib.Path(thief.data_dir) / "vault")
    thief.start(env=CHEAP)
    proc = vault(thief, "unlock", pin="4711", check=False)
    assert proc.returncode == 5, proc.stderr
    assert "wrong PIN" in one_line_error(proc)
    owner.start(env=CHEAP)
    assert names(owner, "4711") == ["doc.txt"]
    assert code.startswith("tdmr1-")


def test_vault_init_killed_at_a_step_leaves_nothing_or_a_whole_vault(make_node, tmp_path):
    """A debug build's node kills itself (SIGKILL) right after step N of `vault init`
    (TANDEM_VAULT_INIT_ABORT_AFTER; the steps are VaultCreation.Step): before the keys file
    (steps 1-6) nothing is left that counts as a vault and init works again; from step 7 on the
    vault opens with its PIN and its recovery code is sealed in it."""
    for step in [3, 6, 7]:
        node = make_node(f"k{step}").start(env={**CHEAP, "TANDEM_VAULT_INIT_ABORT_AFTER": str(step)})
        proc = vault(node, "init", pin="2580", check=False)
        assert proc.returncode != 0
        node.proc.wait(timeout=20)
        assert node.proc.returncode == -9, node.proc.returncode
        node.start(env=CHEAP)
        status = vault_json(node, "status")
        index = pathlib.Path(node.data_dir) / "vault" / "index"
        if step < 7:
            assert status["initialized"] is False, step
            assert not index.exists() or list(index.iterdir()) == [], step
            code = vault_json(node, "init", pin="1111")["recovery_code"]
            assert recovery_code(node, "1111") == code
        else:
            assert status["initialized"] is True, step
            assert not (pathlib.Path(node.data_dir) / "recovery-code").exists(), "sealed, so removed at the start"
            assert names(node, "2580") == []
            assert recovery_code(node, "2580").startswith("tdmr1-")
        assert len(list(index.iterdir())) == 2
        node.kill()


def test_a_holder_keeps_nothing_a_pin_opens(make_node, tmp_path):
    """Everything a friend holds after a push (packs, index files, the recovery kit): no keys file
    among it in clear (the only thing a PIN could open, and it needs the owner's identity key
    too), no index that is not padded to a size class, no name."""
    from tandem_testkit import befriend, wait_event
    from test_backup import backup, held_dir

    owner = make_node("owner").start(env=CHEAP)
    holder = make_node("holder").start(env=CHEAP)
    befriend(owner, holder)
    vault(owner, "init", pin="2580")
    (tmp_path / "diary-entry.txt").write_text("a private line\n" * 100)
    vault(owner, "import", str(tmp_path / "diary-entry.txt"))
    backup(holder, "offer", owner.id, "--quota", "1GiB")
    wait_event(owner, "backup.offer.received", f"from={holder.id}")
    backup(owner, "push")
    held = held_dir(holder, owner)
    keys = (pathlib.Path(owner.data_dir) / "vault" / "keys").read_bytes()
    index_sizes = {p.stat().st_size for p in (pathlib.Path(owner.data_dir) / "vault" / "index").iterdir()}
    files = [p for p in held.rglob("*") if p.is_file()]
    assert files
    for p in files:
        data = p.read_bytes()
        assert b"TDMK" not in data and keys[22:60] not in data, p
        assert b"diary-entry" not in data, p
    blob_sizes = {p.stat().st_size for p in (held / "blobs").iterdir()}
    assert index_sizes <= blob_sizes, (index_sizes, blob_sizes)

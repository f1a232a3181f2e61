"""A received file straight into the vault (Protocol/messages.md 7.3, `--to-vault`), between two
real nodes through the CLI: refused clearly while there is no vault or it is locked; accepted with
the vault open, the file goes through the vault's import and no clear copy stays in the downloads
folder; a file already received moves in with `message save ID --to-vault`."""
import os

from tandem_testkit import befriend, cli, cli_json, one_line_error, poll, wait_event
from test_vault import CHEAP, vault, vault_json


def test_accept_and_save_to_the_vault(make_node, tmp_path):
    alice = make_node("alice").start()
    bob = make_node("bob").start(env=CHEAP)
    befriend(alice, bob)
    cli(bob, "message", "file-settings", "--auto-accept", "0")
    secret = os.urandom(300_000)
    (tmp_path / "passport.bin").write_bytes(secret)
    sent = cli_json(alice, "message", "send", bob.id, "--file", str(tmp_path / "passport.bin"))
    wait_event(bob, "message.file_offered", f"file_id={sent['file_id']}")

    # No vault yet, then a locked one: one line on stderr, non-zero, nothing fetched.
    none = cli(bob, "message", "accept", sent["id"][:10], "--to-vault", check=False)
    assert none.returncode != 0 and "vault" in one_line_error(none), none.stderr
    vault(bob, "init", pin="2580")
    vault(bob, "lock")
    locked = cli(bob, "message", "accept", sent["id"][:10], "--to-vault", check=False)
    assert locked.returncode != 0 and "locked" in one_line_error(locked), locked.stderr
    assert cli_json(bob, "message", "list", alice.id)["messages"][-1]["file"]["state"] == "offered"

    # Open: fetched, imported, and the downloaded copy removed.
    vault(bob, "unlock", pin="2580")
    answer = cli_json(bob, "message", "accept", sent["id"][:10], "--to-vault")
    assert answer["vault"] == "when complete", answer
    done = wait_event(bob, "message.file_vaulted", f"file_id={sent['file_id']}", timeout="60s")
    downloads = os.path.join(bob.data_dir, "files")
    assert "passport.bin" not in os.listdir(downloads)
    assert not [f for f in os.listdir(os.path.join(downloads, ".partial")) if not f.startswith(".")]
    info = cli_json(bob, "message", "list", alice.id)["messages"][-1]["file"]
    assert info["state"] == "received" and info["vault_item"] == done["item"] and "path" not in info, info
    items = {i["name"]: i for i in vault_json(bob, "list")["items"]}
    assert items["passport.bin"]["id"] == done["item"] and items["passport.bin"]["size"] == len(secret)
    out = tmp_path / "out"
    out.mkdir()
    vault(bob, "export", done["item"], str(out))
    assert (out / "passport.bin").read_bytes() == secret

    # Received into the downloads folder first, then moved into the vault.
    cli(bob, "message", "file-settings", "--auto-accept", "1MiB")
    (tmp_path / "ticket.txt").write_text("seat 14C\n" * 100)
    sent2 = cli_json(alice, "message", "send", bob.id, "--file", str(tmp_path / "ticket.txt"))
    got = wait_event(bob, "message.file_received", f"file_id={sent2['file_id']}", timeout="60s")
    assert os.path.exists(got["path"])
    moved = cli_json(bob, "message", "save", sent2["id"][:10], "--to-vault")
    assert moved["vault_item"] and "path" not in moved, moved
    assert not os.path.exists(got["path"])
    again = cli(bob, "message", "save", sent2["id"][:10], "--to-vault", check=False)
    assert again.returncode != 0 and "already" in one_line_error(again)
    both = cli(bob, "message", "save", sent2["id"][:10], str(tmp_path / "x"), "--to-vault", check=False)
    assert both.returncode == 2 and one_line_error(both)
    assert {"passport.bin", "ticket.txt"} <= {i["name"] for i in vault_json(bob, "list")["items"]}


def test_send_and_save_wait_with_a_progress_bar_on_a_terminal(make_node, tmp_path):
    """`message send --file --wait sent` and `message save --wait` follow the transfer: a bar on a
    terminal's stderr (here a pty), nothing but the answer when stderr is not a terminal."""
    import pty
    import subprocess
    from tandem_testkit import TANDEM

    alice = make_node("alice").start(env={"TANDEM_TEST_FILE_SERVE_DELAY_MS": "30"})
    bob = make_node("bob").start()
    befriend(alice, bob)
    data = os.urandom(12 * 262_144 + 5)
    (tmp_path / "big.bin").write_bytes(data)
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([TANDEM, "message", "send", bob.id, "--file", str(tmp_path / "big.bin"), "--wait", "sent",
                               "--timeout", "90s", "--data-dir", alice.data_dir], stdout=subprocess.PIPE, stderr=slave,
                              text=True, timeout=120)
        os.close(slave)
        slave = None
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0, proc
    text = shown.decode(errors="replace")
    assert "Sending" in text and "100%" in text, text
    assert "\r" in text, "the bar is redrawn in place"
    assert proc.stdout.startswith("Offered big.bin"), proc.stdout
    # The friend's side: already received (sent means every chunk went out), save --wait copies it.
    got = wait_event(bob, "message.file_received", timeout="60s")
    out = cli(bob, "message", "save", got["file_id"], str(tmp_path / "copy.bin"), "--wait", "30s")
    assert out.stderr == "" and (tmp_path / "copy.bin").read_bytes() == data
    bad = cli(alice, "message", "send", bob.id, "--file", str(tmp_path / "big.bin"), "--wait", "delivered", check=False)
    assert bad.returncode == 2 and "sent" in one_line_error(bad)


def test_a_vault_locked_before_the_file_completes_keeps_it_in_downloads_until_saved(make_node, tmp_path):
    alice = make_node("alice").start(env={"TANDEM_TEST_FILE_SERVE_DELAY_MS": "60"})
    bob = make_node("bob").start(env=CHEAP)
    befriend(alice, bob)
    cli(bob, "message", "file-settings", "--auto-accept", "0")
    vault(bob, "init", pin="2580")
    data = os.urandom(24 * 262_144)
    (tmp_path / "slow.bin").write_bytes(data)
    sent = cli_json(alice, "message", "send", bob.id, "--file", str(tmp_path / "slow.bin"))
    wait_event(bob, "message.file_offered", f"file_id={sent['file_id']}")
    cli_json(bob, "message", "accept", sent["id"][:10], "--to-vault")
    vault(bob, "lock")
    failed = wait_event(bob, "message.file_vault_failed", f"file_id={sent['file_id']}", timeout="60s")
    assert "locked" in failed["reason"], failed
    assert open(failed["path"], "rb").read() == data, "kept in the downloads folder, whole"
    info = cli_json(bob, "message", "list", alice.id)["messages"][-1]["file"]
    assert info["state"] == "received" and info["vault"] == "not imported" and info["path"] == failed["path"], info
    vault(bob, "unlock", pin="2580")
    moved = cli_json(bob, "message", "save", sent["id"][:10], "--to-vault")
    assert moved["vault_item"] and not os.path.exists(failed["path"])

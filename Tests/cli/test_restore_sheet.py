"""The recovery sheet and restores that start from it, against real node processes (issue 34,
"Finding friends after a disaster" and "Restores that are honest"): the sheet comes as text, PNG and
PDF; `restore --sheet` tries every friend on it in turn; a holder serving junk in place of a blob is
dropped at that blob, having sent no more than the owner's signed sizes."""
import json
import pathlib
import subprocess

from tandem_testkit import TANDEM, cli, one_line_error, wait_event

from test_restore import CHEAP, PIN, backed_up, final_json, restore, restored_node, vault  # noqa: F401 (a fixture)


def write_sheet(alice, tmp_path):
    sheet = tmp_path / "sheet.txt"
    proc = subprocess.run([TANDEM, "recovery", "sheet", "--out", str(sheet), "--pin-stdin", "--json", "--data-dir", alice.data_dir],
                          input=PIN + "\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return sheet, json.loads(proc.stdout.splitlines()[-1])


def test_the_sheet_in_three_forms_and_a_restore_that_tries_every_friend_on_it(make_node, tmp_path, restored_node):
    alice, (bob, carol), files, code = backed_up(make_node, tmp_path, size=200_000, friends=("bob", "carol"))
    cli(carol, "backup", "offer", alice.id, "--quota", "1GiB")
    wait_event(alice, "backup.offer.received", f"from={carol.id}", timeout="30s")
    cli(alice, "backup", "push", "--to", carol.id, timeout=300)
    sheet, answer = write_sheet(alice, tmp_path)
    png, pdf = pathlib.Path(answer["png"]), pathlib.Path(answer["pdf"])
    assert answer["holders"] == 2 and png == tmp_path / "sheet.png" and pdf == tmp_path / "sheet.pdf", answer
    for f in (sheet, png, pdf):
        assert f.stat().st_mode & 0o777 == 0o600, f
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.read_bytes().startswith(b"%PDF-1.4") and code.encode() in pdf.read_bytes()
    # (The PNG's QR codes read back to the code and the share codes: Tests/TandemSheetTests.)
    # A second sheet never overwrites the first.
    again = subprocess.run([TANDEM, "recovery", "sheet", "--out", str(sheet), "--pin-stdin", "--data-dir", alice.data_dir],
                           input=PIN + "\n", capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in one_line_error(again)
    alice.kill()

    # Whichever friend the sheet lists first is offline: the restore goes on to the next line.
    text = sheet.read_text()
    first = min((text.index(bob.id), bob), (text.index(carol.id), carol), key=lambda t: t[0])[1]
    other = carol if first is bob else bob
    first.stop()
    proc = subprocess.run([TANDEM, "restore", "--sheet", str(sheet), "--code-stdin", "--json", "--data-dir", str(tmp_path / "fresh")],
                          input=code + "\n", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report, lines = final_json(proc)
    assert report["id"] == alice.id and report["items"] == 2 and report["vault_from"] == other.id, report
    assert any(first.id[4:14] in l.get("skipped", "") and "recovery kit" in l.get("skipped", "") for l in lines), lines
    restored = restored_node(tmp_path / "fresh").start(env=CHEAP)
    dest = tmp_path / "out"
    dest.mkdir()
    vault(restored, "export", "holiday.bin", str(dest), pin=PIN)
    assert (dest / "holiday.bin").read_bytes() == files["holiday.bin"]


def test_a_sheet_with_no_restore_line_is_one_clear_line(tmp_path):
    sheet = tmp_path / "sheet.txt"
    sheet.write_text("TANDEM RECOVERY SHEET\n  (none yet)\n")
    proc = subprocess.run([TANDEM, "restore", "--sheet", str(sheet), "--code-stdin", "--data-dir", str(tmp_path / "fresh")],
                          input="x\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "names no friend" in one_line_error(proc)
    neither = subprocess.run([TANDEM, "restore", "--code-stdin", "--data-dir", str(tmp_path / "fresh")],
                             input="x\n", capture_output=True, text=True, timeout=60)
    assert neither.returncode == 2
    one_line_error(neither)


def test_a_holder_serving_junk_for_a_blob_is_dropped_there_having_sent_no_more_than_signed(make_node, tmp_path):
    """Junk snapshots (issue 34): bob swaps the largest blob he holds for 48 MiB of junk under the
    same name. The restore asks for the size alice signed, refuses the blob at its hash check, names
    bob and the blob, and never counts more bytes than the owner's signed total."""
    alice, (bob,), files, code = backed_up(make_node, tmp_path, size=2 * 1024 * 1024)
    held = pathlib.Path(bob.data_dir) / "backup-held" / alice.info["public_key"] / "blobs"
    victim = max((p for p in held.iterdir() if p.is_file() and len(p.name) == 64), key=lambda p: p.stat().st_size)
    signed_size = victim.stat().st_size
    alice.kill()
    bob.stop()
    with open(victim, "wb") as f:
        for _ in range(48):
            f.write(b"\xa5" * (1024 * 1024))
    bob.start(port=bob.port, env=CHEAP)

    proc = restore(tmp_path / "fresh", bob, code, check=False)
    assert proc.returncode != 0
    line = one_line_error(proc)
    assert bob.id in line or bob.id[4:14] in line, line
    _, lines = final_json(proc) if proc.stdout.strip() else (None, [])
    progress = [l["progress"] for l in lines if "progress" in l]
    for p in progress:
        assert p["done"] <= p["total"], p
    fetched = max((p["done"] for p in progress if p.get("phase") != "kit"), default=0)
    assert fetched <= 4 * 1024 * 1024, f"{fetched} bytes counted for a vault of ~2 MiB (the junk blob was {signed_size} bytes signed)"
    # Nothing half-fetched stays behind.
    assert not (tmp_path / "fresh" / "vault" / ".restore").exists()

"""The vault through the CLI, against a real node process: PIN from stdin, import/list/export
round trip, nothing readable in the data directory, the lockout across kill -9, clear errors."""
import json
import os
import pathlib
import re
import signal
import subprocess
import time

from tandem_testkit import LIBFAKETIME, TANDEM, cli, one_line_error

CHEAP = {"TANDEM_TEST_CHEAP_PIN_HASH": "1"}


def vault(node, *args, pin=None, check=True, timeout=60):
    """`tandem vault ARGS --data-dir DIR`, with `pin` (a string, or a list of lines) on stdin."""
    stdin = None
    if pin is not None:
        stdin = "\n".join(pin if isinstance(pin, list) else [pin]) + "\n"
        args = (*args, "--pin-stdin")
    proc = subprocess.run([TANDEM, "vault", *args, "--data-dir", node.data_dir], input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"tandem vault {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def vault_json(node, *args, pin=None):
    lines = [l for l in vault(node, *args, "--json", pin=pin).stdout.splitlines() if l.strip()]
    return json.loads(lines[-1])


def grep_tree(root, needles):
    """Files under `root` whose bytes contain any of `needles`."""
    hits = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = pathlib.Path(dirpath) / f
            try:
                data = p.read_bytes()
            except OSError:
                continue
            hits += [(str(p), n) for n in needles if n.encode() in data]
    return hits


def test_import_list_export_round_trip_and_nothing_in_clear(make_node, tmp_path):
    node = make_node("a").start(env=CHEAP)
    vault(node, "init", pin="2580")
    src = tmp_path / "src"
    (src / "trip").mkdir(parents=True)
    big = os.urandom(3 * 1024 * 1024 + 17)
    (src / "trip" / "secret-holiday.jpg").write_bytes(b"\xff\xd8\xff" + big)
    (src / "notes-for-lawyer.txt").write_text("Meet at the Zanzibar cafe.\n" * 4000)
    (src / "trip" / ".hidden").write_text("skipped")
    out = vault_json(node, "import", str(src / "trip"), str(src / "notes-for-lawyer.txt"), "--album", "Paris")
    assert len(out["items"]) == 2, out
    by_name = {i["name"]: i for i in out["items"]}
    assert by_name["secret-holiday.jpg"]["type"] == "photo"
    assert by_name["notes-for-lawyer.txt"]["type"] == "document"

    listed = vault_json(node, "list", "--sort", "name")
    assert [i["name"] for i in listed["items"]] == ["notes-for-lawyer.txt", "secret-holiday.jpg"]
    assert all(i["album"] == "Paris" for i in listed["items"])
    assert vault_json(node, "list", "--type", "photo")["items"][0]["id"] == by_name["secret-holiday.jpg"]["id"]

    dest = tmp_path / "out"
    dest.mkdir()
    vault(node, "export", by_name["secret-holiday.jpg"]["id"], "notes-for-lawyer.txt", str(dest))
    assert (dest / "secret-holiday.jpg").read_bytes() == (src / "trip" / "secret-holiday.jpg").read_bytes()
    assert (dest / "notes-for-lawyer.txt").read_bytes() == (src / "notes-for-lawyer.txt").read_bytes()
    # A second export never overwrites: it picks a free name.
    vault(node, "export", "notes-for-lawyer.txt", str(dest))
    assert (dest / "notes-for-lawyer (2).txt").exists()

    # --remove-originals: each original goes once the vault holds it durably.
    gone = tmp_path / "gone"
    gone.mkdir()
    for i in range(3):
        (gone / f"scan{i}.pdf").write_bytes(os.urandom(5000))
    kept = {p.name: p.read_bytes() for p in gone.iterdir()}
    moved = vault_json(node, "import", str(gone), "--remove-originals")
    assert sorted(i["name"] for i in moved["items"]) == sorted(kept)
    assert list(gone.iterdir()) == []
    vault(node, "export", *[i["id"] for i in moved["items"]], str(dest))
    assert all((dest / n).read_bytes() == b for n, b in kept.items())

    check = vault_json(node, "check", "--read-data")
    assert check["ok"] is True and check["blobs_checked"] >= 4, check

    # Whoever copies the data directory learns no names, albums or contents.
    assert grep_tree(node.data_dir, ["secret-holiday", "notes-for-lawyer", "Paris", "Zanzibar", ".jpg"]) == []
    # Events name no file either.
    events = cli(node, "events", "--json").stdout
    assert "vault.imported" in events
    assert "secret-holiday" not in events and "Paris" not in events


def test_locked_vault_asks_for_the_pin_and_wrong_pins_lock_out_across_kill_9(make_node, tmp_path):
    node = make_node("b").start(env=CHEAP)
    vault(node, "init", pin="1234")
    vault(node, "lock")
    # Locked, no terminal, no --pin-stdin: one clear line, non-zero.
    proc = vault(node, "list", check=False)
    assert proc.returncode != 0
    line = one_line_error(proc)
    assert "PIN" in line, line
    # --pin-stdin opens it for the command.
    assert vault_json(node, "list", pin="1234")["items"] == []
    vault(node, "lock")

    for attempt in range(3):
        proc = vault(node, "unlock", pin="9999", check=False)
        assert proc.returncode == 5, proc.stderr
        assert "wrong PIN" in one_line_error(proc)
    assert "30 s" in proc.stderr

    # kill -9 and restart: the wait is still there, and the right PIN is refused without counting.
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait(timeout=10)
    node.start()
    proc = vault(node, "unlock", pin="1234", check=False)
    assert proc.returncode == 5
    assert "too many wrong PINs" in one_line_error(proc)
    status = vault_json(node, "status")
    assert status["locked"] is True and status["failed_attempts"] == 3
    assert 0 < status["retry_in_ms"] <= 30_000


def test_bad_input_gets_one_line(make_node, tmp_path):
    node = make_node("c").start(env=CHEAP)
    proc = vault(node, "unlock", pin="1234", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "tandem vault init" in one_line_error(proc)
    proc = vault(node, "init", pin="12", check=False)
    assert proc.returncode == 2
    assert "4 to 256 characters" in one_line_error(proc)
    vault(node, "init", pin="5555")
    proc = vault(node, "import", str(tmp_path / "nope"), check=False)
    assert proc.returncode != 0
    one_line_error(proc)
    proc = vault(node, "export", "no-such-item", str(tmp_path), check=False)
    assert proc.returncode == 8
    one_line_error(proc)
    proc = vault(node, "album", "rename", "x", check=False)
    assert proc.returncode == 2
    one_line_error(proc)


def make_photo(path, fmt="JPEG"):
    """An 800 × 400 photo, left half red and right half blue, with Exif: a capture date, a camera
    make and model, GPS coordinates, and orientation 6 (shown rotated 90° clockwise)."""
    from PIL import Image

    img = Image.new("RGB", (800, 400), (255, 0, 0))
    img.paste((0, 0, 255), (400, 0, 800, 400))
    exif = Image.Exif()
    exif[0x010F] = "TestCam"          # Make
    exif[0x0110] = "X100-SECRET"      # Model
    exif[0x0112] = 6                  # Orientation
    exif.get_ifd(0x8769)[0x9003] = "2021:07:04 10:30:00"   # DateTimeOriginal
    gps = exif.get_ifd(0x8825)
    gps[1] = "N"
    gps[2] = (48.0, 51.0, 29.0)
    gps[3] = "E"
    gps[4] = (2.0, 17.0, 40.0)
    img.save(path, fmt, exif=exif.tobytes())


def test_photos_get_thumbnails_dates_and_lose_gps_and_camera(make_node, tmp_path):
    from PIL import Image

    node = make_node("p").start(env=CHEAP)
    vault(node, "init", pin="8080")
    src = tmp_path / "photos"
    src.mkdir()
    make_photo(src / "beach.jpg")
    make_photo(src / "screenshot.png", "PNG")
    items = {i["name"]: i for i in vault_json(node, "import", str(src))["items"]}
    assert items["beach.jpg"]["type"] == "photo" and items["beach.jpg"]["thumbnail"] is True
    assert items["screenshot.png"]["thumbnail"] is True
    assert items["beach.jpg"]["created"] == "2021-07-04T10:30:00.000Z", items["beach.jpg"]
    assert vault_json(node, "list", "--sort", "created")["items"][-1]["name"] in ("beach.jpg", "screenshot.png")

    thumb = tmp_path / "thumb.jpg"
    vault(node, "thumbnail", "beach.jpg", str(thumb))
    with Image.open(thumb) as t:
        assert t.format == "JPEG" and t.size == (300, 300)
        # Orientation 6 applied: the red half (left) is now on top.
        top, bottom = t.getpixel((150, 20)), t.getpixel((150, 280))
        assert top[0] > 200 and top[2] < 60, top
        assert bottom[2] > 200 and bottom[0] < 60, bottom

    out = tmp_path / "out"
    out.mkdir()
    vault(node, "export", "beach.jpg", "screenshot.png", str(out))
    for name in ("beach.jpg", "screenshot.png"):
        data = (out / name).read_bytes()
        assert b"TestCam" not in data and b"X100-SECRET" not in data, name
        with Image.open(out / name) as exported:
            exif = exported.getexif()
            assert not exif.get_ifd(0x8825), f"{name} still has GPS"
            assert exif.get(0x0112) == 6, f"{name} lost its orientation"
            assert exif.get_ifd(0x8769).get(0x9003) == "2021:07:04 10:30:00", f"{name} lost its date"
            assert exported.size == (800, 400)
    assert grep_tree(node.data_dir, ["TestCam", "X100-SECRET", "beach"]) == []


def with_user_description(heic, strings):
    """`heic` with a user-description property (`udes`: language, name, description, tags) added at
    the end of its `ipco`: the `ipco`, `iprp` and `meta` sizes grow by the new box's length and
    every `iloc` file offset past the `meta` box moves with them (32-bit box sizes, as libheif
    writes them)."""
    import struct

    def boxes(data, start, end):
        at = start
        while at < end:
            size, kind = struct.unpack(">I4s", data[at:at + 8])
            assert size >= 8, "libheif writes 32-bit box sizes"
            yield kind.decode("latin-1"), at, at + size
            at += size

    payload = b"\0\0\0\0" + b"".join(s.encode() + b"\0" for s in strings)
    udes = struct.pack(">I", 8 + len(payload)) + b"udes" + payload
    grow = len(udes)
    data = bytearray(heic)
    meta = next((s, e) for k, s, e in boxes(data, 0, len(data)) if k == "meta")
    children = {k: (s, e) for k, s, e in boxes(data, meta[0] + 12, meta[1])}
    # iloc first (its values change, not its length): offsets past meta move by `grow`.
    s, _ = children["iloc"]
    version = data[s + 8]
    sizes = data[s + 12] << 8 | data[s + 13]
    off_size, len_size, base_size = sizes >> 12, (sizes >> 8) & 15, (sizes >> 4) & 15
    index_size = sizes & 15 if version in (1, 2) else 0
    at = s + 14

    def take(n):
        nonlocal at
        value = int.from_bytes(data[at:at + n], "big") if n else 0
        at += n
        return value

    def shift(n):
        value = int.from_bytes(data[at:at + n], "big") if n else 0
        if n and value >= meta[1]:
            data[at:at + n] = (value + grow).to_bytes(n, "big")

    count = take(2 if version < 2 else 4)
    for _ in range(count):
        take(2 if version < 2 else 4)
        method = take(2) & 15 if version in (1, 2) else 0
        take(2)
        if method == 0 and base_size:
            shift(base_size)
        take(base_size)
        for _ in range(take(2)):
            take(index_size)
            if method == 0 and not base_size:
                shift(off_size)
            take(off_size)
            take(len_size)
    ipco = next((a, b) for k, a, b in boxes(data, children["iprp"][0] + 8, children["iprp"][1]) if k == "ipco")
    for start in (meta[0], children["iprp"][0], ipco[0]):
        data[start:start + 4] = struct.pack(">I", struct.unpack(">I", data[start:start + 4])[0] + grow)
    return bytes(data[:ipco[1]] + udes + data[ipco[1]:])


def test_heic_photo_loses_gps_camera_and_xmp_in_place(make_node, tmp_path):
    """A HEIC (libvips's `vips copy` of make_photo's JPEG, with an XMP packet added: libheif writes
    the Exif and XMP items; a user-description property added by hand) is stored with its metadata
    items and the property's strings rewritten in place: the exported file has the original's size
    and decodes to the same pixels, keeps the date and orientation, and has no GPS, camera, XMP or
    description text left."""
    import shutil
    import pytest
    from PIL import Image

    if not (shutil.which("vips") and shutil.which("vipsheader")):
        pytest.skip("the vips command-line tools (libvips-tools) make and read the HEIC here")
    src = tmp_path / "photos"
    src.mkdir()
    jpeg = tmp_path / "street.jpg"
    make_photo(jpeg)
    with Image.open(jpeg) as img:
        img.save(jpeg, "JPEG", exif=img.info["exif"], quality=95,
                 xmp=b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF>TestCam XMP-SECRET 48,51N</rdf:RDF></x:xmpmeta>')
    heic = src / "street.heic"
    subprocess.run(["vips", "copy", str(jpeg), str(heic)], check=True, capture_output=True, timeout=120)
    plain = tmp_path / "plain.raw"
    subprocess.run(["vips", "rawsave", str(heic), str(plain)], check=True, capture_output=True, timeout=120)
    heic.write_bytes(with_user_description(heic.read_bytes(), ["en", "UDES-NAME", "UDES-SECRET 48.85N", "UDES-TAG"]))
    original = heic.read_bytes()
    assert b"X100-SECRET" in original and b"XMP-SECRET" in original and b"UDES-SECRET" in original

    node = make_node("h").start(env=CHEAP)
    vault(node, "init", pin="8080")
    item = vault_json(node, "import", str(src))["items"][0]
    assert item["type"] == "photo" and item["thumbnail"] is True, item
    assert item["created"] == "2021-07-04T10:30:00.000Z", item

    out = tmp_path / "out"
    out.mkdir()
    vault(node, "export", "street.heic", str(out))
    exported = (out / "street.heic").read_bytes()
    assert len(exported) == len(original), "rewritten in place: same size"
    for secret in (b"TestCam", b"X100-SECRET", b"XMP-SECRET", b"UDES"):
        assert secret not in exported, secret
    assert exported.count(b"udes") == 1, "the property stays, emptied"
    header = subprocess.run(["vipsheader", "-a", str(out / "street.heic")], capture_output=True, text=True,
                            check=True, timeout=60).stdout
    assert "GPS" not in header and "TestCam" not in header, header
    assert "2021:07:04 10:30:00" in header, header
    # The Exif item as it is in the file (libvips hides its orientation: libheif applies the container's).
    exif = Image.Exif()
    exif.load(exported[re.search(rb"Exif\0\0(II\*\0|MM\0\*)", exported).start():][:65536])
    assert exif.get(0x0112) == 6 and not exif.get_ifd(0x8825) and exif.get(0x010F) is None, dict(exif)
    assert exif.get_ifd(0x8769).get(0x9003) == "2021:07:04 10:30:00"

    raw = {}
    for name, path in (("original", heic), ("exported", out / "street.heic")):
        target = tmp_path / f"{name}.raw"
        subprocess.run(["vips", "rawsave", str(path), str(target)], check=True, capture_output=True, timeout=120)
        raw[name] = target.read_bytes()
    assert raw["original"] == raw["exported"] == plain.read_bytes(), "decoded pixels differ"
    assert grep_tree(node.data_dir, ["TestCam", "X100-SECRET", "XMP-SECRET", "UDES", "street"]) == []


def test_recovery_code_is_sealed_in_the_vault_once_there_is_one(make_node, tmp_path):
    node = make_node("r").start(env=CHEAP)
    before = json.loads(subprocess.run([TANDEM, "recovery", "show", "--json", "--data-dir", node.data_dir],
                                       capture_output=True, text=True, check=True).stdout)["code"]
    assert before.startswith("tdmr1-")
    clear = pathlib.Path(node.data_dir) / "recovery-code"
    assert clear.exists() and oct(clear.stat().st_mode & 0o777) == "0o600"
    created = vault_json(node, "init", pin="7777")
    assert created["recovery_code"] == before, "vault init shows the node's code"
    assert not clear.exists(), "with a vault the code is no longer kept in clear"
    compact = before.replace("-", "")
    assert grep_tree(node.data_dir, [compact, compact[5:20]]) == []
    vault(node, "lock")
    proc = subprocess.run([TANDEM, "recovery", "show", "--json", "--pin-stdin", "--data-dir", node.data_dir], input="7777\n",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["code"] == before
    # Locked and no PIN: one clear line.
    vault(node, "lock")
    proc = subprocess.run([TANDEM, "recovery", "show", "--data-dir", node.data_dir], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode != 0
    one_line_error(proc)


def recovery_show(node, pin):
    return subprocess.run([TANDEM, "recovery", "show", "--json", "--pin-stdin", "--data-dir", node.data_dir],
                          input=pin + "\n", capture_output=True, text=True, timeout=60)


def test_recovery_show_checks_the_pin_even_while_the_vault_is_open(make_node, tmp_path):
    node = make_node("rp").start(env=CHEAP)
    real = vault_json(node, "init", pin="2468")["recovery_code"]
    vault(node, "decoy", pin=["2468", "1357"])
    vault(node, "unlock", pin="2468")
    assert vault_json(node, "status")["locked"] is False

    wrong = recovery_show(node, "0000")
    assert wrong.returncode != 0
    one_line_error(wrong)
    assert "tdmr1" not in wrong.stdout + wrong.stderr, "a wrong PIN gets no code"
    assert vault_json(node, "status")["failed_attempts"] == 1, "it counts as a wrong try"

    decoy = [recovery_show(node, "1357") for _ in range(2)]
    assert all(p.returncode == 0 for p in decoy), [p.stderr for p in decoy]
    decoy_codes = [json.loads(p.stdout)["code"] for p in decoy]
    assert decoy_codes[0] == decoy_codes[1], "the decoy PIN gives the decoy's code, the same each time"
    assert decoy_codes[0] != real

    shown = recovery_show(node, "2468")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["code"] == real
    assert vault_json(node, "status")["failed_attempts"] == 0


def test_one_digit_typos_leave_no_digit_in_the_store(make_node, tmp_path):
    """Three one-digit typos of the PIN (the third is logged): none of them, nor any masked form,
    is anywhere in node.sqlite or its write-ahead log; the owner still sees when and how many."""
    # The node's wall clock is moved past the lockout instead of waiting 30 s for it (libfaketime
    # re-reads the offset from a file at every clock read; its monotonic clock is left alone).
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    fake = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": str(offset), "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"} if LIBFAKETIME else {}
    node = make_node("typos").start(env={**CHEAP, **fake})
    vault(node, "init", pin="483920")
    vault(node, "lock")
    typos = ["583920", "473920", "481920"]
    for typo in typos:
        proc = vault(node, "unlock", pin=typo, check=False)
        assert proc.returncode == 5, proc.stderr
    store = pathlib.Path(node.data_dir)
    files = [p for p in store.iterdir() if p.name.startswith("node.sqlite")]
    assert files
    for p in files:
        data = p.read_bytes()
        for needle in [*typos, "483920", "\u2022"]:
            assert needle.encode() not in data, (p.name, needle)
    status = vault_json(node, "status")
    assert status["retry_in_ms"] > 0, status
    if LIBFAKETIME:
        offset.write_text(f"+{status['retry_in_ms'] // 1000 + 2}\n")
        assert vault_json(node, "status")["retry_in_ms"] is None, "the lockout is over on the node's clock"
    else:
        time.sleep(status["retry_in_ms"] / 1000 + 0.5)
    log = vault_json(node, "break-ins", pin="483920")["break_ins"]
    assert [e["attempt"] for e in log] == [3] and set(log[0]) == {"at", "attempt"}, log
    text = vault(node, "break-ins").stdout
    assert "wrong PIN (3 in a row)" in text and not any(t in text for t in typos), text


def test_import_killed_mid_way_leaves_no_clear_copy(make_node, tmp_path):
    """kill -9 during an import of photos (their stripped copies being staged): nothing under the
    data directory holds a photo's bytes in clear, neither right after the kill nor after the
    restart; a clear copy an older node left in the vault's tmp/ is shredded at the restart."""
    from PIL import Image
    node = make_node("crash").start(env=CHEAP)
    vault(node, "init", pin="2580")
    photos = tmp_path / "photos"
    photos.mkdir()
    markers = []
    for i in range(24):
        w, h = 1200, 900
        path = photos / f"IMG_{i:04d}.jpg"
        Image.frombytes("RGB", (w, h), os.urandom(w * h * 3)).save(path, quality=95)
        data = path.read_bytes()
        markers.append(data[len(data) // 2:len(data) // 2 + 32])  # image data: kept by the lossless rewrite
    importer = subprocess.Popen([TANDEM, "vault", "import", str(photos), "--json", "--pin-stdin", "--data-dir", node.data_dir],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    importer.stdin.write("2580\n")
    importer.stdin.close()
    # Wait until the vault is reading the group (its copies staged), then kill the node.
    mid_way = False
    for line in importer.stdout:
        progress = json.loads(line).get("progress") if line.strip() else None
        if progress and 0 < progress["done"] and progress["files_done"] < progress["files"]:
            mid_way = True
            break
    assert mid_way, "the import ended before it could be interrupted: make the photo set bigger"
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait(timeout=10)
    importer.wait(timeout=60)
    assert importer.returncode != 0

    def leaks():
        hits = []
        for dirpath, _, files in os.walk(node.data_dir):
            for f in files:
                p = pathlib.Path(dirpath) / f
                try:
                    data = p.read_bytes()
                except OSError:
                    continue
                hits += [str(p) for m in markers if m in data]
        return hits

    assert leaks() == [], "a clear copy survived the kill"
    # What a node without in-memory staging left: shredded at the next start.
    tmp = pathlib.Path(node.data_dir) / "vault" / "tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    left = tmp / "import-0123456789abcdef"
    left.write_bytes((photos / "IMG_0000.jpg").read_bytes())
    node.start()
    deadline = time.monotonic() + 30
    while left.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left.exists(), "the leftover copy was not shredded at the start"
    assert leaks() == []
    assert vault_json(node, "status")["initialized"] is True

"""Issue 34, vault side, through the CLI against a real node: what import strips from a JPEG (the
JFIF thumbnail, application and unknown markers, bytes after the end of the image) while the
capture date stays; `vault add --keep-metadata` stores the original bytes; an item name with a
bidi override is refused with one line."""
import struct

from tandem_testkit import one_line_error
from test_vault import CHEAP, make_photo, vault, vault_json


def segment(marker, payload):
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def with_leftovers(jpeg):
    """The JPEG with a JFIF APP0 holding a 2 × 2 thumbnail, an APP15 segment, a comment, and a
    trailer after end-of-image. (JPGn markers are covered in-process, JPEGLeftoversTests: libjpeg
    refuses a file holding one, so it would get no thumbnail here.)"""
    assert jpeg[:2] == b"\xff\xd8"
    extra = (segment(0xE0, b"JFIF\x00\x01\x02\x01\x00\x48\x00\x48\x02\x02" + b"THUMB-SECRET")
             + segment(0xEF, b"APP15-SECRET serial")
             + segment(0xFE, b"COMMENT-SECRET"))
    return jpeg[:2] + extra + jpeg[2:] + b"TRAILER-SECRET motion video"


SECRETS = [b"THUMB-SECRET", b"APP15-SECRET", b"COMMENT-SECRET", b"TRAILER-SECRET",
           b"TestCam", b"X100-SECRET"]


def test_import_strips_leftovers_keeps_the_date_and_keep_metadata_keeps_the_bytes(make_node, tmp_path):
    from PIL import Image

    node = make_node("meta").start(env=CHEAP)
    vault(node, "init", pin="8080")
    src = tmp_path / "src"
    src.mkdir()
    make_photo(tmp_path / "base.jpg")
    original = with_leftovers((tmp_path / "base.jpg").read_bytes())
    for secret in SECRETS:
        assert secret in original, secret
    (src / "street.jpg").write_bytes(original)
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "as-is.jpg").write_bytes(original)

    item = vault_json(node, "import", str(src))["items"][0]
    assert item["created"] == "2021-07-04T10:30:00.000Z" and item["thumbnail"] is True, item
    raw = vault_json(node, "add", "--keep-metadata", str(kept))["items"][0]
    assert raw["created"] == "2021-07-04T10:30:00.000Z" and raw["thumbnail"] is True, raw

    out = tmp_path / "out"
    out.mkdir()
    vault(node, "export", "street.jpg", "as-is.jpg", str(out))
    clean = (out / "street.jpg").read_bytes()
    for secret in SECRETS:
        assert secret not in clean, secret
    assert clean.endswith(b"\xff\xd9"), "nothing after end-of-image"
    assert clean[2:20] == segment(0xE0, b"JFIF\x00\x01\x02\x01\x00\x48\x00\x48\x00\x00"), "JFIF kept without its thumbnail"
    with Image.open(out / "street.jpg") as img:
        img.load()
        assert img.size == (800, 400)
    assert (out / "as-is.jpg").read_bytes() == original, "--keep-metadata stores the original bytes"


def test_an_item_name_with_a_bidi_override_is_refused(make_node, tmp_path):
    node = make_node("names").start(env=CHEAP)
    vault(node, "init", pin="8080")
    sneaky = tmp_path / "invoice\u202egpj.exe"
    sneaky.write_bytes(b"MZ not a photo")
    proc = vault(node, "import", str(sneaky), check=False)
    assert proc.returncode != 0
    line = one_line_error(proc)
    assert "U+202E" in line, line
    assert vault_json(node, "list")["items"] == []

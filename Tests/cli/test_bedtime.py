"""Bedtime (issue 35) through real `tandem node` processes whose wall clock is set by libfaketime:
a node off across the bed time locks at its start, a photo in the night is refused with the hour
of sunrise, a node killed in the night is locked again when it restarts, the emergency exit costs
20 health, and the next night locks again. `tandem sun --json` against the polar rule.

After sunrise the node's real daylight check (TandemDaylight) judges the photo: a night scene is
refused with its reason, a clear sky taken two minutes ago opens the mode (photos drawn by
Tests/daylight/daylight_set.py, with their EXIF capture time)."""
import json
import pathlib
import signal

import pytest
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "daylight"))

from tandem_testkit import LIBFAKETIME, Node, cli, cli_json, control_call, one_line_error, run, wait_event

pytestmark = pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime is not installed (apt-get install faketime)")


class BedtimeNode(Node):
    """A node with its own hosts file, started under libfaketime at a chosen UTC instant."""

    keeps_port = True

    def __init__(self, data_dir):
        super().__init__(data_dir)
        self.hosts = pathlib.Path(self.data_dir).parent / "bedtime.hosts"
        self.hosts.write_text("127.0.0.1\tlocalhost\n")

    def command(self):
        return super().command() + ["--hosts-file", str(self.hosts)]

    def start_at(self, instant):
        env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"@{instant}", "FAKETIME_DONT_FAKE_MONOTONIC": "1", "TZ": "UTC"}
        # Through env(1), which execs the node in place: see ChallengeNode in test_challenges.py.
        return self.start(env=env, prefix=["env"])

    def forget_faketime(self):
        if self.proc is not None:
            for name in (f"faketime_shm_{self.proc.pid}", f"sem.faketime_sem_{self.proc.pid}"):
                pathlib.Path("/dev/shm", name).unlink(missing_ok=True)

    def stop(self, sig=signal.SIGTERM, timeout=10):
        try:
            return super().stop(sig, timeout)
        finally:
            self.forget_faketime()

    def kill(self):
        super().kill()
        self.forget_faketime()


def scene_photo(path, label, taken):
    """A drawn scene (Tests/daylight/daylight_set.py) as a JPEG taken at `taken` (EXIF, +01:00)."""
    daylight_set = pytest.importorskip("daylight_set", reason="numpy and Pillow draw the photos")
    import io
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng([35, len(label)])
    pixels = daylight_set.render(label, rng, (640, 480))
    exif = Image.Exif()
    ifd = exif.get_ifd(0x8769)
    ifd[0x9003] = taken
    ifd[0x9011] = "+01:00"
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, "JPEG", quality=90, exif=exif)
    path.write_bytes(buf.getvalue())


def lock_status(node):
    r = control_call(node, "lock.status")
    assert r["ok"], r
    return r["result"]


def refused(node, *args):
    proc = cli(node, *args, check=False)
    assert proc.returncode == 1, (args, proc.returncode, proc.stdout, proc.stderr)
    return one_line_error(proc)


def test_bedtime_night_morning_and_the_next_night(tmp_path):
    node = BedtimeNode(tmp_path / "sleeper")
    photo = tmp_path / "sky.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xd9")
    try:
        # 22:59:55 in Oslo (UTC+1 in December).
        node.start_at("2026-12-01 21:59:55")
        cli(node, "mode", "create", "night", "--block-site", "news.example")
        shown = cli_json(node, "bedtime", "set", "--mode", "night", "--bed", "23:00", "--wake", "07:00", "--city", "Oslo")
        assert shown["place"]["name"] == "Oslo" and shown["time_zone"] == "Europe/Oslo", shown
        assert shown["holding"] is False and shown["locked"] is False, shown
        assert lock_status(node)["locked"] is False
        # Off across 23:00 (stopped at 22:59, started at 23:00:05): it locks at its start. (The
        # node's own tick at the bed time is covered in-process with an injected clock: a node's
        # sleeps under libfaketime with an absolute date are not reliable enough for a deadline.)
        node.stop()
        node.start_at("2026-12-01 22:00:05")
        started = wait_event(node, "bedtime.started", timeout="15s")
        assert started["mode"] == "night" and started["night_start"].startswith("2026-12-01T22:00:00"), started
        s = lock_status(node)
        assert s["locked"] and s["hold"] == "bedtime", s
        assert "news.example" in node.hosts.read_text()
        # The main key path and the photo are refused in the night, with the hour of sunrise.
        line = refused(node, "unlock", "--daylight", str(photo))
        assert "too early" in line and "civil sunrise in Oslo" in line and "08:" in line, line
        assert "bedtime" in refused(node, "bedtime", "off")

        # Killed in the night, restarted at 05:00 Oslo: still locked, the refusal says "today".
        node.kill()
        node.start_at("2026-12-02 04:00:00")
        assert lock_status(node)["hold"] == "bedtime"
        assert "news.example" in node.hosts.read_text()
        line = refused(node, "unlock", "--daylight", str(photo))
        assert "civil sunrise in Oslo today is 08:" in line, line

        # 09:30 Oslo, after sunrise: the photo reaches the daylight check. A night scene is refused
        # with the check's reason; a clear sky taken at 09:28 opens the mode until the next night.
        node.stop()
        node.start_at("2026-12-02 08:30:00")
        night, clear = tmp_path / "night.jpg", tmp_path / "clear.jpg"
        scene_photo(night, "night", "2026:12:02 09:28:00")
        scene_photo(clear, "clear", "2026:12:02 09:28:00")
        line = refused(node, "unlock", "--daylight", str(night))
        assert "daylight" in line.lower(), line
        assert lock_status(node)["locked"] is True
        out = cli_json(node, "unlock", "--daylight", str(clear))
        assert out["locked"] is False, out
        assert "news.example" not in node.hosts.read_text()
        assert cli_json(node, "health")["health"] == 100  # leaving bedtime by daylight costs nothing

        # Off across the next bed time: locked when it starts at 23:30 Oslo; the emergency exit opens
        # it and costs 20 health.
        node.stop()
        node.start_at("2026-12-02 22:30:00")
        s = lock_status(node)
        assert s["locked"] and s["hold"] == "bedtime", s
        out = cli_json(node, "unlock", "--emergency")
        assert out["locked"] is False, out
        health = cli_json(node, "health")
        assert health["health"] == 80 and health["state"] == "healthy", health
        timeline = cli_json(node, "timeline", "--date", "2026-12-02")
        kinds = [e["kind"] for e in timeline["entries"]]
        assert "bedtime_emergency" in kinds and "bedtime_refused" in kinds and "bedtime_started" in kinds, kinds
        assert "bedtime_left" in kinds, kinds
        # The same day reads the same twice.
        assert cli_json(node, "timeline", "--date", "2026-12-02") == timeline
    finally:
        node.kill()


def test_sun_json_and_polar_rule():
    oslo = json.loads(run("sun", "--city", "Oslo", "--date", "2026-12-21", "--json").stdout)
    assert oslo["sunrise"].startswith("2026-12-21T09:1") and oslo["sunrise"].endswith("+01:00"), oslo
    assert "polar" not in oslo
    night = json.loads(run("sun", "--location", "69.65,18.96", "--tz", "Europe/Oslo", "--date", "2026-12-21", "--json").stdout)
    assert night["sunrise"] is None and night["sunset"] is None and night["polar"] == "night", night
    assert night["civil_dawn"] is not None
    day = json.loads(run("sun", "--location", "69.65,18.96", "--tz", "Europe/Oslo", "--date", "2026-06-21", "--json").stdout)
    assert day["sunrise"] is None and day["polar"] == "day", day
    for bad in (["--location", "91,0"], ["--city", "Atlantis"], ["--date", "2026-02-30"], ["--tz", "Mars/Olympus"]):
        proc = run("sun", *bad, check=False)
        assert proc.returncode == 2, (bad, proc.returncode, proc.stderr)
        one_line_error(proc)

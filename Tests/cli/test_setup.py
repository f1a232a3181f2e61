"""`tandem setup` (issue 35) driven through a pseudo-terminal as a person would type, run again to
change answers, stopped with Ctrl-D, and its `--non-interactive` path; health shared in presence
(`tandem share health on`) seen in a friend's `friend list`, and a cheer for a weak friend."""
import datetime
import json
import os
import pathlib
import pty
import select
import signal
import subprocess
import time
import zoneinfo

from tandem_testkit import TANDEM, Node, befriend, cli, cli_json, events, friend, one_line_error, poll, run, wait_event


class Terminal:
    """`tandem ARGS` on a pseudo-terminal: what it printed so far, and lines typed into it."""

    def __init__(self, *args, env=None):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the terminal is its stdin, stdout and stderr
            os.execve(TANDEM, [TANDEM, *args], {**os.environ, "TERM": "dumb", **(env or {})})
        self.seen = b""

    def expect(self, text, timeout=30.0):
        """Reads until `text` appears after what earlier expects consumed; returns what came before it."""
        want = text.encode()
        deadline = time.monotonic() + timeout
        while want not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {text!r} on the terminal; it shows:\n{self.seen.decode(errors='replace')}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the program ended before {text!r}; it showed:\n{self.seen.decode(errors='replace')}")
                self.seen += chunk
        before, _, after = self.seen.partition(want)
        self.seen = after
        return before.decode(errors="replace")

    def type(self, line):
        os.write(self.fd, line.encode() + b"\r")

    def answer(self, prompt, line):
        self.expect(prompt)
        self.type(line)

    def wait(self, timeout=30.0):
        """The exit status, reading the rest of the output meanwhile."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                try:
                    while select.select([self.fd], [], [], 0.1)[0]:
                        chunk = os.read(self.fd, 4096)
                        if not chunk:
                            break
                        self.seen += chunk
                except OSError:
                    pass
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:
                if select.select([self.fd], [], [], 0.2)[0]:
                    self.seen += os.read(self.fd, 4096)
            except OSError:
                time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"tandem setup did not end; it showed:\n{self.seen.decode(errors='replace')}")


class ExistingNode(Node):
    """A node on a data directory that setup created (no `tandem init` of its own), with its own hosts file."""

    def __init__(self, data_dir):
        self.data_dir = str(data_dir)
        self.id = json.loads(run("id", "--json", "--data-dir", self.data_dir).stdout)["id"]
        self.port = None
        self.proc = None
        self.env = None
        self.log_path = None
        self._log = None
        self.hosts = pathlib.Path(self.data_dir).parent / (pathlib.Path(self.data_dir).name + ".hosts")
        self.hosts.write_text("127.0.0.1 localhost\n")

    def command(self):
        return super().command() + ["--hosts-file", str(self.hosts)]


def quiet_window(zone):
    """A bedtime window (bed, wake) in `zone` that does not hold now: bed in 3 h, wake in 5 h."""
    now = datetime.datetime.now(zoneinfo.ZoneInfo(zone))
    bed, wake = now + datetime.timedelta(hours=3), now + datetime.timedelta(hours=5)
    return bed.strftime("%H:%M"), wake.strftime("%H:%M")


def test_setup_on_a_terminal_then_again_then_ctrl_d(tmp_path):
    home = tmp_path / "alice"
    bed, wake = quiet_window("America/Sao_Paulo")
    t = Terminal("setup", "--data-dir", str(home))
    t.answer("Create one now? (Y/n):", "")
    t.expect("Identity created: ")
    t.answer("Your display name (friends see it)", "Alice")
    t.answer("Your first mode's name [focus]:", "")
    t.answer("Sites focus blocks", "news.example, social.example")
    t.answer("Apps focus stops", "")
    t.answer("Show the tag to your reader now, or type its text", "my secret tag")
    t.answer("Show it once more", "my secret tga")
    t.expect("not the same text")
    t.answer("Show it once more", "my secret tag")
    t.expect("It reads the same")
    t.answer("A temporary key opens", "coffee-tag")
    t.answer("A temporary key opens", "")
    t.answer("What a temporary key opens", "social.example")
    t.answer("Bedtime:", bed)
    t.answer("Wake time (HH:MM) [07:00]:", wake)
    t.answer("Where you live, for sunrise", "Atlantis")
    t.expect("no city Atlantis")
    t.answer("Where you live, for sunrise", "Valencia")
    t.expect("several countries")
    t.expect("Valencia, ES")
    t.answer("Where you live, for sunrise", "São Paulo")
    t.answer("Cooldown after a bypass, in minutes (10, 20, 30, 45 or 60) [10]:", "7")
    t.expect("one of 10, 20, 30, 45 or 60")
    t.answer("Cooldown after a bypass", "30")
    t.answer("Share your health (0–100) and state with your friends? (y/N):", "y")
    t.answer("A shell command to run when focus locks (`none` for none) [none]:", "echo locked >> /tmp/never")
    t.expect("Done.")
    assert t.wait() == 0

    hook = home / "hooks" / "focus" / "locked"
    assert hook.exists() and os.access(hook, os.X_OK)
    assert "echo locked >> /tmp/never" in hook.read_text()

    node = ExistingNode(home).start()
    try:
        assert cli_json(node, "name")["name"] == "Alice"
        mode = cli_json(node, "mode", "show", "focus")
        assert sorted(mode["block_sites"]) == ["news.example", "social.example"]
        assert mode["main_key"]["name"] == "main key" and mode["main_key"]["usable"]
        assert len(mode["temp_keys"]) == 1 and mode["temp_allow"] == ["social.example"]
        shown = cli_json(node, "bedtime", "show")
        assert shown["enabled"] and shown["bed"] == bed and shown["wake"] == wake
        assert shown["time_zone"] == "America/Sao_Paulo"
        assert cli_json(node, "health")["cooldown_minutes"] == 30
        assert cli_json(node, "share")["health"] is True
        # The main key is the tag typed: it checks as that key.
        check = cli_json(node, "key", "check", mode["main_key"]["id"], "--tag", "my secret tag")
        assert check["match"] is True

        # Again, against the running node: the current answers are the defaults; change two.
        t = Terminal("setup", "--data-dir", str(home))
        t.expect("(kept)")
        t.answer("Your display name (friends see it) [Alice]:", "")
        t.answer("Your first mode's name [focus]:", "")
        t.answer("Sites focus blocks", "news.example")
        t.answer("Apps focus stops", "")
        t.answer("Main key: main key (kept)", "")
        t.answer("A temporary key opens", "")
        t.answer("What a temporary key opens", "")
        t.answer(f"Bedtime: focus locks", "off")
        t.answer("Cooldown after a bypass, in minutes (10, 20, 30, 45 or 60) [30]:", "")
        t.answer("Share your health (0–100) and state with your friends? (Y/n):", "n")
        t.answer("[echo locked >> /tmp/never]:", "none")
        t.expect("Done.")
        assert t.wait() == 0
        assert cli_json(node, "mode", "show", "focus")["block_sites"] == ["news.example"]
        assert cli_json(node, "bedtime", "show")["enabled"] is False
        assert cli_json(node, "share")["health"] is False
        assert not hook.exists()

        # Ctrl-D at a question: one clear line, the answers before it kept.
        t = Terminal("setup", "--data-dir", str(home))
        t.answer("Your display name (friends see it) [Alice]:", "Alice B.")
        t.expect("Your first mode's name [focus]:")
        os.write(t.fd, b"\x04")
        assert t.wait() == 1
        assert "setup stopped at the end of input" in t.seen.decode(errors="replace")
        assert "Backtrac" not in t.seen.decode(errors="replace")
        assert cli_json(node, "name")["name"] == "Alice B."
    finally:
        node.stop()


def test_setup_non_interactive_with_flags(tmp_path):
    home = tmp_path / "bob"
    proc = run("setup", "--data-dir", str(home), "--non-interactive", "--name", "Bob", "--mode", "deep",
               "--block-sites", "a.example,b.example", "--block-apps", "game", "--main-key-tag", "bob-key",
               "--bed", "off", "--cooldown", "45", "--share-health", "on", "--hook-locked", "true")
    assert "Done." in proc.stdout
    # Bad answers as flags: one line, usage exit, nothing half-done.
    bad = run("setup", "--data-dir", str(home), "--non-interactive", "--cooldown", "7", check=False)
    assert bad.returncode == 2 and "10, 20, 30, 45 or 60" in one_line_error(bad)
    bad = run("setup", "--data-dir", str(home), "--non-interactive", "--place", "Valencia", check=False)
    assert bad.returncode == 2 and "Valencia, ES" in one_line_error(bad)

    node = ExistingNode(home).start()
    try:
        mode = cli_json(node, "mode", "show", "deep")
        assert sorted(mode["block_sites"]) == ["a.example", "b.example"] and mode["block_apps"] == ["game"]
        assert mode["main_key"]["usable"]
        assert cli_json(node, "name")["name"] == "Bob"
        assert cli_json(node, "health")["cooldown_minutes"] == 45
        assert cli_json(node, "share")["health"] is True
        # Again with the node running: only what the flags name changes.
        run("setup", "--data-dir", str(home), "--non-interactive", "--cooldown", "10", "--share-health", "off")
        assert cli_json(node, "health")["cooldown_minutes"] == 10
        assert cli_json(node, "share")["health"] is False
        assert cli_json(node, "name")["name"] == "Bob"
        assert sorted(cli_json(node, "mode", "show", "deep")["block_sites"]) == ["a.example", "b.example"]
        # A bedtime in an ambiguous city named with its country; a run that names none leaves it alone.
        bed, wake = quiet_window("Europe/Madrid")
        run("setup", "--data-dir", str(home), "--non-interactive", "--bed", bed, "--wake", wake, "--place", "Valencia, ES")
        shown = cli_json(node, "bedtime", "show")
        assert shown["place"]["name"] == "Valencia" and shown["place"]["country"] == "ES" and shown["bed"] == bed
        run("setup", "--data-dir", str(home), "--non-interactive")
        assert len(events(node, "bedtime.set")) == 1
    finally:
        node.stop()


def test_health_shared_in_presence_and_a_cheer_for_a_weak_friend(make_node):
    # Heartbeats 5 minutes apart: within the polls below only the PRESENCE a change of the shared
    # health sends at once can carry it.
    a, b = make_node("a"), make_node("b")
    for n in (a, b):
        n.command = lambda base=n.command: [*base(), "--heartbeat", "300"]
    a.start()
    b.start()
    befriend(a, b)
    # Off by default: a sees no health of b's.
    assert friend(a, b)["health"] is None
    ok = cli(a, "cheer", b.id, "hang in there", check=False)
    assert ok.returncode == 8 and "does not share their health" in one_line_error(ok)

    assert cli_json(b, "share", "health", "on")["health"] is True
    # A PRESENCE carries it at once (not at the next heartbeat).
    poll(lambda: friend(a, b)["health"] == 100, timeout=30, what="b's shared health at a")
    assert friend(a, b)["state"] == "healthy"
    assert "health 100 (healthy)" in cli(a, "friend", "list").stdout
    refused = cli(a, "cheer", b.id, check=False)
    assert refused.returncode == 1 and "cheers are for a weak friend" in one_line_error(refused)

    # b quits 13 sessions early: 100 − 65 = 35, weak.
    for _ in range(13):
        cli(b, "focus", "start", "--duration", "30m")
        cli(b, "focus", "quit")
    poll(lambda: cli_json(b, "health")["health"] == 35, timeout=30, what="b's health at 35")
    poll(lambda: friend(a, b)["health"] == 35, timeout=30, what="b's weak health at a")
    assert friend(a, b)["state"] == "weak"

    cli(a, "cheer", b.id, "you've got this")
    got = wait_event(b, "message.received", f"from={a.id}", timeout="30s")
    assert got["text"].startswith("💪 ") and "you've got this" in got["text"]

    # Sharing off: a stops seeing it at once.
    cli(b, "share", "health", "off")
    poll(lambda: friend(a, b)["health"] is None, timeout=30, what="b's health no longer shared")

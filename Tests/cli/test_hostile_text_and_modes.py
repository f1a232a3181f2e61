"""A peer's display name with terminal controls is shown escaped; store files are private whatever the umask."""
import json
import os
import sqlite3
import stat
import subprocess

from tandem_testkit import TANDEM, cli, cli_json
from test_friends import befriend

HOSTILE = "\x1b[2J\rboss\u202e"


def raw_controls(text):
    """The control characters a terminal would act on: C0 (bar newline), DEL, C1, bidi overrides."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]


def out(node, *args):
    """stdout of `tandem ARGS` exactly as written (bytes decoded, no newline translation, which
    would turn a raw CR into a LF)."""
    proc = subprocess.run([TANDEM, *args, "--data-dir", node.data_dir], capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def set_raw_name(node, name):
    """Stores a display name the CLI would refuse (it has a CR), straight in the stopped node's
    store: the node then sends it to its friends as any other name, as a hostile peer would."""
    node.stop()
    db = sqlite3.connect(os.path.join(node.data_dir, "node.sqlite"))
    with db:
        db.execute("UPDATE setting SET value = ? WHERE key = 'display_name'", (name,))
    db.close()
    node.start()


def test_a_peers_name_with_controls_is_shown_escaped(make_node):
    mallory = make_node("mallory").start()
    bob = make_node("bob").start()
    cli(mallory, "name", "placeholder")
    set_raw_name(mallory, HOSTILE)
    befriend(mallory, bob)
    friends = cli_json(bob, "friend", "list")["friends"]
    assert [f["name"] for f in friends] == [HOSTILE], "the name arrived as sent"

    human = out(bob, "friend", "list")
    assert raw_controls(human) == [], repr(human)
    assert human.count("\n") == 1, repr(human)
    assert human.startswith("\\x1b[2J\\x0dboss\\u{202e} (tdm1-"), repr(human)

    # JSON output stays JSON with the same value, and no raw control either.
    raw_json = out(bob, "friend", "list", "--json")
    assert raw_controls(raw_json) == [], repr(raw_json)
    assert json.loads(raw_json)["friends"][0]["name"] == HOSTILE

    # The event log's text lines escape it too.
    events = out(bob, "events")
    assert raw_controls(events) == [] and "\\x1b[2J\\x0dboss" in events, repr(events)
    assert raw_controls(out(bob, "status")) == []


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_data_dir_and_store_files_are_private_under_umask_000(make_node, tmp_path):
    old = os.umask(0)
    try:
        node = make_node("alice")
        node.start()
        cli(node, "name", "Alice")  # a write: the -wal and -shm exist
        files = {name: mode(os.path.join(node.data_dir, name)) for name in os.listdir(node.data_dir)}
        assert mode(node.data_dir) == 0o700, oct(mode(node.data_dir))
        for name in ["identity.key", "node.sqlite", "node.sqlite-wal", "node.sqlite-shm", "control.sock"]:
            assert name in files, (name, sorted(files))
            assert files[name] == 0o600, (name, oct(files[name]))
        # Nothing in it is readable by anyone else.
        assert all(m & 0o077 == 0 for m in files.values()), {k: oct(v) for k, v in files.items()}
        node.stop()
        # An older store left 0644 is made private when the node opens it.
        os.chmod(os.path.join(node.data_dir, "node.sqlite"), 0o644)
        node.start()
        assert mode(os.path.join(node.data_dir, "node.sqlite")) == 0o600
    finally:
        os.umask(old)

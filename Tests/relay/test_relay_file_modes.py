"""The relay's data dir is 0700, its identity and mailbox 0600, whatever the umask."""
import os
import stat


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_relay_files_are_private_under_umask_000(make_relay):
    old = os.umask(0)
    try:
        relay = make_relay()
        d = relay.data_dir
        assert mode(d) == 0o700, oct(mode(d))
        names = sorted(os.listdir(d))
        for name in ["identity.key", "mailbox.sqlite"]:
            assert name in names, names
        for name in names:
            assert mode(os.path.join(d, name)) == 0o600, (name, oct(mode(os.path.join(d, name))))
    finally:
        os.umask(old)

"""Driving real `tandem` processes on the namespace LAN through the CLI (shared by the LAN tests)."""
import json
import os
import subprocess
import time

from netns import TANDEM_BIN

# LAN tests want discovery: drop the loopback tests' switch.
NODE_ENV = {k: v for k, v in os.environ.items() if k != "TANDEM_NO_DISCOVERY"}


def cli(node, *args, timeout=30):
    proc = subprocess.run([TANDEM_BIN, *args, "--data-dir", node["dir"]], capture_output=True, text=True,
                          timeout=timeout, env=NODE_ENV)
    assert proc.returncode == 0, f"tandem {' '.join(args)}: {proc.stderr.strip()}"
    return proc.stdout


def cli_json(node, *args, timeout=30):
    return json.loads(cli(node, *args, "--json", timeout=timeout))


def wait_event(node, event, *matches, timeout="20s"):
    """The first event of that type since the node's first event (`tandem wait --since 0`)."""
    args = ["wait", event, "--since", "0", "--timeout", timeout]
    for m in matches:
        args += ["--match", m]
    return cli_json(node, *args, timeout=90)


def until(predicate, timeout=15.0, step=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()

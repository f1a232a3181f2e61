#!/usr/bin/env bash
# make test-package: installs the .deb into a fresh Debian root made with debootstrap (downloads
# Debian's base packages: not part of make test) and runs tandem init, a node and tandem-relay
# there, as a person would after `apt install ./tandem_*.deb`. Needs root (debootstrap, chroot).
set -euo pipefail
deb=$1 root=${2:-.build-dist/rootfs}
suite=${SUITE:-bookworm} mirror=${MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" = 0 ] || { echo "test-deb: needs root (debootstrap and chroot)" >&2; exit 1; }
if [ ! -x "$root/usr/bin/apt-get" ]; then
  echo "Making a fresh $suite root in $root with debootstrap…"
  rm -rf "$root"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
fi
cleanup() { umount "$root/proc" 2>/dev/null || true; }
trap cleanup EXIT
mount -t proc proc "$root/proc"
cp "$deb" "$root/tmp/tandem.deb"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
in_root apt-get update -qq
in_root apt-get install -y -qq /tmp/tandem.deb >/dev/null
echo "Installed: $(in_root dpkg-query -W -f='${Package} ${Version}' tandem)"
# No Swift toolchain in the root: the binaries carry the Swift runtime.
in_root sh -c '! ls /usr/lib/swift 2>/dev/null' || { echo "test-deb: a Swift runtime was found in the root" >&2; exit 1; }
in_root tandem --version
in_root rm -rf /root/node-a /root/relay /root/node.log /root/node.pid  # a root kept from an earlier run
in_root tandem init --data-dir /root/node-a
in_root sh -c 'tandem node --data-dir /root/node-a --listen 127.0.0.1:0 --no-discovery >/root/node.log 2>&1 & echo $! >/root/node.pid'
for _ in $(seq 1 100); do
  if in_root tandem status --data-dir /root/node-a >/dev/null 2>&1; then break; fi
  sleep 0.2
done
in_root tandem status --data-dir /root/node-a
in_root sh -c 'kill -TERM "$(cat /root/node.pid)"; while kill -0 "$(cat /root/node.pid)" 2>/dev/null; do sleep 0.1; done'
in_root tandem-relay id --data-dir /root/relay
test -f "$root/usr/lib/systemd/user/tandem.service"
grep -q 'ExecStart=/usr/bin/tandem node' "$root/usr/lib/systemd/user/tandem.service"
echo "test-package: the .deb installs into a fresh $suite root and its node, CLI and relay run there."

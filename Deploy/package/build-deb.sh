#!/usr/bin/env bash
# Builds dist/tandem_VERSION_ARCH.deb from a staged install (make deb calls this after
# `make install DESTDIR=STAGE PREFIX=/usr`). The package's Depends are read off the binaries:
# each shared library a binary names itself (NEEDED) is mapped, through the path `ldd` finds, to
# the Debian package that ships it (dpkg -S): libsodium, libzstd, libvips, libzbar, libsqlite3, ….
set -euo pipefail
stage=$1 version=$2 out=$3
arch=$(dpkg --print-architecture)
mkdir -p "$stage/DEBIAN" "$(dirname "$out")"
declare -A pkgs=()
for bin in "$stage/usr/bin/tandem" "$stage/usr/bin/tandem-relay"; do
  # Only the libraries the binary itself names (NEEDED); theirs come with their own packages.
  needed=$(objdump -p "$bin" | awk '/NEEDED/{print $2}')
  while read -r lib; do
    [ -n "$lib" ] || continue
    grep -qx "$(basename "$lib")" <<<"$needed" || continue
    real=$(readlink -f "$lib")
    owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null || true)
    owner=${owner%%:*}
    [ -n "$owner" ] || { echo "build-deb: no Debian package ships $lib" >&2; exit 1; }
    case "$owner" in libc6|libgcc-s1|libstdc++6) ;; *) pkgs[$owner]=1 ;; esac
  done < <(ldd "$bin" | awk '/=> \//{print $3}')
done
depends="libc6, libgcc-s1, libstdc++6, tzdata"
for p in $(printf '%s\n' "${!pkgs[@]}" | sort); do depends+=", $p"; done
size=$(du -sk "$stage/usr" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: tandem
Version: $version
Architecture: $arch
Maintainer: Tandem developers <tandem@localhost>
Installed-Size: $size
Depends: $depends
Section: net
Priority: optional
Homepage: https://example.invalid/tandem
Description: peer-to-peer focus challenges and messages between friends
 Tandem runs a node per person: friends find each other on a LAN or through a relay, run focus
 challenges whose countdowns start and end together, keep a co-signed ledger, send messages, lock
 focus modes until a physical key is shown, and keep an encrypted vault whose backups friends hold.
 Includes tandem (node and CLI), tandem-relay, a systemd user unit for the node and system units.
CONTROL
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out" >/dev/null
echo "$out"
echo "Depends: $depends"

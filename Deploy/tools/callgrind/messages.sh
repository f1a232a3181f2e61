#!/bin/bash
# Instructions per message of both nodes' store steps (Protocol/messages.md 11.6, session 12):
#   Deploy/tools/callgrind/messages.sh [BENCH]   (default .build/release/tandem-bench)
# Counts only what runs inside the send lane's drain and the inbound router's batch (every step of a
# message on both nodes, with its commit, after-commit work and search pass), both nodes in one
# process. One lone message = (105 rounds - 5 rounds, burst 1) / 100; one burst message =
# (burst 3000 - burst 1000, 5 rounds) / 2000.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(realpath "${1:-.build/release/tandem-bench}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -shared -fPIC -O2 -o "$work/sigshim.so" "$here/sigshim.c" -ldl
# Valgrind's reader gives up on the bench's debug information; the symbols are enough.
strip --strip-debug -o "$work/bench" "$bench"
count() {  # rounds burst -> total instructions collected
    TANDEM_CORE_NICE=0 LD_PRELOAD="$work/sigshim.so" valgrind --tool=callgrind --separate-threads=no --dump-instr=no \
        --collect-atstart=no \
        '--toggle-collect=$s12NodeMessages14MessageServiceC10drainSendsyyF' \
        '--toggle-collect=$s14TandemNodeCore0B11FrameRouterV6handleyySayAA12InboundEventOGF' \
        --callgrind-out-file="$work/cg.$1.$2" "$work/bench" messages --rounds "$1" --no-relay --burst "$2" --in-flight 64 \
        --in-process > "$work/out.$1.$2.json" 2> "$work/err.$1.$2"
    grep -q '"all_once_in_seq_order" : true' "$work/out.$1.$2.json" || { echo "run $1/$2: not once and in order" >&2; exit 1; }
    awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.$1.$2"
}
r5=$(count 5 1); r105=$(count 105 1)
b1=$(count 5 1000); b3=$(count 5 3000)
echo "lone message:  $(( (r105 - r5) / 100 )) instructions"
echo "burst message: $(( (b3 - b1) / 2000 )) instructions"

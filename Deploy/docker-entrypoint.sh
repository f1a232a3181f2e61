#!/bin/sh
# Entrypoint of the Tandem image: runs the command it is given, with two conveniences.
#  - Arguments that start with "-" are flags for the relay: `docker run IMAGE --listen :7820`
#    runs `tandem-relay --listen :7820`.
#  - `tandem node …` creates the node's identity on the first start, when the data directory
#    (--data-dir, else $TANDEM_HOME, else ~/.tandem) holds no identity.key yet. With
#    $TANDEM_PASSPHRASE set, the key is sealed with it (the node then reads the same variable).
# The relay needs nothing of the kind: it creates identity.key and mailbox.sqlite on its first run.
set -eu

if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- tandem-relay "$@"
fi

if [ "$1" = tandem ] && [ "${2:-}" = node ]; then
    data_dir="${TANDEM_HOME:-${HOME:-/data}/.tandem}"
    previous=""
    for arg in "$@"; do
        case "$arg" in
            --data-dir=*) data_dir="${arg#--data-dir=}" ;;
            *) if [ "$previous" = --data-dir ]; then data_dir="$arg"; fi ;;
        esac
        previous="$arg"
    done
    if [ ! -e "$data_dir/identity.key" ]; then
        if [ -n "${TANDEM_PASSPHRASE:-}" ]; then
            tandem init --data-dir "$data_dir" --passphrase
        else
            tandem init --data-dir "$data_dir"
        fi
    fi
fi

exec "$@"

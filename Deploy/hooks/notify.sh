#!/bin/sh
# Tandem hook: a desktop notification when a focus mode locks, unlocks, opens for a moment or
# locks again (notify-send, from the libnotify-bin package).
#
# Install for every mode and transition (HOOKS is the node's hooks directory):
#   for t in locked unlocked temp_unlocked relocked; do
#     install -D -m 0755 Deploy/hooks/notify.sh "$HOOKS/all/$t.d/50-notify"
#   done
#
# It needs the desktop session's D-Bus: it uses DBUS_SESSION_BUS_ADDRESS, else
# $XDG_RUNTIME_DIR/bus (or /run/user/UID/bus). Without a session bus (a system service, a server)
# it exits 0 with a note, so the node logs the note instead of a failure.
set -u

mode=${TANDEM_MODE:-?}
sites=${TANDEM_BLOCKED_SITES:-}
apps=${TANDEM_BLOCKED_APPS:-}
temp=${TANDEM_TEMP_ITEMS:-}

until=""
case ${TANDEM_UNTIL_MS:-} in
    '' | *[!0-9]*) ;;
    *) until=$(date -d "@$((TANDEM_UNTIL_MS / 1000))" +%H:%M 2>/dev/null) || until="" ;;
esac

case ${TANDEM_TRANSITION:-} in
    locked)        title="Focus: $mode is locked";        body="Blocked: ${sites:-no sites} / ${apps:-no apps}" ;;
    relocked)      title="Focus: $mode is locked again";  body="Blocked: ${sites:-no sites} / ${apps:-no apps}" ;;
    temp_unlocked) title="Focus: $mode is open for a moment"; body="Open now: ${temp:-nothing}" ;;
    unlocked)      title="Focus: $mode is unlocked";      body="Everything is open again." ;;
    *) echo "notify: unknown transition '${TANDEM_TRANSITION:-}'" >&2; exit 2 ;;
esac
[ -n "$until" ] && body="$body (until $until)"

if ! command -v notify-send >/dev/null 2>&1; then
    echo "notify: notify-send is not installed (apt install libnotify-bin); no notification"
    exit 0
fi
if [ -z "${DBUS_SESSION_BUS_ADDRESS:-}" ]; then
    bus="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/bus"
    if [ ! -S "$bus" ]; then
        echo "notify: no desktop session bus for uid $(id -u) (no $bus); no notification"
        exit 0
    fi
    DBUS_SESSION_BUS_ADDRESS="unix:path=$bus"
    export DBUS_SESSION_BUS_ADDRESS
fi
exec notify-send --app-name=Tandem "$title" "$body"

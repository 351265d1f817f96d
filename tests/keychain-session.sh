#!/usr/bin/env bash
# Runs a command with both Linux keychain backends available, so the keychain vault tests
# exercise the real stores:
#   - a fresh kernel session keyring (keyutils backend), via `keyctl session`;
#   - a private D-Bus session bus with gnome-keyring-daemon's Secret Service, its login
#     keyring unlocked with a throwaway password (Secret Service backend).
#
# Needs the Debian packages: keyutils dbus gnome-keyring (libsecret-tools is optional, for
# poking at the store by hand with secret-tool).
#
# Usage: tests/keychain-session.sh cargo test --workspace
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi

missing=()
for tool in keyctl dbus-run-session gnome-keyring-daemon; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -ne 0 ]; then
    echo "keychain-session.sh: missing ${missing[*]}; install with: apt-get install -y keyutils dbus gnome-keyring" >&2
    exit 127
fi

if [ "${SALLYPORT_KEYCHAIN_INNER:-}" != "1" ]; then
    # Stage 1: a private XDG runtime dir and home for the keyring files, then a session bus.
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/sallyport-keychain.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/runtime" "$tmp/data"
    chmod 700 "$tmp/runtime"
    export XDG_RUNTIME_DIR="$tmp/runtime"
    export XDG_DATA_HOME="$tmp/data"
    export SALLYPORT_KEYCHAIN_INNER=1
    # `keyctl session -` joins a new anonymous session keyring and runs the rest inside it.
    set +e
    keyctl session - dbus-run-session -- bash "$0" "$@"
    status=$?
    set -e
    exit "$status"
fi

# Stage 2 (inside the session keyring and the session bus): start and unlock the keyring.
# gnome-keyring-daemon reads the login keyring password from stdin with --unlock.
eval "$(printf 'sallyport-test-keyring\n' | gnome-keyring-daemon --unlock --components=secrets 2>/dev/null)"
export GNOME_KEYRING_CONTROL SSH_AUTH_SOCK 2>/dev/null || true
# Wait until the Secret Service answers on the bus.
for _ in $(seq 1 50); do
    if dbus-send --session --print-reply --dest=org.freedesktop.DBus / \
        org.freedesktop.DBus.NameHasOwner string:org.freedesktop.secrets 2>/dev/null | grep -q 'boolean true'; then
        break
    fi
    sleep 0.1
done
export SALLYPORT_KEYCHAIN_SESSION=1
exec "$@"

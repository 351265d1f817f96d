#!/usr/bin/env bash
# The test command: every test of the workspace, in one `cargo test` run.
#
# The SSH tests start a real OpenSSH sshd and the keychain tests talk to a real kernel keyring
# and a real Secret Service, so this runs cargo inside a fresh session keyring and a private
# D-Bus session with an unlocked gnome-keyring (tests/keychain-session.sh). Missing tools fail
# loudly: install them with
#   apt-get install openssh-server keyutils dbus gnome-keyring fish
# The SSH tests create a throwaway user and start sshd, so they run as root.
set -uo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null 2>&1 || missing+=(openssh-server)
command -v keyctl >/dev/null 2>&1 || missing+=(keyutils)
command -v dbus-run-session >/dev/null 2>&1 || missing+=(dbus)
command -v gnome-keyring-daemon >/dev/null 2>&1 || missing+=(gnome-keyring)
[ -x /usr/bin/fish ] || missing+=(fish)
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests/run.sh: missing ${missing[*]}; install with: apt-get install ${missing[*]}" >&2
  exit 2
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash tests/keychain-session.sh cargo test --workspace "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"

#!/usr/bin/env bash
# The test command: every test of the workspace, in one `cargo test` run, with its own set-up.
#
# The tests use real components: an OpenSSH sshd they start (as a throwaway user with fish as
# a refused login shell), a kernel keyring and a Secret Service, headless Chromium through
# chromedriver, and PostgreSQL. So this script
#   1. installs the Debian/Ubuntu packages that are missing (as root: `apt-get update` once,
#      then `apt-get install -y`; as anyone else it prints that command and stops);
#   2. runs `cargo test --workspace "$@"` inside a fresh session keyring and a private D-Bus
#      session with an unlocked gnome-keyring (tests/keychain-session.sh).
# The SSH tests create a throwaway user and start sshd, so run this as root.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# ---- 1. System packages ------------------------------------------------------------------
# sshd and useradd live in sbin, which a non-root PATH may leave out.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
has() { command -v "$1" >/dev/null 2>&1; }
missing=()
need() { case " ${missing[*]} " in *" $1 "*) ;; *) missing+=("$1") ;; esac; }
[ -x /usr/sbin/sshd ] || has sshd || need openssh-server
has ssh-keygen || need openssh-client
has keyctl || need keyutils
# `dbus` brings dbus-run-session (package dbus-daemon) and dbus-send (dbus-bin) with it.
has dbus-run-session || need dbus
has dbus-send || need dbus
has useradd || need passwd
has gnome-keyring-daemon || need gnome-keyring
[ -x /usr/bin/fish ] || need fish  # the path the SSH tests use
# The paths sallyport-console's browser test uses.
[ -x /usr/bin/chromium ] || need chromium
[ -x /usr/bin/chromedriver ] || need chromium-driver
# Not used by any test yet: the OAuth tests to come run an OpenID provider from npm.
has node || need nodejs
has npm || need npm

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! has apt-get; then
    echo "tests/run.sh: missing packages: ${missing[*]}" >&2
    echo "install them as root (or run this script as root, which does it):" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 2
  fi
  echo "tests/run.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null || exit 2
  apt-get install -y -qq "${missing[@]}" >/dev/null || exit 2
fi

echo "tests/run.sh: set-up took $SECONDS s" >&2

# ---- 2. The tests ------------------------------------------------------------------------
log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash tests/keychain-session.sh cargo test --workspace "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"

#!/usr/bin/env bash
# The test command: every test of the workspace, in one `cargo test` run, with its own set-up.
#
# The tests use real components: an OpenSSH sshd they start (as a throwaway user with fish as
# a refused login shell), a kernel keyring and a Secret Service, headless Chromium through
# chromedriver, and PostgreSQL. So this script
#   1. installs the Debian/Ubuntu packages that are missing (as root: `apt-get update` once,
#      then `apt-get install -y`; as anyone else it prints that command and stops);
#   2. starts a throwaway PostgreSQL cluster in a temporary directory (unix socket there,
#      TCP on 127.0.0.1 at a free port), exports SALLYPORT_PG_URL for the tests, and stops
#      and deletes it when the script exits, however it exits. A SALLYPORT_PG_URL already
#      set is used as it is, and nothing is started;
#   3. runs `cargo test --workspace "$@"` (without `--workspace` when "$@" names a package
#      with -p) inside a fresh session keyring and a private D-Bus
#      session with an unlocked gnome-keyring (tests/keychain-session.sh).
# The SSH tests create a throwaway user and start sshd, so run this as root.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# ---- 1. System packages ------------------------------------------------------------------
# sshd, useradd and runuser live in sbin, which a non-root PATH may leave out.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
has() { command -v "$1" >/dev/null 2>&1; }
# The directory of the newest PostgreSQL server binaries (Debian keeps them off PATH, under
# /usr/lib/postgresql/<version>/bin), or nothing.
pg_bindir() {
  local dir
  while IFS= read -r dir; do
    [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] && { echo "$dir"; return; }
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r)
  has initdb && has pg_ctl && has postgres && dirname "$(command -v initdb)"
}

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
has runuser || need util-linux
[ -x /usr/bin/fish ] || need fish  # the path the SSH tests use
# The paths sallyport-console's browser test uses.
[ -x /usr/bin/chromium ] || need chromium
[ -x /usr/bin/chromedriver ] || need chromium-driver
[ -n "${SALLYPORT_PG_URL:-}" ] || [ -n "$(pg_bindir)" ] || need postgresql
# The OAuth tests run an OpenID provider from npm (tests/oidc, `oidc-provider`) with node.
has node || need nodejs
has npm || need npm
# The MCP Tasks tests' client is the official Python MCP SDK (tests/mcp-py), in a virtualenv.
has python3 || need python3
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need python3-venv

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

# The provider's packages, exactly as tests/oidc/package-lock.json pins them.
if [ ! -d tests/oidc/node_modules ]; then
  echo "tests/run.sh: npm ci in tests/oidc" >&2
  (cd tests/oidc && npm ci --no-audit --no-fund >/dev/null) || {
    echo "tests/run.sh: npm ci in tests/oidc failed" >&2
    exit 2
  }
fi

# The Python MCP SDK and what it pulls in, as tests/mcp-py/requirements.txt pins them.
if ! tests/mcp-py/.venv/bin/python -c 'import mcp' >/dev/null 2>&1; then
  echo "tests/run.sh: creating tests/mcp-py/.venv" >&2
  rm -rf tests/mcp-py/.venv
  { python3 -m venv tests/mcp-py/.venv \
      && tests/mcp-py/.venv/bin/pip install -q --disable-pip-version-check \
        -r tests/mcp-py/requirements.txt >/dev/null; } || {
    echo "tests/run.sh: creating tests/mcp-py/.venv failed" >&2
    exit 2
  }
fi

# ---- 2. A throwaway PostgreSQL -----------------------------------------------------------
pgdir=""
pgbin=""
# shellcheck disable=SC2317  # pg_stop and cleanup run from the EXIT trap
pg_stop() {
  [ -n "$pgdir" ] || return 0
  if [ -f "$pgdir/data/postmaster.pid" ]; then
    as_pg "$pgbin/pg_ctl" -D "$pgdir/data" -m fast -w stop >/dev/null 2>&1 \
      || as_pg "$pgbin/pg_ctl" -D "$pgdir/data" -m immediate -w stop >/dev/null 2>&1
  fi
  rm -rf "$pgdir"
}
log=""
# shellcheck disable=SC2317
cleanup() {
  pg_stop
  [ -z "$log" ] || rm -f "$log"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# initdb and postgres refuse to run as root: as root they run as the `postgres` system user
# (the postgresql package creates it), else as whoever runs this script.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd "$pgdir" && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

if [ -z "${SALLYPORT_PG_URL:-}" ]; then
  pgbin=$(pg_bindir)
  if [ -z "$pgbin" ]; then
    echo "tests/run.sh: no PostgreSQL server binaries (initdb, pg_ctl, postgres) found" >&2
    exit 2
  fi
  pgdir=$(mktemp -d "${TMPDIR:-/tmp}/sallyport-pg.XXXXXX") || exit 2
  [ "$(id -u)" -ne 0 ] || chown postgres: "$pgdir" || exit 2
  # Trust on the socket, so the tests' admin connections need no password; real password
  # checks over TCP, which the tests of wrong passwords rely on.
  if ! as_pg "$pgbin/initdb" -D "$pgdir/data" -U postgres -E UTF8 --locale=C \
      --auth-local=trust --auth-host=scram-sha-256 >"$pgdir/initdb.log" 2>&1; then
    cat "$pgdir/initdb.log" >&2
    echo "tests/run.sh: initdb failed" >&2
    exit 2
  fi
  # A free port: the socket's name carries it and TCP listens on it; another process may
  # take it between the check and the start, so try a few. 400 connections: the fleet tests
  # run up to eight executor processes of about 14 connections each beside the other tests'
  # pools, and the server's default 100 refused some of them ("too many clients").
  port=""
  for _ in 1 2 3 4 5; do
    candidate=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null && continue
    if as_pg "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -c port=$candidate -c unix_socket_directories=$pgdir -c max_connections=400" \
        >/dev/null 2>&1; then
      port=$candidate
      break
    fi
  done
  if [ -z "$port" ]; then
    cat "$pgdir/server.log" >&2 2>/dev/null
    echo "tests/run.sh: the throwaway PostgreSQL did not start" >&2
    exit 2
  fi
  export SALLYPORT_PG_URL="host=$pgdir port=$port user=postgres dbname=postgres"
  echo "tests/run.sh: PostgreSQL $("$pgbin/postgres" -V | awk '{print $3}') for the tests: $SALLYPORT_PG_URL" >&2
fi

echo "tests/run.sh: set-up took $SECONDS s" >&2

# ---- 3. The tests ------------------------------------------------------------------------
# `-p CRATE` narrows the run to that package (cargo ignores `-p` beside `--workspace`).
scope=(--workspace)
for arg in "$@"; do
  case "$arg" in -p | -p* | --package | --package=*) scope=() ;; esac
done
log=$(mktemp)
bash tests/keychain-session.sh cargo test "${scope[@]}" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"

#!/usr/bin/env bash
# The crash campaign (issue 39 §5): builds `crash-campaign` and the executor process it kills
# (`approvals-host`, the approval tests' host), then runs it with the arguments given, e.g.
#
#   bash tests/crash-campaign.sh --scenarios 5000 --backend both --seed 20261206 --parallel 3
#
# Each scenario runs real executor processes against a fresh journal (a SQLite file, or a
# fresh database on a PostgreSQL server of the campaign's own: one per parallel lane, started
# with initdb/pg_ctl in a temporary directory, as the `postgres` user when run as root, and
# stopped and deleted at the end) and a counting HTTP upstream on 127.0.0.1, kills them with
# SIGKILL at random points, sometimes restarts the server with `pg_ctl stop -m immediate`,
# settles what they left and checks the journal against the upstream. It prints the totals
# and exits 1 if any check failed, naming the failing scenario and how to replay it alone
# (`--seed S --only I`). CI runs a short form inside `cargo test`
# (tests/tests/integration/crash_campaign.rs).
#
# Needs the PostgreSQL server binaries (initdb, pg_ctl: Debian's `postgresql` package, which
# tests/run.sh installs) and, as root, `runuser`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p sallyport-tests --bin crash-campaign --bin approvals-host
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# Run copies, so that a build beside a long run does not swap the binaries under it.
bin=$(mktemp -d "${TMPDIR:-/tmp}/crash-campaign.XXXXXX")
trap 'rm -rf "$bin"' EXIT
cp "$target_dir/debug/crash-campaign" "$target_dir/debug/approvals-host" "$bin/"
"$bin/crash-campaign" --host "$bin/approvals-host" "$@"

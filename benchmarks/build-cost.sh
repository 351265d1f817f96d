#!/usr/bin/env bash
# What a program pays to build sallyport: for each of two programs outside the workspace, the
# number of packages it compiles (`cargo tree`) and one cold debug build's wall and CPU time.
#
#   hello  sallyport-core with its default features + sallyport-http (hello_http's set)
#   lean   sallyport-core without default features + sallyport-http + sallyport-postgres
#
# usage: bash benchmarks/build-cost.sh [REV]
# With REV (e.g. a commit before a change), the same two programs are measured against that
# revision too, each build alternating with the current tree's, all on the workspace's
# Cargo.lock of each tree, offline. Needs `time` (/usr/bin/time) and bc.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/rev" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

measure() { # TREE LABEL DEFAULTS WITH_POSTGRES
  local tree=$1 label=$2 defaults=$3 pg=$4 dir="$work/$2"
  mkdir -p "$dir/src"
  local extra=""
  [ "$pg" = yes ] && extra="sallyport-postgres = { path = \"$tree/sallyport-postgres\" }"
  cat > "$dir/Cargo.toml" <<TOML
[package]
name = "build-cost"
version = "0.0.0"
edition = "2024"
publish = false
[workspace]
[dependencies]
sallyport-core = { path = "$tree/sallyport-core", default-features = $defaults }
sallyport-http = { path = "$tree/sallyport-http" }
$extra
tokio = { version = "1.47", features = ["rt", "macros"] }
serde = { version = "1", features = ["derive"] }
schemars = "1.2"
TOML
  echo 'fn main() { let _ = sallyport_core::Catalog::builder(); let _ = sallyport_http::HttpChannel::builder(); }' > "$dir/src/main.rs"
  cp "$tree/Cargo.lock" "$dir/"
  local n
  n=$(cd "$dir" && cargo tree --offline -e normal,build --prefix none --format '{p}' 2>/dev/null | awk '{print $1}' | sort -u | wc -l)
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  (cd "$dir" && /usr/bin/time -f "%e %U %S" -o "$dir/time" cargo build --offline --quiet 2>/dev/null)
  local wall user sys
  read -r wall user sys < "$dir/time"
  printf '%-14s packages %3d   wall %6.1f s   cpu %6.1f s   load before %s\n' \
    "$label" "$n" "$wall" "$(echo "$user + $sys" | bc)" "$load"
  rm -rf "$dir"
}

if [ -n "$rev" ]; then
  git -C "$root" worktree add --detach "$work/rev" "$rev" >/dev/null 2>&1
fi
for program in "hello true no" "lean false yes"; do
  set -- $program
  measure "$root" "$1" "$2" "$3"
  [ -n "$rev" ] && measure "$work/rev" "$1@$rev" "$2" "$3"
done

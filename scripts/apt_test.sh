#!/usr/bin/env bash
# Tests scripts/apt.sh's wait for another package manager, against an fcntl lock
# (as apt and dpkg take) held on a temporary file: nothing of the real dpkg lock.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/apt.sh
source scripts/apt.sh
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
lock=$dir/lock-frontend
touch "$lock"
apt_locks=("$lock")
fail() { echo "FAIL scripts/apt.sh: $*" >&2; exit 1; }

if apt_lock_holder >/dev/null; then fail "a free lock is reported held"; fi
/usr/bin/python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "w"); fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").close(); time.sleep(float(sys.argv[3]))' "$lock" "$dir/locked" 3 &
holder=$!
until [ -e "$dir/locked" ]; do sleep 0.05; done
[ "$(apt_lock_holder)" = "$holder" ] || fail "holder $(apt_lock_holder || true), want $holder"
if VIRGA_APT_WAIT=1 apt_wait 2>"$dir/err1"; then fail "apt_wait returned at once while the lock was held"; fi
grep -q "still holds the dpkg lock after 1s" "$dir/err1" || fail "no message on giving up: $(cat "$dir/err1")"
start=$SECONDS
VIRGA_APT_WAIT=30 apt_wait 2>"$dir/err2" || fail "apt_wait gave up: $(cat "$dir/err2")"
grep -q "waiting for pid $holder" "$dir/err2" || fail "no message while waiting: $(cat "$dir/err2")"
wait "$holder"
echo "ok  scripts/apt.sh waits for the dpkg lock ($((SECONDS - start))s here) and gives up with a message"

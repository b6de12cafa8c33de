#!/usr/bin/env bash
# Installs (if missing) and starts a local PostgreSQL cluster "main" for Virga's tests,
# of whatever major version Debian installs (an existing "main" cluster's if there is
# one), with a database "virga_test" that user "virga" (password "virga") owns,
# reachable on 127.0.0.1:5432. Prints the URL to use as VIRGA_TEST_POSTGRES.
#   scripts/postgres.sh start     install, create and start (idempotent)
#   scripts/postgres.sh stop      stop the cluster
#   scripts/postgres.sh status    exit 0 if the cluster is online
#   scripts/postgres.sh version   the major version used (empty if none is installed)
#   scripts/postgres.sh url
set -euo pipefail
cmd=${1:-start}
url="postgres://virga:virga@127.0.0.1:5432/virga_test?sslmode=disable"
# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

# version: the major version of the "main" cluster if one exists, else the newest
# server installed under /usr/lib/postgresql.
version() {
  local v=""
  if command -v pg_lsclusters >/dev/null; then
    v=$(pg_lsclusters -h 2>/dev/null | awk '$2 == "main" {print $1}' | sort -n | tail -n 1)
  fi
  if [ -z "$v" ]; then
    v=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null |
      awk -F/ '$5 ~ /^[0-9]+$/ {print $5}' | sort -n | tail -n 1)
  fi
  echo "$v"
}

online() { # online VERSION
  pg_lsclusters -h 2>/dev/null | awk -v v="$1" '$1 == v && $2 == "main" {print $4}' | grep -q online
}

case "$cmd" in
url) echo "$url"; exit 0 ;;
version) version; exit 0 ;;
status)
  v=$(version)
  if [ -n "$v" ] && online "$v"; then exit 0; fi
  exit 1 ;;
stop)
  v=$(version)
  if [ -n "$v" ]; then pg_ctlcluster "$v" main stop 2>/dev/null || true; fi
  exit 0 ;;
start) ;;
*) echo "usage: $0 start|stop|status|version|url" >&2; exit 2 ;;
esac
v=$(version)
if ! command -v pg_ctlcluster >/dev/null || [ -z "$v" ]; then
  echo "== installing postgresql" >&2
  apt_install postgresql
  v=$(version)
  if [ -z "$v" ]; then
    echo "postgresql is installed but no server is under /usr/lib/postgresql/*/bin" >&2
    exit 1
  fi
fi
if ! pg_lsclusters -h | awk -v v="$v" '$1 == v && $2 == "main" {found=1} END {exit !found}'; then
  pg_createcluster "$v" main >/dev/null
fi
if ! online "$v"; then
  pg_ctlcluster "$v" main start
fi
for _ in $(seq 1 50); do
  su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
  sleep 0.2
done
su postgres -c "psql -qAtc \"select 1 from pg_roles where rolname='virga'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"create role virga login password 'virga' createdb\""
su postgres -c "psql -qAtc \"select 1 from pg_database where datname='virga_test'\"" | grep -q 1 ||
  su postgres -c "psql -qc 'create database virga_test owner virga'"
echo "$url"

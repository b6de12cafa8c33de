#!/usr/bin/env bash
# Installs (if missing) and starts a local PostgreSQL 15 cluster for Virga's tests,
# with a database "virga_test" that user "virga" (password "virga") owns, reachable
# on 127.0.0.1:5432. Prints the URL to use as VIRGA_TEST_POSTGRES.
#   scripts/postgres.sh start | stop | url
set -euo pipefail
cmd=${1:-start}
url="postgres://virga:virga@127.0.0.1:5432/virga_test?sslmode=disable"
case "$cmd" in
url) echo "$url"; exit 0 ;;
stop) pg_ctlcluster 15 main stop 2>/dev/null || true; exit 0 ;;
start) ;;
*) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
if ! command -v pg_ctlcluster >/dev/null || [ ! -d /usr/lib/postgresql/15 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq postgresql >/dev/null
fi
if ! pg_lsclusters -h | grep -q '^15 *main'; then
  pg_createcluster 15 main >/dev/null
fi
if ! pg_lsclusters -h | awk '$1==15 && $2=="main" {print $4}' | grep -q online; then
  pg_ctlcluster 15 main start
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

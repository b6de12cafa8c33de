#!/usr/bin/env bash
# Virga's whole test suite, from a fresh clone on a fresh Debian machine:
# installs what is missing (PostgreSQL, Python with PyTorch, Optuna and matplotlib), starts PostgreSQL,
# runs every Go test with the race detector, the Python tests, and a short fuzz
# pass of every parser, then stops what it started.
#   scripts/test.sh            everything
#   VIRGA_TEST_QUICK=1 ...     skip the fuzz pass
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

need=()
command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /usr/lib/postgresql/15 ] || need+=(postgresql)
/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1 || need+=(python3-torch python3-numpy)
/usr/bin/python3 -c 'import optuna, matplotlib' >/dev/null 2>&1 || need+=(python3-optuna python3-matplotlib)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

started_pg=0
if ! pg_lsclusters -h 2>/dev/null | awk '$1==15 && $2=="main" {print $4}' | grep -q online; then
  started_pg=1
fi
VIRGA_TEST_POSTGRES=$(scripts/postgres.sh start | tail -n 1)
export VIRGA_TEST_POSTGRES
cleanup() {
  if [ "$started_pg" = 1 ]; then scripts/postgres.sh stop; fi
}
trap cleanup EXIT

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -timeout 20m ./... 2>&1 | tee /tmp/virga-go-test.log

echo "== python tests (SDK, the PyTorch example, the search benchmark's scorer and Optuna replay)"
/usr/bin/python3 -m unittest discover -s sdk/python -t sdk/python
if [ -f examples/digits-torch/test_train.py ]; then
  /usr/bin/python3 -m unittest discover -s examples/digits-torch -p 'test_*.py'
fi
/usr/bin/python3 -m unittest discover -s bench/search -p 'test_*.py'


if [ -z "${VIRGA_TEST_QUICK:-}" ]; then
  echo "== fuzz (15s per parser: experiment files, report bodies, VIRGA_METRIC lines, searcher snapshots, benchmark tables, learning curves, capacity traces)"
  go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 15s -fuzzminimizetime 3s ./internal/spec
  go test -run '^$' -fuzz '^FuzzReportDecode$' -fuzztime 15s -fuzzminimizetime 3s ./internal/api
  go test -run '^$' -fuzz '^FuzzMetricLine$' -fuzztime 15s -fuzzminimizetime 3s ./internal/backend/local
  go test -run '^$' -fuzz '^FuzzRestore$' -fuzztime 15s -fuzzminimizetime 3s ./internal/search
  go test -run '^$' -fuzz '^FuzzRead$' -fuzztime 15s -fuzzminimizetime 3s ./internal/search/replay
  go test -run '^$' -fuzz '^FuzzPredict$' -fuzztime 15s -fuzzminimizetime 3s ./internal/search/curve
  for f in FuzzAvailability FuzzGCPPrices FuzzAWSPrices; do
    go test -run '^$' -fuzz "^$f\$" -fuzztime 10s -fuzzminimizetime 3s ./internal/capacity/trace
  done
fi
echo "== all tests passed"

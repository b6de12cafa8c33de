#!/usr/bin/env bash
# Virga's whole test suite, from a fresh clone on a fresh Debian machine:
# installs what is missing (PostgreSQL of Debian's version, gcc for the race detector, Python with PyTorch, Optuna,
# matplotlib and scikit-learn, Slurm), waiting for another apt to finish; starts PostgreSQL and a single-host Slurm
# cluster (scripts/slurm.sh, which adds a line for its nodes to /etc/hosts), installs ONNX Runtime's library
# (scripts/onnxruntime.sh), runs every Go test with the race detector, the Kubernetes backend's end-to-end tests
# against a real control plane whose nodes KWOK plays (scripts/kube.sh, which builds it on the first run: about
# 1,000 CPU-seconds from cold caches), the Python tests, and a short fuzz pass of every parser, then stops what it
# started (on failure or interrupt too).
#   scripts/test.sh            everything
#   VIRGA_TEST_QUICK=1 ...     skip the fuzz pass
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

# shellcheck source=scripts/apt.sh
source scripts/apt.sh
need=()
command -v pg_ctlcluster >/dev/null 2>&1 && [ -n "$(scripts/postgres.sh version)" ] || need+=(postgresql)
# The race detector needs cgo, and cgo a C compiler.
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1 || need+=(python3-torch python3-numpy)
/usr/bin/python3 -c 'import optuna, matplotlib' >/dev/null 2>&1 || need+=(python3-optuna python3-matplotlib)
/usr/bin/python3 -c 'import sklearn' >/dev/null 2>&1 || need+=(python3-sklearn)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  apt_install "${need[@]}"
fi

started_pg=0
scripts/postgres.sh status || started_pg=1
VIRGA_TEST_POSTGRES=$(scripts/postgres.sh start | tail -n 1)
export VIRGA_TEST_POSTGRES
started_slurm=0
scripts/slurm.sh status >/dev/null 2>&1 || started_slurm=1
started_kube=0
cleanup() {
  if [ "$started_kube" = 1 ]; then scripts/kube.sh stop; fi
  if [ "$started_slurm" = 1 ]; then scripts/slurm.sh stop; fi
  if [ "$started_pg" = 1 ]; then scripts/postgres.sh stop; fi
}
trap cleanup EXIT
scripts/slurm.sh start
export VIRGA_TEST_SLURM=1

echo "== script tests"
scripts/apt_test.sh

echo "== go mod tidy (go.mod and go.sum must be tidy)"
if ! go mod tidy -diff; then
  echo "go.mod or go.sum is not tidy: run go mod tidy and commit the result" >&2
  exit 1
fi

# cmd/virga links the Kubernetes backend and the cloud object stores only with the build tags kubernetes and
# cloud (their own packages' tests run in every build): vet each combination.
echo "== go vet (no tags; -tags kubernetes; -tags cloud; -tags kubernetes,cloud)"
for tags in "" kubernetes cloud kubernetes,cloud; do
  go vet -tags "$tags" ./...
done

echo "== ONNX Runtime's library for the inference engine's tests (installed once, cached)"
VIRGA_ONNXRUNTIME=$(scripts/onnxruntime.sh | tail -n 1)
export VIRGA_ONNXRUNTIME

echo "== go test -race"
go test -race -timeout 20m ./... 2>&1 | tee /tmp/virga-go-test.log
echo "== go test -race -tags kubernetes,cloud (cmd/virga's wiring of the drivers)"
go test -race -tags kubernetes,cloud -run 'TestDriversOfThisBuild|TestCoreLinksNoDriverSDK' ./cmd/virga 2>&1 | tee -a /tmp/virga-go-test.log

# The Kubernetes backend against a real control plane (etcd, kube-apiserver,
# controller-manager, scheduler) whose nodes KWOK plays: scripts/kube.sh builds its
# binaries on the first run (cached in ~/.cache/virga/kube; it prints its progress) and
# starts it; what this script started is stopped on exit, failure or interrupt.
echo "== Kubernetes end-to-end tests (scripts/kube.sh: a real control plane, 200 KWOK nodes)"
scripts/kube.sh status >/dev/null 2>&1 || started_kube=1
scripts/kube.sh start >/dev/null
eval "$(scripts/kube.sh env)"
go test -race -timeout 20m -run KWOK ./internal/backend/kube 2>&1 | tee -a /tmp/virga-go-test.log
if [ "$started_kube" = 1 ]; then scripts/kube.sh stop; started_kube=0; fi
unset KUBECONFIG VIRGA_TEST_KWOK

echo "== python tests (SDK, the PyTorch example, the search benchmark's scorer and Optuna replay)"
/usr/bin/python3 -m unittest discover -s sdk/python -t sdk/python
if [ -f examples/digits-torch/test_train.py ]; then
  /usr/bin/python3 -m unittest discover -s examples/digits-torch -p 'test_*.py'
fi
/usr/bin/python3 -m unittest discover -s bench/search -p 'test_*.py'


# fuzz TARGET SECONDS PACKAGE: fuzz one target. Go 1.26's fuzzing coordinator can
# end a run with a bare "context deadline exceeded" when -fuzztime expires while a
# worker is busy (golang/go#75804, fixed in Go 1.27): such a run found nothing and
# wrote no failing input, so it is run once more; any other failure fails.
fuzz() {
  local log
  log=$(mktemp)
  for attempt in 1 2; do
    if go test -run '^$' -fuzz "^$1\$" -fuzztime "$2s" -fuzzminimizetime 3s "$3" >"$log" 2>&1; then
      tail -n 1 "$log"; rm -f "$log"; return 0
    fi
    if [ "$attempt" = 1 ] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
      echo "$1: the fuzzing coordinator's deadline race (no failing input); running it again"
      continue
    fi
    cat "$log"; rm -f "$log"; return 1
  done
}

if [ -z "${VIRGA_TEST_QUICK:-}" ]; then
  echo "== fuzz (15s per parser: experiment files, capacity files, report bodies, VIRGA_METRIC lines, searcher snapshots, benchmark tables, learning curves; 10s per capacity trace format, squeue and scontrol output, checkpoint archives, the agent's spec, model manifests and virga.mlp/v1 files)"
  fuzz FuzzParse 15 ./internal/spec
  fuzz FuzzParseCapacity 15 ./internal/spec
  fuzz FuzzReportDecode 15 ./internal/api
  fuzz FuzzMetricLine 15 ./internal/backend/local
  fuzz FuzzParseQueue 10 ./internal/backend/slurm
  fuzz FuzzParseScontrol 10 ./internal/backend/slurm
  fuzz FuzzExtractArchive 10 ./internal/checkpoint
  fuzz FuzzDecode 10 ./internal/agent
  fuzz FuzzMetricScanner 10 ./internal/agent
  fuzz FuzzReadModel 10 ./elastic
  fuzz FuzzDecodeDeltas 10 ./elastic
  for f in FuzzCSV FuzzJSONLines FuzzLibSVM FuzzLibSVMWidth FuzzRanges; do
    fuzz "$f" 10 ./elastic/input
  done
  fuzz FuzzRestore 15 ./internal/search
  fuzz FuzzRead 15 ./internal/search/replay
  fuzz FuzzPredict 15 ./internal/search/curve
  fuzz FuzzDecodeManifest 10 ./internal/serve/engine
  fuzz FuzzDecode 10 ./internal/serve/runtime/mlp
  for f in FuzzAvailability FuzzGCPPrices FuzzAWSPrices; do
    fuzz "$f" 10 ./internal/capacity/trace
  done
fi
echo "== all tests passed"

#!/usr/bin/env bash
# The live goodput benchmark: `virga serve` per batching policy on a model repository (bench/serve/models.py),
# loaded open-loop by `virga bench serve` from the same machine.
#   bench/serve/live.sh capacity VIRGA REPO MODEL OBJECTIVE RATE...     goodput per second at each rate (fixed)
#   bench/serve/live.sh run VIRGA REPO MODEL OBJECTIVE CAPACITY SECONDS  every policy at 50-95% of CAPACITY,
#                                                                        Poisson and Azure, as JSON lines
# VIRGA_ONNXRUNTIME must name ONNX Runtime's library (scripts/onnxruntime.sh path).
set -euo pipefail
mode=$1 virga=$2 repo=$3 model=$4 objective=$5
shift 5
addr=127.0.0.1:18431
azure=${AZURE:-/work/shared/data/azure-llm-inference-trace-2023/data/AzureLLMInferenceTrace_conv.csv}
server=""
stop() { if [ -n "$server" ]; then kill "$server"; wait "$server" 2>/dev/null || true; server=""; fi; }
trap stop EXIT
start() { # policy
  "$virga" serve --repository "$repo" --http "$addr" --grpc "" --batching "$1" --objective "$objective" \
    --pin "$model" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 100); do
    curl -sf "http://$addr/v2/models/$model/ready" >/dev/null && return 0
    sleep 0.1
  done
  echo "server did not become ready" >&2
  exit 1
}
bench() { # arrivals rate seconds
  "$virga" --json bench serve --url "http://$addr" --model "$model" --arrivals "$1" --rate "$2" \
    --duration "$3s" --slo "$objective" | jq -c .
}
case $mode in
capacity)
  start fixed
  for rate in "$@"; do
    bench poisson "$rate" 3 | sed "s/^{/{\"policy\":\"fixed\",/"
  done
  ;;
run)
  capacity=$1 seconds=$2
  for policy in ${POLICIES:-deadline fixed fixed:1ms fixed:5ms aimd none}; do
    start "$policy"
    for arrivals in poisson "trace:$azure"; do
      for load in 0.5 0.7 0.9 0.95; do
        rate=$(awk "BEGIN{print $capacity*$load}")
        bench "$arrivals" "$rate" "$seconds" | sed "s/^{/{\"policy\":\"$policy\",\"load\":$load,/"
      done
    done
    stop
  done
  ;;
esac

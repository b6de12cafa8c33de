#!/usr/bin/env bash
# The search benchmark in one command: Virga's replay, Optuna's replay and the comparison,
# for every table in bench/search/tables (or the tables named on the command line).
#
#   bench/search/run.sh                      # all tables, 20 seeds, 4 workers
#   bench/search/run.sh digits-mlp           # one table (a name or a .json.gz path)
#   SEEDS=3 bench/search/run.sh bench/search/testdata/tiny.json.gz   # a quick try
#
# Environment: SEEDS (20), WORKERS (4), SUGGEST (index: numeric dimensions as grid indices; float: as
# float ranges snapped to the nearest grid value, a continuous space; use another OUT for it), BUDGET_X (budget = BUDGET_X x the table's epochs, 50, passed
# to both replays so that they match), JOBS (parallel Optuna runs, 2), OUT (bench/search/results),
# VIRGA_METHODS / OPTUNA_METHODS (comma lists of the methods to run, e.g. 'virga auto' and
# 'optuna random+sha,optuna tpe'; default all), SKIP_VIRGA=1 / SKIP_OPTUNA=1 (reuse the results
# already in OUT), CHECK=1 (exit 1 when a verdict is FAIL).
#
# Writes OUT/virga-<table>.jsonl and OUT/optuna-<table>.jsonl (not in git), then OUT/<table>.png
# and OUT/results.md (the comparison tables and verdicts, in git). Run it from anywhere.
set -euo pipefail

cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-20}
WORKERS=${WORKERS:-4}
BUDGET_X=${BUDGET_X:-50}
JOBS=${JOBS:-2}
SUGGEST=${SUGGEST:-index}
OUT=${OUT:-bench/search/results}
VIRGA_METHODS=${VIRGA_METHODS:-}
OPTUNA_METHODS=${OPTUNA_METHODS:-}
PY=/usr/bin/python3 # Debian's python3-optuna imports only under this interpreter

tables=()
if [ $# -gt 0 ]; then
	for t in "$@"; do
		if [ -f "$t" ]; then tables+=("$t"); else tables+=("bench/search/tables/$t.json.gz"); fi
	done
else
	tables=(bench/search/tables/*.json.gz)
fi
for t in "${tables[@]}"; do
	[ -f "$t" ] || { echo "run.sh: no table $t" >&2; exit 2; }
done
mkdir -p "$OUT"

virga=""
if [ "${SKIP_VIRGA:-}" != 1 ]; then
	if [ -f bench/search/replay/main.go ]; then
		virga=$(mktemp -d)/replay
		trap 'rm -rf "$(dirname "$virga")"' EXIT
		go build -o "$virga" ./bench/search/replay
	else
		echo "run.sh: bench/search/replay does not exist yet: Virga's side is skipped" >&2
	fi
fi

results=()
for t in "${tables[@]}"; do
	name=$(basename "$t" .json.gz)
	epochs=$("$PY" -c 'import gzip, json, sys; print(json.load(gzip.open(sys.argv[1]))["epochs"])' "$t")
	budget=$((BUDGET_X * epochs))
	if [ -n "$virga" ]; then
		echo "== virga replay: $name ($SEEDS seeds, $WORKERS workers, budget $budget epochs)" >&2
		start=$(date +%s)
		"$virga" --table "$t" --seeds "$SEEDS" --workers "$WORKERS" --budget-epochs "$budget" --suggest "$SUGGEST" \
			${VIRGA_METHODS:+--methods "$VIRGA_METHODS"} --out "$OUT/virga-$name.jsonl"
		echo "== virga replay: $name took $(($(date +%s) - start)) s" >&2
	fi
	if [ "${SKIP_OPTUNA:-}" != 1 ]; then
		echo "== optuna replay: $name ($SEEDS seeds, $WORKERS workers, budget $budget epochs, $JOBS jobs)" >&2
		start=$(date +%s)
		"$PY" bench/search/optuna_replay.py --table "$t" --seeds "$SEEDS" --workers "$WORKERS" \
			--budget-epochs "$budget" --jobs "$JOBS" --suggest "$SUGGEST" --quiet \
			${OPTUNA_METHODS:+--methods "$OPTUNA_METHODS"} --out "$OUT/optuna-$name.jsonl"
		echo "== optuna replay: $name took $(($(date +%s) - start)) s" >&2
	fi
	for f in "$OUT/virga-$name.jsonl" "$OUT/optuna-$name.jsonl"; do
		if [ -f "$f" ]; then results+=("$f"); fi
	done
done

[ ${#results[@]} -gt 0 ] || { echo "run.sh: no results to compare" >&2; exit 1; }
tabledirs=()
for t in "${tables[@]}"; do tabledirs+=(--table "$t"); done
check=()
if [ "${CHECK:-}" = 1 ]; then check=(--check); fi
"$PY" bench/search/compare.py "${results[@]}" "${tabledirs[@]}" \
	--plot "$OUT/{table}.png" --markdown "$OUT/results.md" "${check[@]}"

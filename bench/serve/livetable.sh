#!/usr/bin/env bash
# Print the live runs' JSON lines (bench/serve/live.sh run) as tables: % of requests answered within the objective.
set -euo pipefail
for f in "$@"; do
  jq -rs '
    def pols: ["deadline","fixed","fixed:1ms","fixed:5ms","aimd","none","deadline-old"];
    (.[0].model) as $m | (.[0].slo_ms) as $slo |
    ["poisson","trace"][] as $a |
    "\n\($m), live, \($a) arrivals, objective \($slo) ms: % answered within the objective",
    ([" load"] + [pols[] | .] | map(.[0:13]) | map(if length < 13 then (" " * (13 - length)) + . else . end) | join("")),
    ([0.5,0.7,0.9,0.95][] as $l |
      ([("  " + (($l*100)|tostring) + "%")] +
       [pols[] as $p | (map(select(.policy==$p and .load==$l and (.arrivals|startswith($a)))) | first) as $r |
        if $r == null then "-" else ((10000*$r.on_time/$r.requests|floor)/100|tostring) + "%" end]
      | map(if length < 13 then (" " * (13 - length)) + . else . end) | join("")))
  ' "$f"
done

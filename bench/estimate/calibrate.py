#!/usr/bin/python3
"""Estimates calibrated on earlier runs against what happened.

For each case of run.py, in a directory of its own, it runs the experiment
--runs times with `virga run --capacity` (each run after the first is
submitted with the estimate made from the history before it, so each one
that completes is a calibration pair). Before each run after the first it
asks `virga estimate --json` twice: as it is (calibrated once 3 earlier runs
were submitted with an estimate) and with `--unmodelled 0.3` (the fixed
spread, never calibrated). It prints both beside the run's actual wall time,
and at the end, over the runs whose estimate was calibrated, the median
absolute error of each's median and how often the actual fell inside each's
p10-p90.

  /usr/bin/python3 bench/estimate/calibrate.py [--virga bin/virga] [--cases a,b] [--runs 7]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as bench  # noqa: E402


def plan_of(rep, plan):
    for p in rep["plans"]:
        if p["plan"] == plan:
            return {"p50": bench.dur(p.get("wall_p50", p["wall"])), "p10": bench.dur(p["wall_p10"]), "p90": bench.dur(p["wall_p90"])}
    raise RuntimeError("no plan %s" % plan)


def case(virga, name, spec, runs):
    file, top, hps, pools, _ = spec
    d = tempfile.mkdtemp(prefix="virga-calibrate-%s-" % name)
    rows = []
    try:
        with open(os.path.join(bench.ROOT, file)) as f:
            e = yaml.safe_load(f)
        e["name"] = "cal-" + name
        e["entrypoint"]["workdir"] = bench.ROOT
        e.update(top)
        e["hyperparameters"].update(hps)
        with open(os.path.join(d, "e.yaml"), "w") as f:
            yaml.safe_dump(e, f)
        with open(os.path.join(d, "capacity.yaml"), "w") as f:
            yaml.safe_dump({"pools": pools}, f)
        plan = "spot-only" if pools[0]["market"] == "spot" else "on-demand"
        est = [virga, "estimate", "e.yaml", "--capacity", "capacity.yaml", "--samples", "200", "--json"]
        for i in range(1, runs + 1):
            row = {"case": name, "run": i}
            if i > 1:
                cal = json.loads(bench.run(est, d).stdout)
                row["calibrated"] = plan_of(cal, plan)
                row["calibration"] = cal.get("calibration")
                row["fixed"] = plan_of(json.loads(bench.run(est + ["--unmodelled", "0.3"], d).stdout), plan)
            bench.run([virga, "run", "e.yaml", "--capacity", "capacity.yaml"], d, check=False)
            row["actual"] = bench.actual(virga, d, i)["wall"]
            rows.append(row)
            if i > 1:
                c, f, a = row["calibrated"], row["fixed"], row["actual"]
                cal = row["calibration"]
                how = "on %d runs, median %.2f" % (cal["pairs"], cal["median"]) if cal else "not calibrated"
                print("%-14s run %d  calibrated %6.1f [%6.1f-%6.1f] %s (%s)  fixed 0.3 %6.1f [%6.1f-%6.1f] %s  actual %6.1f" % (
                    name, i, c["p50"], c["p10"], c["p90"], "in " if c["p10"] <= a <= c["p90"] else "OUT", how,
                    f["p50"], f["p10"], f["p90"], "in " if f["p10"] <= a <= f["p90"] else "OUT", a))
                sys.stdout.flush()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--virga", default=os.path.join(bench.ROOT, "bin/virga"))
    ap.add_argument("--cases", default="go-random-sec")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    if not os.path.exists(args.virga):
        bench.run(["go", "build", "-o", args.virga, "./cmd/virga"], bench.ROOT)
    virga = os.path.abspath(args.virga)
    rows = []
    for name in args.cases.split(","):
        rows += case(virga, name, bench.CASES[name], args.runs)
    judged = [r for r in rows if r.get("calibration")]
    if not judged:
        print("no run was estimated with a calibration (fewer than 3 earlier runs completed with an estimate)")
        return
    print()
    for k in ("calibrated", "fixed"):
        errs = [abs(r[k]["p50"] - r["actual"]) / r["actual"] for r in judged]
        inside = sum(r[k]["p10"] <= r["actual"] <= r[k]["p90"] for r in judged)
        print("%-10s over %d calibrated runs: median |error| of the median %3.0f%%; actual inside p10-p90 %d of %d" % (
            k, len(judged), 100 * statistics.median(errs), inside, len(judged)))


if __name__ == "__main__":
    main()

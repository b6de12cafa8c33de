#!/usr/bin/python3
"""Forecasts before a run against what happened.

For each case (an example experiment, a searcher, a capacity with its billing),
in a directory of its own:

  1. `virga estimate --profile N --json`: the forecast from profiling alone
     (a few configurations spanning the space, run here);
  2. a first run (`virga run --capacity`): the history;
  3. `virga estimate --json`: the forecast from that history;
  4. a second run, the actual the two forecasts are judged against.

It prints, per case, the forecast wall time and cost (mean, p10-p90) of the
plan the run used, the actual, and the errors; then the median absolute
errors and how often the actual fell inside the forecast's p10-p90.

  /usr/bin/python3 bench/estimate/run.py [--virga bin/virga] [--cases a,b] [--json out.json]

Run it from the repository root on an otherwise idle machine: the profile
and the runs measure the same machine.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def pool(name, market="on-demand", billing=None, nodes=1, cpu=2, extra=None):
    p = {"name": name, "backend": "local", "node": {"cpu": cpu, "memory": "4GiB"}, "nodes": nodes,
         "market": market, "price": 3.06 if market == "on-demand" else 0.918}
    if billing:
        p["billing"] = billing
    if extra:
        p.update(extra)
    return p


SPOT = pool("spot", market="spot", billing="per-second", nodes=2, extra={
    "on_demand_price": 3.06,
    "preemption": {"trace": os.path.join(ROOT, "examples/capacity/traces/us-east-1f_v100_1.json"),
                   "speed": 60, "offset": "28h46m"},
    "warning": "2s", "restart_overhead": "5s"})

# name: (experiment file, edits of its top-level keys, hyperparameter edits, pools, profile steps)
CASES = {
    "go-random-min": ("examples/digits-go/experiment.yaml", {"max_trials": 12}, {}, [pool("od")], 5),
    "go-random-sec": ("examples/digits-go/experiment.yaml", {}, {}, [pool("od", billing="per-second")], 5),
    "go-tpe": ("examples/digits-go/experiment.yaml", {"searcher": "tpe", "max_trials": 10}, {}, [pool("od", billing="per-second")], 5),
    "go-asha-stop": ("examples/digits-go/experiment-tpe-asha.yaml", {"searcher": {"sampler": "tpe", "stopper": "asha", "mode": "stop",
                     "min_resource": 1, "max_resource": 9, "reduction_factor": 3, "startup_trials": 6}}, {}, [pool("od", billing="per-second")], 5),
    "go-asha-promote": ("examples/digits-go/experiment-tpe-asha.yaml", {}, {}, [pool("od")], 5),
    "go-curve": ("examples/digits-go/experiment-curve.yaml", {}, {}, [pool("od", billing="per-second")], 5),
    "go-pbt": ("examples/digits-go/experiment-pbt.yaml", {}, {}, [pool("od", billing="per-second")], 5),
    "go-spot": ("examples/digits-go/experiment.yaml", {}, {}, [SPOT], 5),
    "go-wide-slow": ("examples/digits-go/experiment.yaml", {"max_trials": 6}, {"hidden": {"type": "int", "min": 128, "max": 512},
                     "batch": 8, "epochs": 6}, [pool("od", billing="per-second")], 3),
    "go-4-at-once": ("examples/digits-go/experiment.yaml", {"max_concurrent": 4, "resources": {"cpu": 0.5}}, {}, [pool("od", billing="per-second")], 5),
    "torch-random": ("examples/digits-torch/experiment-quick.yaml", {"max_trials": 4}, {}, [pool("od", billing="per-second")], 2),
    "torch-random-min": ("examples/digits-torch/experiment-quick.yaml", {"max_trials": 4, "max_concurrent": 1}, {"epochs": 4}, [pool("od")], 2),
}


def run(cmd, cwd, check=True):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return p


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))


def dur(ns):
    return ns / 1e9


def actual(virga, d, exp_id):
    e = json.loads(run([virga, "show", str(exp_id), "--json"], d).stdout)["experiment"]
    return {"wall": (ts(e["ended_at"]) - ts(e["created_at"])).total_seconds(), "cost": e.get("cost", 0.0),
            "state": e["state"], "counts": e.get("counts", {})}


def forecast(rep, plan):
    for p in rep["plans"]:
        if p["plan"] == plan:
            return {"wall": dur(p["wall"]), "wall_p10": dur(p["wall_p10"]), "wall_p90": dur(p["wall_p90"]),
                    "cost": p["cost"], "cost_p10": p["cost_p10"], "cost_p90": p["cost_p90"], "source": rep["source"]}
    raise RuntimeError("no plan %s in %s" % (plan, [p["plan"] for p in rep["plans"]]))


def case(virga, name, spec):
    file, top, hps, pools, steps = spec
    d = tempfile.mkdtemp(prefix="virga-estimate-%s-" % name)
    try:
        with open(os.path.join(ROOT, file)) as f:
            e = yaml.safe_load(f)
        e["name"] = "est-" + name
        e["entrypoint"]["workdir"] = ROOT
        e.update(top)
        e["hyperparameters"].update(hps)
        with open(os.path.join(d, "e.yaml"), "w") as f:
            yaml.safe_dump(e, f)
        with open(os.path.join(d, "capacity.yaml"), "w") as f:
            yaml.safe_dump({"pools": pools}, f)
        plan = "spot-only" if pools[0]["market"] == "spot" else "on-demand"
        est = ["estimate", "e.yaml", "--capacity", "capacity.yaml", "--samples", "200", "--json"]
        prof = json.loads(run([virga] + est + ["--profile", str(steps)], d).stdout)
        run([virga, "run", "e.yaml", "--capacity", "capacity.yaml"], d, check=False)
        hist = json.loads(run([virga] + est, d).stdout)
        run([virga, "run", "e.yaml", "--capacity", "capacity.yaml"], d, check=False)
        return {"case": name, "plan": plan, "profile": forecast(prof, plan), "history": forecast(hist, plan),
                "actual": actual(virga, d, 2)}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def err(f, a, k):
    return (f[k] - a[k]) / a[k] if a[k] else float("nan")


def inside(f, a, k):
    tol = 1e-6 * max(abs(a[k]), 1e-9)
    return f[k + "_p10"] - tol <= a[k] <= f[k + "_p90"] + tol


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--virga", default=os.path.join(ROOT, "bin/virga"))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--json")
    args = ap.parse_args()
    if not os.path.exists(args.virga):
        run(["go", "build", "-o", args.virga, "./cmd/virga"], ROOT)
    virga = os.path.abspath(args.virga)
    rows = []
    print("%-16s %-8s %26s %26s %18s" % ("case", "from", "wall s: mean [p10-p90]", "cost $: mean [p10-p90]", "actual s / $"))
    for name in args.cases.split(","):
        r = case(virga, name, CASES[name])
        rows.append(r)
        a = r["actual"]
        for src in ("profile", "history"):
            f = r[src]
            print("%-16s %-8s %8.1f [%6.1f-%6.1f] %s %8.3f [%6.3f-%6.3f] %s %7.1f / %.3f  err wall %+4.0f%% cost %+4.0f%%" % (
                name, src, f["wall"], f["wall_p10"], f["wall_p90"], "in " if inside(f, a, "wall") else "OUT",
                f["cost"], f["cost_p10"], f["cost_p90"], "in " if inside(f, a, "cost") else "OUT",
                a["wall"], a["cost"], 100 * err(f, a, "wall"), 100 * err(f, a, "cost")))
        sys.stdout.flush()
    print()
    for src in ("profile", "history"):
        we = [abs(err(r[src], r["actual"], "wall")) for r in rows]
        ce = [abs(err(r[src], r["actual"], "cost")) for r in rows if r["actual"]["cost"]]
        wi = sum(inside(r[src], r["actual"], "wall") for r in rows)
        ci = sum(inside(r[src], r["actual"], "cost") for r in rows)
        print("from %-8s median |error| wall %3.0f%%, cost %3.0f%%; actual inside p10-p90: wall %d of %d, cost %d of %d" % (
            src, 100 * statistics.median(we), 100 * statistics.median(ce) if ce else float("nan"), wi, len(rows), ci, len(rows)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

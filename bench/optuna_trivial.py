#!/usr/bin/python3
"""Optuna's trials/s on a trivial objective, the reference for Virga's API benchmark.

One suggest_float, returned as the value; study.optimize in-process, one
thread; random sampler (Virga's `searcher: random`). Storages: SQLite (a fresh
file, as Optuna's RDB storage is its durable one) and in-memory (for context).

Run with Debian's python3-optuna (3.1), which imports only under /usr/bin/python3:

    /usr/bin/python3 bench/optuna_trivial.py [--trials 2000] [--repeat 2] [--json]
"""

import argparse
import json
import os
import tempfile
import time

import optuna


def objective(trial):
    return trial.suggest_float("x", 0.0, 1.0)


def run(storage, trials):
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=1),
                                direction="minimize")
    t0 = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    wall = time.perf_counter() - t0
    done = len(study.trials)
    return done, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--storage", default="sqlite,memory", help="comma-separated: sqlite, memory")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results = []
    for kind in [s.strip() for s in args.storage.split(",") if s.strip()]:
        for i in range(1, args.repeat + 1):
            with tempfile.TemporaryDirectory(prefix="optuna-bench-") as d:
                storage = None
                if kind == "sqlite":
                    storage = "sqlite:///" + os.path.join(d, "optuna.db")
                elif kind != "memory":
                    raise SystemExit(f"unknown storage {kind!r} (want sqlite or memory)")
                done, wall = run(storage, args.trials)
            r = {"storage": kind, "run": i, "trials": done, "seconds": round(wall, 3),
                 "rate": round(done / wall, 1), "optuna": optuna.__version__}
            results.append(r)
            if not args.json:
                print(f"optuna {optuna.__version__} {kind:6} run {i}: {done} trials in {wall:.2f}s "
                      f"= {done / wall:.1f} trials/s", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Replays Optuna 3.1 over a tabular benchmark (bench/search/FORMAT.md) in virtual time.

No training happens: each epoch's value and duration come from the table. W simulated
workers (`--workers`, default 4) each run one trial at a time, one epoch at a time; an
event queue ordered by (epoch end time, worker index) decides which epoch ends next.
When a worker is free it calls `study.ask()` and suggests the parameters:

- int/float dimension: `trial.suggest_int(name, 0, len(values) - 1)`, the index of the
  grid value (a log-spaced grid is so searched on a log scale), as Virga's replay
  presents it (internal/search/replay, Table.Experiment);
- categorical: `trial.suggest_categorical(name, values)`.

`--suggest float` instead suggests each int/float dimension as
`trial.suggest_float(name, values[0], values[-1], log=log)` (ints too, as floats) and snaps
the proposal to the nearest grid value (nearest in log space when `log`; on an exact tie
the lower value), the searcher's view FORMAT.md describes.

The values pick the table configuration. At each epoch end the epoch is appended
to the trace `[config_index, epoch, time]` and reported, `trial.report(value, epoch)`
(steps are 1-based epochs). At the last epoch the trial is told COMPLETE with that value;
before it, if the pruner says so (`trial.should_prune()`), the trial is told PRUNED. Either
way the worker is then free. A run stops as soon as
`--budget-epochs` epochs were trained (default 50 x the table's epochs); epochs under
way at that moment are not counted. Optuna sees the other workers' trials as RUNNING
(TPE ignores them: constant_liar=False, the default). A configuration proposed twice is
trained twice: that is what Optuna's samplers do on a discrete grid.

Methods (`--methods`, comma list, the "optuna " prefix optional; default all):

    optuna random           RandomSampler(seed), no pruner
    optuna tpe              TPESampler(seed) with its defaults, no pruner
    optuna tpe+sha          TPESampler + SuccessiveHalvingPruner(min_resource="auto",
                            reduction_factor=3, min_early_stopping_rate=0)
    optuna tpe+hyperband    TPESampler + HyperbandPruner(min_resource=1,
                            max_resource=epochs, reduction_factor=3)
    optuna tpe+median       TPESampler + MedianPruner(n_startup_trials=5) (its defaults)
    optuna random+sha       RandomSampler + the same SuccessiveHalvingPruner

SuccessiveHalvingPruner: reduction_factor 3 (Optuna's default is 4) so that its rungs match
Hyperband's and ASHA's usual eta. min_resource "auto" is Optuna's default: no pruning until
the first trial completes, then max(last_step // 100, 1), i.e. 1 epoch for tables of fewer
than 200 epochs, so rungs at epochs 1, 3, 9, 27, ...

Seed i (`--seeds N` runs seeds 0..N-1, or `--seed-list 3,7`) is the sampler's seed. The
study name is fixed per (table, method, seed), which makes HyperbandPruner's bracket choice
(a CRC of the study name and the trial number) reproducible too; storage is in memory.
`--jobs` runs that many runs in parallel processes; the output does not depend on it.

Writes one JSON line per run (FORMAT.md) to `--out`, ordered by method then seed:

    /usr/bin/python3 bench/search/optuna_replay.py --table digits-mlp --seeds 20 --jobs 2 \\
        --out bench/search/results/optuna-digits-mlp.jsonl

`--table` is a name (bench/search/tables/<name>.json.gz) or a path.
"""

import argparse
import bisect
import gzip
import heapq
import json
import logging
import math
import multiprocessing
import os
import sys
import time
import warnings

import optuna
from optuna.trial import TrialState

HERE = os.path.dirname(os.path.abspath(__file__))
TABLES_DIR = os.path.join(HERE, "tables")

METHODS = [
    "optuna random",
    "optuna tpe",
    "optuna tpe+sha",
    "optuna tpe+hyperband",
    "optuna tpe+median",
    "optuna random+sha",
]


def table_path(name_or_path):
    """A table name (bench/search/tables/<name>.json.gz) or a path to a table file."""
    if os.path.exists(name_or_path):
        return name_or_path
    for d in (TABLES_DIR, os.path.join(HERE, "testdata")):
        p = os.path.join(d, name_or_path + ".json.gz")
        if os.path.exists(p):
            return p
    raise SystemExit(f"no table {name_or_path!r} (neither a file nor {TABLES_DIR}/<name>.json.gz)")


def load_table(name_or_path):
    path = table_path(name_or_path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        table = json.load(f)
    check_table(table)
    return table


def check_table(table):
    n = 1
    for d in table["space"]:
        vals = d["values"]
        if not vals:
            raise ValueError(f"dimension {d['name']} has no values")
        if d["type"] in ("int", "float"):
            if list(vals) != sorted(vals):
                raise ValueError(f"dimension {d['name']}: values not sorted ascending")
            if d.get("log") and vals[0] <= 0:
                raise ValueError(f"dimension {d['name']}: log with a value <= 0")
        elif d["type"] != "categorical":
            raise ValueError(f"dimension {d['name']}: unknown type {d['type']!r}")
        n *= len(vals)
    if n != len(table["configs"]):
        raise ValueError(f"{len(table['configs'])} configs, the space's product is {n}")
    E = table["epochs"]
    for i, c in enumerate(table["configs"]):
        if len(c["curve"]) != E or len(c["seconds"]) != E:
            raise ValueError(f"config {i}: curve/seconds length is not epochs={E}")


class Snapper:
    """Nearest grid value of one int/float dimension (in log space when log; ties go low)."""

    def __init__(self, values, log):
        self.values = list(values)
        self.log = bool(log)
        self.keys = [math.log(v) for v in self.values] if self.log else [float(v) for v in self.values]

    def index(self, x):
        k = math.log(x) if self.log else float(x)
        keys = self.keys
        i = bisect.bisect_left(keys, k)
        if i <= 0:
            return 0
        if i >= len(keys):
            return len(keys) - 1
        # keys[i-1] < k <= keys[i]
        return i - 1 if k - keys[i - 1] <= keys[i] - k else i


def snap(x, values, log=False):
    """The grid value nearest to x (see Snapper)."""
    return values[Snapper(values, log).index(x)]


class Space:
    """Turns a trial's suggestions into a config index (mixed radix, last dimension fastest)."""

    def __init__(self, table, suggest="index"):
        if suggest not in ("index", "float"):
            raise ValueError(f"suggest {suggest!r}: want index or float")
        self.by_index = suggest == "index"
        self.dims = []
        for d in table["space"]:
            vals = d["values"]
            if d["type"] == "categorical":
                self.dims.append((d["name"], "categorical", vals, None, {self._key(v): j for j, v in enumerate(vals)}))
            else:
                self.dims.append((d["name"], d["type"], vals, Snapper(vals, d.get("log", False)), None))
        self.strides = []
        s = 1
        for d in reversed(self.dims):
            self.strides.append(s)
            s *= len(d[2])
        self.strides.reverse()

    @staticmethod
    def _key(v):
        return json.dumps(v, sort_keys=True)

    def suggest(self, trial):
        idx = 0
        for (name, typ, vals, snapper, cat_index), stride in zip(self.dims, self.strides):
            if typ == "categorical":
                v = trial.suggest_categorical(name, vals)
                j = cat_index[self._key(v)]
            elif self.by_index:
                j = trial.suggest_int(name, 0, len(vals) - 1)
            else:
                x = trial.suggest_float(name, float(vals[0]), float(vals[-1]), log=snapper.log)
                j = snapper.index(x)
            idx += j * stride
        return idx


def make_method(method, seed, epochs):
    """(sampler, pruner or None) for a method name."""
    m = method[len("optuna "):] if method.startswith("optuna ") else method
    parts = m.split("+")
    if len(parts) > 2:
        raise ValueError(f"unknown method {method!r}")
    sampler_name = parts[0]
    pruner_name = parts[1] if len(parts) == 2 else None
    if sampler_name == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    elif sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        raise ValueError(f"unknown sampler in method {method!r}")
    if pruner_name is None:
        pruner = None
    elif pruner_name == "sha":
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource="auto", reduction_factor=3,
                                                         min_early_stopping_rate=0)
    elif pruner_name == "hyperband":
        pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs, reduction_factor=3)
    elif pruner_name == "median":
        pruner = optuna.pruners.MedianPruner(n_startup_trials=5)
    else:
        raise ValueError(f"unknown pruner in method {method!r}")
    return sampler, pruner


def canonical_method(method):
    method = method.strip()
    if not method.startswith("optuna "):
        method = "optuna " + method
    return method


def quiet_optuna():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.logging.disable_default_handler()
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", module="optuna")


def replay(table, method, seed, workers=4, budget_epochs=None, space=None, suggest="index"):
    """One run: returns the FORMAT.md record (a dict)."""
    quiet_optuna()
    E = table["epochs"]
    if budget_epochs is None:
        budget_epochs = 50 * E
    if space is None:
        space = Space(table, suggest)
    curves = [c["curve"] for c in table["configs"]]
    seconds = [c["seconds"] for c in table["configs"]]
    sampler, pruner = make_method(method, seed, E)
    study = optuna.create_study(
        study_name=f"{table['name']}/{method}/{seed}",
        direction=table.get("direction", "minimize"),
        sampler=sampler,
        pruner=pruner if pruner is not None else optuna.pruners.NopPruner(),
    )

    heap = []  # (end time, worker, trial, config, epoch)

    def start(worker, now):
        trial = study.ask()
        c = space.suggest(trial)
        heapq.heappush(heap, (now + seconds[c][0], worker, trial, c, 1))

    for w in range(workers):
        start(w, 0.0)
    trace = []
    while len(trace) < budget_epochs:
        now, w, trial, c, e = heapq.heappop(heap)
        trace.append([c, e, now])
        if len(trace) >= budget_epochs:
            break
        value = curves[c][e - 1]
        if e == E:
            trial.report(value, e)
            study.tell(trial, value)
            start(w, now)
            continue
        trial.report(value, e)
        if pruner is not None and trial.should_prune():
            study.tell(trial, state=TrialState.PRUNED)
            start(w, now)
            continue
        heapq.heappush(heap, (now + seconds[c][e], w, trial, c, e + 1))

    return {
        "table": table["name"],
        "method": method,
        "seed": seed,
        "workers": workers,
        "budget_epochs": budget_epochs,
        "trace": trace,
    }


_worker_table = None


_worker_suggest = "index"


def _init_worker(path, suggest):
    global _worker_table, _worker_suggest
    _worker_table = load_table(path)
    _worker_suggest = suggest


def _run_one(job):
    method, seed, workers, budget = job
    t0 = time.perf_counter()
    rec = replay(_worker_table, method, seed, workers, budget, suggest=_worker_suggest)
    return rec, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--table", required=True, help="table name (bench/search/tables/<name>.json.gz) or path")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list (default: all six)")
    ap.add_argument("--seeds", type=int, default=20, help="run seeds 0..N-1 (default 20)")
    ap.add_argument("--seed-list", default="", help="comma list of seeds instead of --seeds")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--budget-epochs", type=int, default=0, help="default: 50 x the table's epochs")
    ap.add_argument("--suggest", choices=["index", "float"], default="index",
                    help="int/float dimensions as grid indices (default) or as float ranges snapped to the grid")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel processes (default 1)")
    ap.add_argument("--out", default="", help="JSON lines file (default: stdout)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)

    path = table_path(args.table)
    table = load_table(path)
    budget = args.budget_epochs or 50 * table["epochs"]
    methods = [canonical_method(m) for m in args.methods.split(",") if m.strip()]
    for m in methods:
        make_method(m, 0, table["epochs"])  # fail early on an unknown name
    seeds = [int(s) for s in args.seed_list.split(",") if s.strip()] if args.seed_list else list(range(args.seeds))
    jobs = [(m, s, args.workers, budget) for m in methods for s in seeds]

    def log(msg):
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    log(f"optuna {optuna.__version__}: table {table['name']} ({len(table['configs'])} configs, "
        f"{table['epochs']} epochs), {len(methods)} methods x {len(seeds)} seeds, "
        f"{args.workers} workers, budget {budget} epochs, suggest {args.suggest}, {args.jobs} jobs")
    t0 = time.perf_counter()
    results = {}
    per_method = {m: 0.0 for m in methods}
    if args.jobs > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.jobs, initializer=_init_worker, initargs=(path, args.suggest)) as pool:
            for (m, s, _, _), (rec, dt) in zip(jobs, pool.imap(_run_one, jobs)):
                results[(m, s)] = rec
                per_method[m] += dt
                log(f"  {m} seed {s}: {dt:.1f}s")
    else:
        _init_worker(path, args.suggest)
        for job in jobs:
            rec, dt = _run_one(job)
            results[(job[0], job[1])] = rec
            per_method[job[0]] += dt
            log(f"  {job[0]} seed {job[1]}: {dt:.1f}s")
    wall = time.perf_counter() - t0

    lines = [json.dumps(results[(m, s)], separators=(",", ":")) + "\n" for m in methods for s in seeds]
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(lines)
        os.replace(tmp, args.out)
    else:
        sys.stdout.writelines(lines)
    for m in methods:
        log(f"{m}: {per_method[m]:.1f}s of CPU over {len(seeds)} seeds")
    log(f"table {table['name']}: {len(jobs)} runs in {wall:.1f}s wall" + (f" -> {args.out}" if args.out else ""))


if __name__ == "__main__":
    logging.getLogger("optuna").setLevel(logging.ERROR)
    main()

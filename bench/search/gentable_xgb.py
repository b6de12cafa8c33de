#!/usr/bin/python3
"""Build the digits-xgb tabular benchmark (bench/search/FORMAT.md).

Gradient-boosted trees (xgboost, multi:softprob) on the UCI digits data set,
every configuration of a grid trained for all its boosting rounds; a round is
the table's "epoch". After each round it records the validation mlogloss
(xgboost's evals_result) and the round's wall time (a callback's clock: the
round's trees plus its evaluation). Every configuration uses seed 0, so the
curves are reproducible; the seconds are as measured.

Run from the module root (about 3 minutes on 2 cores); Debian's python3-xgboost
imports only under /usr/bin/python3:

    /usr/bin/python3 bench/search/gentable_xgb.py

The split is the digits examples' (examples/data/SOURCE.md): a SplitMix64(42)
Fisher-Yates shuffle of the row indices, the first n/5 for validation.
"""

import argparse
import gzip
import itertools
import json
import multiprocessing
import os
import sys
import time

import numpy as np
import xgboost as xgb

NAME = "digits-xgb"
DEFAULT_DATA = "../shared/data/digits/digits.csv.gz"
ROUNDS = 81  # 3^4: whole rungs for successive halving with eta 3
SEED = 0

# The search space, in table order (the last dimension varies fastest).
SPACE = [
    {"name": "eta", "type": "float", "log": True, "values": [0.03, 0.1, 0.3, 1.0]},
    {"name": "max_depth", "type": "int", "log": True, "values": [1, 2, 4, 8]},
    {"name": "min_child_weight", "type": "float", "log": True, "values": [0.01, 0.1, 1.0, 8.0]},
    {"name": "lambda", "type": "float", "log": True, "values": [0.01, 1.0, 10.0]},
    {"name": "colsample_bytree", "type": "float", "log": False, "values": [0.25, 0.5, 1.0]},
]

MASK = (1 << 64) - 1


def splitmix64(state):
    """Yields SplitMix64's outputs from state (examples/data/SOURCE.md)."""
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def split_indices(n, seed=42):
    """Returns (validation rows, training rows), as examples/digits-go/mlp.SplitIndices."""
    perm = list(range(n))
    rng = splitmix64(seed)
    for i in range(n - 1, 0, -1):
        j = next(rng) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm[: n // 5], perm[n // 5 :]


def load(path):
    """Reads the digits CSV (64 pixels 0..16, then the label) and splits it."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",")
    x, y = rows[:, :64] / 16.0, rows[:, 64].astype(int)
    val, train = split_indices(len(rows))
    if val[:4] != [1324, 623, 1117, 298]:
        sys.exit("gentable_xgb: the split differs from examples/data/SOURCE.md")
    return x[train], y[train], x[val], y[val]


class RoundClock(xgb.callback.TrainingCallback):
    """Records the wall time of each boosting round (training and evaluation)."""

    def __init__(self):
        super().__init__()
        self.seconds = []
        self.last = None

    def before_training(self, model):
        self.last = time.perf_counter()
        return model

    def after_iteration(self, model, epoch, evals_log):
        now = time.perf_counter()
        self.seconds.append(now - self.last)
        self.last = now
        return False


DATA = None  # (dtrain, dval) in each worker process


def init_worker(path):
    global DATA
    xt, yt, xv, yv = load(path)
    DATA = (xgb.DMatrix(xt, label=yt, nthread=1), xgb.DMatrix(xv, label=yv, nthread=1))


def sig5(v):
    return float("%.5g" % v)


def train(hp):
    """Trains one configuration; returns its table entry."""
    dtrain, dval = DATA
    params = {
        "objective": "multi:softprob",
        "num_class": 10,
        "eval_metric": "mlogloss",
        "tree_method": "hist",
        "nthread": 1,
        "seed": SEED,
        **hp,
    }
    result, clock = {}, RoundClock()
    xgb.train(params, dtrain, num_boost_round=ROUNDS, evals=[(dval, "val")],
              evals_result=result, callbacks=[clock], verbose_eval=False)
    curve = result["val"]["mlogloss"]
    assert len(curve) == ROUNDS and len(clock.seconds) == ROUNDS
    return {"hparams": hp, "curve": [sig5(v) for v in curve],
            "seconds": [sig5(max(s, 1e-6)) for s in clock.seconds]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="the digits CSV (default %(default)s, from the module root)")
    ap.add_argument("--out", default="bench/search/tables/%s.json.gz" % NAME)
    ap.add_argument("--workers", type=int, default=2, choices=[1, 2],
                    help="configurations trained at once, one thread each (default %(default)s)")
    args = ap.parse_args()
    if not os.path.exists(args.data):
        sys.exit("gentable_xgb: --data %s: no such file (run from the module root, with shared/ beside it)" % args.data)

    names = [d["name"] for d in SPACE]
    grid = [dict(zip(names, vals)) for vals in itertools.product(*(d["values"] for d in SPACE))]
    began = time.time()
    configs = []
    with multiprocessing.Pool(args.workers, initializer=init_worker, initargs=(args.data,)) as pool:
        for i, c in enumerate(pool.imap(train, grid), 1):
            configs.append(c)
            if i % max(len(grid) // 20, 1) == 0 or i == len(grid):
                el = time.time() - began
                print("%4d/%d configurations  %.0fs elapsed  ~%.0fs left" % (i, len(grid), el, el / i * (len(grid) - i)),
                      file=sys.stderr, flush=True)

    _, ytrain, _, yval = load(args.data)
    table = {
        "name": NAME,
        "model": "xgboost %s gradient-boosted trees, multi:softprob, tree_method hist, seed %d; a boosting round is an epoch"
                 % (xgb.__version__, SEED),
        "dataset": "digits (../shared/data/digits/digits.csv.gz: UCI optical recognition of handwritten digits, copied from "
                   "Debian's python3-sklearn 1.2.1 sklearn/datasets/data/ per ../shared/data/digits/SOURCE.md; the same file "
                   "as examples/data/digits.csv.gz), fixed split seed 42 (examples/data/SOURCE.md): %d train / %d val, "
                   "pixels / 16" % (len(ytrain), len(yval)),
        "command": "/usr/bin/python3 bench/search/gentable_xgb.py --workers %d" % args.workers,
        "metric": "val_mlogloss",
        "direction": "minimize",
        "epochs": ROUNDS,
        "notes": "curve: xgboost's validation mlogloss after each round (evals_result). seconds: wall time of each round, "
                 "training and evaluation, from a callback's clock, %d configurations trained at once (nthread 1 each) "
                 "on a 2-core machine." % args.workers,
        "space": SPACE,
    }
    write(table, configs, args.out)
    finals = [c["curve"][-1] for c in configs]
    best = min(range(len(finals)), key=finals.__getitem__)
    print("%s: %d configurations x %d rounds in %.0fs; best final val_mlogloss %.5g (config %d: %s); wrote %s (%d bytes)"
          % (NAME, len(configs), ROUNDS, time.time() - began, finals[best], best, configs[best]["hparams"],
             args.out, os.path.getsize(args.out)))


def write(table, configs, path):
    """Writes the table as gzipped JSON, one configuration per line, through a renamed temporary file."""
    head = json.dumps(table, separators=(",", ":"))
    tmp = path + ".tmp"
    with gzip.open(tmp, "wt", compresslevel=9) as f:
        f.write(head[:-1] + ',"configs": [\n')
        f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in configs))
        f.write("\n]}\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes bench/search/testdata/tiny.json.gz: a small synthetic table (FORMAT.md) for tests.

48 configurations (lr: 6 log-spaced floats, hidden: 4 log-spaced ints, act: 2 categoricals),
9 epochs, noisy power-law validation-loss curves with crossings (a larger lr learns faster
early but ends higher when too large), epoch seconds growing with `hidden`. Deterministic:
a fixed numpy seed and a gzip header without a timestamp, so rerunning it gives the same bytes.

    /usr/bin/python3 bench/search/testdata/gentiny.py [--out bench/search/testdata/tiny.json.gz]

With --name/--epochs/--lrs/--hiddens it writes larger synthetic tables (e.g. to time the
replay), to --out.
"""

import argparse
import gzip
import itertools
import json
import math
import os

import numpy as np


LRS = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]
HIDDENS = [8, 16, 32, 64]


def build(name="tiny", epochs=9, lrs=LRS, hiddens=HIDDENS, seed=7):
    rng = np.random.default_rng(seed)
    space = [
        {"name": "lr", "type": "float", "log": True, "values": list(lrs)},
        {"name": "hidden", "type": "int", "log": True, "values": list(hiddens)},
        {"name": "act", "type": "categorical", "values": ["relu", "tanh"]},
    ]
    configs = []
    for lr, hidden, act in itertools.product(*(d["values"] for d in space)):
        lg = math.log10(lr)
        # Asymptote: best near lr=0.03, bigger nets slightly better, relu slightly better.
        final = 0.08 + 0.06 * (lg + 1.5) ** 2 + 0.02 * math.log2(64 / hidden) + (0.03 if act == "tanh" else 0.0)
        # Speed of the power law: larger lr converges faster.
        rate = 0.4 + 0.35 * (lg + 3.0)
        amp = 1.6 + 0.1 * rng.standard_normal()
        curve = []
        for e in range(1, epochs + 1):
            v = final + amp * e ** (-rate) - amp * epochs ** (-rate) * 0.5
            v += 0.015 * rng.standard_normal()
            curve.append(round(max(v, 0.01), 6))
        base = 0.01 * math.sqrt(hidden / 8)
        seconds = [round(base * (1 + 0.05 * rng.standard_normal()), 6) for _ in range(epochs)]
        configs.append({"hparams": {"lr": lr, "hidden": hidden, "act": act}, "curve": curve, "seconds": seconds})
    return {
        "name": name,
        "model": "synthetic noisy power-law curves (bench/search/testdata/gentiny.py)",
        "dataset": "none",
        "command": "/usr/bin/python3 bench/search/testdata/gentiny.py",
        "metric": "val_loss",
        "direction": "minimize",
        "epochs": epochs,
        "space": space,
        "configs": configs,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.json.gz"))
    ap.add_argument("--name", default="tiny")
    ap.add_argument("--epochs", type=int, default=9)
    ap.add_argument("--lrs", default=",".join(map(str, LRS)), help="comma list of lr values")
    ap.add_argument("--hiddens", default=",".join(map(str, HIDDENS)), help="comma list of hidden sizes")
    args = ap.parse_args()
    table = build(args.name, args.epochs, [float(x) for x in args.lrs.split(",")],
                  [int(x) for x in args.hiddens.split(",")])
    data = json.dumps(table, separators=(",", ":")).encode()
    with open(args.out, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
            gz.write(data)


if __name__ == "__main__":
    main()

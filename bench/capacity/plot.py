#!/usr/bin/python3
"""Plot bench/capacity's runs: mean cost relative to on-demand only per job
length and deadline, one bar per policy (deadlines met in the labels).

    /usr/bin/python3 bench/capacity/plot.py bench/capacity/results/runs.jsonl bench/capacity/results/deadline.png
"""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

POLICIES = ["on-demand", "greedy", "uniform-progress", "uniform-progress-plain", "planned"]
LABELS = {"planned": "Virga (planned)", "uniform-progress": "Uniform Progress", "uniform-progress-plain": "Uniform Progress (plain)"}


def main(src, dst):
    cost = collections.defaultdict(list)
    met = collections.defaultdict(list)
    cells = set()
    for line in open(src):
        r = json.loads(line)
        cell = (r["work_h"], r["deadline_x"])
        cells.add(cell)
        cost[cell, r["policy"]].append(r["relative"])
        met[cell, r["policy"]].append(r["met"])
    cells = sorted(cells)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    width = 0.8 / len(POLICIES)
    for k, p in enumerate(POLICIES):
        xs = [i + (k - (len(POLICIES) - 1) / 2) * width for i in range(len(cells))]
        ys = [sum(cost[c, p]) / len(cost[c, p]) for c in cells]
        bars = ax.bar(xs, ys, width, label=LABELS.get(p, p))
        for b, c in zip(bars, cells):
            m = 100 * sum(met[c, p]) / len(met[c, p])
            if m < 100:
                ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{m:.0f}%", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([f"{w:g}h job\n{x:g}x deadline" for w, x in cells], fontsize=8)
    ax.set_ylabel("cost / on-demand-only cost")
    ax.set_ylim(0, 1.2)
    ax.set_title("Single training job on real spot availability traces (all deadlines met unless labelled)")
    ax.legend(fontsize=8, ncol=4, loc="upper right")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

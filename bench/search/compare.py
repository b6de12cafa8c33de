#!/usr/bin/python3
"""Scores search replays (bench/search/FORMAT.md) and compares the methods, table by table.

    /usr/bin/python3 bench/search/compare.py 'bench/search/results/*.jsonl' \\
        --plot 'bench/search/results/{table}.png' --markdown bench/search/results/results.md

Arguments are result files or globs (JSON lines, one run per line, from the Virga replay
and from optuna_replay.py). Each run's table is read from bench/search/tables/<name>.json.gz
(or bench/search/testdata, or `--tables-dir`, or `--table PATH`).

Scoring (the same for every method). After the k-th trace entry the incumbent is the best
configuration among those trained to the last epoch so far (a completed trial, as Optuna's
best_trial and the Hyperband papers count it); the run's regret is then
|final(incumbent) - best final|, final(c) being config c's value at the last epoch and
"best final" the best over the whole table (the smallest, or the largest when the table's
direction is maximize). Before the first completion the regret is the worst final's,
|worst final - best final|. Regret is a step function of consumed epochs k and of
simulated time. A run that has stopped keeps its last regret.

Printed per table, for each method (mean over its seeds, ± the standard error
std(ddof=1)/sqrt(n)):

- regret at 10%, 25%, 50%, 75% and 100% of budget_epochs (after k = floor(fraction x budget)
  epochs, the points the Virga replay prints);
- regret at 25%, 50%, 75% and 100% of t_min, the earliest simulated time at which any run of
  the table ended (so at these points every run is still searching);
- epochs needed to reach two regret targets: per run the first k whose regret is <= the
  target; shown as the median over seeds (">B" when fewer than half the seeds reached it)
  and how many seeds reached it, plus where the method's mean regret curve first crosses it.
  Target "random": the mean final regret of the random-search baseline ("virga random" when
  present, else "optuna random"). Target "1%": 1% of the table's typical range of final
  values, 0.01 x |median final - best final|. The median rather than the worst final: diverged
  configurations recorded at a cap make the worst meaningless (digits-xgb's worst final is
  23.1, and 1% of best-to-worst would accept 390 of its 576 configs); with the median the
  target asks for one of the best few configs (the printout says how many lie within it).

Verdict (PASS/FAIL with the numbers):

(a) At each budget of 25%, 50%, 75% and 100%: the best Virga mean regret (the smallest mean
    over the methods whose name starts with "virga", taken separately at each budget point)
    is strictly lower than the best Optuna mean regret at that point (methods starting with
    "optuna"). PASS when it holds at all four points.
(b) Virga's ASHA (the virga methods whose name contains "asha"; the one crossing earliest is
    used) reaches the random baseline's mean final regret (target "random" above) with at
    most a third of the budget: its mean regret curve is <= that target at some
    k <= budget_epochs / 3.
(c) "virga auto" (what `searcher: auto` runs) alone: its mean regret is at or below the best
    Optuna mean regret at each budget of 25%, 50%, 75% and 100%. N/A without it. Each point
    also shows the difference of the two means ± its standard error and Welch's t-test (t and
    two-sided p; seeds are independent runs, not pairs: seed i of two methods shares nothing),
    which say whether the seeds can tell the two apart; the verdict is on the means.

`--plot` writes a PNG per table (a path, "{table}" is replaced by the table's name): mean
regret (log scale) against consumed epochs and against simulated time, a light band of ± one
standard error, one line per method, Virga solid, Optuna dashed. `--markdown FILE` writes
the same tables as Markdown. `--check` exits 1 when a verdict is FAIL.
"""

import argparse
import glob
import gzip
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TABLE_DIRS = [os.path.join(HERE, "tables"), os.path.join(HERE, "testdata")]

BUDGET_FRACTIONS = [0.10, 0.25, 0.50, 0.75, 1.00]
VERDICT_FRACTIONS = [0.25, 0.50, 0.75, 1.00]
TIME_FRACTIONS = [0.25, 0.50, 0.75, 1.00]
FIXED_TARGET_FRACTION = 0.01


# ---------------------------------------------------------------- tables and scoring

class Table:
    """A table's finals and per-epoch values, as scoring needs them."""

    def __init__(self, data):
        self.data = data
        self.name = data["name"]
        self.epochs = int(data["epochs"])
        self.maximize = data.get("direction", "minimize") == "maximize"
        self.curves = np.array([c["curve"] for c in data["configs"]], dtype=float)
        if self.curves.shape != (len(data["configs"]), self.epochs):
            raise ValueError(f"table {self.name}: curves are not configs x epochs")
        self.finals = self.curves[:, -1]
        self.best_final = float(np.nanmax(self.finals) if self.maximize else np.nanmin(self.finals))
        self.worst_final = float(np.nanmin(self.finals) if self.maximize else np.nanmax(self.finals))
        self.median_final = float(np.nanmedian(self.finals))
        # Regret of each config as an incumbent.
        self.config_regret = np.abs(self.finals - self.best_final)

    @property
    def range(self):
        """|worst final - best final|: the regret before any configuration completes."""
        return abs(self.worst_final - self.best_final)

    @property
    def typical_range(self):
        """|median final - best final| (see the fixed target in the module's doc)."""
        return abs(self.median_final - self.best_final)


def load_table_file(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return Table(json.load(f))


def score(table, trace):
    """Regret after each trace entry, and the entry's time: two float arrays of len(trace).

    The incumbent is the best configuration trained to the last epoch so far; before any
    completes, the regret is the worst final's.
    """
    n = len(trace)
    regrets = np.empty(n)
    times = np.empty(n)
    reg = table.range
    cr = table.config_regret
    for k, (c, e, t) in enumerate(trace):
        c, e = int(c), int(e)  # the Go replay writes them as numbers of a float array
        if e == table.epochs and not math.isnan(cr[c]):
            reg = min(reg, float(cr[c]))
        regrets[k] = reg
        times[k] = t
    return regrets, times


def regret_at_epochs(regrets, k):
    """Regret after k consumed epochs (a stopped run keeps its last regret)."""
    if k <= 0 or len(regrets) == 0:
        return math.nan
    return float(regrets[min(k, len(regrets)) - 1])


def regret_at_time(regrets, times, t, before=math.nan):
    """Regret at simulated time t: that after the last entry ending at or before t
    (`before` when none has ended yet)."""
    i = int(np.searchsorted(times, t, side="right")) - 1
    return before if i < 0 else float(regrets[i])


def regrets_at_times(regrets, times, ts, before=math.nan):
    """regret_at_time over an array of times."""
    idx = np.searchsorted(times, ts, side="right") - 1
    if len(regrets) == 0:
        return np.full(len(ts), before, dtype=float)
    out = regrets[np.maximum(idx, 0)].astype(float)
    out[idx < 0] = before
    return out


def first_reach(regrets, target):
    """The first k (1-based) with regret <= target, or None."""
    tol = 1e-12 * max(1.0, abs(target))
    hit = np.nonzero(regrets <= target + tol)[0]
    return int(hit[0]) + 1 if len(hit) else None


def mean_se(xs):
    xs = np.asarray([x for x in xs if not math.isnan(x)], dtype=float)
    if len(xs) == 0:
        return math.nan, math.nan
    if len(xs) == 1:
        return float(xs[0]), 0.0
    return float(xs.mean()), float(xs.std(ddof=1) / math.sqrt(len(xs)))


def welch(a, b):
    """Welch's unequal-variance t-test of mean(a) - mean(b) (NaNs dropped): (difference, its
    standard error, t, two-sided p). p uses the Welch-Satterthwaite degrees of freedom (scipy),
    or the normal approximation when scipy is missing; nan when either side has under 2 values."""
    a = np.asarray([x for x in a if not math.isnan(x)], dtype=float)
    b = np.asarray([x for x in b if not math.isnan(x)], dtype=float)
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan, math.nan, math.nan
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    d, se = float(a.mean() - b.mean()), math.sqrt(va + vb)
    if se == 0:
        return d, 0.0, math.nan, math.nan
    t = d / se
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    try:
        from scipy import stats
        p = float(2 * stats.t.sf(abs(t), df))
    except ImportError:
        p = math.erfc(abs(t) / math.sqrt(2))
    return d, se, t, p


# ---------------------------------------------------------------- results

class Run:
    def __init__(self, rec, table):
        self.method = rec["method"]
        self.seed = rec["seed"]
        self.workers = rec.get("workers")
        self.budget = int(rec["budget_epochs"])
        self.trace = rec["trace"]
        self.regrets, self.times = score(table, self.trace)

    @property
    def end_time(self):
        return float(self.times[-1]) if len(self.times) else 0.0


def read_results(patterns, warn):
    """{table name: [record, ...]} from files and globs; a (table, method, seed) seen twice keeps the last."""
    files = []
    for p in patterns:
        hits = sorted(glob.glob(p))
        if not hits:
            warn(f"no file matches {p!r}")
        files.extend(hits)
    seen = {}
    for path in files:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{path}:{lineno}: {e}")
                key = (rec["table"], rec["method"], rec["seed"])
                if key in seen:
                    warn(f"{path}:{lineno}: {key} seen before; keeping this one")
                seen[key] = rec
    by_table = {}
    for (tname, _, _), rec in seen.items():
        by_table.setdefault(tname, []).append(rec)
    return by_table


def find_table(name, explicit, dirs):
    if name in explicit:
        return explicit[name]
    for d in dirs:
        for ext in (".json.gz", ".json"):
            p = os.path.join(d, name + ext)
            if os.path.exists(p):
                return p
    raise SystemExit(f"table {name!r} not found in {', '.join(dirs)} (use --table PATH)")


def method_order(methods):
    """Virga first, then Optuna, then others; alphabetical within each."""
    def key(m):
        return (0 if m.startswith("virga") else 1 if m.startswith("optuna") else 2, m)
    return sorted(methods, key=key)


# ---------------------------------------------------------------- analysis

def fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == 0:
        return "0"
    return f"{x:.{digits}g}"


def fmt_ms(m, s):
    if math.isnan(m):
        return "-"
    if s < 1e-9 * abs(m):  # identical values: float noise, not spread
        s = 0.0
    return f"{fmt(m)} ± {fmt(s, 2)}"


def random_baseline(methods):
    for name in ("virga random", "optuna random"):
        if name in methods:
            return name
    return None


class Analysis:
    def __init__(self, table, runs, warn):
        self.table = table
        self.by_method = {}
        for r in runs:
            self.by_method.setdefault(r.method, []).append(r)
        for m in self.by_method:
            self.by_method[m].sort(key=lambda r: r.seed)
        self.methods = method_order(self.by_method)
        budgets = sorted({r.budget for r in runs})
        if len(budgets) > 1:
            warn(f"table {table.name}: runs with different budget_epochs {budgets}; using {budgets[-1]}")
        self.budget = budgets[-1]
        workers = sorted({r.workers for r in runs if r.workers is not None})
        if len(workers) > 1:
            warn(f"table {table.name}: runs with different worker counts {workers}")
        self.workers = workers
        for r in runs:
            if len(r.trace) < r.budget:
                warn(f"table {table.name}: {r.method} seed {r.seed}: {len(r.trace)} epochs < budget {r.budget}")
        self.t_min = min(r.end_time for r in runs)
        self.t_max = max(r.end_time for r in runs)

        # Epoch-aligned regret matrix per method: seeds x budget (a short run keeps its last regret).
        self.curves = {}
        for m in self.methods:
            rows = []
            for r in self.by_method[m]:
                a = r.regrets[: self.budget]
                if len(a) < self.budget:
                    a = np.concatenate([a, np.full(self.budget - len(a), a[-1] if len(a) else np.nan)])
                rows.append(a)
            self.curves[m] = np.vstack(rows)

        self.baseline = random_baseline(self.methods)
        self.target_random = (float(np.nanmean(self.curves[self.baseline][:, -1]))
                              if self.baseline else math.nan)
        self.target_fixed = FIXED_TARGET_FRACTION * table.typical_range
        tol = 1e-12 * max(1.0, self.target_fixed)
        self.fixed_within = int(np.sum(table.config_regret <= self.target_fixed + tol))

    def budget_points(self, fractions):
        return [max(1, int(f * self.budget)) for f in fractions]

    def at_budget(self, m, k):
        return mean_se(self.values_at_budget(m, k))

    def values_at_budget(self, m, k):
        return [regret_at_epochs(r.regrets, k) for r in self.by_method[m]]

    def at_time(self, m, t):
        vals = [regret_at_time(r.regrets, r.times, t, self.table.range) for r in self.by_method[m]]
        if any(math.isnan(v) for v in vals):
            return math.nan, math.nan
        return mean_se(vals)

    def mean_curve(self, m):
        return self.curves[m].mean(axis=0)

    def mean_cross(self, m, target):
        if math.isnan(target):
            return None
        return first_reach(self.mean_curve(m), target)

    def reach(self, m, target):
        """(median k or None if > half missed it, number of seeds that reached it, seeds)."""
        if math.isnan(target):
            return None, 0, len(self.by_method[m])
        ks = [first_reach(r.regrets, target) for r in self.by_method[m]]
        n = len(ks)
        reached = [k for k in ks if k is not None]
        vals = sorted(k if k is not None else math.inf for k in ks)
        med = (vals[(n - 1) // 2] + vals[n // 2]) / 2
        return (None if math.isinf(med) else med), len(reached), n

    # --- tables: each a (title, header, rows) triple

    def tables(self):
        B = self.budget
        out = []
        ks = self.budget_points(BUDGET_FRACTIONS)
        header = ["method", "seeds"] + [f"{int(f * 100)}% ({k})" for f, k in zip(BUDGET_FRACTIONS, ks)]
        rows = []
        for m in self.methods:
            rows.append([m, str(len(self.by_method[m]))] + [fmt_ms(*self.at_budget(m, k)) for k in ks])
        out.append((f"Mean regret ± s.e. after a share of the budget ({B} epochs)", header, rows))

        ts = [f * self.t_min for f in TIME_FRACTIONS]
        header = ["method"] + [f"{fmt(t, 3)} s" for t in ts] + ["run end (mean)"]
        rows = []
        for m in self.methods:
            end = np.mean([r.end_time for r in self.by_method[m]])
            rows.append([m] + [fmt_ms(*self.at_time(m, t)) for t in ts] + [f"{fmt(end, 4)} s"])
        out.append((f"Mean regret ± s.e. at simulated time (25/50/75/100% of t_min = {fmt(self.t_min, 4)} s, "
                    f"the earliest end of a run)", header, rows))

        header = ["method",
                  f"to random's {fmt(self.target_random)}: median [reached]", "mean curve crosses",
                  f"to 1% {fmt(self.target_fixed)}: median [reached]", "mean curve crosses"]
        rows = []
        for m in self.methods:
            row = [m]
            for target in (self.target_random, self.target_fixed):
                med, got, n = self.reach(m, target)
                if math.isnan(target):
                    row += ["-", "-"]
                    continue
                row.append(f"{fmt(med, 6) if med is not None else '>' + str(B)} [{got}/{n}]")
                c = self.mean_cross(m, target)
                row.append(str(c) if c is not None else "never")
            rows.append(row)
        out.append((f"Epochs to reach a regret target (target random: {self.baseline or 'no random baseline'}'s "
                    f"mean final regret; target 1%: 1% of |median final - best final| = "
                    f"|{fmt(self.table.median_final, 4)} - {fmt(self.table.best_final, 4)}|, "
                    f"{self.fixed_within} of {len(self.table.finals)} configs within it)", header, rows))
        return out

    # --- verdict

    def verdict(self):
        """[(name, status, lines)] with status PASS, FAIL or N/A."""
        res = []
        virga = [m for m in self.methods if m.startswith("virga")]
        optuna = [m for m in self.methods if m.startswith("optuna")]
        lines = ["(a) best Virga mean regret < best Optuna mean regret at 25/50/75/100% of the budget",
                 "    (best = smallest mean over the methods of each side, taken separately at each budget point)"]
        if not virga or not optuna:
            lines.append(f"    no {'virga' if not virga else 'optuna'} methods in the results")
            res.append(("a", "N/A", lines))
        else:
            ok = True
            for f, k in zip(VERDICT_FRACTIONS, self.budget_points(VERDICT_FRACTIONS)):
                bv = min(virga, key=lambda m: self.at_budget(m, k)[0])
                bo = min(optuna, key=lambda m: self.at_budget(m, k)[0])
                (vm, vs), (om, os_) = self.at_budget(bv, k), self.at_budget(bo, k)
                good = vm < om
                ok = ok and good
                lines.append(f"    {int(f * 100):3d}% ({k:5d} epochs): {bv} {fmt_ms(vm, vs)} "
                             f"{'<' if good else '>='} {bo} {fmt_ms(om, os_)}  {'ok' if good else 'NO'}")
            res.append(("a", "PASS" if ok else "FAIL", lines))

        lines = ["(c) virga auto (what `searcher: auto` runs) <= best Optuna mean regret at 25/50/75/100% of the budget",
                 "    (the means decide; then auto's mean minus the best Optuna mean ± its s.e., Welch's t-test's t and",
                 "    two-sided p: whether the seeds can tell the two apart)"]
        if "virga auto" not in self.methods or not optuna:
            lines.append("    " + ("no 'virga auto' method in the results" if "virga auto" not in self.methods
                                  else "no optuna methods in the results"))
            res.append(("c", "N/A", lines))
        else:
            ok = True
            for f, k in zip(VERDICT_FRACTIONS, self.budget_points(VERDICT_FRACTIONS)):
                bo = min(optuna, key=lambda m: self.at_budget(m, k)[0])
                (vm, vs), (om, os_) = self.at_budget("virga auto", k), self.at_budget(bo, k)
                good = vm <= om
                ok = ok and good
                d, dse, t, p = welch(self.values_at_budget("virga auto", k), self.values_at_budget(bo, k))
                test = "" if math.isnan(t) else f"; {d:+.2g} ± {dse:.2g}, t {t:+.2f}, p {p:.2g}"
                lines.append(f"    {int(f * 100):3d}% ({k:5d} epochs): virga auto {fmt_ms(vm, vs)} "
                             f"{'<=' if good else '>'} {bo} {fmt_ms(om, os_)}  {'ok' if good else 'NO'}{test}")
            res.append(("c", "PASS" if ok else "FAIL", lines))

        B = self.budget
        lines = [f"(b) Virga ASHA's mean regret curve reaches the random baseline's mean final regret "
                 f"within budget/3 = {B / 3:.0f} epochs"]
        asha = [m for m in virga if "asha" in m]
        if not asha or self.baseline is None:
            lines.append("    " + ("no virga *asha* method in the results" if not asha
                                  else "no random baseline ('virga random' or 'optuna random')"))
            res.append(("b", "N/A", lines))
        else:
            target = self.target_random
            lines.append(f"    target: {self.baseline}'s mean final regret {fmt(target, 4)}")
            crossings = {m: self.mean_cross(m, target) for m in asha}
            best = min(asha, key=lambda m: crossings[m] if crossings[m] is not None else math.inf)
            for m in asha:
                c = crossings[m]
                lines.append(f"    {m}: crosses at {c if c is not None else 'never'}"
                             + (f" ({c / B:.1%} of the budget)" if c is not None else "")
                             + ("  <- used" if m == best else ""))
            other = "optuna random" if self.baseline == "virga random" else None
            if other and other in self.methods:
                ot = float(np.nanmean(self.curves[other][:, -1]))
                oc = {m: self.mean_cross(m, ot) for m in asha}
                ob = min(asha, key=lambda m: oc[m] if oc[m] is not None else math.inf)
                c = oc[ob]
                lines.append(f"    not the verdict, for reference: against {other}'s mean final regret {fmt(ot, 4)}, "
                             f"{ob} crosses at {c if c is not None else 'never'}"
                             f" ({'within' if c is not None and c <= B / 3 else 'not within'} budget/3)")
            c = crossings[best]
            res.append(("b", "PASS" if c is not None and c <= B / 3 else "FAIL", lines))
        return res

    # --- plot

    def plot(self, path):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        nrows = math.ceil(len(self.methods) / 4)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5 + 0.22 * nrows))
        colors = plt.get_cmap("tab20").colors if len(self.methods) > 10 else plt.get_cmap("tab10").colors
        # Mean regrets can be 0 (every seed at the optimum): drawn at a floor on the log axis.
        positive = [v for m in self.methods for v in self.mean_curve(m) if v > 0]
        floor = 0.5 * min(positive) if positive else 1e-6

        B = self.budget
        x = np.arange(1, B + 1)
        tgrid = np.linspace(0, self.t_max, 400)[1:]
        for i, m in enumerate(self.methods):
            style = "-" if m.startswith("virga") else "--"
            color = colors[i % len(colors)]
            a = self.curves[m]
            mean = a.mean(axis=0)
            se = a.std(axis=0, ddof=1) / math.sqrt(len(a)) if len(a) > 1 else np.zeros_like(mean)
            ax1.plot(x, np.maximum(mean, floor), style, color=color, label=m, lw=1.6)
            ax1.fill_between(x, np.maximum(mean - se, floor), np.maximum(mean + se, floor), color=color, alpha=0.12, lw=0)

            runs = self.by_method[m]
            vals = np.array([regrets_at_times(r.regrets, r.times, tgrid, self.table.range) for r in runs])
            ok = ~np.isnan(vals).any(axis=0)
            if ok.any():
                v = vals[:, ok]
                mean = v.mean(axis=0)
                se = v.std(axis=0, ddof=1) / math.sqrt(len(v)) if len(v) > 1 else np.zeros_like(mean)
                ax2.plot(tgrid[ok], np.maximum(mean, floor), style, color=color, label=m, lw=1.6)
                ax2.fill_between(tgrid[ok], np.maximum(mean - se, floor), np.maximum(mean + se, floor),
                                 color=color, alpha=0.12, lw=0)
        if not math.isnan(self.target_random):
            for ax in (ax1, ax2):
                ax.axhline(max(self.target_random, floor), color="grey", lw=0.8, ls=":")
            ax1.axvline(B / 3, color="grey", lw=0.8, ls=":")
        seeds = sorted({len(v) for v in self.by_method.values()})
        ws = "/".join(str(w) for w in self.workers) or "?"
        for ax, xl in ((ax1, "epochs trained (all workers)"), (ax2, "simulated time (s)")):
            ax.set_yscale("log")
            ax.set_xlabel(xl)
            ax.set_ylabel("regret of the incumbent (mean over seeds)")
            ax.grid(True, which="both", alpha=0.25)
        ax1.set_xlim(0, B)
        ax2.set_xlim(0, self.t_max)
        ax1.set_title(f"{self.table.name}: regret vs epochs (budget {B}; dotted: random's final, budget/3)", fontsize=9)
        ax2.set_title(f"regret vs simulated time ({ws} workers; {'/'.join(map(str, seeds))} seeds; "
                      f"0 drawn at {fmt(floor, 2)})", fontsize=9)
        handles, labels = ax1.get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, (0.2 * nrows + 0.1) / fig.get_figheight(), 1, 1))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)


# ---------------------------------------------------------------- output

def text_table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def md_table(header, rows):
    esc = lambda s: str(s).replace("|", "\\|")
    out = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(esc(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def describe(a):
    t = a.table
    seeds = sorted({len(v) for v in a.by_method.values()})
    return (f"{t.name}: {len(t.finals)} configs x {t.epochs} epochs, {t.data.get('metric', 'value')} "
            f"({'maximize' if t.maximize else 'minimize'}), best final {fmt(t.best_final, 5)}; "
            f"budget {a.budget} epochs, {'/'.join(str(w) for w in a.workers) or '?'} workers, "
            f"{'/'.join(map(str, seeds))} seeds per method")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("results", nargs="+", help="result files or globs (JSON lines)")
    ap.add_argument("--table", action="append", default=[], help="a table file (repeatable); else looked up by name")
    ap.add_argument("--tables-dir", action="append", default=[], help="where to look tables up by name (repeatable)")
    ap.add_argument("--plot", default="", help="PNG path per table; '{table}' is replaced by the table's name")
    ap.add_argument("--markdown", default="", help="write the tables and verdicts as Markdown to this file")
    ap.add_argument("--check", action="store_true", help="exit 1 when a verdict is FAIL")
    args = ap.parse_args(argv)

    def warn(msg):
        print(f"compare: {msg}", file=sys.stderr)

    explicit = {}
    for p in args.table:
        explicit[load_table_file(p).name] = p
    dirs = args.tables_dir + DEFAULT_TABLE_DIRS
    by_table = read_results(args.results, warn)
    if not by_table:
        raise SystemExit("compare: no runs")

    md = []
    failed = False
    names = sorted(by_table)
    for name in names:
        table = load_table_file(find_table(name, explicit, dirs))
        a = Analysis(table, [Run(rec, table) for rec in by_table[name]], warn)
        print("=" * 100)
        print(describe(a))
        md.append(f"### {table.name}\n\n{describe(a)}\n")
        for title, header, rows in a.tables():
            print(f"\n{title}\n")
            print(text_table(header, rows))
            md.append(f"{title}:\n\n{md_table(header, rows)}\n")
        print("\nVerdict")
        md.append("Verdict:\n\n```")
        for _, status, lines in a.verdict():
            failed = failed or status == "FAIL"
            print(f"{status:4}  {lines[0]}")
            md.append(f"{status:4}  {lines[0]}")
            for ln in lines[1:]:
                print(f"      {ln}")
                md.append(f"      {ln}")
        md.append("```\n")
        if args.plot:
            path = args.plot.replace("{table}", name)
            if "{table}" not in args.plot and len(names) > 1:
                root, ext = os.path.splitext(args.plot)
                path = f"{root}-{name}{ext or '.png'}"
            a.plot(path)
            print(f"\nplot: {path}")
            md.append(f"![{name}]({os.path.basename(path)})\n")
        print()
    if args.markdown:
        os.makedirs(os.path.dirname(os.path.abspath(args.markdown)), exist_ok=True)
        with open(args.markdown, "w") as f:
            f.write("\n".join(md).rstrip() + "\n")
    if args.check and failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

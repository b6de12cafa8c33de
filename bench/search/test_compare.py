"""Tests of the search benchmark's scorer (compare.py) and Optuna replay (optuna_replay.py).

    /usr/bin/python3 -m unittest bench/search/test_compare.py
"""

import io
import json
import math
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402
import optuna_replay  # noqa: E402

TINY = os.path.join(HERE, "testdata", "tiny.json.gz")


def hand_table(maximize=False):
    """3 configs x 3 epochs; values are binary fractions, so every regret below is exact.

    finals: c0 0.5, c1 0.125 (best), c2 0.375; worst final 0.5, so the regret before any
    completion is 0.375; as incumbents c0 has regret 0.375, c1 0, c2 0.25.
    """
    curves = [[1.0, 0.75, 0.5], [1.0, 0.5, 0.125], [0.75, 0.5, 0.375]]
    if maximize:
        curves = [[-v for v in c] for c in curves]
    return {
        "name": "hand",
        "metric": "loss",
        "direction": "maximize" if maximize else "minimize",
        "epochs": 3,
        "space": [{"name": "x", "type": "float", "log": False, "values": [1.0, 2.0, 3.0]}],
        "configs": [{"hparams": {"x": float(i + 1)}, "curve": c, "seconds": [1.0, 1.0, 1.0]}
                    for i, c in enumerate(curves)],
    }


# Entries: (config, epoch, time). c2 completes 4th, c0 6th (worse than c2), c1 9th (the best).
HAND_TRACE = [[2, 1, 1.0], [0, 1, 1.5], [2, 2, 2.0], [2, 3, 3.0], [0, 2, 3.5], [0, 3, 4.5],
              [1, 1, 5.0], [1, 2, 6.0], [1, 3, 7.0]]
HAND_REGRETS = [0.375, 0.375, 0.375, 0.25, 0.25, 0.25, 0.25, 0.25, 0.0]


def record(method, seed, trace, budget=9, table="hand"):
    return {"table": table, "method": method, "seed": seed, "workers": 2,
            "budget_epochs": budget, "trace": trace}


class TestScore(unittest.TestCase):
    def test_regret_per_entry(self):
        for maximize in (False, True):
            t = compare.Table(hand_table(maximize))
            self.assertEqual(t.best_final, -0.125 if maximize else 0.125)
            self.assertEqual(t.range, 0.375)
            self.assertEqual(t.typical_range, 0.25)  # |median 0.375 - best 0.125|
            regrets, times = compare.score(t, HAND_TRACE)
            self.assertEqual(list(regrets), HAND_REGRETS)
            self.assertEqual(list(times), [e[2] for e in HAND_TRACE])

    def test_float_trace_from_go(self):
        t = compare.Table(hand_table())
        regrets, _ = compare.score(t, [[float(c), float(e), s] for c, e, s in HAND_TRACE])
        self.assertEqual(list(regrets), HAND_REGRETS)

    def test_lookups(self):
        t = compare.Table(hand_table())
        regrets, times = compare.score(t, HAND_TRACE)
        self.assertEqual(compare.regret_at_epochs(regrets, 4), 0.25)
        self.assertEqual(compare.regret_at_epochs(regrets, 100), 0.0)  # a stopped run keeps its last
        self.assertEqual(compare.regret_at_time(regrets, times, 2.9), 0.375)
        self.assertEqual(compare.regret_at_time(regrets, times, 3.0), 0.25)
        self.assertEqual(compare.regret_at_time(regrets, times, 0.5, before=t.range), 0.375)
        self.assertEqual(list(compare.regrets_at_times(regrets, times, [0.5, 3.0, 7.0, 9.0], t.range)),
                         [0.375, 0.25, 0.0, 0.0])
        self.assertEqual(compare.first_reach(regrets, 0.25), 4)
        self.assertEqual(compare.first_reach(regrets, 0.0), 9)
        self.assertIsNone(compare.first_reach(regrets[:8], 0.1))

    def test_analysis(self):
        table = compare.Table(hand_table())
        # seed 1 finds c1 first: regret 0.375 until entry 3, then 0.
        fast = [[1, 1, 1.0], [1, 2, 2.0], [1, 3, 3.0], [0, 1, 4.0], [0, 2, 5.0], [0, 3, 6.0],
                [2, 1, 7.0], [2, 2, 8.0], [2, 3, 9.0]]
        recs = [record("optuna random", 0, HAND_TRACE), record("optuna random", 1, fast),
                record("virga random+asha", 0, fast), record("virga random+asha", 1, fast)]
        a = compare.Analysis(table, [compare.Run(r, table) for r in recs], warn=lambda m: None)
        self.assertEqual(a.methods, ["virga random+asha", "optuna random"])
        self.assertEqual(a.budget_points([0.25, 0.5, 1.0]), [2, 4, 9])  # floor(2.25), floor(4.5), 9
        m, se = a.at_budget("optuna random", 4)  # regrets 0.25 and 0
        self.assertEqual(m, 0.125)
        self.assertAlmostEqual(se, 0.125, places=15)  # std(ddof=1) 0.25/sqrt(2), / sqrt(2)
        self.assertEqual(a.at_budget("virga random+asha", 4), (0.0, 0.0))
        self.assertEqual(a.t_min, 7.0)  # the earliest end of a run
        self.assertEqual(a.at_time("optuna random", 3.5), (0.125, 0.125))
        self.assertEqual(a.target_random, 0.0)  # optuna random's mean final regret
        self.assertEqual(a.target_fixed, 0.0025)  # 1% of |median 0.375 - best 0.125|
        self.assertEqual(a.reach("optuna random", 0.0), (6.0, 2, 2))  # first reaches 3 and 9
        self.assertEqual(a.mean_cross("optuna random", 0.0), 9)
        self.assertEqual(a.mean_cross("virga random+asha", 0.0), 3)
        verdict = {name: (status, lines) for name, status, lines in a.verdict()}
        # (a): at 25% (k=2) both sides have 0.375: not strictly lower.
        self.assertEqual(verdict["a"][0], "FAIL")
        # (b): virga random+asha's mean curve reaches 0 at k=3 <= 9/3.
        self.assertEqual(verdict["b"][0], "PASS")
        self.assertEqual(verdict["c"][0], "N/A")  # no virga auto

    def test_verdict_auto(self):
        table = compare.Table(hand_table())
        fast = [[1, 1, 1.0], [1, 2, 2.0], [1, 3, 3.0], [0, 1, 4.0], [0, 2, 5.0], [0, 3, 6.0],
                [2, 1, 7.0], [2, 2, 8.0], [2, 3, 9.0]]
        for auto, want in ((fast, "PASS"), (HAND_TRACE, "FAIL")):
            recs = [record("optuna random", 0, fast), record("virga auto", 0, auto)]
            a = compare.Analysis(table, [compare.Run(r, table) for r in recs], warn=lambda m: None)
            verdict = {name: (status, lines) for name, status, lines in a.verdict()}
            # (c) passes on a tie (<=), as long as no budget point is worse.
            self.assertEqual(verdict["c"][0], want, verdict["c"][1])
        # With two seeds a side the lines carry the difference and Welch's test.
        recs = [record("optuna random", s, fast) for s in (0, 1)] + [
            record("virga auto", 0, HAND_TRACE), record("virga auto", 1, fast)]
        a = compare.Analysis(table, [compare.Run(r, table) for r in recs], warn=lambda m: None)
        lines = {name: lines for name, _, lines in a.verdict()}["c"]
        # at 50% (k=4): auto 0.25 and 0, optuna 0 and 0: +0.125 ± 0.125, t +1.
        self.assertIn("+0.12 ± 0.12, t +1.00", lines[4])

    def test_welch(self):
        # a: mean 2, var 1 (n 3); b: mean 0, var 2 (n 2): se = sqrt(1/3 + 2/2), t = 2/se,
        # df = (1/3 + 1)^2 / ((1/3)^2/2 + 1^2/1) = (16/9) / (19/18) = 32/19.
        d, se, t, p = compare.welch([1.0, 2.0, 3.0, math.nan], [-1.0, 1.0])
        self.assertEqual(d, 2.0)
        self.assertAlmostEqual(se, math.sqrt(4 / 3), places=12)
        self.assertAlmostEqual(t, 2 / math.sqrt(4 / 3), places=12)
        try:
            from scipy import stats
        except ImportError:
            self.skipTest("no scipy")
        self.assertAlmostEqual(p, 2 * stats.t.sf(t, 32 / 19), places=12)
        self.assertGreater(p, 0.2)
        self.assertTrue(all(math.isnan(x) for x in compare.welch([1.0], [1.0, 2.0])))
        self.assertLess(compare.welch([0.0, 0.1] * 50, [1.0, 1.1] * 50)[3], 1e-6)

    def test_main_writes_markdown_and_plot(self):
        with tempfile.TemporaryDirectory() as d:
            tpath = os.path.join(d, "hand.json")
            with open(tpath, "w") as f:
                json.dump(hand_table(), f)
            rpath = os.path.join(d, "r.jsonl")
            with open(rpath, "w") as f:
                for s in range(3):
                    f.write(json.dumps(record("virga random", s, HAND_TRACE)) + "\n")
                    f.write(json.dumps(record("optuna random", s, HAND_TRACE)) + "\n")
            out = io.StringIO()
            args = [os.path.join(d, "*.jsonl"), "--table", tpath, "--markdown", os.path.join(d, "r.md")]
            try:
                import matplotlib  # noqa: F401
                args += ["--plot", os.path.join(d, "{table}.png")]
            except ImportError:
                pass
            with redirect_stdout(out):
                compare.main(args)
            self.assertIn("Verdict", out.getvalue())
            with open(os.path.join(d, "r.md")) as f:
                md = f.read()
            self.assertIn("| virga random | 3 | 0.375 ± 0 |", md)
            if "--plot" in args:
                self.assertTrue(os.path.getsize(os.path.join(d, "hand.png")) > 0)


class TestSnap(unittest.TestCase):
    def test_linear(self):
        vals = [1, 10, 100]
        self.assertEqual(optuna_replay.snap(0.0, vals), 1)
        self.assertEqual(optuna_replay.snap(5.4, vals), 1)
        self.assertEqual(optuna_replay.snap(5.5, vals), 1)  # a tie goes to the lower value
        self.assertEqual(optuna_replay.snap(5.6, vals), 10)
        self.assertEqual(optuna_replay.snap(56, vals), 100)
        self.assertEqual(optuna_replay.snap(1000, vals), 100)

    def test_log(self):
        vals = [1, 10, 100]
        self.assertEqual(optuna_replay.snap(3.1, vals, log=True), 1)   # log10 0.49
        self.assertEqual(optuna_replay.snap(3.2, vals, log=True), 10)  # log10 0.505
        self.assertEqual(optuna_replay.snap(31, vals, log=True), 10)
        self.assertEqual(optuna_replay.snap(32, vals, log=True), 100)
        self.assertEqual(optuna_replay.snap(55, vals, log=True), 100)  # linear would say 10
        self.assertEqual(optuna_replay.snap(1e-9, vals, log=True), 1)

    def test_space_index(self):
        import optuna
        table = optuna_replay.load_table(TINY)
        # lr [0.001 .. 0.3] x 6, hidden [8, 16, 32, 64], act [relu, tanh]: index = (lr*4 + hidden)*2 + act
        fl = optuna_replay.Space(table, "float")
        self.assertEqual(fl.suggest(optuna.trial.FixedTrial({"lr": 0.001, "hidden": 8.0, "act": "relu"})), 0)
        self.assertEqual(fl.suggest(optuna.trial.FixedTrial({"lr": 0.02, "hidden": 40.0, "act": "tanh"})),
                         (3 * 4 + 2) * 2 + 1)  # 0.02 -> 0.03 (log), 40 -> 32 (log)
        ix = optuna_replay.Space(table, "index")
        self.assertEqual(ix.suggest(optuna.trial.FixedTrial({"lr": 3, "hidden": 2, "act": "tanh"})),
                         (3 * 4 + 2) * 2 + 1)
        self.assertEqual(ix.suggest(optuna.trial.FixedTrial({"lr": 5, "hidden": 3, "act": "tanh"})),
                         len(table["configs"]) - 1)


class TestOptunaReplay(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.table = optuna_replay.load_table(TINY)

    def check_trace(self, rec, budget, workers):
        trace = rec["trace"]
        self.assertEqual(len(trace), budget)
        self.assertEqual(rec["budget_epochs"], budget)
        times = [t for _, _, t in trace]
        self.assertEqual(times, sorted(times))
        E = self.table["epochs"]
        counts = {}
        for c, e, _ in trace:
            self.assertTrue(1 <= e <= E)
            counts[(c, e)] = counts.get((c, e), 0) + 1
            if e > 1:  # every epoch > 1 follows the config's previous epoch
                self.assertLessEqual(counts[(c, e)], counts.get((c, e - 1), 0))
        # The first W entries' times are first-epoch times of W trials started at 0.
        first = trace[:workers]
        for c, e, t in first:
            if e == 1:
                self.assertEqual(t, self.table["configs"][c]["seconds"][0])

    def test_deterministic_and_budget(self):
        for method in ("optuna tpe+hyperband", "optuna random+sha", "optuna tpe+median"):
            for suggest in ("index", "float"):
                a = optuna_replay.replay(self.table, method, 3, workers=4, budget_epochs=150, suggest=suggest)
                b = optuna_replay.replay(self.table, method, 3, workers=4, budget_epochs=150, suggest=suggest)
                self.assertEqual(a, b, method)
                self.check_trace(a, 150, 4)
                self.assertEqual((a["method"], a["seed"], a["workers"], a["table"]), (method, 3, 4, "tiny"))
        seed3 = optuna_replay.replay(self.table, "optuna tpe+hyperband", 3, workers=4, budget_epochs=150)
        seed4 = optuna_replay.replay(self.table, "optuna tpe+hyperband", 4, workers=4, budget_epochs=150)
        self.assertNotEqual(seed3["trace"], seed4["trace"])

    def test_pruning_prunes(self):
        rec = optuna_replay.replay(self.table, "optuna random+sha", 0, workers=2, budget_epochs=200)
        E = self.table["epochs"]
        started = sum(1 for _, e, _ in rec["trace"] if e == 1)
        completed = sum(1 for _, e, _ in rec["trace"] if e == E)
        self.assertGreater(started, completed + 10)
        rec = optuna_replay.replay(self.table, "optuna random", 0, workers=2, budget_epochs=200)
        # Without a pruner every trial runs to the end: at most 2 trials under way at the stop.
        started = sum(1 for _, e, _ in rec["trace"] if e == 1)
        completed = sum(1 for _, e, _ in rec["trace"] if e == E)
        self.assertLessEqual(started - completed, 2)

    def test_cli_jobs_do_not_change_output(self):
        with tempfile.TemporaryDirectory() as d:
            outs = []
            for jobs in (1, 2):
                p = os.path.join(d, f"o{jobs}.jsonl")
                with redirect_stderr(io.StringIO()):
                    optuna_replay.main(["--table", TINY, "--methods", "tpe+sha,random", "--seed-list", "1,2",
                                        "--budget-epochs", "60", "--jobs", str(jobs), "--out", p])
                with open(p) as f:
                    outs.append(f.read())
            self.assertEqual(outs[0], outs[1])
            recs = [json.loads(line) for line in outs[0].splitlines()]
            self.assertEqual([(r["method"], r["seed"]) for r in recs],
                             [("optuna tpe+sha", 1), ("optuna tpe+sha", 2), ("optuna random", 1), ("optuna random", 2)])
            self.assertTrue(all(len(r["trace"]) == 60 for r in recs))


if __name__ == "__main__":
    unittest.main()

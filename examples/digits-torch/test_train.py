"""Tests of the digits-torch trainer, in-process and without a server.

Run from the repository root with Debian's Python (where torch is installed):

    /usr/bin/python3 -m unittest discover -s examples/digits-torch

Under a Python without torch the tests are skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - depends on the interpreter
    torch = None


def load_trainer():
    """Import train.py as a module (its directory name is not a package name)."""
    spec = importlib.util.spec_from_file_location("digits_torch_train", os.path.join(HERE, "train.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@unittest.skipIf(torch is None, "torch is not installed for this Python (use /usr/bin/python3)")
class TrainTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = load_trainer()
        torch.set_num_threads(1)
        cls.data = cls.m.load_dataset(cls.m.DEFAULT_DATA)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="digits-torch-test-")
        self.addCleanup(shutil.rmtree, self.dir)

    def config(self, epochs):
        return argparse.Namespace(lr=0.1, hidden=64, l2=1e-4, momentum=0.9, epochs=epochs, batch=32, seed=1)

    def trial(self, directory, stop_at=None, interrupt_after=None):
        """A hand-run trial (no server) that records reports and can script a
        stop decision or a SIGTERM-like interruption."""
        import virga_trial  # on sys.path once train.py is loaded

        class Recording(virga_trial.Trial):
            def __init__(self):
                super().__init__(default_checkpoint_dir=directory)
                self.reports = []
                self.interrupted = False

            @property
            def stopping(self):
                return self.interrupted

            def report(self, step, metrics):
                decision = super().report(step, metrics)
                self.reports.append((step, dict(metrics)))
                if step == interrupt_after:
                    self.interrupted = True
                return virga_trial.STOP if step == stop_at else decision

        return Recording()

    def test_split_matches_go_and_docs(self):
        val, train = self.m.split_indices(1797)
        self.assertEqual((len(val), len(train)), (359, 1438))
        self.assertEqual(val[:4], [1324, 623, 1117, 298])  # examples/data/SOURCE.md, digits-go
        self.assertEqual(sorted(val + train), list(range(1797)))
        self.assertEqual(tuple(self.data[0].shape), (1438, 64))
        self.assertLessEqual(float(self.data[0].max()), 1.0)

    def test_train_two_epochs_then_resume_a_third(self):
        first = self.trial(self.dir)
        _, outcome = self.m.train(self.config(2), first, self.data, out=io.StringIO())
        self.assertEqual(outcome, self.m.FINISHED)
        self.assertEqual([s for s, _ in first.reports], [1, 2])
        self.assertEqual(self.m.load_checkpoint(self.dir)["epoch"], 2)

        second = self.trial(self.dir)
        out = io.StringIO()
        _, outcome = self.m.train(self.config(3), second, self.data, out=out)
        self.assertEqual(outcome, self.m.FINISHED)
        self.assertIn("resuming from", out.getvalue())
        self.assertEqual([s for s, _ in second.reports], [3], "the resumed run must train only epoch 3")
        self.assertEqual(self.m.load_checkpoint(self.dir)["epoch"], 3)
        metrics = second.reports[-1][1]
        self.assertGreater(metrics["val_accuracy"], 0.80)
        self.assertLess(metrics["val_loss"], first.reports[0][1]["val_loss"])
        self.assertEqual(set(metrics), {"train_loss", "val_loss", "val_accuracy"})

    def test_interrupted_and_resumed_run_matches_a_straight_one(self):
        straight_dir = os.path.join(self.dir, "straight")
        straight, _ = self.m.train(self.config(4), self.trial(straight_dir), self.data, out=io.StringIO())

        resumed_dir = os.path.join(self.dir, "resumed")
        t = self.trial(resumed_dir, interrupt_after=2)
        _, outcome = self.m.train(self.config(4), t, self.data, out=io.StringIO())
        self.assertEqual(outcome, self.m.INTERRUPTED)
        self.assertEqual(self.m.load_checkpoint(resumed_dir)["epoch"], 2)
        resumed, outcome = self.m.train(self.config(4), self.trial(resumed_dir), self.data, out=io.StringIO())
        self.assertEqual(outcome, self.m.FINISHED)

        a, b = straight.state_dict(), resumed.state_dict()
        self.assertEqual(a.keys(), b.keys())
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), f"{k} differs after an interruption and resume")

    def test_stop_decision(self):
        t = self.trial(self.dir, stop_at=1)
        _, outcome = self.m.train(self.config(5), t, self.data, out=io.StringIO())
        self.assertEqual(outcome, self.m.STOPPED)
        self.assertEqual([s for s, _ in t.reports], [1])
        self.assertEqual(self.m.load_checkpoint(self.dir)["epoch"], 1)

    def test_resume_rejects_another_width(self):
        self.m.train(self.config(1), self.trial(self.dir), self.data, out=io.StringIO())
        cfg = self.config(2)
        cfg.hidden = 32
        with self.assertRaisesRegex(ValueError, "64 hidden units"):
            self.m.train(cfg, self.trial(self.dir), self.data, out=io.StringIO())

    def test_flags_override_hparams(self):
        import virga_trial
        t = virga_trial.from_env({"VIRGA_HPARAMS": '{"lr": 0.05, "hidden": 16, "epochs": 4}'}, handle_signals=False)
        cfg = self.m.parse_args(["--epochs", "2"], t)
        self.assertEqual((cfg.lr, cfg.hidden, cfg.epochs), (0.05, 16, 2))
        with self.assertRaises(SystemExit):
            self.m.parse_args(["--lr", "-1"], t)


if __name__ == "__main__":
    unittest.main()

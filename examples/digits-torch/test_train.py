"""Tests of the digits-torch trainer, in-process and without a server.

Run from the repository root with Debian's Python (where torch is installed):

    /usr/bin/python3 -m unittest discover -s examples/digits-torch

Under a Python without torch the tests are skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
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


def _fields(buf):
    """Decode one protobuf message into {field number: [values]} (varints as
    ints, length-delimited fields as bytes): enough to read an ONNX file's
    graph signature without the onnx package."""
    out, i = {}, 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while i < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 2:
            n = varint()
            value, i = buf[i:i + n], i + n
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.setdefault(field, []).append(value)
    return out


def onnx_signature(path):
    """The opset and the (name, element type, dims) of an ONNX model's graph
    inputs and outputs; a dim is an int or the name of a dynamic axis."""
    with open(path, "rb") as f:
        model = _fields(f.read())
    opset = max(_fields(o).get(2, [0])[0] for o in model[8] if not _fields(o).get(1))
    graph = _fields(model[7][0])

    def info(raw):
        vi = _fields(raw)
        tensor = _fields(_fields(vi[2][0])[1][0])
        dims = []
        for d in _fields(tensor[2][0]).get(1, []):
            d = _fields(d)
            dims.append(d[1][0] if 1 in d else d[2][0].decode())
        return vi[1][0].decode(), tensor[1][0], dims

    return opset, [info(v) for v in graph.get(11, [])], [info(v) for v in graph.get(12, [])]


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

    def test_checkpoint_holds_onnx_model(self):
        t = self.trial(self.dir)
        model, _ = self.m.train(self.config(2), t, self.data, out=io.StringIO())
        model_dir = os.path.join(self.dir, "model")
        with open(os.path.join(model_dir, "virga-model.json")) as f:
            manifest = json.load(f)
        self.assertEqual((manifest["format"], manifest["file"]), ("onnx", "model.onnx"))
        self.assertEqual([(s["name"], s["datatype"], s["shape"]) for s in manifest["signature"]["inputs"]],
                         [("pixels", "FP32", [-1, 64])])
        self.assertEqual([(s["name"], s["datatype"], s["shape"]) for s in manifest["signature"]["outputs"]],
                         [("probabilities", "FP32", [-1, 10]), ("label", "INT64", [-1])])

        # The ONNX graph has the manifest's signature, with a dynamic batch
        # (ONNX element types: 1 is FLOAT, 7 is INT64).
        opset, inputs, outputs = onnx_signature(os.path.join(model_dir, "model.onnx"))
        self.assertEqual(opset, self.m.ONNX_OPSET)
        self.assertEqual(inputs, [("pixels", 1, ["batch", 64])])
        self.assertEqual(outputs, [("probabilities", 1, ["batch", 10]), ("label", 7, ["batch"])])

        # What is exported takes raw pixel counts: on the validation rows
        # unscaled (x 16), it scores what the trainer reported.
        raw = self.data[2] * 16
        with torch.no_grad():
            probabilities, label = self.m.Exported(model)(raw)
        self.assertTrue(torch.allclose(probabilities.sum(dim=1), torch.ones(len(raw))))
        self.assertEqual(label.dtype, torch.int64)
        accuracy = (label == self.data[3]).float().mean().item()
        self.assertAlmostEqual(accuracy, t.reports[-1][1]["val_accuracy"], places=6)

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

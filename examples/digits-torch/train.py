#!/usr/bin/python3
"""Train a small MLP on the UCI digits data set with PyTorch, under Virga or by hand.

The same model and protocol as examples/digits-go, through sdk/python/virga_trial.py:
hyperparameters from VIRGA_HPARAMS (flags given on the command line override
them), a checkpoint in VIRGA_CHECKPOINT_DIR after every epoch (written
atomically, before the report) holding the network exported to ONNX in model/
(model.onnx and virga-model.json: a model directory Virga's registry takes,
docs/models.md), resume from it on start, and a prompt exit on SIGTERM. Run by
hand from the repository root:

    /usr/bin/python3 examples/digits-torch/train.py --lr 0.1 --hidden 64 --epochs 20

Exit codes: 0 when all epochs are trained or the searcher stopped the trial;
143 after SIGTERM or SIGINT (the current epoch is abandoned and the checkpoint
of the previous one stands); 3 when Virga says this attempt is superseded;
2 for bad flags; 1 for other errors.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import math
import os
import sys
import time
from typing import List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import virga_trial  # noqa: E402

DEFAULT_DATA = os.path.join(REPO, "examples", "data", "digits.csv.gz")
CHECKPOINT_FILE = "model.pt"
MODEL_DIR = "model"  # the model directory inside the checkpoint directory
ONNX_FILE = "model.onnx"
ONNX_OPSET = 13  # torch 1.13 exports opsets 7 to 17; ONNX Runtime reads them all
NUM_INPUTS, NUM_CLASSES, MAX_PIXEL = 64, 10, 16
SPLIT_SEED = 42

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_SUPERSEDED = 0, 1, 2, 3

# Outcomes of train().
FINISHED, STOPPED, INTERRUPTED = "finished", "stopped", "interrupted"

_MASK64 = (1 << 64) - 1


def split_indices(n: int) -> Tuple[List[int], List[int]]:
    """The fixed split of examples/data/SOURCE.md: a SplitMix64(42) Fisher-Yates
    shuffle of 0..n-1; the first n // 5 are validation rows, the rest training."""
    state = SPLIT_SEED
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
        j = z % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    n_val = n // 5
    return perm[:n_val], perm[n_val:]


def load_dataset(path: str):
    """Read the gzip CSV (64 pixels 0..16, then a label 0..9) and split it.

    Returns (train_x, train_y, val_x, val_y) tensors, pixels scaled to 0..1."""
    opener = gzip.open if path.endswith(".gz") else open
    xs, ys = [], []
    with opener(path, "rt", newline="") as f:
        for line, row in enumerate(csv.reader(f), start=1):
            if not row:
                continue
            if len(row) != NUM_INPUTS + 1:
                raise ValueError(f"{path}: line {line}: {len(row)} columns, want {NUM_INPUTS + 1}")
            try:
                pixels = [float(v) for v in row[:NUM_INPUTS]]
                label = int(float(row[NUM_INPUTS]))
            except ValueError as e:
                raise ValueError(f"{path}: line {line}: {e}") from None
            if any(p < 0 or p > MAX_PIXEL for p in pixels) or not 0 <= label < NUM_CLASSES:
                raise ValueError(f"{path}: line {line}: pixels must be 0..16 and the label 0..9")
            xs.append(pixels)
            ys.append(label)
    x = torch.tensor(xs, dtype=torch.float32) / MAX_PIXEL
    y = torch.tensor(ys, dtype=torch.long)
    val, train = split_indices(len(xs))
    return x[train], y[train], x[val], y[val]


def build_model(hidden: int) -> nn.Module:
    """64 -> hidden (ReLU) -> 10 logits."""
    return nn.Sequential(nn.Linear(NUM_INPUTS, hidden), nn.ReLU(), nn.Linear(hidden, NUM_CLASSES))


def build_optimizer(model: nn.Module, cfg: argparse.Namespace) -> torch.optim.Optimizer:
    """SGD with momentum; weight decay on the weights only, not the biases (as digits-go)."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return torch.optim.SGD(
        [{"params": weights, "weight_decay": cfg.l2}, {"params": biases, "weight_decay": 0.0}],
        lr=cfg.lr, momentum=cfg.momentum)


def settings(cfg: argparse.Namespace) -> dict:
    """The settings a checkpoint records, to flag a resume under different ones."""
    return {k: getattr(cfg, k) for k in ("lr", "hidden", "l2", "momentum", "batch", "seed")}


def save_checkpoint(directory: str, state: dict) -> None:
    """torch.save into a temporary file in directory, fsync, then rename over
    model.pt: readers (and Virga, saving the directory) see the old checkpoint
    or the new one, never a mix."""
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, CHECKPOINT_FILE)
    tmp = f"{final}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass  # some file systems cannot sync directories


def load_checkpoint(directory: str) -> Optional[dict]:
    """The checkpoint in directory, or None if there is none."""
    path = os.path.join(directory, CHECKPOINT_FILE)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return torch.load(f, map_location="cpu")


class Exported(nn.Module):
    """The served form of the network: raw pixel rows (counts 0..16, as in the
    data file) in, class probabilities and the most probable label out. The
    loader's scaling (1/16) is folded in, so clients send rows as they are."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixels: torch.Tensor):
        probabilities = torch.softmax(self.model(pixels * (1.0 / MAX_PIXEL)), dim=1)
        return probabilities, torch.argmax(probabilities, dim=1)


MANIFEST = {
    "format": "onnx",
    "file": ONNX_FILE,
    "signature": {
        "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [-1, NUM_INPUTS]}],
        "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": [-1, NUM_CLASSES]},
                    {"name": "label", "datatype": "INT64", "shape": [-1]}],
    },
    "max_batch": 1024,
}


def _replace(path: str, write) -> None:
    """Call write(file) on a temporary file next to path, fsync, rename over path."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_model(directory: str, model: nn.Module) -> None:
    """Export model to directory/model/: model.onnx (input pixels [-1, 64] with a
    dynamic batch; outputs probabilities [-1, 10] and label [-1], int64) and
    virga-model.json, each written atomically, the manifest last."""
    out = os.path.join(directory, MODEL_DIR)
    os.makedirs(out, exist_ok=True)
    was_training = model.training
    model.eval()
    try:
        _replace(os.path.join(out, ONNX_FILE), lambda f: torch.onnx.export(
            Exported(model), torch.zeros(1, NUM_INPUTS), f, opset_version=ONNX_OPSET,
            input_names=["pixels"], output_names=["probabilities", "label"],
            dynamic_axes={"pixels": {0: "batch"}, "probabilities": {0: "batch"}, "label": {0: "batch"}}))
    finally:
        model.train(was_training)
    _replace(os.path.join(out, "virga-model.json"),
             lambda f: f.write((json.dumps(MANIFEST, indent=2) + "\n").encode()))


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Tuple[float, float]:
    """Mean cross-entropy and accuracy on (x, y)."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y).item()
        acc = (logits.argmax(dim=1) == y).float().mean().item()
    model.train()
    return loss, acc


def train(cfg: argparse.Namespace, trial, data, out=sys.stdout) -> Tuple[nn.Module, str]:
    """Train (or resume) under cfg, checkpointing into trial.checkpoint_dir.

    1. Resume from the checkpoint if there is one, else initialize from cfg.seed.
    2. For each remaining epoch: shuffle with the epoch's own generator (seed
       derived from cfg.seed and the epoch, so resume needs no RNG state) and
       make one pass of mini-batch SGD, abandoning the epoch when trial.stopping.
    3. Evaluate, write the model (model/, exported to ONNX) and the
       checkpoint, then report (the server saves the directory on the report).
    4. Return when the epochs are done or the decision is stop.

    Returns the model and FINISHED, STOPPED or INTERRUPTED."""
    train_x, train_y, val_x, val_y = data
    ckpt_dir = trial.checkpoint_dir

    # 1. Resume or start.
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.hidden)
    optimizer = build_optimizer(model, cfg)
    start = 0
    state = load_checkpoint(ckpt_dir)
    if state is not None:
        if state["settings"]["hidden"] != cfg.hidden:
            raise ValueError(f"checkpoint in {ckpt_dir} has {state['settings']['hidden']} hidden units, "
                             f"but --hidden is {cfg.hidden}")
        if state["settings"] != settings(cfg):
            print(f"warning: resuming a checkpoint written with different settings ({state['settings']}); "
                  "the result will differ from an uninterrupted run", file=out)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
        print(f"resuming from {ckpt_dir} after epoch {start}", file=out, flush=True)
    if start >= cfg.epochs:
        print(f"already trained {start} of {cfg.epochs} epochs; nothing to do", file=out, flush=True)
        return model, FINISHED

    model.train()
    n = len(train_x)
    for epoch in range(start + 1, cfg.epochs + 1):
        began = time.monotonic()

        # 2. One pass over the shuffled training rows.
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
        order = torch.randperm(n, generator=gen)
        total = 0.0
        for b in range(0, n, cfg.batch):
            if trial.stopping:
                print(f"stop requested: abandoning epoch {epoch}; the checkpoint holds epoch {epoch - 1}",
                      file=out, flush=True)
                return model, INTERRUPTED
            idx = order[b:b + cfg.batch]
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        train_loss = total / n

        # 3. Evaluate, checkpoint (the model for serving too), report.
        val_loss, val_acc = evaluate(model, val_x, val_y)
        if not (math.isfinite(train_loss) and math.isfinite(val_loss)):
            raise FloatingPointError(f"epoch {epoch}: train loss {train_loss}, validation loss {val_loss}: "
                                     "training diverged (try a lower --lr)")
        save_model(ckpt_dir, model)
        save_checkpoint(ckpt_dir, {
            "epoch": epoch,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "settings": settings(cfg),
        })
        print(f"epoch {epoch:3d}/{cfg.epochs}  train_loss {train_loss:.4f}  val_loss {val_loss:.4f}  "
              f"val_accuracy {100 * val_acc:6.2f}%  ({1000 * (time.monotonic() - began):.0f}ms)",
              file=out, flush=True)
        decision = trial.report(epoch, {"train_loss": train_loss, "val_loss": val_loss, "val_accuracy": val_acc})

        # 4. The searcher may end the trial early.
        if decision == virga_trial.STOP:
            print(f"the searcher stopped this trial after epoch {epoch}", file=out, flush=True)
            return model, STOPPED
    return model, FINISHED


def parse_args(argv: Sequence[str], trial) -> argparse.Namespace:
    """Flags, with VIRGA_HPARAMS as their defaults (so an explicit flag wins)."""
    p = argparse.ArgumentParser(description="Train an MLP on the digits data set (Virga example).")
    p.add_argument("--lr", type=float, default=trial.get("lr", 0.1), help="learning rate")
    p.add_argument("--hidden", type=int, default=trial.get("hidden", 64), help="hidden units")
    p.add_argument("--l2", type=float, default=trial.get("l2", 1e-4), help="L2 weight decay (weights only)")
    p.add_argument("--momentum", type=float, default=trial.get("momentum", 0.9), help="SGD momentum")
    p.add_argument("--epochs", type=int, default=trial.get("epochs", 20), help="epochs to train in all")
    p.add_argument("--batch", type=int, default=trial.get("batch", 32), help="mini-batch size")
    p.add_argument("--seed", type=int, default=trial.get("seed", 1), help="seed of the weights and shuffles")
    p.add_argument("--data", default=DEFAULT_DATA, help="the data set (gzip CSV)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="checkpoint directory when not run by Virga (default: a new temporary directory)")
    cfg = p.parse_args(argv)
    problems = []
    if not (cfg.lr > 0 and math.isfinite(cfg.lr)):
        problems.append(f"--lr {cfg.lr}: want a positive number")
    if cfg.hidden < 1:
        problems.append(f"--hidden {cfg.hidden}: want at least 1")
    if not (cfg.l2 >= 0 and math.isfinite(cfg.l2)):
        problems.append(f"--l2 {cfg.l2}: want a number >= 0")
    if not 0 <= cfg.momentum < 1:
        problems.append(f"--momentum {cfg.momentum}: want 0 <= momentum < 1")
    if cfg.epochs < 0:
        problems.append(f"--epochs {cfg.epochs}: want at least 0")
    if cfg.batch < 1:
        problems.append(f"--batch {cfg.batch}: want at least 1")
    if problems:
        p.error("; ".join(problems))
    return cfg


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the trainer; return the exit code."""
    torch.set_num_threads(1)
    try:
        # Before parsing flags, so hyperparameters can be their defaults.
        trial = virga_trial.from_env()
    except ValueError as e:
        print(f"digits-torch: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        cfg = parse_args(sys.argv[1:] if argv is None else argv, trial)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    if cfg.checkpoint_dir:
        trial.set_default_checkpoint_dir(cfg.checkpoint_dir)
    try:
        data = load_dataset(cfg.data)
    except (OSError, ValueError) as e:
        print(f"digits-torch: {e}", file=sys.stderr)
        return EXIT_ERROR
    print(f"digits-torch: {len(data[0])} training and {len(data[2])} validation rows; "
          f"lr={cfg.lr:g} hidden={cfg.hidden} l2={cfg.l2:g} momentum={cfg.momentum:g} batch={cfg.batch} "
          f"epochs={cfg.epochs} seed={cfg.seed}; checkpoints in {trial.checkpoint_dir}", flush=True)
    try:
        _, outcome = train(cfg, trial, data)
    except virga_trial.Superseded:
        print("digits-torch: Virga says this attempt is no longer current; exiting", file=sys.stderr)
        return EXIT_SUPERSEDED
    except (virga_trial.ReportError, OSError, ValueError, FloatingPointError) as e:
        print(f"digits-torch: {e}", file=sys.stderr)
        return EXIT_ERROR
    return virga_trial.STOPPED_EXIT_CODE if outcome == INTERRUPTED else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

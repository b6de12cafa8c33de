#!/usr/bin/python3
"""Data-parallel training of the digits MLP with PyTorch DDP (gloo, CPU), under Virga.

Virga starts one process per rank (resources.nodes x processes_per_node) with
torch.distributed's rendezvous variables: RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (init_method "env://"). Each rank trains on its
shard of every epoch's batches; DDP averages the gradients, so every rank holds
the same model. Rank 0 writes the checkpoint (model, optimizer, epoch) and
reports val_loss; it tells the others whether the searcher said stop. Every
rank resumes from the checkpoint in VIRGA_CHECKPOINT_DIR (restored on each
node by Virga), so a gang that lost a member restarts together from the last
epoch saved.

By hand, two processes on this machine:

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 /usr/bin/python3 examples/ddp-torch/train.py &
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 /usr/bin/python3 examples/ddp-torch/train.py
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
sys.path.insert(0, os.path.join(REPO, "examples", "digits-torch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import train as digits  # noqa: E402  (examples/digits-torch/train.py)
import virga_trial  # noqa: E402

stopping = False


def on_term(signum, frame):  # noqa: ARG001
    global stopping
    stopping = True


def main() -> int:
    trial = virga_trial.from_env(handle_signals=False)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lr", type=float, default=trial.get("lr", 0.1))
    p.add_argument("--hidden", type=int, default=trial.get("hidden", 64))
    p.add_argument("--epochs", type=int, default=trial.get("epochs", 5))
    p.add_argument("--batch", type=int, default=trial.get("batch", 64))
    p.add_argument("--data", default=digits.DEFAULT_DATA)
    cfg = p.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    torch.set_num_threads(1)

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(7)
    model = digits.build_model(cfg.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    start = 0
    ckpt = trial.checkpoint_dir
    state = digits.load_checkpoint(ckpt)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    ddp = DDP(model)
    tx, ty, vx, vy = digits.load_dataset(cfg.data)
    print(f"rank {rank}/{world}: epochs {start}..{cfg.epochs - 1}", flush=True)
    for epoch in range(start, cfg.epochs):
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(len(tx), generator=g)
        batches = [order[i:i + cfg.batch] for i in range(0, len(order), cfg.batch)]
        # Every rank takes the same number of batches: DDP's all-reduce pairs them up.
        for b in batches[rank::world][: len(batches) // world]:
            opt.zero_grad()
            F.cross_entropy(ddp(tx[b]), ty[b]).backward()
            opt.step()
        decision = torch.zeros(1)
        if rank == 0:
            loss, acc = digits.evaluate(model, vx, vy)
            digits.save_checkpoint(ckpt, {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch})
            print(f"epoch {epoch}: val_loss {loss:.4f} val_acc {acc:.4f}", flush=True)
            if trial.report(epoch, {"val_loss": loss, "val_acc": acc}) == virga_trial.STOP:
                decision[0] = 1
        if stopping:
            decision[0] = 2
        dist.all_reduce(decision, op=dist.ReduceOp.MAX)  # a stop on any rank stops all
        if decision[0] == 2:
            dist.destroy_process_group()
            return 143
        if decision[0] == 1:
            break
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

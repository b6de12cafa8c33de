#!/usr/bin/python3
"""Write the serving benchmark's real models as a model repository (Triton's layout):

    /usr/bin/python3 bench/serve/models.py DIR

DIR/digits/1: the digits-torch network (64 -> 64 ReLU -> 10, softmax; examples/digits-torch/train.py's
Exported form: raw pixels in, probabilities and label out), and DIR/mlp1024/1: the same interface over a
larger MLP (64 -> 1024 -> 1024 -> 10), so that batching pays differently. Random weights (seeded): only
latency is measured. Each directory holds model.onnx and virga-model.json with max_batch 64."""

import json
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "digits-torch"))
import train  # noqa: E402

MAX_BATCH = 64


def write(directory, model):
    os.makedirs(directory, exist_ok=True)
    model.eval()
    torch.onnx.export(
        train.Exported(model), torch.zeros(1, train.NUM_INPUTS), os.path.join(directory, "model.onnx"),
        opset_version=train.ONNX_OPSET, input_names=["pixels"], output_names=["probabilities", "label"],
        dynamic_axes={"pixels": {0: "batch"}, "probabilities": {0: "batch"}, "label": {0: "batch"}})
    manifest = dict(train.MANIFEST, max_batch=MAX_BATCH)
    with open(os.path.join(directory, "virga-model.json"), "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")


def main(argv):
    if len(argv) != 2:
        print("usage: models.py DIR", file=sys.stderr)
        return 2
    torch.manual_seed(1)
    write(os.path.join(argv[1], "digits", "1"), train.build_model(64))
    big = nn.Sequential(nn.Linear(train.NUM_INPUTS, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                        nn.Linear(1024, train.NUM_CLASSES))
    write(os.path.join(argv[1], "mlp1024", "1"), big)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

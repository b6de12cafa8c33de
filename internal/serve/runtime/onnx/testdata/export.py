"""Exports a small seeded PyTorch MLP with a dynamic batch dimension to DIR/model.onnx, with
DIR/virga-model.json, and writes PyTorch's own outputs for a few inputs to DIR/expected.json.
Used by the ONNX runtime's tests: python3 export.py DIR"""
import json
import sys

import torch

out = sys.argv[1]
torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10),
                                     torch.nn.Softmax(dim=1))

    def forward(self, pixels):
        p = self.m(pixels)
        return p, torch.argmax(p, dim=1)


net = Net().eval()
x = torch.rand(9, 64) * 16
torch.onnx.export(net, (x,), out + "/model.onnx", input_names=["pixels"], output_names=["probabilities", "label"],
                  dynamic_axes={"pixels": {0: "batch"}, "probabilities": {0: "batch"}, "label": {0: "batch"}})
with torch.no_grad():
    p, label = net(x)
json.dump({"pixels": x.flatten().tolist(), "probabilities": p.flatten().tolist(), "label": label.tolist()},
          open(out + "/expected.json", "w"))
json.dump({"format": "onnx", "file": "model.onnx", "max_batch": 16, "signature": {
    "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
                {"name": "label", "datatype": "INT64", "shape": [-1]}]}},
          open(out + "/virga-model.json", "w"), indent=1)

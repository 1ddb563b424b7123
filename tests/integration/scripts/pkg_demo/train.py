"""Run as `python -m pkg_demo.train --steps N` from the scripts directory."""

import argparse
import json
import sys

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--report", default=None)
args = parser.parse_args()
if args.report:
    with open(args.report, "w") as fh:
        json.dump({"argv": sys.argv, "name": __name__, "spec": __spec__.name}, fh)

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(args.steps):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

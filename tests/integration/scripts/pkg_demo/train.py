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
    frame, frames_above = sys._getframe(), []
    while frame.f_back is not None:
        frame = frame.f_back
        frames_above.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
    with open(args.report, "w") as fh:
        report = {"argv": sys.argv, "name": __name__, "spec": __spec__.name}
        json.dump({**report, "frames_above": frames_above}, fh)

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(args.steps):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

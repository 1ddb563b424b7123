"""Run as `python -m pkg_demo.train --steps N` from the scripts directory.

It also writes what the launcher must sort out: a line of its own on each stream, and
profiler chatter the script did not write (USDT, CPUAllocator) that only the logs keep."""

import argparse
import json
import os
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

print("hello from stdout", os.environ.get("PERFDOCTOR_TEST_ENV"))
print(
    "USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start",
    file=sys.stderr,
)
print(
    "[W1122 05:37:49.91 CPUAllocator.cpp:245] Memory block of unknown size was allocated "
    "before the profiling started, profiler results will not include the deallocation event",
    file=sys.stderr,
)
print("[W1122 05:37:50.00 user.cpp:1] a warning of the script's own", file=sys.stderr)
print("hello from stderr", file=sys.stderr)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(args.steps):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

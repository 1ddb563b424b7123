"""A short script (100 steps by default) of a small MLP with anomaly detection left on.

The shape of a script a user profiles as it is: one epoch, over before an in-process A/B of
one process can decide, and `torch.autograd.set_detect_anomaly(True)` left on from debugging
(about 2x on a ~3 ms step). `perfdoctor profile` must reach a verdict on `anomaly-off` by
running it again and pooling the pairs (optimize/engine.py).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--no-anomaly", action="store_true", help="the fix, for the plain clock")
    args = p.parse_args()
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(not args.no_anomaly)
    model = nn.Sequential(
        nn.Linear(64, args.width),
        nn.ReLU(),
        nn.Linear(args.width, args.width),
        nn.ReLU(),
        nn.Linear(args.width, args.width),
        nn.ReLU(),
        nn.Linear(args.width, 1),
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 64)
    y = torch.randn(args.batch, 1)
    started = time.perf_counter()
    for _ in range(args.steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    ms = (time.perf_counter() - started) * 1000.0 / args.steps
    print(f"{args.steps} steps, {ms:.2f} ms per step")


if __name__ == "__main__":
    main()

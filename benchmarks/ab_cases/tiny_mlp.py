"""A tiny, steady MLP training loop: the script of the A/A benchmark (ab_false_verdicts.py).

Nothing is wrong with it on purpose: data in memory, one small MLP, SGD. Its own clock prints
"ms/step" (median and mean of the steps after --warmup) at the end.

Run: python benchmarks/ab_cases/tiny_mlp.py [--steps N] [--threads N] [--hidden 256]
"""

from __future__ import annotations

import argparse

import torch
from _step_clock import train_on_slices
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as is)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(4096, 64)
    y = torch.randint(0, 10, (4096,))
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    train_on_slices(model, opt, x, y, args.steps, args.batch, args.warmup)


if __name__ == "__main__":
    main()

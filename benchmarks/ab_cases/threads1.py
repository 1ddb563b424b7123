"""Case (c): `torch.set_num_threads(1)` on a machine with more cores (2 here).

Matrix-heavy MLP steps that a second intra-op thread can split. The fix is `cpu-threads`
(threads held at the usable cores), switchable between steps, so perfdoctor measures it in
one process. `--threads N` overrides the planted 1, for the direct measurement.

Run: python benchmarks/ab_cases/threads1.py [--threads 1] [--steps N]
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
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)  # planted: 1 thread on a multi-core machine
    torch.manual_seed(0)
    x = torch.randn(4096, 512)
    y = torch.randint(0, 10, (4096,))
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train_on_slices(model, opt, x, y, args.steps, args.batch, args.warmup)


if __name__ == "__main__":
    main()

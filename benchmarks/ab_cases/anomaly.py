"""Case (b): `torch.autograd.set_detect_anomaly(True)` left on after debugging.

A small MLP on in-memory data; anomaly mode records a Python stack for every autograd node
and checks every backward output. The fix is `anomaly-off`, switchable between steps, so
perfdoctor measures it in one process. `--no-anomaly` is the fixed script, for the direct
measurement.

Run: python benchmarks/ab_cases/anomaly.py [--no-anomaly] [--threads 0] [--steps N]
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
    p.add_argument("--no-anomaly", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as is)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.no_anomaly:
        torch.autograd.set_detect_anomaly(True)  # left on after hunting a NaN
    torch.manual_seed(0)
    x = torch.randn(8192, 64)
    y = torch.randint(0, 10, (8192,))
    layers: list[nn.Module] = [nn.Linear(64, 128), nn.ReLU()]
    for _ in range(6):
        layers += [nn.Linear(128, 128), nn.LayerNorm(128), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_on_slices(model, opt, x, y, args.steps, args.batch, args.warmup)


if __name__ == "__main__":
    main()

"""A tiny, steady MLP training loop: the script of the A/A benchmark (ab_false_verdicts.py).

Nothing is wrong with it on purpose: data in memory, one small MLP, SGD. Its own clock prints
"ms/step" (median and mean of the steps after --warmup) at the end.

Run: python benchmarks/ab_cases/tiny_mlp.py [--steps N] [--threads N] [--hidden 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
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
    times: list[float] = []
    last = time.perf_counter()
    for step in range(args.steps):
        i = (step * args.batch) % (len(x) - args.batch)
        loss = nn.functional.cross_entropy(model(x[i : i + args.batch]), y[i : i + args.batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.perf_counter()
        if step >= args.warmup:
            times.append((now - last) * 1000.0)
        last = now
    if times:
        print(
            f"ms/step median {statistics.median(times):.4f} mean {statistics.fmean(times):.4f} "
            f"steps {len(times)}"
        )


if __name__ == "__main__":
    main()

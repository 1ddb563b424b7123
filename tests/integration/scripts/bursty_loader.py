"""A DataLoader whose epoch ends inside a run: ~17 ms of Python per batch, ~3 ms of compute.

The shape of the issue's bursty-loader script: a map-style Dataset whose __getitem__ does
pure-Python work (about 17 ms per batch of 32), num_workers=0, one epoch of 128 batches, so
every run of the script ends after 128 steps. With DataLoader workers, batches arrive in
bursts (a prefetched few, then a wait): step p90 is well above p50, and a median of a
handful of steps cannot see what the workers buy (optimize/engine.py: throughput windows).

Run: python bursty_loader.py [--batches 128] [--workers 0] [--item-ms 0.53]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowPython(Dataset):
    """Each item spins in Python for `item_ms`, like decoding or augmenting in __getitem__."""

    def __init__(self, n: int, item_ms: float) -> None:
        self.n = n
        self.item_s = item_ms / 1000.0
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        end = time.perf_counter() + self.item_s
        acc = 0
        while time.perf_counter() < end:
            acc += 1
        return self.x[i], self.y[i]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--item-ms", type=float, default=0.53)
    args = p.parse_args()
    torch.manual_seed(0)
    data = SlowPython(args.batches * args.batch, args.item_ms)
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(
        nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    started = time.perf_counter()
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    ms = (time.perf_counter() - started) * 1000.0 / len(loader)
    print(f"{len(loader)} steps, {ms:.2f} ms per step")


if __name__ == "__main__":
    main()

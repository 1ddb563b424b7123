"""A training loop whose `__getitem__` sets the pace: the arm that dataloader_split.py times.

Plain PyTorch, no perfdoctor: a small conv net on 32x32 images whose Dataset does fixed
pure-Python work per sample (fixed work, not a timed spin, so that contention for the cores
slows it as it would slow real decoding). Prints one JSON line: per-step wall times, the
data wait (time inside the DataLoader's __next__) and the thread and worker counts in use.

    python benchmarks/_slow_loader_train.py --workers 2 --threads 0 --steps 40
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, n: int, work: int) -> None:
        self.n, self.work = n, work

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        acc = i
        for k in range(self.work):  # stands in for decoding and augmenting one image
            acc = (acc * 1103515245 + k) % 2147483648
        g = torch.Generator().manual_seed(acc)
        return torch.rand(3, 32, 32, generator=g), acc % 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--work", type=int, default=6000, help="loop iterations per sample")
    parser.add_argument("--width", type=int, default=32, help="conv channels")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    total = (args.steps + args.warmup) * args.batch_size
    loader = DataLoader(
        SlowDataset(total, args.work), batch_size=args.batch_size, num_workers=args.workers
    )
    w = args.width
    model = nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1), nn.ReLU(),
        nn.Conv2d(w, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(w, w, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(w, 10),
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps: list[float] = []
    waits: list[float] = []
    it = iter(loader)
    for index in range(args.steps + args.warmup):
        start = time.perf_counter()
        x, y = next(it)
        got = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        end = time.perf_counter()
        if index >= args.warmup:
            steps.append((end - start) * 1e3)
            waits.append((got - start) * 1e3)
    threads = torch.get_num_threads()
    del it
    print(
        json.dumps(
            {"step_ms": steps, "wait_ms": waits, "threads": threads, "workers": args.workers}
        )
    )


if __name__ == "__main__":
    main()

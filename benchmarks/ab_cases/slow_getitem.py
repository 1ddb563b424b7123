"""Case (a): a Dataset whose `__getitem__` does Python/numpy work, loaded in the main process.

Each sample costs about 1.25 ms of Python and small numpy calls (a hand-rolled augmentation),
so a batch of 32 costs ~40 ms against ~6 ms of compute: the step waits for data. The fix is
`dataloader-workers` (the batches built in worker processes while the main process trains);
it cannot be switched between steps, so perfdoctor measures it by re-runs.

Run: python benchmarks/ab_cases/slow_getitem.py [--workers 0] [--threads 0] [--steps N]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _step_clock import StepClock
from torch import nn
from torch.utils.data import DataLoader, Dataset

FEATURES = 256


class SlowAugmented(Dataset):
    def __init__(self, n: int, rounds: int) -> None:
        self.n = n
        self.rounds = rounds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        x = rng.standard_normal(FEATURES).astype(np.float32)
        # Small numpy calls: interpreter-bound, like real augmentations.
        for _ in range(self.rounds):
            x = np.tanh(x * 1.01 + 0.01)
            x[::7] = x[::7].mean()
        label = int(abs(float(x.sum())) * 1000) % 10
        return torch.from_numpy(x), label


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as is)")
    p.add_argument("--rounds", type=int, default=160, help="augmentation rounds per sample")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    loader = DataLoader(
        SlowAugmented(10**7, args.rounds),
        batch_size=args.batch,
        shuffle=False,
        num_workers=args.workers,
    )
    model = nn.Sequential(
        nn.Linear(FEATURES, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = StepClock(args.warmup)
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clock.tick()
    clock.report()


if __name__ == "__main__":
    main()

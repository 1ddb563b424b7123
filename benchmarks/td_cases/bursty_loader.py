"""A bursty DataLoader: ~17 ms of Python per batch against ~3 ms of compute, 128 batches,
one epoch, num_workers=0. Fix (CASE_FIX=1): num_workers=2 (batches then arrive in bursts)."""

from __future__ import annotations

import math

import torch
from _clock import Clock, fixed
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH, BATCHES = 16, 128


class Bursty(Dataset):
    def __len__(self) -> int:
        return BATCH * BATCHES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        acc = 0.0
        for k in range(6000):  # ~1 ms of Python per sample, ~17 ms per batch
            acc += math.sin(i * 0.5 + k)
        return torch.full((256,), acc / 6000) + torch.randn(256) * 0.1, i % 10


def main() -> None:
    torch.manual_seed(0)
    loader = DataLoader(Bursty(), batch_size=BATCH, num_workers=2 if fixed() else 0)
    model = nn.Sequential(
        nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    clock = Clock()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        clock.tick()


if __name__ == "__main__":
    main()

"""A loader whose epoch ends within the run: 40 batches per epoch, 3 epochs (120 steps),
~8 ms of Python per batch in __getitem__, num_workers=0. Fix (CASE_FIX=1): 2 workers."""

from __future__ import annotations

import math

import torch
from _clock import Clock, fixed
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH, BATCHES, EPOCHS = 32, 40, 3


class Slow(Dataset):
    def __len__(self) -> int:
        return BATCH * BATCHES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        acc = 0.0
        for k in range(1500):  # ~0.25 ms of Python per sample
            acc += math.sin(i + k)
        return torch.full((32,), acc / 1500), i % 4


def main() -> None:
    torch.manual_seed(0)
    loader = DataLoader(Slow(), batch_size=BATCH, shuffle=True, num_workers=2 if fixed() else 0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    clock = Clock()
    for _ in range(EPOCHS):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.tick()


if __name__ == "__main__":
    main()

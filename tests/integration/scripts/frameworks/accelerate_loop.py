"""A plain loop under Hugging Face Accelerate: `prepare` rebuilds the DataLoader, gradient
accumulation 2 through `accelerator.accumulate`. The Dataset does slow per-sample CPU work
and the loader has no workers (the planted inefficiency: input-bound)."""

import argparse
import time

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--sample-ms", type=float, default=5.0)
args = parser.parse_args()


class Slow(Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 32, generator=g), torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        end = time.perf_counter() + args.sample_ms / 1000.0
        while time.perf_counter() < end:  # per-sample decoding / augmentation stands here
            pass
        return self.x[i], self.y[i]


if __name__ == "__main__":
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    loader = DataLoader(Slow(4096), batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _epoch in range(10):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()

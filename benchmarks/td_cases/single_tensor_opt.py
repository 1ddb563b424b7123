"""A single-tensor optimizer: Adam(foreach=False) over 40 small layers, 150 steps; the
optimizer step is a large share of a small step. Fix (CASE_FIX=1): fused=True."""

from __future__ import annotations

import torch
from _clock import Clock, fixed
from torch import nn

STEPS = 150


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(20) for m in (nn.Linear(64, 64), nn.Tanh())])
    opt = (
        torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        if fixed()
        else torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    )
    x = torch.randn(16, 64)
    clock = Clock()
    for _ in range(STEPS):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clock.tick()


if __name__ == "__main__":
    main()

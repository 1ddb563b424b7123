"""Short script: 120 steps of a ~3 ms MLP step with anomaly detection left on.
Fix (CASE_FIX=1): anomaly detection off."""

from __future__ import annotations

import torch
from _clock import Clock, fixed
from torch import nn

STEPS = 120


def main() -> None:
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(not fixed())
    model = nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
    clock = Clock()
    for _ in range(STEPS):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clock.tick()


if __name__ == "__main__":
    main()

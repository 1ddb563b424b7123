"""Anomaly detection left on and a thread setting: 150 steps of a small CNN,
torch.set_num_threads(1) on a 2-core machine, set_detect_anomaly(True).
Fix (CASE_FIX=1): anomaly detection off (the thread count is left: whether 2 threads help
depends on the machine's load, which is what perfdoctor's cpu-threads variant measures)."""

from __future__ import annotations

import torch
from _clock import Clock, fixed
from torch import nn

STEPS = 150

torch.set_num_threads(1)


def main() -> None:
    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(not fixed())
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(256, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(32, 3, 24, 24), torch.randint(0, 10, (32,))
    clock = Clock()
    for _ in range(STEPS):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clock.tick()


if __name__ == "__main__":
    main()

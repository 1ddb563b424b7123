"""Training without torch.optim (manual SGD), or forward passes only (--forward-only)."""

import sys
import time

import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
forward_only = "--forward-only" in sys.argv
steps = 400 if forward_only else 60

for _ in range(steps):
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    if forward_only:
        with torch.no_grad():
            model(x)
        time.sleep(0.01)
        continue
    loss = nn.functional.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad

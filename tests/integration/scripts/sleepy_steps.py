"""A tiny training loop whose step time is set by --sleep-ms (a planted, known slowdown).

The update is by hand: creating a torch.optim optimizer imports torch._dynamo (about 1.5 s of
CPU per run), and what is read from this script is its step time, not its optimizer; its
steps are then backward calls."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--sleep-ms", type=float, default=10.0)
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()

model = nn.Linear(16, 1)
x, y = torch.randn(32, 16), torch.randn(32, 1)
for _ in range(args.steps):
    time.sleep(args.sleep_ms / 1000.0)  # stands for work the regression added
    loss = nn.functional.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad

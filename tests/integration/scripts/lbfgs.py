"""A closure-based optimizer: LBFGS takes its 20 iterations (20 forwards and backwards)
inside one optimizer.step(closure) call, and the script steps once (--steps N: N times)."""

import sys

import torch
from torch import nn


def main() -> None:
    steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 1
    torch.manual_seed(0)
    x, y = torch.randn(256, 8), torch.randn(256, 1)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.LBFGS(model.parameters(), max_iter=20, history_size=10)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(steps):
        loss = opt.step(closure)
        print(f"loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()

"""torch.optim.LBFGS: every step evaluates a closure (forward and backward) several times."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=5)
x, y = torch.randn(512, 32), torch.randn(512, 1)

for _ in range(1000):

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)

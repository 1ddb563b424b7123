"""Two optimizers stepping once per iteration (a GAN): one step per iteration.

--no-loader draws batches from torch.randn instead of a DataLoader.
"""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
discriminator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
use_loader = "--no-loader" not in sys.argv
loader = DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=8)


def batches():
    while True:
        if use_loader:
            for (real,) in loader:
                yield real
        else:
            yield torch.randn(8, 8)


for real in batches():
    fake = generator(torch.randn(8, 4))
    opt_d.zero_grad()
    d_loss = bce(discriminator(real), torch.ones(8, 1)) + bce(
        discriminator(fake.detach()), torch.zeros(8, 1)
    )
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = bce(discriminator(fake), torch.ones(8, 1))
    g_loss.backward()
    opt_g.step()

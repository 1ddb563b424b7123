"""A compiled training loop with an evaluation in it, both ways users compile
(torch.compile(module) and the in-place module.compile()), with the eager backend: dynamo
traces perfdoctor's hooks exactly as with inductor, without C++ compiles. Used to prove the
hooks add no graph break or recompile."""

from __future__ import annotations

import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.norm = nn.LayerNorm(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.relu(self.fc(x))) + x


class Body(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


body = Body()
body.compile(backend="eager")
head = torch.compile(nn.Linear(32, 4), backend="eager")
opt = torch.optim.AdamW([*body.parameters(), *head.parameters()], lr=1e-3)
loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,))),
    batch_size=16,
)
for _ in range(4):
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(head(body(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i % 3 == 2:
            with torch.no_grad():  # an evaluation in the loop: a grad-mode switch for dynamo
                body.eval()
                head(body(x))
                body.train()

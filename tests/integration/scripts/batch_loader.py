"""A DataLoader script for --plan-batch: each sample holds 4 MiB activations for backward
(tanh of a widened input; large enough that glibc maps and unmaps them, so the RSS peak
follows the batch), so the peak grows by a few MiB per sample, and each step pays a
fixed 20 ms (a stand-in for a per-step cost such as logging), so larger batches train more
samples per second. No batch-size argument: the plan must rebuild the DataLoader.

The update is by hand, no torch.optim: creating an optimizer imports torch._dynamo (torch's
own lazy import, about 1.6 s of CPU in each of the plan's children), and plain SGD keeps no
state that would count in the peak. Steps are counted by backward calls."""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

WIDEN = 4096  # 256 features x 4096 x 4 bytes = 4 MiB kept per sample


class Widened(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(x).repeat(1, WIDEN))
        return h.mean(dim=1)


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 256), torch.randn(2048))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = Widened()
    for epoch in range(100):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
            time.sleep(0.02)
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

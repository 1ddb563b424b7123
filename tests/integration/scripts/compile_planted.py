"""A compiled training loop with two planted graph breaks and one recompile storm.

Each can be switched off by an environment variable (the by-hand fix), so a benchmark can
measure what removing it buys (benchmarks/README.md, "Compile diagnosis: planted breaks"):
  PLANTED_NO_ITEM=1     break 1: `.item()` in a data-dependent `if` -> torch.where
  PLANTED_NO_DISABLE=1  break 2: a torch.compiler.disable'd helper -> traced into the graph
  PLANTED_NO_STORM=1    storm: a Python int attribute changed every step -> a tensor buffer
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.nn as nn

torch.manual_seed(0)
NO_ITEM = os.environ.get("PLANTED_NO_ITEM") == "1"
NO_DISABLE = os.environ.get("PLANTED_NO_DISABLE") == "1"
NO_STORM = os.environ.get("PLANTED_NO_STORM") == "1"
STEPS = int(os.environ.get("PLANTED_STEPS", "40"))
# The user raised the limit to silence dynamo's warning: every step now recompiles.
torch._dynamo.config.cache_size_limit = 64
torch._dynamo.config.recompile_limit = 64


def _smooth(h: torch.Tensor) -> torch.Tensor:
    for _ in range(12):  # many small elementwise ops: cheap fused, slow one by one
        h = h * 0.9 + torch.tanh(h) * 0.1
    return h


smooth_eager = torch.compiler.disable(_smooth)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(64, 256)
        self.mid = nn.Linear(256, 256)
        self.out = nn.Linear(256, 10)
        self.step = 0  # the storm: a Python int that changes every step
        self.register_buffer("step_t", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        if NO_ITEM:
            h = torch.where(h.abs().max() > 100.0, h / 100.0, h)
        else:
            if h.abs().max().item() > 100.0:  # PLANTED BREAK 1
                h = h / 100.0
        h = self.mid(h)
        h = _smooth(h) if NO_DISABLE else smooth_eager(h)  # PLANTED BREAK 2
        if NO_STORM:  # noqa: SIM108 (the planted line stays on its own line)
            h = h * (1.0 + 0.0 * self.step_t)
        else:
            h = h * (1.0 + 0.0 * self.step)  # PLANTED STORM
        return self.out(h)


model = Net()
model.compile()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(128, 64)
y = torch.randint(0, 10, (128,))
times: list[float] = []
cpu_times: list[float] = []  # this process's CPU time: far less moved by other processes' load
for step in range(STEPS):
    t0 = time.perf_counter()
    c0 = time.process_time()
    model.step = step
    model.step_t.fill_(step)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append((time.perf_counter() - t0) * 1000.0)
    cpu_times.append((time.process_time() - c0) * 1000.0)
# For benchmarks/compile_planted_ab.py: the median step after the first compiles.
print(
    f"planted median_step_ms={statistics.median(times[5:] or times):.3f} "
    f"median_step_cpu_ms={statistics.median(cpu_times[5:] or cpu_times):.3f}"
)

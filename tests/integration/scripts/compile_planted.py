"""A compiled training loop with two planted graph breaks and one recompile storm.

Each can be switched off by an environment variable (the by-hand fix), so a benchmark can
measure what removing it buys (benchmarks/README.md, "Compile diagnosis: planted breaks"):
  PLANTED_NO_ITEM=1     break 1: `.item()` in a data-dependent `if` -> torch.where
  PLANTED_NO_DISABLE=1  break 2: a torch.compiler.disable'd helper -> traced into the graph
  PLANTED_NO_STORM=1    storm: a Python int attribute changed every step -> a tensor buffer
  PLANTED_ALTERNATE_DISABLE=K  break 2 removed by hand in every other block of K steps (the
                        module flag is read in forward, so dynamo guards on it and keeps both
                        versions): the hand removal paired in one process, like perfdoctor's A/B
  PLANTED_BACKEND=eager  dynamo's eager backend instead of inductor: the same graph breaks
                        and recompiles (dynamo finds them before any backend runs), without a
                        C++ compile at every recompile of the storm (the integration test)
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
ALTERNATE = int(os.environ.get("PLANTED_ALTERNATE_DISABLE", "0"))
BACKEND = os.environ.get("PLANTED_BACKEND", "inductor")
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
model.compile(backend=BACKEND)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(128, 64)
y = torch.randint(0, 10, (128,))
times: list[float] = []
cpu_times: list[float] = []  # this process's CPU time: far less moved by other processes' load
blocks: list[tuple[bool, list[float], list[float]]] = []  # (removed, CPU ms, wall ms)
for step in range(STEPS):
    if ALTERNATE and step % ALTERNATE == 0:
        NO_DISABLE = (step // ALTERNATE) % 2 == 1
        blocks.append((NO_DISABLE, [], []))
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
    if ALTERNATE and step % ALTERNATE:  # a block's first step settles (a recompile, once)
        blocks[-1][1].append(cpu_times[-1])
        blocks[-1][2].append(times[-1])
if ALTERNATE:
    # Pairs of blocks (planted, removed) after the first two: what removing it buys, as a
    # share of the planted block's median step, per pair; the median over the pairs.
    pairs = [(blocks[i], blocks[i + 1]) for i in range(2, len(blocks) - 1, 2)]
    for k, name in ((1, "cpu"), (2, "wall")):
        shares = sorted(
            1 - statistics.median(b[k]) / statistics.median(a[k]) for a, b in pairs if a[k] and b[k]
        )
        if shares:
            print(
                f"alternate {name}_share_median={statistics.median(shares):.4f} "
                f"q1={shares[len(shares) // 4]:.4f} q3={shares[(3 * len(shares)) // 4]:.4f} "
                f"pairs={len(shares)}"
            )
# For benchmarks/compile_planted_ab.py: the median step after the first compiles.
print(
    f"planted median_step_ms={statistics.median(times[5:] or times):.3f} "
    f"median_step_cpu_ms={statistics.median(cpu_times[5:] or cpu_times):.3f}"
)

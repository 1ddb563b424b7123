"""The case scripts' own clock: wall time between optimizer steps, printed as one line
("ms/step median M mean A steps N") at the end, after the first `warmup` steps; and the
loop the in-memory cases share (slices of one tensor, the planted setting left to each)."""

from __future__ import annotations

import atexit
import statistics
import time
from typing import Any


class StepClock:
    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.times: list[float] = []
        self.steps = 0
        self.last = time.perf_counter()
        atexit.register(self.report)  # also when perfdoctor stops the script after its plan

    def tick(self) -> None:
        now = time.perf_counter()
        if self.steps >= self.warmup:
            self.times.append((now - self.last) * 1000.0)
        self.last = now
        self.steps += 1

    def report(self) -> None:
        if self.times:
            print(
                f"ms/step median {statistics.median(self.times):.4f} "
                f"mean {statistics.fmean(self.times):.4f} steps {len(self.times)}",
                flush=True,
            )
            self.times = []


def train_on_slices(
    model: Any, opt: Any, x: Any, y: Any, steps: int, batch: int, warmup: int
) -> None:
    """Cross-entropy steps on consecutive slices of (x, y), timed by a StepClock."""
    import torch.nn.functional as F

    clock = StepClock(warmup)
    for step in range(steps):
        i = (step * batch) % (len(x) - batch)
        loss = F.cross_entropy(model(x[i : i + batch]), y[i : i + batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clock.tick()
    clock.report()

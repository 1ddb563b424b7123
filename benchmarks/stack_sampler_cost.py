"""Cost of the per-step stack sampler (collect/stack_sampler.py) on a training loop: blocks of
steps with the SIGPROF sampler on and off, alternated in one process (A B A B ...), the
median step of each arm. Prints the ratio; asserts nothing.

    python benchmarks/stack_sampler_cost.py [--rounds 8] [--block 150] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect.stack_sampler import StackSampler


def python_work(n: int) -> float:
    v = 0.5
    for _ in range(n):
        v = v * 0.999 + 0.001 * math.cos(v)
    return v


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--block", type=int, default=150)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # one thread: no intra-op stall under load
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))

    def step() -> None:
        python_work(300)  # the script's own Python between steps
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(50):
        step()
    arms: dict[str, list[float]] = {"off": [], "on": []}
    user = UserCode.for_target(str(Path(__file__).parent), str(Path.cwd()))
    index = 0
    for _ in range(args.rounds):
        for arm in ("off", "on"):
            sampler = StackSampler(user) if arm == "on" else None
            if sampler is not None:
                sampler.start()
            for _ in range(args.block):
                if sampler is not None:
                    sampler.step_started(index)
                t = time.perf_counter()
                step()
                arms[arm].append((time.perf_counter() - t) * 1000.0)
                index += 1
            if sampler is not None:
                sampler.stop()
    off, on = statistics.median(arms["off"]), statistics.median(arms["on"])
    print(f"median step: off {off:.3f} ms, on {on:.3f} ms, on/off {on / off:.3f}x")


if __name__ == "__main__":
    main()

"""A straggler rank: 2-rank gloo DDP on 127.0.0.1, 120 steps; rank 1 does ~20 ms of extra
host work per step (a planted per-rank cost), rank 0 none. Fix (CASE_FIX=1): the extra work
is gone (a by-hand change: perfdoctor names the rank, nothing applies it at runtime).
Launch: python straggler_ddp.py (it starts its two ranks itself)."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _clock import Clock, fixed
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 120
EXTRA_S = 0.020


def run(rank: int, world: int, port: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    clock = Clock() if rank == 0 else None
    for _ in range(STEPS):
        if rank == 1 and not fixed():
            end = time.perf_counter() + EXTRA_S  # busy host work, as a slow logger would be
            while time.perf_counter() < end:
                pass
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if clock is not None:
            clock.tick()
    if clock is not None:
        clock.report()
    dist.destroy_process_group()


if __name__ == "__main__":
    port = 29500 + os.getpid() % 1000
    mp.spawn(run, args=(2, port), nprocs=2, join=True)

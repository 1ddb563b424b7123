"""DDP without torchrun: main() starts 2 workers with torch.multiprocessing.spawn (gloo, CPU).

The main process never trains; each worker joins a process group and trains a small model.
`--crash-rank K` makes worker K raise at step 3; `--hang-rank K` makes it sleep there.
"""

import argparse
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def worker(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        if rank == args.crash_rank and step == 3:
            raise ValueError(f"planted crash in worker {rank}")
        if rank == args.hang_rank and step == 3:
            print(f"worker {rank} hangs", flush=True)
            time.sleep(600)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--hang-rank", type=int, default=-1)
    args = p.parse_args()
    # A Python child that never trains: it must cost nothing and leave no record.
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    mp.spawn(worker, args=(2, free_port(), args), nprocs=2, join=True)
    print("main: workers done", flush=True)


if __name__ == "__main__":
    main()

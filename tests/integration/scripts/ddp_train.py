"""A tiny DistributedDataParallel loop (gloo, CPU) for the multi-rank tests.

Run it as torchrun does: `torchrun --nproc-per-node 2 ddp_train.py`, or under
`perfdoctor profile --nproc-per-node 2 ddp_train.py`.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomPairs(Dataset):
    def __init__(self, n: int, slow_ms: float) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 16, generator=g)
        self.y = torch.randn(n, 1, generator=g)
        self.slow_s = slow_ms / 1000.0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.slow_s:
            time.sleep(self.slow_s)  # SLOW-LINE: this rank's data path is slow
        return self.x[i], self.y[i]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--crash-step", type=int, default=3, help="also where --hang-rank hangs")
    p.add_argument("--hang-rank", type=int, default=-1, help="sleeps: the others wait in DDP")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0, help="per sample, on --slow-rank")
    p.add_argument(
        "--step-sleep-ms",
        type=float,
        default=0.0,
        help="per step on --slow-rank, in its own code after the optimizer step",
    )
    p.add_argument("--no-init", action="store_true", help="never init a process group")
    p.add_argument("--zero-grad-zeros", action="store_true", help="zero_grad(set_to_none=False)")
    p.add_argument(
        "--manual-sgd",
        action="store_true",
        help="no optimizer, no DataLoader, the model called through .forward(): steps are "
        "backward calls, so perfdoctor's plan ends inside loss.backward() on every rank",
    )
    return p.parse_args()


def main() -> None:
    args = parse()
    if args.no_init:
        rank, world = 0, 1
    else:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    slow_ms = args.slow_ms if rank == args.slow_rank else 0.0
    dataset = RandomPairs(args.samples, slow_ms)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank) if world > 1 else None
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    if not args.no_init:
        model = DistributedDataParallel(model)
    if args.manual_sgd:
        manual_sgd(model, args, rank)
        return
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            if rank == args.crash_rank and step == args.crash_step:
                raise ValueError(f"planted crash on rank {rank} at step {step}")
            if rank == args.hang_rank and step == args.crash_step:
                print(f"rank {rank} hangs", flush=True)
                time.sleep(600)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=not args.zero_grad_zeros)
            loss.backward()
            opt.step()
            if rank == args.slow_rank and args.step_sleep_ms:
                time.sleep(args.step_sleep_ms / 1000.0)  # this rank's own code is slow
            step += 1
    if not args.no_init:
        dist.destroy_process_group()
    print(f"rank {rank} of {world} done ({os.environ.get('LOCAL_RANK')})", file=sys.stderr)


def manual_sgd(model: nn.Module, args: argparse.Namespace, rank: int) -> None:
    g = torch.Generator().manual_seed(rank)
    for _ in range(args.epochs * args.samples // args.batch):
        x, y = torch.randn(args.batch, 16, generator=g), torch.randn(args.batch, 1, generator=g)
        # .forward(): no module hook sees it, so only backward calls mark the steps.
        loss = nn.functional.mse_loss(model.forward(x), y)
        loss.backward()  # DDP all-reduces the gradients in here
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None


if __name__ == "__main__":
    main()

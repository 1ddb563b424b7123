"""Hogwild: 2 multiprocessing.Process trainers update one model in shared memory
(start method spawn by default, `--start-method fork` as in pytorch/examples' mnist_hogwild)."""

import argparse

import torch
import torch.multiprocessing as mp
from torch import nn


def train(model: nn.Module, seed: int, steps: int) -> None:
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--start-method", default="spawn")
    args = p.parse_args()
    mp.set_start_method(args.start_method, force=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    model.share_memory()
    procs = [mp.Process(target=train, args=(model, k, args.steps)) for k in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    print("main: trainers done", [proc.exitcode for proc in procs], flush=True)


if __name__ == "__main__":
    main()

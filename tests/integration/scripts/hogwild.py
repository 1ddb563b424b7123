"""Hogwild: multiprocessing.Process trainers update one model in shared memory (start method
spawn by default, `--start-method fork` as in pytorch/examples' mnist_hogwild).

`--start-method` names one method (2 trainers started by it) or several, comma-separated
(trainer K started by the K-th): one run then has a trainer of each way of starting.

`--crash-trainer K` makes trainer K raise at step 3, `--hang-trainer K` makes it sleep there;
main exits with the first failing trainer's exit code, as a careful launcher script does.

`--update-by-hand`: each trainer updates the weights itself instead of through torch.optim.
Creating an optimizer imports torch._dynamo (torch's own lazy import, about 1.6 s of CPU per
trainer); tests of how a run ends, which read no optimizer, use it.
"""

import argparse
import sys
import time

import torch
import torch.multiprocessing as mp
from torch import nn


def train(model: nn.Module, seed: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    opt = None if args.update_by_hand else torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(seed)
    for step in range(args.steps):
        if seed == args.crash_trainer and step == 3:
            raise ValueError(f"planted crash in trainer {seed}")
        if seed == args.hang_trainer and step == 3:
            print(f"trainer {seed} hangs", flush=True)
            time.sleep(600)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        if opt is None:
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
            continue
        opt.zero_grad()
        loss.backward()
        opt.step()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--start-method", default="spawn")
    p.add_argument("--crash-trainer", type=int, default=-1)
    p.add_argument("--hang-trainer", type=int, default=-1)
    p.add_argument("--update-by-hand", action="store_true", help="no torch.optim")
    args = p.parse_args()
    methods = args.start_method.split(",")
    if len(methods) == 1:
        methods *= 2
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    model.share_memory()
    procs = [
        mp.get_context(method).Process(target=train, args=(model, k, args))
        for k, method in enumerate(methods)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    codes = [proc.exitcode for proc in procs]
    print("main: trainers done", codes, flush=True)
    sys.exit(next((code for code in codes if code), 0))


if __name__ == "__main__":
    main()

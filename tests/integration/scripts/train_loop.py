"""A tiny configurable training loop for the child-process tests."""

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RandomPairs(Dataset):
    """Defined in the script: must pickle for DataLoader workers."""

    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 8, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--crash-at", type=int, default=-1)
    p.add_argument("--crash-oom", action="store_true", help="crash with CUDA's OOM error")
    p.add_argument("--exit-code", type=int, default=None)
    p.add_argument("--forever", action="store_true")
    p.add_argument("--catch", action="store_true")
    p.add_argument("--eval-without-no-grad", action="store_true")
    p.add_argument("--mp-context", default=None)
    p.add_argument("--print-loss", action="store_true")
    p.add_argument("--debug-modes", action="store_true")
    return p.parse_args()


def train(args: argparse.Namespace) -> None:
    if args.debug_modes:
        torch.autograd.set_detect_anomaly(True)  # DEBUG-LINE: left on after debugging
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        RandomPairs(args.samples),
        batch_size=args.batch,
        num_workers=args.workers,
        multiprocessing_context=args.mp_context if args.workers else None,
    )
    step = 0
    epoch = 0
    while args.forever or epoch < args.epochs:
        for i, (x, y) in enumerate(loader):
            if step == args.crash_at:
                if args.crash_oom:
                    raise torch.cuda.OutOfMemoryError("CUDA out of memory (planted)")
                raise ValueError(f"planted crash at step {step}")
            loss = nn.functional.mse_loss(model(x), y) / args.accum
            loss.backward()
            if args.print_loss:
                print(f"loss {loss.item():.8f}")
            if (i + 1) % args.accum == 0:
                opt.step()
                opt.zero_grad(set_to_none=not args.debug_modes)  # ZERO-GRAD-LINE
                step += 1
        if args.eval_without_no_grad:
            evaluate(model, loader)
        epoch += 1
    if args.exit_code is not None:
        sys.exit(args.exit_code)


def evaluate(model: nn.Module, loader: DataLoader) -> float:
    total = 0.0
    for x, y in loader:
        out = model(x)  # EVAL-LINE: builds a graph that no backward uses
        total += float(nn.functional.mse_loss(out, y))
    return total


if __name__ == "__main__":
    arguments = parse()
    if arguments.catch:
        try:
            train(arguments)
        except Exception as exc:
            print("caught", exc)
    else:
        train(arguments)

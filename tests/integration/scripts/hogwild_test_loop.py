"""Hogwild as pytorch/examples' mnist_hogwild is written: trainers (torch.multiprocessing,
spawn) update one model in shared memory with no process group; the parent joins them, then
runs a test loop (model.eval(), no_grad forwards over a DataLoader) and never trains."""

import argparse

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 32, generator=g), torch.randint(0, 4, (n,), generator=g))


def train(rank: int, model: nn.Module, args: argparse.Namespace) -> None:
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    loader = DataLoader(data(args.train_rows, rank), batch_size=16, shuffle=True)
    model.train()
    for _ in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()


def test(model: nn.Module, args: argparse.Namespace) -> None:
    model.eval()
    loader = DataLoader(data(args.test_rows, 99), batch_size=64)
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += int((model(x).argmax(1) == y).sum())
    print(f"test accuracy {correct / args.test_rows:.3f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--num-processes", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-rows", type=int, default=2000)
    p.add_argument("--test-rows", type=int, default=20000)
    args = p.parse_args()
    mp.set_start_method("spawn", force=True)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4))
    model.share_memory()
    procs = [mp.Process(target=train, args=(k, model, args)) for k in range(args.num_processes)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    test(model, args)


if __name__ == "__main__":
    main()

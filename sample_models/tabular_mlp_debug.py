"""Tabular classifier that still carries the settings it was debugged with.

What it trains: a three-hidden-layer MLP on synthetic tabular data - 48 numeric features, a few of
them heavy-tailed, labelled into 6 classes by a fixed random "teacher" network plus label noise -
with AdamW. The whole table lives in memory as tensors on the training device and mini-batches
are slices of a shuffled index, so the input pipeline costs next to nothing.

Known inefficiency (exactly one, of the kind "debug settings left on"), in two parts:
1. `torch.autograd.set_detect_anomaly(True)` is still switched on at the top of `train()`, left
   over from hunting a NaN. Anomaly mode records a Python stack trace for every autograd node in
   the forward pass and checks every backward output for NaN, which makes each step several times
   slower on CPU and on GPU.
2. The validation pass that runs every `--eval-every` steps calls the model without
   `torch.no_grad()` / `torch.inference_mode()`, so every evaluation forward builds an autograd
   graph (and keeps activations alive for it) that no backward ever uses.

What perfdoctor should find: anomaly detection enabled; and forward passes that built a graph
with no backward (about one evaluation forward per `--eval-every` training steps), with the
source line of `evaluate()` in this file.

What fixes it: `anomaly-off` (applied at runtime: anomaly mode switched off) and `no-grad-eval`
(a by-hand change); by hand, delete the `set_detect_anomaly(True)` line and decorate
`evaluate()` with `@torch.inference_mode()`.

Run: python sample_models/tabular_mlp_debug.py [--epochs 3] [--batch-size 256] [--max-steps N]
"""

from __future__ import annotations

import argparse
import logging
import random
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger("tabular_mlp_debug")

NUM_FEATURES = 48
NUM_CLASSES = 6


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--rows", type=int, default=40_000, help="training rows")
    parser.add_argument("--val-rows", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--eval-every", type=int, default=5, help="steps between validations")
    parser.add_argument("--log-every", type=int, default=20, help="steps between loss logs")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def pick_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda requested but CUDA is not available")
    return torch.device(choice)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------- data


def make_table(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and labels of a synthetic table, the same for a given seed on every device.

    Labels come from a fixed random two-layer "teacher", so there is real structure to learn;
    10% of them are flipped at random so the task is not perfectly separable.
    """
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(rows, NUM_FEATURES)).astype(np.float32)
    # A few heavy-tailed columns, like prices or counts in real tables, log-scaled as usual.
    features[:, :6] = np.log1p(rng.lognormal(mean=0.0, sigma=1.0, size=(rows, 6)))
    teacher_rng = np.random.default_rng(1234)  # the same teacher for train and validation
    w1 = teacher_rng.normal(size=(NUM_FEATURES, 32)).astype(np.float32) / np.sqrt(NUM_FEATURES)
    w2 = teacher_rng.normal(size=(32, NUM_CLASSES)).astype(np.float32)
    labels = np.argmax(np.tanh(features @ w1) @ w2, axis=1)
    flip = rng.random(rows) < 0.1
    labels[flip] = rng.integers(0, NUM_CLASSES, size=int(flip.sum()))
    return torch.from_numpy(features), torch.from_numpy(labels.astype(np.int64))


def standardise(train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    mean, std = train.mean(dim=0), train.std(dim=0).clamp_min(1e-6)
    return tuple((t - mean) / std for t in (train, *others))


# --------------------------------------------------------------------------- the model


class TabularMLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, hidden),
            nn.LayerNorm(hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, classes),
        )

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.layers(rows)


# --------------------------------------------------------------------------- training


def evaluate(
    model: nn.Module, features: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validation loss and accuracy, as detached tensors (read them only when logging).

    THE INEFFICIENCY, part 2: no `torch.no_grad()` here, so this forward builds a graph.
    """
    model.eval()
    logits = model(features)
    loss = F.cross_entropy(logits, labels)
    accuracy = (logits.argmax(dim=1) == labels).float().mean()
    model.train()
    return loss.detach(), accuracy


def train(args: argparse.Namespace) -> None:
    # THE INEFFICIENCY, part 1: left on after chasing a NaN last week.
    torch.autograd.set_detect_anomaly(True)

    device = pick_device(args.device)
    seed_everything(args.seed)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and later GPUs

    train_x, train_y = make_table(args.rows, args.seed)
    val_x, val_y = make_table(args.val_rows, args.seed + 1)
    train_x, val_x = standardise(train_x, val_x)
    train_x, train_y = train_x.to(device), train_y.to(device)
    val_x, val_y = val_x.to(device), val_y.to(device)

    model = TabularMLP(NUM_FEATURES, args.hidden, NUM_CLASSES).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    steps_per_epoch = args.rows // args.batch_size

    step = 0
    val_loss = val_accuracy = torch.zeros((), device=device)
    started = time.perf_counter()
    for epoch in range(args.epochs):
        order = torch.randperm(args.rows, device=device)
        for batch in range(steps_per_epoch):
            index = order[batch * args.batch_size : (batch + 1) * args.batch_size]
            loss = F.cross_entropy(model(train_x[index]), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.eval_every == 0:
                val_loss, val_accuracy = evaluate(model, val_x, val_y)
            if step % args.log_every == 0:
                log.info(
                    "epoch %d step %d loss %.4f val_loss %.4f val_acc %.3f",
                    epoch,
                    step,
                    loss.item(),
                    val_loss.item(),
                    val_accuracy.item(),
                )
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break

    elapsed = time.perf_counter() - started
    log.info(
        "%d steps in %.2f s: %.1f ms/step, %.0f rows/s",
        step,
        elapsed,
        1000 * elapsed / max(step, 1),
        step * args.batch_size / elapsed,
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train(parse_args())


if __name__ == "__main__":
    main()

"""cnn_slow_dataloader.py as a performance engineer would tune it by hand, for comparison with
what perfdoctor applies at runtime (benchmarks/gpu_vs_hand_tuned.py).

Same dataset, model, optimizer, seed and command line as the sample (imported from it); the
training loop differs only in the by-hand changes:

- DataLoader: one worker per spare core (the per-sample work dominates), persistent workers,
  prefetch_factor 4, pinned memory (the sample pins already) and non-blocking copies;
- channels_last model and inputs, bf16 autocast on CUDA (Ampere or newer);
- cudnn.benchmark (the sample sets it already);
- torch.compile of the model unless --no-compile.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import torch
import torch.nn.functional as F
from _switches import SAMPLE_MODELS, parse_with_switches
from torch.utils.data import DataLoader

sys.path.insert(0, str(SAMPLE_MODELS))
import cnn_slow_dataloader as sample

log = logging.getLogger("cnn_tuned")


def parse_args() -> argparse.Namespace:
    return parse_with_switches(sample.parse_args)


def spare_cores() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def train(args: argparse.Namespace) -> None:
    device = sample.pick_device(args.device)
    sample.seed_everything(args.seed)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    dataset = sample.SyntheticImageDataset(args.samples, args.image_size, args.seed)
    workers = args.num_workers or spare_cores()
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=cuda,
        drop_last=True,
        persistent_workers=True,
        prefetch_factor=4,
    )
    model = sample.SmallConvNet().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
    forward = torch.compile(model) if args.compile else model
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda and args.amp)

    step = 0
    started = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for images, labels in loader:
            images = images.to(device, non_blocking=True, memory_format=torch.channels_last)
            labels = labels.to(device, non_blocking=True)
            with amp:
                loss = F.cross_entropy(forward(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
    elapsed = time.perf_counter() - started
    log.info("%d steps in %.2f s (%d workers)", step, elapsed, workers)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train(parse_args())


if __name__ == "__main__":
    main()

"""gpt_char_lm.py as a performance engineer would tune it by hand, for comparison with what
perfdoctor applies at runtime (benchmarks/gpu_vs_hand_tuned.py).

Same corpus, model, optimizer, seed and command line as the sample (imported from it); the
training loop differs only in the by-hand changes:

- no host sync per step: the running loss stays on the device and is read when logging, and
  there is no torch.cuda.synchronize() (the sample's known inefficiency on CUDA);
- default CPU threads (the sample pins one; its known inefficiency on CPU);
- bf16 autocast on CUDA; TF32 and the fused AdamW are kept from the sample;
- torch.compile of the model unless --no-compile.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import torch
from _switches import SAMPLE_MODELS, parse_with_switches

sys.path.insert(0, str(SAMPLE_MODELS))
import gpt_char_lm as sample

log = logging.getLogger("gpt_tuned")


def parse_args() -> argparse.Namespace:
    return parse_with_switches(sample.parse_args)


def train(args: argparse.Namespace) -> None:
    device = sample.pick_device(args.device)
    sample.seed_everything(args.seed)
    torch.set_float32_matmul_precision("high")
    cuda = device.type == "cuda"

    corpus = sample.CharCorpus(args.corpus.read_text(encoding="utf-8"), device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    model = sample.CharGPT(
        corpus.vocab_size, args.block_size, args.embed, args.heads, args.layers, args.dropout
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, fused=True)
    forward = torch.compile(model) if args.compile else model
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda and args.amp)
    steps_per_epoch = max(1, len(corpus.train) // (args.batch_size * args.block_size))

    step = 0
    running_loss = torch.zeros((), device=device)
    started = time.perf_counter()
    for epoch in range(args.epochs):
        for _ in range(steps_per_epoch):
            inputs, targets = sample.random_windows(
                corpus.train, args.batch_size, args.block_size, generator
            )
            with amp:
                loss = sample.next_char_loss(forward, inputs, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            running_loss = 0.9 * running_loss + 0.1 * loss.detach() if step else loss.detach()
            step += 1
            if step % args.log_every == 0:  # the only host sync of the loop
                log.info("epoch %d step %d loss %.4f", epoch, step, running_loss.item())
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
    elapsed = time.perf_counter() - started
    log.info("%d steps in %.2f s", step, elapsed)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train(parse_args())


if __name__ == "__main__":
    main()

"""A small GPT-style character language model trained on a text file shipped in the repo.

What it trains: token + position embeddings, a few pre-norm transformer blocks with causal
self-attention written out (scaled_dot_product_attention with `is_causal=True`) and an MLP, and
a tied output projection, on `sample_models/data/tiny_corpus.txt` (self-written prose). Batches
are random windows of the corpus gathered on the training device, so no data crosses from host
to device during training. One epoch is as many steps as there are non-overlapping
(batch-size x block-size) windows in the training split.

Known inefficiencies: one per device, so perfdoctor has something real to find on either.
On CPU: the script pins torch to a single intra-op thread (`torch.set_num_threads(1)`, left
over from chasing a non-determinism), so matmuls use one core of several. perfdoctor should
find `cpu-threads-below-cores` and its `cpu-threads` applier should raise the threads again.
On CUDA (threads hardly matter there): a host synchronisation every step for logging. The loop
calls `loss.item()` after every step to keep a running loss and, on CUDA, also
`torch.cuda.synchronize()` to time each step "exactly". Both block the Python thread until the
device has finished all queued work, so the CPU can no longer run ahead and queue the next
step's kernels while the GPU computes: the GPU idles in the gaps. On CPU there is no device
to wait for, so the same lines cost next to nothing; the profiler trace still shows them
(`aten::item` -> `aten::_local_scalar_dense` once per step, under the `loss.item()` line).

What perfdoctor should find: on CUDA, host synchronisations (>= 1 per step: the `.item()` and
`cudaDeviceSynchronize` calls) with the source lines below, and the GPU idle time they cause.
On CPU nothing is slowed by them, and perfdoctor's host-sync rule only applies to CUDA runs.

What fixes it: `remove-host-syncs`, a by-hand change - keep the running loss on the device
(`running_loss += loss.detach()`) and call `.item()` only when logging every N steps; time
with CUDA events or over many steps instead of synchronising every step.

Run: python sample_models/gpt_char_lm.py [--epochs 3] [--batch-size 32] [--max-steps N]
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger("gpt_char_lm")

DEFAULT_CORPUS = Path(__file__).resolve().parent / "data" / "tiny_corpus.txt"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--block-size", type=int, default=64, help="context length in chars")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--embed", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--log-every", type=int, default=10, help="steps between loss logs")
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


class CharCorpus:
    """The corpus as one long tensor of character ids, split 90/10 into train and validation."""

    def __init__(self, text: str, device: torch.device) -> None:
        self.chars = sorted(set(text))
        self.char_to_id = {c: i for i, c in enumerate(self.chars)}
        ids = torch.tensor([self.char_to_id[c] for c in text], dtype=torch.long)
        split = int(0.9 * len(ids))
        # Moved to the device once; every batch is gathered there afterwards.
        self.train = ids[:split].to(device)
        self.val = ids[split:].to(device)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)


def random_windows(
    data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, next-char targets) for `batch_size` random windows, built without host syncs."""
    starts = torch.randint(
        len(data) - block_size - 1,
        (batch_size, 1),
        device=data.device,
        generator=generator,
    )
    offsets = torch.arange(block_size + 1, device=data.device)
    windows = data[starts + offsets]
    return windows[:, :-1], windows[:, 1:]


# --------------------------------------------------------------------------- the model


class CausalSelfAttention(nn.Module):
    def __init__(self, embed: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(embed, 3 * embed)
        self.proj = nn.Linear(embed, embed)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time_steps, embed = x.shape
        q, k, v = self.qkv(x).split(embed, dim=2)
        # (batch, heads, time, head_dim): every head attends over the whole prefix.
        q, k, v = (
            t.view(batch, time_steps, self.heads, embed // self.heads).transpose(1, 2)
            for t in (q, k, v)
        )
        attended = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        merged = attended.transpose(1, 2).contiguous().view(batch, time_steps, embed)
        return self.proj(merged)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, embed: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(embed)
        self.attn = CausalSelfAttention(embed, heads, dropout)
        self.ln_mlp = nn.LayerNorm(embed)
        self.mlp = nn.Sequential(
            nn.Linear(embed, 4 * embed),
            nn.GELU(),
            nn.Linear(4 * embed, embed),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))
        return x + self.mlp(self.ln_mlp(x))


class CharGPT(nn.Module):
    def __init__(
        self, vocab_size: int, block_size: int, embed: int, heads: int, layers: int, dropout: float
    ) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, embed)
        self.position_embedding = nn.Embedding(block_size, embed)
        self.blocks = nn.Sequential(*(Block(embed, heads, dropout) for _ in range(layers)))
        self.ln_final = nn.LayerNorm(embed)
        self.lm_head = nn.Linear(embed, vocab_size, bias=False)
        # Weight tying: input and output share the character embedding.
        self.lm_head.weight = self.token_embedding.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        return self.lm_head(self.ln_final(self.blocks(x)))


# --------------------------------------------------------------------------- training


def next_char_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@torch.no_grad()
def validation_loss(
    model: nn.Module, corpus: CharCorpus, args: argparse.Namespace, generator: torch.Generator
) -> float:
    model.eval()
    losses = [
        next_char_loss(
            model, *random_windows(corpus.val, args.batch_size, args.block_size, generator)
        )
        for _ in range(8)
    ]
    model.train()
    return torch.stack(losses).mean().item()


def train(args: argparse.Namespace) -> None:
    device = pick_device(args.device)
    seed_everything(args.seed)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and later GPUs
    # Left over from chasing a non-determinism: one intra-op thread for every op.
    torch.set_num_threads(1)

    corpus = CharCorpus(args.corpus.read_text(encoding="utf-8"), device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    model = CharGPT(
        corpus.vocab_size, args.block_size, args.embed, args.heads, args.layers, args.dropout
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, fused=True)
    steps_per_epoch = max(1, len(corpus.train) // (args.batch_size * args.block_size))
    log.info(
        "corpus %d chars, vocab %d, %d params, %d steps/epoch",
        len(corpus.train) + len(corpus.val),
        corpus.vocab_size,
        sum(p.numel() for p in model.parameters()),
        steps_per_epoch,
    )

    step = 0
    running_loss = 0.0
    started = time.perf_counter()
    for epoch in range(args.epochs):
        for _ in range(steps_per_epoch):
            step_started = time.perf_counter()
            inputs, targets = random_windows(
                corpus.train, args.batch_size, args.block_size, generator
            )
            loss = next_char_loss(model, inputs, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            # THE INEFFICIENCY: both lines below wait for the device every single step.
            if device.type == "cuda":
                torch.cuda.synchronize()  # so the step time below is "exact"
            running_loss = 0.9 * running_loss + 0.1 * loss.item() if step else loss.item()
            step_ms = 1000 * (time.perf_counter() - step_started)
            step += 1
            if step % args.log_every == 0:
                log.info(
                    "epoch %d step %d loss %.4f (smoothed %.4f, bpc %.3f) %.1f ms/step",
                    epoch,
                    step,
                    loss.item(),
                    running_loss,
                    running_loss / math.log(2),
                    step_ms,
                )
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
        log.info(
            "epoch %d validation loss %.4f", epoch, validation_loss(model, corpus, args, generator)
        )

    elapsed = time.perf_counter() - started
    tokens = step * args.batch_size * args.block_size
    log.info(
        "%d steps in %.2f s: %.1f ms/step, %.0f tokens/s",
        step,
        elapsed,
        1000 * elapsed / max(step, 1),
        tokens / elapsed,
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    train(parse_args())


if __name__ == "__main__":
    main()

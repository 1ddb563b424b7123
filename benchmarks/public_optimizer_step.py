"""Optimizer step alone: single-tensor vs foreach vs fused, on the corpus's models (issue 24).

single-tensor-optimizer assumes a fused/foreach step takes at most half the time of the
single-tensor loop. This times one `optimizer.step()` of each implementation on the
parameters of the public scripts' models (built from their own code at the pinned commits,
random gradients; nanoGPT's two weight-decay groups and betas), one intra-op thread,
alternating the three, 15 rounds, the median per step. One thread: the step's per-tensor
overhead is what the implementations differ in, and one thread is what a loaded machine
leaves a process anyway.

    python benchmarks/public_optimizer_step.py --mirror DIR
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import machine_line, out
from public_scripts import MAKEMORE, NANOGPT, extract

CHILD = r"""
import os, statistics, sys, time
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
kind = sys.argv[1]
sys.path.insert(0, os.getcwd())
if kind == "nanogpt":
    from model import GPT, GPTConfig
    m = GPT(GPTConfig(block_size=64, vocab_size=65, n_layer=2, n_head=2, n_embd=64,
                      dropout=0.0, bias=False))
    ps = [p for p in m.parameters() if p.requires_grad]
    # New group dicts per optimizer: torch writes its defaults (foreach, fused) into the
    # dicts it is given, so optimizers built from one list would all run the first's kind.
    groups = lambda: [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
                      {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]
    make = lambda **kw: torch.optim.AdamW(groups(), lr=6e-4, betas=(0.9, 0.95), **kw)
elif kind == "makemore":
    import makemore as mm
    m = mm.Transformer(mm.ModelConfig(vocab_size=27, block_size=10, n_layer=4, n_head=4,
                                      n_embd=64, n_embd2=64))
    ps = list(m.parameters())
    make = lambda **kw: torch.optim.AdamW(ps, lr=5e-4, weight_decay=0.01, betas=(0.9, 0.99),
                                          eps=1e-8, **kw)
else:  # CleanRL c51's Q-network (CartPole: 4 inputs, 2 actions x 101 atoms)
    m = torch.nn.Sequential(torch.nn.Linear(4, 120), torch.nn.ReLU(), torch.nn.Linear(120, 84),
                            torch.nn.ReLU(), torch.nn.Linear(84, 202))
    ps = list(m.parameters())
    make = lambda **kw: torch.optim.Adam(ps, lr=2.5e-4, eps=0.01 / 128, **kw)
for p in ps:
    p.grad = torch.randn_like(p)
opts = {"single": make(foreach=False), "foreach": make(foreach=True), "fused": make(fused=True)}
for o in opts.values():
    for _ in range(10):
        o.step()
res = {k: [] for k in opts}
for _ in range(15):
    for k, o in opts.items():
        t = time.perf_counter()
        for _ in range(20):
            o.step()
        res[k].append((time.perf_counter() - t) / 20 * 1e3)
print(len(ps), " ".join(f"{statistics.median(v):.3f}" for v in res.values()))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True)
    args = parser.parse_args()
    out(machine_line())
    out("| model | tensors | single-tensor ms | foreach ms | fused ms | load |")
    out("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="pd-opt-") as tmp:
        for kind, repo, paths in (
            ("nanogpt", NANOGPT, ("model.py",)),
            ("makemore", MAKEMORE, ("makemore.py",)),
            ("c51", None, ()),
        ):
            tree = Path(tmp) / kind
            tree.mkdir()
            if repo is not None:
                git_dir = args.mirror / repo[0].replace("/", "+") / "repo"
                extract(git_dir, repo[1], paths, tree)
            load = os.getloadavg()[0]
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, kind],
                cwd=tree,
                capture_output=True,
                text=True,
                check=True,
            )
            tensors, *times = proc.stdout.strip().splitlines()[-1].split()
            out(f"| {kind} | {tensors} | {' | '.join(times)} | {load:.1f} |")


if __name__ == "__main__":
    main()

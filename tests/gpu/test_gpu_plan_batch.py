"""`perfdoctor profile --plan-batch` on a live CUDA GPU: the fit on torch's max reserved,
the check of its prediction, and, with a wanted batch over a --memory-limit, the ways to
make it fit (AMP, activation checkpointing on the repeated blocks, a fused optimizer,
gradient accumulation) each measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Repeated blocks (checkpointing has something to wrap) and activations of 4096 x 4 bytes x
# 8 blocks x a few tensors per sample: about half a MiB per sample.
TRAIN = """\
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=64)
args = parser.parse_args()
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4096, 4096)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.fc(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(8))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(10_000):
    x = torch.randn(args.batch_size, 4096, device="cuda")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
"""


def test_plan_batch_on_cuda_fits_reserved_memory_and_compares_ways_to_fit(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "runs"
    # The model's fixed part is about 2 GiB (params, grads, AdamW state: 4 x 512 MiB), a
    # sample about half a MiB: a 3 GiB limit leaves room for about 2000, so a wanted 8192
    # does not fit.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfdoctor",
            "profile",
            "--no-apply",
            "--plan-batch",
            "--memory-limit",
            "3GiB",
            "--want-batch",
            "1024",
            "--steps",
            "10",
            "--warmup",
            "3",
            "--profile-steps",
            "0",
            "--repeat",
            "1",
            "--quiet",
            "-o",
            str(out),
            str(script),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    session = (out / "latest").resolve()
    plan = json.loads((session / "batch_plan.json").read_text())
    assert plan["device"] == "cuda" and plan["peak_kind"] == "cuda_reserved"
    assert plan["knob"] == "argument" and plan["script_batch"] == 64
    assert plan["per_sample_bytes"] > 100 * 2**10 and plan["fixed_bytes"] > 2**30
    probe = json.loads((session / "batch-64" / "batch_probe.json").read_text())
    assert probe["cuda_total_bytes"] > 2**30 and probe["cuda_max_reserved_bytes"] > 0
    assert abs(plan["verify_error_frac"]) < 0.15
    assert plan["wanted_batch"] == 8192 and plan["wanted_fits"] is False
    options = {o["id"]: o for o in plan["options"]}
    assert {"amp-bf16", "activation-checkpointing", "fused-optimizer", "grad-accumulation"} <= set(
        options
    )
    assert options["activation-checkpointing"]["saved_bytes"] > 0
    assert options["grad-accumulation"]["fits"] is True
    assert "Batch size and memory" in (session / "report.md").read_text()

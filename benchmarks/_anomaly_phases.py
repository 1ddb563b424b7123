"""In-process arm of benchmarks/speedup_band.py: tabular_mlp_debug's training step and its
evaluation forward, anomaly mode on and off, interleaved every few steps in one process.

    python benchmarks/_anomaly_phases.py OUT.json [--blocks 40] [--block-steps 10]

CPU time of this process (time.process_time), not wall time: on a machine shared with
other jobs the wall clock mostly measures the neighbours. Blocks alternate on / off, so
drift falls on both alike. Prints nothing; writes the medians per phase and mode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_models"))
import tabular_mlp_debug as sample

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--blocks", type=int, default=40)
parser.add_argument("--block-steps", type=int, default=10)
args = parser.parse_args()

train_x, train_y = sample.make_table(40_000, 0)
val_x, val_y = sample.make_table(2048, 1)
train_x, val_x = sample.standardise(train_x, val_x)
torch.manual_seed(0)
model = sample.TabularMLP(sample.NUM_FEATURES, 256, sample.NUM_CLASSES)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=True)
times: dict[str, list[float]] = {"train_on": [], "train_off": [], "eval_on": [], "eval_off": []}
for block in range(args.blocks + 2):  # the first two blocks warm up
    mode = "on" if block % 2 == 0 else "off"
    torch.autograd.set_detect_anomaly(mode == "on")
    for _ in range(args.block_steps):
        start = time.process_time()
        index = torch.randint(0, len(train_x), (256,))
        loss = F.cross_entropy(model(train_x[index]), train_y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        train_s = time.process_time() - start
        start = time.process_time()
        sample.evaluate(model, val_x, val_y)
        eval_s = time.process_time() - start
        if block >= 2:
            times[f"train_{mode}"].append(1000.0 * train_s)
            times[f"eval_{mode}"].append(1000.0 * eval_s)
Path(args.out).write_text(json.dumps({k: statistics.median(v) for k, v in times.items()}))

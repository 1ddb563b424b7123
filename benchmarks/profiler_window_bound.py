"""Issue 14 item 5: the cost of the profiler window on a Python-heavy step, bounded or not.

A step that runs a pure-Python tokenizer (tens of thousands of Python calls) is recorded
with perfdoctor's ProfilerWindow (with_stack, record_shapes, profile_memory) for 3 planned
steps. Two arms, each round in its own process, alternating A B / B A:

  bounded     the window as shipped (collect/profiler_window.py): cut after the first
              recorded step when steps are Python-heavy, gzip level 6
  unbounded   the bound switched off and gzip at 9 (torch's tensorboard_trace_handler),
              i.e. the window as it was before the bound

Printed per arm: the time from opening the window to the trace on disk (record + stop +
export + gzip), the steps recorded, the trace size. Never asserts.

    python benchmarks/profiler_window_bound.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys

from _common import ROOT, machine_line, out

CHILD = r"""
import json, math, sys, tempfile, time
from pathlib import Path
import torch
from perfdoctor import rundir
from perfdoctor.collect import profiler_window

if sys.argv[1] == "unbounded":
    profiler_window.SLOW_STEP_FACTOR = math.inf
    profiler_window.MIN_WINDOW_BUDGET_S = math.inf
    profiler_window.TRACE_GZIP_LEVEL = 9

text = " ".join(f"word{i}" for i in range(20000))
def tokenize(s):
    out = []
    for word in s.split():
        h = 0
        for ch in word:
            h = (h * 31 + ord(ch)) % 1000
        out.append(h)
    return out

model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def step():
    ids = tokenize(text)
    x = torch.tensor(ids[: 64 * 32], dtype=torch.float32).view(32, 64) / 1000
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()

run_dir = Path(tempfile.mkdtemp())
window = profiler_window.ProfilerWindow(run_dir, first_step=7, steps=3)
for _ in range(6):
    t0 = time.perf_counter(); step(); window.timed_step(time.perf_counter() - t0)
start = time.perf_counter()
for index in range(6, 10):
    window.on_step_start(index)
    step()
window.finish()
total = time.perf_counter() - start
traces = rundir.find_traces(run_dir)
print(json.dumps({
    "total_s": total,
    "recorded": 3 - (window.info.get("dropped_steps") or 0),
    "export_s": window.info.get("export_s"),
    "trace_mb": sum(p.stat().st_size for p in traces) / 1e6,
}))
"""


def run_arm(arm: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, arm],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out(machine_line())
    arms = ("bounded", "unbounded")
    results: dict[str, list[dict]] = {a: [] for a in arms}
    for round_index in range(args.rounds):
        order = arms if round_index % 2 == 0 else tuple(reversed(arms))
        for arm in order:
            results[arm].append(run_arm(arm))
    for arm in arms:
        rows = results[arm]
        totals = [r["total_s"] for r in rows]
        out(
            f"{arm:>10}: window {statistics.median(totals):6.2f} s "
            f"(range {min(totals):.2f}-{max(totals):.2f}), export "
            f"{statistics.median(r['export_s'] for r in rows):.2f} s, steps recorded "
            f"{sorted({r['recorded'] for r in rows})}, trace "
            f"{statistics.median(r['trace_mb'] for r in rows):.1f} MB"
        )
    ratios = [
        u["total_s"] / b["total_s"]
        for b, u in zip(results["bounded"], results["unbounded"], strict=True)
    ]
    geo = math.exp(statistics.fmean(math.log(r) for r in ratios))
    out(f"unbounded / bounded per round: {', '.join(f'{r:.2f}x' for r in ratios)} (geo {geo:.2f}x)")


if __name__ == "__main__":
    main()

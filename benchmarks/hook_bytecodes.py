"""perfdoctor's bytecodes per null step, by function: the per-step cost counted exactly,
in a minute, with nothing but Python (issue 30).

    python benchmarks/hook_bytecodes.py [--tree DIR] [--skip 1000] [--steps 1000]

The null step of `window_instructions.py` (`Linear(8, 8)`, zero_grad, forward, mse_loss,
backward, SGD step, one intra-op thread) runs under `perfdoctor profile --no-apply
--profile-steps 0 --run-to-end` twice:

- observed: a plan as long as the script, so every step is observed (the hooks' full path);
- after the plan: a plan of 300 steps, so the counted steps run after it ended, where the
  hooks stay installed and return early (StepTracker.stopped): the cost of merely having
  them, below which no change to their bodies can go.

From step `--skip` for `--steps` steps the script traces itself (`sys.settrace` with
`f_trace_opcodes`) and counts the bytecodes executed in frames of perfdoctor's code, per
function; frames of torch and of the script are not counted. The count repeats to within
a few bytecodes a step (the RSS is read at most once a millisecond, so how often depends
on the clock): a change to a hook shows its effect, where timing it on this guest needs
rounds of same-core pairs (`checkout_ab.py`). A bytecode here stands for its share of the C work it
calls too (a `perf_counter()` call is one CALL): benchmarks/README.md ("Session 9")
relates the counts to time per step. The window is a multiple of the step log's 50-step
flush, so the flush's share is whole. `--tree DIR` imports perfdoctor from DIR (a scratch
copy or a worktree of another revision).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import ROOT, machine_line, out
from window_instructions import NULL_STEP_BODY, NULL_STEP_SETUP

NULL_STEPS = (
    NULL_STEP_SETUP
    + """
import collections, json, os, sys
skip, steps = int(os.environ["COUNT_SKIP"]), int(os.environ["COUNT_STEPS"])
marker = os.sep + "perfdoctor" + os.sep
counts = collections.Counter()

def in_perfdoctor(frame, event, arg):
    code = frame.f_code
    if marker not in code.co_filename:
        return None  # torch's and the script's frames: no per-line events
    frame.f_trace_opcodes = True
    key = code.co_filename.rsplit(marker, 1)[1] + ":" + code.co_name

    def each(frame, event, arg):
        if event == "opcode":
            counts[key] += 1
        return each

    return each

for i in range(skip + steps + 5):
    if i == skip:
        sys.settrace(in_perfdoctor)
    if i == skip + steps:
        sys.settrace(None)
"""
    + NULL_STEP_BODY.lstrip("\n")
    + """
with open(os.environ["COUNT_OUT"], "w") as f:
    json.dump({key: n / steps for key, n in counts.items()}, f)
"""
)

# The two states counted, with the plan (steps) each runs under: None = the whole script.
STATES = {"observed": None, "after the plan": 300}


def count(tree: Path, plan: int | None, skip: int, steps: int, work: Path) -> dict[str, float]:
    """Bytecodes per step by "module:function" in one run of the null step."""
    script = work / "null_steps.py"
    script.write_text(NULL_STEPS)
    result = work / f"counts-{plan}.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(tree),
        "COUNT_SKIP": str(skip),
        "COUNT_STEPS": str(steps),
        "COUNT_OUT": str(result),
    }
    command = [sys.executable, "-m", "perfdoctor", "profile", "--no-apply", "--profile-steps",
               "0", "--run-to-end", "--warmup", "5", "--steps", str(plan or skip + steps + 10),
               "--quiet", "-o", str(work / "runs"), str(script)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"the counted run failed:\n{proc.stderr[-2000:]}")
    return json.loads(result.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="import perfdoctor from here")
    parser.add_argument("--skip", type=int, default=1000, help="steps before the window")
    parser.add_argument("--steps", type=int, default=1000, help="steps counted (x50)")
    parser.add_argument("--top", type=int, default=25, help="functions listed per state")
    args = parser.parse_args()
    if args.steps % 50 or args.skip < STATES["after the plan"] + 100:
        raise SystemExit("--steps must be a multiple of 50 and --skip at least 400")
    out(machine_line())
    out(f"null step, steps {args.skip}-{args.skip + args.steps}, perfdoctor from {args.tree}")
    with tempfile.TemporaryDirectory(prefix="hook-bytecodes-") as tmp:
        for state, plan in STATES.items():
            counts = count(args.tree, plan, args.skip, args.steps, Path(tmp))
            out(f"\n{state}: {sum(counts.values()):.0f} bytecodes a step in perfdoctor's code")
            ranked = sorted(counts.items(), key=lambda kv: -kv[1])
            for key, per_step in ranked[: args.top]:
                out(f"  {per_step:7.1f}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Instructions per null step in an exact window of steps, plain against under perfdoctor
(issue 30): a one-minute, deterministic figure for trying a change to the hooks.

    python benchmarks/window_instructions.py [--tree DIR] [--skip 300] [--steps 500]

`step_instructions.py` counts a window of seconds, minutes into the run (valgrind's start of
torch is slow); this one counts an exact window of steps: the script itself switches
callgrind's counting on at step `--skip` and off `--steps` steps later, through callgrind's
client requests (a 2-function C library built here with gcc against valgrind's
callgrind.h, loaded with ctypes). Counting is off until then, so torch's import runs
uncounted and fast. Both arms run the same `Linear(8, 8)` step (zero_grad, forward,
mse_loss, backward, SGD step), one intra-op thread; perfdoctor runs it under `profile
--no-apply --profile-steps 0 --run-to-end` with a plan as long as the script.

`--tree DIR` imports perfdoctor from DIR (a scratch copy with one part switched off: how
benchmarks/README.md's session-7 table of the step's parts was made). Needs valgrind, its
headers and gcc.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import ROOT, machine_line, out
from step_instructions import profile_command

CLIENT_REQUESTS = """
#include <valgrind/callgrind.h>
void count_on(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void count_off(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }
"""

# The null step both exact-window counts run (hook_bytecodes.py too): its model, then the
# loop body, each script placing its own counting around them.
NULL_STEP_SETUP = """
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 8), torch.randn(8, 8)
"""
NULL_STEP_BODY = """
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""

NULL_STEPS = (
    NULL_STEP_SETUP
    + """
import ctypes, os
counter = ctypes.CDLL(os.environ["WINDOW_LIB"])
skip, steps = int(os.environ["WINDOW_SKIP"]), int(os.environ["WINDOW_STEPS"])
for i in range(skip + steps + 5):
    if i == skip:
        counter.count_on()
    if i == skip + steps:
        counter.count_off()
"""
    + NULL_STEP_BODY.lstrip("\n")
)


def _build(work: Path) -> tuple[Path, Path]:
    source = work / "window.c"
    source.write_text(CLIENT_REQUESTS)
    library = work / "window.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    script = work / "null_steps.py"
    script.write_text(NULL_STEPS)
    return library, script


def _count(
    arm: str, tree: Path, work: Path, library: Path, script: Path, args: argparse.Namespace
) -> int:
    """Ir of the window, read from the one dump the script's count_off wrote."""
    dumps = work / arm
    dumps.mkdir()
    env = {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(tree),
        "WINDOW_LIB": str(library),
        "WINDOW_SKIP": str(args.skip),
        "WINDOW_STEPS": str(args.steps),
    }
    command = [sys.executable, str(script)]
    if arm == "perfdoctor":
        command = profile_command(script, dumps / "runs")
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=yes",
         f"--callgrind-out-file={dumps}/cg.%p", *command],
        capture_output=True, env=env, check=True,
    )  # fmt: skip
    totals = [
        int(found.group(1))
        for dump in dumps.glob("cg.*.1")
        if (found := re.search(r"^totals: (\d+)", dump.read_text(), re.M))
    ]
    if len(totals) != 1:
        raise SystemExit(f"{arm}: expected one window's dump, found {len(totals)}")
    return totals[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="import perfdoctor from here")
    parser.add_argument("--skip", type=int, default=300, help="steps before the window")
    parser.add_argument("--steps", type=int, default=500, help="steps in the window")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("gcc") is None:
        raise SystemExit("needs valgrind (with its headers) and gcc")
    out(machine_line())
    with tempfile.TemporaryDirectory(prefix="window-instructions-") as tmp:
        work = Path(tmp)
        library, script = _build(work)
        plain = _count("plain", args.tree, work, library, script, args) / args.steps
        child = _count("perfdoctor", args.tree, work, library, script, args) / args.steps
    out(f"null step, steps {args.skip}-{args.skip + args.steps}, perfdoctor from {args.tree}:")
    out(f"  plain      {plain / 1000:8.1f} k Ir per step")
    out(f"  perfdoctor {child / 1000:8.1f} k Ir per step: +{(child - plain) / 1000:.1f} k")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

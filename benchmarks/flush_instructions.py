"""The step log's instructions per row, by part, counted by callgrind (issue 30).

    python benchmarks/flush_instructions.py          # ~2 min, needs valgrind

The child keeps each closed step as a tuple of raw values (`StepLog.add_step`) and writes
them every 50 steps (`flush`: the steps.jsonl lines, then the progress.jsonl lines). This
runs a process that adds and flushes batches of 50 typical CPU rows (no torch: rows
without losses) under `valgrind --tool=callgrind`, twice, with 10 and 60 batches; the
difference divided by the 2,500 rows between is the instructions per row, the start-up and
import cancelled. Each variant replaces one part with a no-op:

    full          add_step, the steps.jsonl lines and the progress.jsonl lines
    no progress   the progress lines dropped at each flush (not encoded, not written)
    no flush      nothing written: add_step alone

Instructions, not time: the flush runs once every 50 steps in one burst, with its code and
data in cache, where a step's hooks run between torch's ops; an instruction here costs
less time than one in a hook (benchmarks/README.md, session 7).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import ROOT, machine_line, out

ROWS_PER_BATCH = 50
BATCHES = (10, 60)
VARIANTS = ("full", "no progress", "no flush")


def _worker(batches: int, variant: str) -> None:
    """Adds and flushes `batches` batches of rows (run under valgrind by main)."""
    from perfdoctor.collect import step_log
    from perfdoctor.collect.probes_steps import ClosedStep

    if variant == "no progress":
        step_log.StepLog._write_progress = lambda self: self._progress_rows.clear()  # type: ignore[method-assign]
    elif variant == "no flush":
        step_log.StepLog.flush = lambda self: (self._pending.clear(), self._progress_rows.clear())  # type: ignore[method-assign]
    log = step_log.StepLog(Path(tempfile.mkdtemp(prefix="flush-instructions-")), 0.0)
    steps = []
    for index in range(ROWS_PER_BATCH):
        step = ClosedStep(index=index, start=1.0)
        step.end = 1.002
        step.forward_s, step.forward_calls = 0.0005, 1
        step.backward_s, step.micro_batches = 0.0007, 1
        step.optimizer_s = 0.0001
        step.losses = ()
        steps.append(step)
    for _ in range(batches):
        for step in steps:
            log.add_step((step, "timed", 123456, 0.0019, None, False, None, None, step_log.NO_ARM))
        log.flush()


def _count(batches: int, variant: str) -> int:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed")
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, __file__, "--worker", str(batches), variant],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    found = re.search(r"Collected : ([\d,]+)", run.stderr)
    if found is None:
        raise SystemExit(f"no count in valgrind's output:\n{run.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> int:
    out(machine_line())
    rows = (BATCHES[1] - BATCHES[0]) * ROWS_PER_BATCH
    out(f"instructions per row (add_step and its share of the flush), {rows} rows:")
    for variant in VARIANTS:
        low, high = (_count(n, variant) for n in BATCHES)
        out(f"  {variant:12s} {(high - low) / rows / 1000:7.1f} k Ir")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        _worker(int(sys.argv[2]), sys.argv[3])
        raise SystemExit(0)
    raise SystemExit(main())

"""`perfdoctor compare --fail-if-...`: an undecided gate measures more by itself.

A gate whose band straddles its limit (exit 71) asked the user to record more runs; a CI user
learns to ignore such a gate (issue 32: an A/A of two records of one script came back 71).
Here the gate records more runs of B itself, as B was recorded (its spec.json: the same
script, arguments, working directory, seed and plan, no profiler window), and judges again
with them, a few at a time, until it decides or MAX_MORE_RUNS are spent. Only B: it is the
checkout under test, the code on this machine now; A is a record of code that may no longer
be here, so its runs are what they are (the run-level band narrows with B's runs either way).

B is re-run only where its record says exactly how: a script or module target with an
absolute working directory that exists, a script file that exists, and a session of one
process (the gate's runs of a multi-rank or launcher job are left to `profile`).
The new runs go in `<B>/gate-more/run-k/`, beside B's own, and the gate's JSON counts them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from perfdoctor.analyze.record import RunRecord, load_run
from perfdoctor.model import RunSpec

log = logging.getLogger(__name__)

# Runs of B the gate may add in all, and per look: two at a time, so each look sees a pair.
MAX_MORE_RUNS = 6
RUNS_PER_LOOK = 2
MORE_DIR = "gate-more"


def rerunnable(record: RunRecord) -> RunSpec | None:
    """B's spec when the gate can run B again exactly as recorded, else None."""
    spec = record.spec
    if spec is None or spec.target.kind not in ("script", "module"):
        return None
    cwd = Path(spec.cwd)
    if not cwd.is_absolute() or not cwd.is_dir():
        return None
    if spec.target.kind == "script":
        script = Path(spec.target.name)
        if not (script if script.is_absolute() else cwd / script).is_file():
            return None
    if record.ranks_launched > 1:
        return None
    return spec


def record_more(
    spec: RunSpec,
    side_dir: Path,
    count: int,
    start: int,
    *,
    timeout_s: float | None = None,
    note: Callable[[str], None] = lambda _: None,
) -> list[RunRecord]:
    """`count` more timing-only runs of `spec` under `side_dir/gate-more/`."""
    from perfdoctor.collect.launcher import launch

    records = []
    for k in range(start, start + count):
        run_dir = Path(side_dir) / MORE_DIR / f"run-{k}"
        run_dir.mkdir(parents=True, exist_ok=True)
        again = replace(
            spec,
            run_dir=str(run_dir),
            plan=replace(spec.plan, profiled_steps=0),
            profile=False,
            ab=None,
            run_to_end=False,
        )
        note(f"gate undecided: recording B again ({run_dir.name})")
        manifest = launch(again, timeout_s=timeout_s, echo_output=False)
        if manifest.status not in ("completed", "finished_early"):
            note(f"gate: the extra run of B ended {manifest.status}; no more runs")
            break
        records.append(load_run(run_dir))
    return records

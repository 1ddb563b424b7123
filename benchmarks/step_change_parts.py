"""The step change's parts, timed in one process (issue 30): where perfdoctor's per-step
Python time goes once a step closes and the next opens.

    python benchmarks/step_change_parts.py

The real `Probes` and `StepTracker` (the set-up of tests/unit/collect/test_step_clocks.py,
a CPU run with no profiler window), driven by optimizer events as a training loop's
`optimizer.step()` drives them, 2,000 step changes per variant, each variant with one part
replaced by a no-op, five rounds alternating, the median per variant. Timing in one process
and alternating rounds is what cancels this guest's drift; the parts' figures are
differences of those medians.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import ROOT, machine_line, out

sys.path.insert(0, str(ROOT / "tests" / "unit" / "collect"))
from test_step_clocks import _probes  # (the unit test's set-up, not a copy)

STEP_CHANGES = 2000
ROUNDS = 5


class _Optimizer:
    """What the tracker keys an optimizer's steps by: any object."""


def _fresh() -> Any:
    probes = _probes(Path(tempfile.mkdtemp(prefix="step-change-")))
    probes.tracker._plan_total = None  # no plan end within the measured changes
    probes.tracker.optimizer_constructed()
    return probes


def _us_per_change(probes: Any, changes: int) -> float:
    tracker = probes.tracker
    opt = _Optimizer()
    start = time.perf_counter()
    for _ in range(changes):
        t0 = tracker.optimizer_start(opt)  # the repeat rule closes the step and opens one
        tracker.optimizer_end(opt, t0)
    return (time.perf_counter() - start) / changes * 1e6


def _no_op(*_args: Any, **_kwargs: Any) -> None:
    """Stands in for the part left out."""


VARIANTS: dict[str, Callable[[Any], None]] = {
    "full": lambda p: None,
    "no add_step": lambda p: setattr(p.step_log, "add_step", _no_op),
    "no flush": lambda p: setattr(p.step_log, "flush", _no_op),
    "no rss": lambda p: setattr(p._rss_reader, "read", _no_op),
    "no publish": lambda p: setattr(p.runtime, "publish_step_start", _no_op),
    "no step_closed": lambda p: setattr(p, "step_closed", _no_op),
    "no step_started": lambda p: setattr(p, "step_started", _no_op),
    "no listener": lambda p: [setattr(p, name, _no_op) for name in ("step_closed", "step_started")],
}


def main() -> int:
    got: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(ROUNDS):
        for name, leave_out in VARIANTS.items():
            probes = _fresh()
            leave_out(probes)
            _us_per_change(probes, 200)  # warm
            got[name].append(_us_per_change(probes, STEP_CHANGES))
    out(machine_line())
    out(f"us per step change, median of {ROUNDS} alternating rounds of {STEP_CHANGES}:")
    for name, values in got.items():
        out(f"  {name:16s} {statistics.median(values):6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a step's time went to besides training: the named costs of each step (forwards of a
model in eval mode, no_grad forwards in train mode, torch.save, torch.compile compiling from
compile.json), and the timed steps' time above their median split by cause (what step-jitter
reports). Pure: reads StepRecords and a run directory's compile.json.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfdoctor.analyze.compile_diag import load_compile_log
from perfdoctor.errors import PerfdoctorError
from perfdoctor.model import StepRecord


def compile_ms_by_step(record: object) -> dict[int, float]:
    """Compile time (dynamo + backend, forward and backward graphs) per step index, from
    compile.json (collect/compile_watch.py); {} without one. A frame compiled after N
    optimizer steps closed was compiled inside step N."""
    run_dir = getattr(record, "dir", None)
    if run_dir is None:
        return {}
    try:
        log = load_compile_log(Path(run_dir))
    except (OSError, ValueError, PerfdoctorError):
        return {}
    out: dict[int, float] = {}
    for frame in (log.frames if log is not None else None) or []:
        if frame.step is None:
            continue
        ms = ((frame.compile_s or 0.0) + (frame.backward_compile_s or 0.0)) * 1000.0
        if ms > 0:
            out[frame.step] = out.get(frame.step, 0.0) + ms
    return out


def named_costs(
    step: StepRecord, compile_ms: Mapping[int, float] | None = None
) -> dict[str, float]:
    """A step's named costs besides training (COST_LABELS keys of analyze/loop_account.py)."""
    return {
        "compile_ms": (compile_ms or {}).get(step.index, 0.0),
        "eval_forward_ms": step.eval_forward_ms or 0.0,
        "nograd_forward_ms": step.nograd_forward_ms or 0.0,
        "save_ms": step.save_ms or 0.0,
    }


@dataclass(frozen=True)
class TimedExcess:
    """What the timed steps above the median spend beyond it (the time step-jitter reports),
    split into the named costs, the extra data wait, and the rest."""

    excess_ms: float
    parts_ms: dict[str, float]  # "data_wait_ms" and COST_LABELS keys
    longest_index: int
    longest_ms: float
    longest_parts_ms: dict[str, float]

    def share(self, key: str) -> float:
        return self.parts_ms.get(key, 0.0) / self.excess_ms if self.excess_ms > 0 else 0.0

    def lead_named(self) -> tuple[str, float] | None:
        """The named cost (not data, not other) with the largest share, and its share."""
        named = {k: v for k, v in self.parts_ms.items() if k not in ("data_wait_ms", "other_ms")}
        if not named or self.excess_ms <= 0:
            return None
        key = max(named, key=lambda k: named[k])
        return key, named[key] / self.excess_ms


def timed_excess(
    all_steps: Sequence[StepRecord], compile_ms: Mapping[int, float] | None = None
) -> TimedExcess | None:
    """The timed steps' time above their median, by cause; None without any."""
    timed = [s for s in all_steps if s.phase == "timed"]
    if len(timed) < 2:
        return None
    typical = statistics.median(s.wall_ms for s in timed)
    waits = [s.data_wait_ms for s in timed if s.data_wait_ms is not None]
    usual_wait = statistics.median(waits) if waits else 0.0
    parts: dict[str, float] = {}
    total = 0.0
    longest: tuple[StepRecord, dict[str, float]] | None = None
    for s in timed:
        excess = s.wall_ms - typical
        if excess <= 0:
            continue
        costs = {k: min(v, excess) for k, v in named_costs(s, compile_ms).items() if v > 0}
        data = min(max((s.data_wait_ms or 0.0) - usual_wait, 0.0), excess)
        if data > 0:
            costs["data_wait_ms"] = data
        named = sum(costs.values())
        if named > excess:  # a step cannot hold more than its excess: scale into it
            costs = {k: v * excess / named for k, v in costs.items()}
            named = excess
        if excess - named > 0:
            costs["other_ms"] = excess - named
        for k, v in costs.items():
            parts[k] = parts.get(k, 0.0) + v
        total += excess
        if longest is None or s.wall_ms > longest[0].wall_ms:
            longest = (s, costs)
    if longest is None or total <= 0:
        return None
    return TimedExcess(total, parts, longest[0].index, longest[0].wall_ms, longest[1])

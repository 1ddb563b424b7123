"""The step as the GPU ran it: the `gpu_user_annotation` copies of ProfilerStep#N.

Kineto copies each record_function range onto the GPU timeline, from the first to the last
GPU op launched inside it. When the host runs ahead (no syncs, CUDA graphs, a deep launch
queue), the host's ProfilerStep spans measure how fast Python issued the work, not how long
the GPU took to run it; the copies measure the latter. The GPU-side time per step is the
distance between the starts of consecutive copies (the last copy's own length when there is
only one): it includes the GPU's idle time between steps, as the host's step time does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_index import STEP_NAME, rows_named


@dataclass(frozen=True)
class GpuSteps:
    count: int
    step_ms: tuple[float, ...]  # per step, start to next start (the last: its own span)

    @property
    def p50_ms(self) -> float | None:
        return float(np.median(self.step_ms)) if self.step_ms else None


def gpu_steps(ev: TraceEvents) -> GpuSteps:
    table = ev.gpu_annotations
    rows = rows_named(table, ev.code_mask(lambda n: STEP_NAME.match(n) is not None))
    if rows.size == 0:
        return GpuSteps(0, ())
    # One copy per step and stream is possible: a step spans its streams' copies.
    spans: dict[int, tuple[float, float]] = {}
    for row in rows.tolist():
        number = int(STEP_NAME.match(ev.names[int(table.name[row])]).group(1))  # type: ignore[union-attr]
        lo, hi = float(table.ts[row]), float(table.end[row])
        if number in spans:
            lo, hi = min(lo, spans[number][0]), max(hi, spans[number][1])
        spans[number] = (lo, hi)
    ordered = [spans[n] for n in sorted(spans)]
    starts = np.array([s for s, _ in ordered])
    ends = np.array([e for _, e in ordered])
    gaps = np.diff(starts)
    last = ends[-1] - starts[-1]
    per_step = np.r_[gaps, last] / 1000.0
    return GpuSteps(len(ordered), tuple(per_step.tolist()))

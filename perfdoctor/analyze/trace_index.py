"""Queries over the parsed trace arrays shared by the host, op and GPU analyses: the
ProfilerStep windows, rows by name, rows by thread, spans per thread, GPU op -> launch call."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import intervals
from perfdoctor.analyze.kernels import is_copy_call, is_launch_call
from perfdoctor.analyze.trace_events import Table, TraceEvents

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")

Point = tuple[int, float, float]  # (thread code, time in µs, weight)


@dataclass(frozen=True)
class Steps:
    """ProfilerStep spans of the trace, sorted, plus their union as disjoint windows."""

    numbers: tuple[int, ...]
    starts: np.ndarray
    ends: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def count(self) -> int:
        return len(self.numbers)

    @property
    def total_us(self) -> float:
        return intervals.total(self.lo, self.hi)

    def durations_ms(self) -> np.ndarray:
        return (self.ends - self.starts) / 1000.0

    def contains(self, points: np.ndarray) -> np.ndarray:
        """Points inside a step; every point when the trace has no steps."""
        if not self.count:
            return np.ones(points.shape, dtype=bool)
        return intervals.point_in(points, self.lo, self.hi)

    def per_step(self, value: float | None) -> float | None:
        return value / self.count if value is not None and self.count else None


def find_steps(ev: TraceEvents) -> Steps:
    """ProfilerStep#N spans on the CPU: user_annotation in current traces (the parser moves
    2021-era `Operator` ones there too); cpu_op rows are the fallback for writers that file
    them as ops. gpu_user_annotation copies on the GPU timeline are not steps."""
    is_step = ev.code_mask(lambda n: STEP_NAME.match(n) is not None)
    ann = ev.annotations
    rows = rows_named(ann, is_step)
    if rows.size == 0 and len(ev.cpu_ops):
        ann = ev.cpu_ops
        rows = rows_named(ann, is_step)
    if rows.size == 0:
        empty = np.empty(0)
        return Steps((), empty, empty, empty, empty)
    # A span of no duration (or none recorded) holds no step: timing one is dividing by 0.
    rows = rows[ann.dur[rows] > 0]
    if rows.size == 0:
        empty = np.empty(0)
        return Steps((), empty, empty, empty, empty)
    rows = rows[np.argsort(ann.ts[rows], kind="stable")]
    numbers = tuple(
        int(STEP_NAME.match(ev.names[c]).group(1))  # type: ignore[union-attr]
        for c in ann.name[rows].tolist()
    )
    starts = ann.ts[rows]
    ends = starts + ann.dur[rows]
    lo, hi = intervals.union(starts, ends)
    return Steps(numbers, starts, ends, lo, hi)


def points(table: Table, rows: np.ndarray) -> list[Point]:
    """(thread, start, duration) of the rows: the input of Attributor.locate."""
    return list(
        zip(
            table.tid[rows].tolist(), table.ts[rows].tolist(), table.dur[rows].tolist(), strict=True
        )
    )


def rows_named(table: Table, mask: np.ndarray) -> np.ndarray:
    """Rows whose name code is selected by a mask from TraceEvents.code_mask."""
    return np.flatnonzero(mask[table.name]) if len(table) else np.empty(0, dtype=np.int64)


def threads(table: Table, rows: np.ndarray) -> dict[int, np.ndarray]:
    """Rows grouped by thread, each group sorted by start time."""
    out: dict[int, np.ndarray] = {}
    if rows.size == 0:
        return out
    tids = table.tid[rows]
    for tid in np.unique(tids).tolist():
        sel = rows[tids == tid]
        out[int(tid)] = sel[np.argsort(table.ts[sel], kind="stable")]
    return out


def union_by_thread(
    spans: Iterable[tuple[Table, np.ndarray]],
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread, the union of spans from one or more tables (a user_annotation and the
    cpu_op it wraps are one interval, not two)."""
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for table, rows in spans:
        for tid, srows in threads(table, rows).items():
            parts[tid].append((table.ts[srows], table.end[srows]))
    return {
        tid: intervals.union(np.concatenate([p[0] for p in ps]), np.concatenate([p[1] for p in ps]))
        for tid, ps in parts.items()
    }


def union_time(table: Table, rows: np.ndarray, steps: Steps | None = None) -> float:
    """Time covered by the rows' spans, summed over threads, clipped to the steps if given."""
    total = 0.0
    for us, ue in union_by_thread([(table, rows)]).values():
        if steps is not None and steps.count:
            us, ue = intervals.clip(us, ue, steps.lo, steps.hi)
        total += intervals.total(us, ue)
    return total


def points_in_spans(
    point_tid: np.ndarray,
    point_ts: np.ndarray,
    spans: Iterable[tuple[Table, np.ndarray]],
) -> np.ndarray:
    """For each point: does it fall inside one of the spans on its own thread?"""
    hit = np.zeros(point_ts.size, dtype=bool)
    for tid, (lo, hi) in union_by_thread(spans).items():
        sel = point_tid == tid
        if sel.any():
            hit[sel] = intervals.point_in(point_ts[sel], lo, hi)
    return hit


def rows_in_spans(
    table: Table, rows: np.ndarray, spans: Iterable[tuple[Table, np.ndarray]]
) -> np.ndarray:
    """Which of `rows` start inside one of the spans on their own thread."""
    if rows.size == 0:
        return np.zeros(0, dtype=bool)
    return points_in_spans(table.tid[rows], table.ts[rows], spans)


def launch_rows(ev: TraceEvents, gpu_rows: np.ndarray) -> np.ndarray:
    """Runtime/driver row whose call put each GPU row on its stream (-1: not in the trace).

    The link is CUPTI's correlation id, unique across the runtime and driver APIs.
    """
    rt = ev.runtime
    out = np.full(gpu_rows.size, -1, dtype=np.int64)
    if len(rt) == 0 or gpu_rows.size == 0:
        return out
    issuing = ev.code_mask(lambda n: is_launch_call(n) or is_copy_call(n))
    corr_all = rt.col("correlation")
    candidates = np.flatnonzero(issuing[rt.name] & (corr_all >= 0))
    if candidates.size == 0:
        return out
    corr = corr_all[candidates]
    order = np.argsort(corr, kind="stable")
    corr_sorted = corr[order]
    want = ev.gpu.col("correlation")[gpu_rows]
    pos = np.clip(np.searchsorted(corr_sorted, want), 0, corr_sorted.size - 1)
    hit = (want >= 0) & (corr_sorted[pos] == want)
    out[hit] = candidates[order[pos[hit]]]
    return out


def launch_points(
    ev: TraceEvents, gpu_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(launch thread, launch time, gpu row) for the GPU rows whose launch is in the trace."""
    rows = launch_rows(ev, gpu_rows)
    found = rows >= 0
    rt = ev.runtime
    if not found.any():
        return np.empty(0, dtype=np.int64), np.empty(0), gpu_rows[found]
    return rt.tid[rows[found]], rt.ts[rows[found]], gpu_rows[found]

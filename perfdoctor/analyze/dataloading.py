"""Where data-loading time goes: the DataLoader's `__next__` spans, and the Python functions
inside them by self time -- the user's Dataset.__getitem__, transforms, collate_fn."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import intervals
from perfdoctor.analyze.frames import parse_frame_name
from perfdoctor.analyze.pytree import PyTree, nearest_flagged
from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_index import Steps, rows_named, union_by_thread
from perfdoctor.model import SourceLocation

# torch wraps every DataLoader iterator's __next__ in record_function(
# "enumerate(DataLoader)#<IterClass>.__next__"); DataPipes use the second prefix.
DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")


@dataclass(frozen=True)
class DataLoading:
    total_us: float  # union of the __next__ spans inside the steps
    locations: tuple[SourceLocation, ...]  # share = part of total_us


def data_loading(
    ev: TraceEvents, steps: Steps, tree: PyTree | None, user_flags: np.ndarray, top: int = 5
) -> DataLoading:
    """The self time of every Python frame inside a __next__ span is charged to the
    innermost frame of the user's own code around it (their Dataset, transform or collate
    function), still inside the span; time with no user frame in the span goes to the
    innermost named library frame (e.g. default_collate), so library-side costs are named
    too. With worker processes the main process only waits on a queue, and that wait is
    what shows up (the workers are not profiled)."""
    is_dl = ev.code_mask(lambda n: n.startswith(DATALOADER_PREFIXES))
    spans = []
    for table in (ev.annotations, ev.cpu_ops):
        rows = rows_named(table, is_dl)
        spans.append((table, rows[steps.contains(table.ts[rows])]))
    by_thread = union_by_thread(spans)
    total = sum(intervals.total(lo, hi) for lo, hi in by_thread.values())
    py = ev.python
    if tree is None or total <= 0 or len(py) == 0:
        return DataLoading(total, ())
    inside = np.zeros(len(py), dtype=bool)
    py_end = py.end
    for tid, (lo, hi) in by_thread.items():
        sel = np.flatnonzero(py.tid == tid)
        idx = intervals.window_index(py.ts[sel], lo, hi)
        ok = idx >= 0
        ok[ok] = py_end[sel][ok] <= hi[idx[ok]] + 1e-3
        inside[sel[ok]] = True
    if not inside.any():
        return DataLoading(total, ())
    named = ev.code_mask(lambda n: parse_frame_name(n) is not None)[py.name]
    to_user = nearest_flagged(tree.parent, user_flags & inside)
    to_named = nearest_flagged(tree.parent, named & inside)
    rows = np.flatnonzero(inside)
    target = np.where(to_user >= 0, to_user, np.where(to_named >= 0, to_named, np.arange(len(py))))
    sums = np.bincount(py.name[target[rows]], weights=tree.self_us[rows], minlength=len(ev.names))
    out = []
    for code in np.argsort(-sums, kind="stable")[:top].tolist():
        if sums[code] <= 0:
            break
        frame = parse_frame_name(ev.names[code])
        share = float(sums[code]) / total
        if frame is None:  # a frame the profiler did not name `file(line): func`
            out.append(SourceLocation(ev.names[code], 0, "", share=share))
        else:
            out.append(SourceLocation(frame.file, frame.line, frame.function, share=share))
    return DataLoading(total, tuple(out))

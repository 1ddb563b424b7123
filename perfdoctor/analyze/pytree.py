"""The Python call tree of a trace (`python_function` events) as index arrays.

`with_stack` traces give every Python frame a `Python id` and its caller's `Python parent id`,
so the tree is rebuilt without any per-event Python work. Older traces without those ids fall
back to nesting by time on each thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.trace_events import Table


@dataclass(frozen=True)
class PyTree:
    parent: np.ndarray  # row of the calling frame, -1 for a root
    self_us: np.ndarray  # duration minus the durations of the frame's callees
    order: np.ndarray  # rows sorted by (thread, start)
    sorted_ts: np.ndarray  # start times in `order`
    thread_bounds: dict[int, tuple[int, int]]  # thread code -> slice of `order`


def build_pytree(py: Table) -> PyTree:
    n = len(py)
    order = np.lexsort((py.ts, py.tid)) if n else np.empty(0, dtype=np.int64)
    bounds: dict[int, tuple[int, int]] = {}
    if n:
        tids_sorted = py.tid[order]
        cuts = np.flatnonzero(np.diff(tids_sorted)) + 1
        starts = np.r_[0, cuts]
        ends = np.r_[cuts, n]
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            bounds[int(tids_sorted[s])] = (s, e)
    py_id = py.extra.get("py_id")
    if n and py_id is not None and bool(np.all(py_id >= 0)):
        parent = _parents_from_ids(py_id, py.col("py_parent"))
    else:
        parent = _parents_from_nesting(py, order)
    child_time: np.ndarray = np.zeros(n, dtype=np.float64)
    has_parent = parent >= 0
    if n:
        child_time = np.bincount(parent[has_parent], weights=py.dur[has_parent], minlength=n)
    self_us = np.maximum(py.dur - child_time, 0.0)
    return PyTree(
        parent=parent,
        self_us=self_us,
        order=order,
        sorted_ts=py.ts[order] if n else np.empty(0),
        thread_bounds=bounds,
    )


def _parents_from_ids(py_id: np.ndarray, py_parent: np.ndarray) -> np.ndarray:
    by_id = np.argsort(py_id, kind="stable")
    sorted_ids = py_id[by_id]
    pos = np.searchsorted(sorted_ids, py_parent)
    pos = np.clip(pos, 0, max(sorted_ids.size - 1, 0))
    found = (py_parent >= 0) & (sorted_ids[pos] == py_parent)
    return np.where(found, by_id[pos], -1).astype(np.int64)


def _parents_from_nesting(py: Table, order: np.ndarray) -> np.ndarray:
    parent = np.full(len(py), -1, dtype=np.int64)
    ends = py.end
    stack: list[int] = []
    last_tid = None
    for row in order.tolist():
        tid = int(py.tid[row])
        if tid != last_tid:
            stack.clear()
            last_tid = tid
        start = py.ts[row]
        while stack and ends[stack[-1]] < start:
            stack.pop()
        if stack:
            parent[row] = stack[-1]
        stack.append(row)
    return parent


def nearest_flagged(parent: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """Row of the nearest ancestor-or-self with flag set, -1 where there is none.

    Pointer jumping: each pass doubles how far up a row has looked, so deep stacks cost
    log(depth) vectorised passes, not a Python loop per frame.
    """
    n = parent.size
    rows = np.arange(n, dtype=np.int64)
    up = np.where(flag, rows, parent)
    for _ in range(64):  # 2**64 levels: only a corrupt, cyclic parent chain gets this far
        pending = (up >= 0) & ~flag[np.maximum(up, 0)]
        if not pending.any():
            return up
        up[pending] = up[up[pending]]
    up[(up >= 0) & ~flag[np.maximum(up, 0)]] = -1
    return up


def innermost_at(py: Table, tree: PyTree, tid: int, t: float) -> int:
    """Row of the innermost frame on thread `tid` running at time t, -1 when none."""
    return int(innermost_many(py, tree, np.array([tid]), np.array([t], dtype=np.float64))[0])


def innermost_many(py: Table, tree: PyTree, tids: np.ndarray, times: np.ndarray) -> np.ndarray:
    """innermost_at for many points at once (rows, -1 where no frame runs)."""
    out = np.full(times.size, -1, dtype=np.int64)
    ends = py.end
    for tid in np.unique(tids).tolist():
        span = tree.thread_bounds.get(int(tid))
        if span is None:
            continue
        sel = np.flatnonzero(tids == tid)
        t = times[sel]
        i = np.searchsorted(tree.sorted_ts[span[0] : span[1]], t, side="right") - 1
        row = np.where(i >= 0, tree.order[span[0] + np.maximum(i, 0)], -1)
        # The latest frame started before t either still runs at t or has returned; in the
        # second case the frame running at t is one of its callers: climb until one covers t.
        for _ in range(len(py)):
            done = (row < 0) | (ends[np.maximum(row, 0)] >= t)
            if done.all():
                break
            row = np.where(done, row, tree.parent[np.maximum(row, 0)])
        out[sel] = row
    return out

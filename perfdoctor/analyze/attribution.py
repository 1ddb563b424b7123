"""Charge trace events to the user's own source: the innermost Python frame of the user's
code that was running on the event's thread when it happened.

Line precision: the profiler names a frame `file(line): function` with the function's first
line when the frame was entered inside the profiler window, and with the line being executed
when the window opened otherwise (typically the training loop's own frame). So a location is
exact to the function, and its line is where that function starts -- or, for a loop running
since before profiling, the line the loop was on when profiling began.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from perfdoctor.analyze.frames import UserCode, parse_frame_name
from perfdoctor.analyze.pytree import PyTree, innermost_at, innermost_many, nearest_flagged
from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_index import Point, Steps
from perfdoctor.model import SourceLocation


class Attributor:
    """Maps (thread, time) points to the user's frames; built once per trace."""

    def __init__(self, ev: TraceEvents, tree: PyTree | None, user: UserCode) -> None:
        self._ev = ev
        self._tree = tree
        self._user = user
        self._nearest_user: np.ndarray | None = None

    @property
    def user(self) -> UserCode:
        return self._user

    def user_flags(self) -> np.ndarray:
        """Per python_function row: is it a frame of the user's code?"""
        return self._ev.code_mask(self._user.is_user_frame_name)[self._ev.python.name]

    def _nearest(self) -> np.ndarray:
        if self._nearest_user is None:
            assert self._tree is not None
            self._nearest_user = nearest_flagged(self._tree.parent, self.user_flags())
        return self._nearest_user

    def user_frame_at(self, tid: int, t: float) -> int:
        """Row of the innermost user frame running at t on thread tid, -1 when none."""
        if self._tree is None:
            return -1
        row = innermost_at(self._ev.python, self._tree, tid, t)
        return int(self._nearest()[row]) if row >= 0 else -1

    def user_frames_at(self, tids: np.ndarray, times: np.ndarray) -> np.ndarray:
        """user_frame_at for many points at once."""
        if self._tree is None:
            return np.full(times.size, -1, dtype=np.int64)
        rows = innermost_many(self._ev.python, self._tree, tids, times)
        return np.where(rows >= 0, self._nearest()[np.maximum(rows, 0)], -1)

    def locate(
        self, points: Iterable[Point], steps: Steps, top: int = 5
    ) -> tuple[SourceLocation, ...]:
        """Top user frames by weight; `share` is the frame's part of the total weight of the
        points (of their number when every weight is zero), `count` occurrences per step."""
        pts = list(points)
        if self._tree is None or not pts:
            return ()
        tids = np.array([p[0] for p in pts], dtype=np.int64)
        times = np.array([p[1] for p in pts], dtype=np.float64)
        weights = np.array([p[2] for p in pts], dtype=np.float64)
        rows = self.user_frames_at(tids, times)
        found = rows >= 0
        if not found.any():
            return ()
        codes = self._ev.python.name[rows[found]]
        n_names = len(self._ev.names)
        counts = np.bincount(codes, minlength=n_names)
        sums = np.bincount(codes, weights=weights[found], minlength=n_names)
        total_weight = float(weights.sum())
        by_weight = total_weight > 0
        # lexsort: last key first -> by weight (or count), ties by count
        ranked = np.lexsort((-counts, -sums)) if by_weight else np.argsort(-counts, kind="stable")
        out = []
        for code in ranked[:top].tolist():
            if counts[code] == 0:
                break
            frame = parse_frame_name(self._ev.names[code])
            if frame is None:
                continue
            n = int(counts[code])
            share = float(sums[code]) / total_weight if by_weight else n / len(pts)
            per_step = max(1, math.ceil(n / steps.count)) if steps.count else n
            out.append(SourceLocation(frame.file, frame.line, frame.function, share, per_step))
        return tuple(out)


def merge_locations(
    *groups: tuple[SourceLocation, ...], top: int = 5
) -> tuple[SourceLocation, ...]:
    """Concatenate location lists in priority order, dropping repeats of a file:line."""
    seen: set[tuple[str, int, str]] = set()
    out: list[SourceLocation] = []
    for group in groups:
        for loc in group:
            key = (loc.file, loc.line, loc.function)
            if key not in seen:
                seen.add(key)
                out.append(loc)
    return tuple(out[:top])

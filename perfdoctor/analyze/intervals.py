"""Interval arithmetic on numpy arrays (microseconds): unions, clipping, containment."""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping [start, end) intervals into sorted disjoint ones."""
    if starts.size == 0:
        return starts.astype(np.float64), ends.astype(np.float64)
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = np.maximum.accumulate(ends[order])
    # A new group starts where an interval begins after everything before it has ended.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    group_starts = s[new]
    last = np.flatnonzero(np.r_[new[1:], True])
    return group_starts, e[last]


def total(starts: np.ndarray, ends: np.ndarray) -> float:
    return float(np.sum(ends - starts)) if starts.size else 0.0


def clip(
    starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of disjoint intervals with disjoint windows [lo, hi) (both sorted)."""
    if starts.size == 0 or lo.size == 0:
        return np.empty(0), np.empty(0)
    # Window k meets intervals first[k] .. last[k]-1; all pieces are gathered at once (a
    # loop over windows cost a Python iteration and two searches per step of the trace).
    first = np.searchsorted(ends, lo, side="right")
    last = np.searchsorted(starts, hi, side="left")
    counts = np.maximum(last - first, 0)
    n = int(counts.sum())
    if n == 0:
        return np.empty(0), np.empty(0)
    # Row of each piece: its window's first interval plus its place within the window.
    begin = np.cumsum(counts) - counts
    rows = np.arange(n) + np.repeat(first - begin, counts)
    out_s = np.maximum(starts[rows], np.repeat(lo, counts))
    out_e = np.minimum(ends[rows], np.repeat(hi, counts))
    return out_s, out_e


def time_in_windows(
    starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Per window [lo, hi), the time of the disjoint sorted intervals inside it. Windows may
    come in any order and overlap; one pass for all of them (not one clip per window)."""
    out = np.zeros(lo.shape, dtype=np.float64)
    if starts.size == 0 or lo.size == 0:
        return out
    first = np.searchsorted(ends, lo, side="right")
    last = np.searchsorted(starts, hi, side="left")
    counts = np.maximum(last - first, 0)
    n = int(counts.sum())
    if n == 0:
        return out
    begin = np.cumsum(counts) - counts
    rows = np.arange(n) + np.repeat(first - begin, counts)
    window = np.repeat(np.arange(lo.size), counts)
    piece = np.minimum(ends[rows], hi[window]) - np.maximum(starts[rows], lo[window])
    return np.bincount(window, weights=piece, minlength=lo.size)


def subtract(
    starts: np.ndarray, ends: np.ndarray, cut_starts: np.ndarray, cut_ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The time of [start, end) intervals outside the cut ones (either set in any order, may
    overlap), as sorted disjoint intervals: one sort of all the boundaries, no loop."""
    a_s, a_e = union(starts, ends)
    b_s, b_e = union(cut_starts, cut_ends)
    if a_s.size == 0 or b_s.size == 0:
        return a_s, a_e
    t = np.concatenate([a_s, a_e, b_s, b_e])
    zeros_a, zeros_b = np.zeros(2 * a_s.size), np.zeros(2 * b_s.size)
    in_a = np.concatenate([np.ones(a_s.size), -np.ones(a_s.size), zeros_b])
    in_b = np.concatenate([zeros_a, np.ones(b_s.size), -np.ones(b_s.size)])
    order = np.argsort(t, kind="stable")
    t, in_a, in_b = t[order], np.cumsum(in_a[order]), np.cumsum(in_b[order])
    # Between two boundaries the counts after the first hold; boundaries at the same time
    # bound zero-length pieces, which are dropped.
    keep = (in_a[:-1] > 0) & (in_b[:-1] == 0) & (t[1:] > t[:-1])
    return union(t[:-1][keep], t[1:][keep])


def covered_time(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Time of the union of the intervals that falls inside the windows."""
    us, ue = union(starts, ends)
    cs, ce = clip(us, ue, lo, hi)
    return total(cs, ce)


def point_in(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each point: inside one of the disjoint sorted intervals [start, end]?"""
    if starts.size == 0:
        return np.zeros(points.shape, dtype=bool)
    i = np.searchsorted(starts, points, side="right") - 1
    ok = i >= 0
    inside = np.zeros(points.shape, dtype=bool)
    inside[ok] = points[ok] <= ends[i[ok]]
    return inside


def window_index(points: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Index of the disjoint sorted window [lo, hi] holding each point, -1 when none."""
    if lo.size == 0:
        return np.full(points.shape, -1, dtype=np.int64)
    i = np.searchsorted(lo, points, side="right") - 1
    ok = i >= 0
    ok[ok] = points[ok] <= hi[i[ok]]
    return np.where(ok, i, -1)

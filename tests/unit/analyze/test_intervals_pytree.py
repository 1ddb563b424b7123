from __future__ import annotations

import numpy as np
import pytest

from perfdoctor.analyze import intervals
from perfdoctor.analyze.pytree import build_pytree, innermost_at, nearest_flagged
from perfdoctor.analyze.trace_events import Table


def arr(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float64)


def test_union_merges_overlapping_and_touching_intervals() -> None:
    s, e = intervals.union(arr(5, 0, 2, 10), arr(6, 3, 4, 12))
    assert s.tolist() == [0, 5, 10] and e.tolist() == [4, 6, 12]


def test_clip_and_covered_time() -> None:
    s, e = intervals.clip(arr(0, 5, 10), arr(4, 6, 12), arr(3, 11), arr(5.5, 20))
    assert list(zip(s.tolist(), e.tolist(), strict=True)) == [(3, 4), (5, 5.5), (11, 12)]
    assert intervals.covered_time(arr(0, 1), arr(2, 3), arr(0), arr(10)) == pytest.approx(3)


def test_point_in_and_window_index() -> None:
    pts = arr(-1, 0, 3, 4.5, 7)
    assert intervals.point_in(pts, arr(0, 4), arr(3, 5)).tolist() == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert intervals.window_index(pts, arr(0, 4), arr(3, 5)).tolist() == [-1, 0, 0, 1, -1]


def _table(ts: list[float], dur: list[float], ids: list[int], parents: list[int]) -> Table:
    n = len(ts)
    return Table(
        name=np.zeros(n, dtype=np.int32),
        ts=np.array(ts, dtype=np.float64),
        dur=np.array(dur, dtype=np.float64),
        tid=np.zeros(n, dtype=np.int64),
        extra={"py_id": np.array(ids), "py_parent": np.array(parents)},
    )


def test_tree_from_ids_self_time_and_innermost_frame() -> None:
    # root [0,100] > a [10,50] > b [20,30]; root > c [60,90]
    t = _table([0, 10, 20, 60], [100, 40, 10, 30], [1, 2, 3, 4], [-1, 1, 2, 1])
    tree = build_pytree(t)
    assert tree.parent.tolist() == [-1, 0, 1, 0]
    assert tree.self_us.tolist() == [30, 30, 10, 30]
    assert innermost_at(t, tree, 0, 25) == 2
    assert innermost_at(t, tree, 0, 55) == 0  # a has returned, root still runs
    assert innermost_at(t, tree, 0, 150) == -1
    assert innermost_at(t, tree, 7, 25) == -1  # unknown thread


def test_tree_from_nesting_when_ids_are_missing() -> None:
    t = _table([0, 10, 20, 60], [100, 40, 10, 30], [-1, -1, -1, -1], [-1, -1, -1, -1])
    assert build_pytree(t).parent.tolist() == [-1, 0, 1, 0]


def test_nearest_flagged_ancestor() -> None:
    parent = np.array([-1, 0, 1, 2, 0])
    flag = np.array([False, True, False, False, False])
    assert nearest_flagged(parent, flag).tolist() == [-1, 1, 1, 1, -1]


def test_nearest_flagged_survives_a_cyclic_parent_chain() -> None:
    parent = np.array([1, 0])
    assert nearest_flagged(parent, np.array([False, False])).tolist() == [-1, -1]


def test_subtract_keeps_the_time_outside_the_cut_intervals() -> None:
    # [0, 10) and [20, 30) less [2, 4), [3, 5) (overlapping cuts), [10, 25) and [28, 30).
    s, e = intervals.subtract(arr(0, 20), arr(10, 30), arr(2, 3, 10, 28), arr(4, 5, 25, 30))
    assert s.tolist() == [0, 5, 25] and e.tolist() == [2, 10, 28]
    s, e = intervals.subtract(arr(0), arr(10), arr(), arr())
    assert s.tolist() == [0] and e.tolist() == [10]


def _clip_one_window_at_a_time(s, e, lo, hi):
    """The reference: the loop over windows that clip() used to be."""
    out_s, out_e = [], []
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        i = int(np.searchsorted(e, a, side="right"))
        j = int(np.searchsorted(s, b, side="left"))
        if i < j:
            out_s.append(np.maximum(s[i:j], a))
            out_e.append(np.minimum(e[i:j], b))
    if not out_s:
        return np.empty(0), np.empty(0)
    return np.concatenate(out_s), np.concatenate(out_e)


@pytest.mark.parametrize("seed", range(20))
def test_clip_and_time_in_windows_match_one_window_at_a_time(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s, e = intervals.union(
        *(lambda a: (a, a + rng.uniform(0, 8, a.size)))(rng.uniform(0, 100, rng.integers(0, 30)))
    )
    lo = np.sort(rng.uniform(-5, 105, rng.integers(0, 12)))
    # Disjoint sorted windows for clip; time_in_windows takes any, overlapping included.
    hi = np.minimum(lo + rng.uniform(0, 15, lo.size), np.r_[lo[1:], np.inf])
    got_s, got_e = intervals.clip(s, e, lo, hi)
    want_s, want_e = _clip_one_window_at_a_time(s, e, lo, hi)
    assert np.array_equal(got_s, want_s) and np.array_equal(got_e, want_e)
    wide = lo + rng.uniform(0, 30, lo.size)
    per_window = intervals.time_in_windows(s, e, lo[::-1], wide[::-1])
    for k, (a, b) in enumerate(zip(lo[::-1].tolist(), wide[::-1].tolist(), strict=True)):
        cs, ce = _clip_one_window_at_a_time(s, e, np.array([a]), np.array([b]))
        assert per_window[k] == pytest.approx(intervals.total(cs, ce), abs=1e-9)

"""Memory growth that lasts over a window of per-step readings (a leak), told apart from
shapes that only look like it: one jump, a swing, allocator jitter, warm-up that settles."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Growth must show in every one of this many consecutive parts of the timed window.
GROWTH_SEGMENTS = 3
# ... and rise over the window by at least this many times the readings' resolution (the
# median size of a change between two readings): RSS moves in allocator-sized pieces (1 MiB
# pymalloc arenas), and a random walk of +-1 piece per step, bounded like a flat RSS, rose
# past 4 pieces in 6 of 3000 simulated 20-step windows and past 5 in none, while a 1 MiB/step
# leak under +-0.3 MiB jitter rose past 5 in all 200 of its 10-step windows.
GROWTH_MIN_RESOLUTIONS = 5.0
# A leak whose RSS moves in large pieces (glibc grows the heap by several MiB, then serves
# a few steps from it: three equal readings, then a jump) leaves a part of the window flat,
# so "every part rises on its own" fails. Its parts' levels (medians) still climb at one
# rate: the later rate at least this share of the earlier one (warm-up that settles slows
# to a few % of its start) ...
GROWTH_STEADY_RATE_RATIO = 0.5
# ... and no single change between two readings carries more than this share of the rise
# (a buffer allocated once is one piece; a leak in chunks is many) ...
GROWTH_MAX_PIECE_SHARE = 0.4
# ... at least this many rises of half the largest one or more (two allocations made once
# are two pieces) ...
GROWTH_MIN_PIECES = 3
# ... and the readings give back at most this share of what they gain: a leaking process
# rarely returns memory, a random walk of allocator jitter that happens to climb returns
# about as much as it takes.
GROWTH_MAX_FALL_SHARE = 0.25


# The Theil-Sen slope takes the median of n*(n-1)/2 pairwise slopes: 500,000 steps would be
# 1.25e11 pairs (233 GiB). Above this many pairs (all pairs of ~450 points) a seeded sample of
# pairs stands in: the median of 100,000 slopes sits within ~0.5% of the slopes' quantiles of
# the full median, and memory stays linear in the step count. The fact
# `memory_growth_fit_sampled` says when it happened.
THEIL_SEN_MAX_PAIRS = 100_000
_THEIL_SEN_SEED = 20261206


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs i < j: all of them up to THEIL_SEN_MAX_PAIRS, else a seeded sample."""
    if n * (n - 1) // 2 <= THEIL_SEN_MAX_PAIRS:
        return np.triu_indices(n, k=1)
    rng = np.random.default_rng(_THEIL_SEN_SEED)
    a = rng.integers(0, n, size=THEIL_SEN_MAX_PAIRS)
    b = rng.integers(0, n - 1, size=THEIL_SEN_MAX_PAIRS)
    b = b + (b >= a)  # uniform over the other n-1 indices: never a pair of a point with itself
    return np.minimum(a, b), np.maximum(a, b)


def growth_fit_sampled(n_points: int) -> bool:
    """Whether a growth fit over this many points uses a sample of its pairwise slopes."""
    return n_points * (n_points - 1) // 2 > THEIL_SEN_MAX_PAIRS


def _theil_sen(xs: np.ndarray, ys: np.ndarray) -> float | None:
    """Median of the pairwise slopes: one jump moves it little, unlike least squares.
    Over many points, the median of a bounded sample of them (THEIL_SEN_MAX_PAIRS)."""
    i, j = _pairs(len(xs))
    dx = xs[j] - xs[i]
    keep = dx != 0
    if not keep.any():
        return None
    return float(np.median((ys[j] - ys[i])[keep] / dx[keep]))


def _parts(n: int) -> list[np.ndarray]:
    # At least two points per part: a short window is cut in fewer parts.
    return np.array_split(np.arange(n), min(GROWTH_SEGMENTS, n // 2))


def _every_part_rises(xs: np.ndarray, ys: np.ndarray, slope: float, scatter: float) -> float | None:
    """The slowest part's rate when every part rises on its own (positive Theil-Sen slope)
    by more than the scatter; None otherwise."""
    parts = _parts(len(xs))
    part_slopes = [_theil_sen(xs[p], ys[p]) for p in parts]
    rises = [
        s * float(xs[p].max() - xs[p].min()) if s is not None else None
        for s, p in zip(part_slopes, parts, strict=True)
    ]
    if not all(s is not None and s > 0 for s in part_slopes) or not all(
        r is not None and r > scatter for r in rises
    ):
        return None
    return min(slope, *(s for s in part_slopes if s is not None))


def _levels_climb_steadily(xs: np.ndarray, ys: np.ndarray, slope: float) -> float | None:
    """The slower of the rates between consecutive parts' levels when they climb steadily
    and in many pieces (a leak served in heap-sized chunks); None otherwise."""
    parts = _parts(len(xs))
    if len(parts) < GROWTH_SEGMENTS or min(len(p) for p in parts) < 3:
        return None
    levels = [float(np.median(ys[p])) for p in parts]
    centers = [float(np.median(xs[p])) for p in parts]
    rates = [
        (levels[k + 1] - levels[k]) / (centers[k + 1] - centers[k])
        for k in range(len(parts) - 1)
        if centers[k + 1] > centers[k]
    ]
    if len(rates) != len(parts) - 1 or min(rates) <= 0:
        return None
    if min(rates[1:]) < GROWTH_STEADY_RATE_RATIO * rates[0]:
        return None  # slowing down: warm-up settling, not a leak
    rate = min(slope, *rates)
    rise = rate * float(xs.max() - xs.min())
    changes = np.diff(ys)
    gains = changes[changes > 0]
    if rise <= 0 or not gains.size or float(gains.max()) > GROWTH_MAX_PIECE_SHARE * rise:
        return None  # one piece carries the rise: an allocation made once
    if int(np.count_nonzero(gains >= 0.5 * gains.max())) < GROWTH_MIN_PIECES:
        return None  # two pieces: two allocations made once
    if float(-changes[changes < 0].sum()) > GROWTH_MAX_FALL_SHARE * float(gains.sum()):
        return None  # gives back as much as it takes: jitter that happens to climb
    return rate


def sustained_growth(points: Sequence[tuple[float, float]]) -> tuple[float | None, float | None]:
    """Growth per step that persists over the whole timed window, and how far it rises
    above the noise.

    A leak (tensors kept with their graphs, a growing cache) adds memory at every step, to
    the end, at the same rate. Shapes that only look like it: one jump (a buffer allocated
    once, an epoch boundary), a swing with no trend (numpy buffers of a DataLoader, +-8 MiB
    per step on cnn_slow_dataloader.py), jitter of an allocator that moves RSS in MiB-sized
    pieces (pymalloc arenas, glibc heap top), and warm-up that settles within the window (a
    Trainer filling its caches: ~1 MiB per step early, a few KiB per step later). So the
    timed window is cut into GROWTH_SEGMENTS consecutive parts (fewer below six steps), and
    growth persists when every part rises on its own (positive Theil-Sen slope) by more
    than the series' scatter: one jump lifts one part, a swing or jitter lifts some and
    lowers others. A leak served in heap-sized chunks (RSS flat for a few steps, then a
    jump) can leave one part flat: it persists too when the parts' levels climb at a steady
    rate in many pieces (_levels_climb_steadily). The whole rise must also span
    GROWTH_MIN_RESOLUTIONS times the size of a typical change between two readings, the
    resolution at which RSS readings move: a few arena-sized pieces up is within what
    jitter draws. Growth that does not persist is 0.

    The rate is the slowest part's (or the slower rate between levels): what the window
    sustains to its end (settling growth reports its tail, a steady leak the same rate in
    every part); never above the slope over the whole window. The second value is the rise
    at that rate over the window divided by the scatter around the whole-window line (1.4826
    x the median absolute residual, a robust standard deviation), so a slope that noise
    alone could draw stays below the rules' 3. CUDA's allocated bytes do not scatter: there
    the ratio is large (or 1e9) for any steady growth.
    """
    if len(points) < 4:
        return None, None
    ordered = sorted(points)
    xs = np.asarray([x for x, _ in ordered], dtype=np.float64)
    ys = np.asarray([y for _, y in ordered], dtype=np.float64)
    slope = _theil_sen(xs, ys)
    if slope is None:
        return None, None
    residuals = ys - slope * xs
    residuals -= np.median(residuals)
    scatter = 1.4826 * float(np.median(np.abs(residuals)))
    # Both readings of persistence may hold; a chunked leak's flat part makes the first one's
    # slowest part far slower than the rate the levels climb at, so the faster reading wins.
    rates = [
        r
        for r in (
            _every_part_rises(xs, ys, slope, scatter),
            _levels_climb_steadily(xs, ys, slope) if slope > 0 else None,
        )
        if r is not None
    ]
    if not rates:
        return 0.0, 0.0
    rate = max(rates)
    rise = rate * float(xs.max() - xs.min())
    changes = np.abs(np.diff(ys))
    changes = changes[changes > 0]
    resolution = float(np.median(changes)) if changes.size else 0.0
    if scatter > 0 and rise < GROWTH_MIN_RESOLUTIONS * resolution:
        return 0.0, 0.0  # a few allocator-sized pieces off a line: jitter can rise that far
    if scatter == 0:  # a perfectly straight line (CUDA allocated bytes): any rise is a trend
        return rate, 1e9 if rise > 0 else 0.0  # 1e9, not inf: JSON has no inf
    return rate, rise / scatter

"""The A/B speed estimate: how much faster a variant is, and how wide the noise band is.

Baseline and variant runs alternate (A B A B ...), so run k of the variant is paired with run
k of the baseline: a machine that drifts (thermal, a neighbour job) affects both members of a
pair alike. Per pair, ratio_k = median(baseline steps) / median(variant steps); the speedup is
the geometric mean of the pair ratios (the mean of their logs). It is therefore exactly the
ratio of two step times that can be shown beside it: the geometric means of the paired run
medians on each side (`baseline_ms`, `variant_ms`, "paired medians"), so a report that prints
"1,794 -> 998 ms" next to the speedup prints 1.80x, never a figure from another pool. (A
median of the pair ratios has no such pair of step times.)

Used where two recordings are compared that were not made to be paired round by round:
`perfdoctor compare`, the CI gate, the batch plan. `perfdoctor profile`'s own A/B rounds are
judged by the measurement engine (optimize/engine.py, verdicts.compare_variant's `looks`).

Noise band: the half-width of a 95% bootstrap interval of that speedup (steps resampled with
replacement within each run, fixed seed, so the same runs always give the same verdict),
widened by the run-to-run spread (half the range of the baseline run medians, or of the
pair ratios when those moved more) when at least two runs exist: the bootstrap alone only
sees step-to-step noise inside a run, not the run-to-run noise that separates two launches
of the same script; and widened by the gap to the same pairs' wall-clock speedup (mean
step, periodic work included; see wall_clock_step_ms). All are taken in log space (see
estimate_speedup); `noise` is the distance down to the band's lower end, so
"speedup - noise > 1" is exactly "the whole band is above 1".

The step-time pools and spreads are analyze/run_stats.py's. Pure: no torch.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from perfdoctor.analyze.run_stats import RunSample, percentile, run_medians_spread
from perfdoctor.optimize.engine import PAIRED_MEDIANS, THROUGHPUT_WINDOWS

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240601
# A run longer than this many steps is bootstrapped m-out-of-n: each resample draws this many
# of its steps, and the resampled median's distance from the run's own median is scaled by
# sqrt(m/n) (a median's spread shrinks as 1/sqrt(n)). Resampling every step of a 500,000-step
# run 2,000 times took hours; this keeps the cost of a comparison bounded in the run length.
BOOTSTRAP_MAX_STEPS = 2000
_BLOCK = 200  # resamples drawn at once on that path
CONFIDENCE = 0.95


@dataclass(frozen=True)
class SpeedEstimate:
    speedup: float  # > 1 is faster
    noise: float  # distance from `speedup` down to the band's lower end
    pair_ratios: tuple[float, ...]
    bootstrap_half_width: float  # in log space
    baseline_spread: float  # half-range of the log baseline run medians (0 with one run)
    log_width: float = 0.0  # bootstrap half-width + run-to-run spread + statistic gap
    wall_clock_speedup: float | None = None  # the same pairs on wall_clock_step_ms
    ratio_spread: float = 0.0  # half-range of the log pair ratios (0 with one pair)
    statistic_gap: float = 0.0  # |log wall_clock_speedup - log speedup|
    # The step times the speedup is the ratio of: the geometric means of the paired runs'
    # median steps ("paired medians"); speedup == baseline_ms / variant_ms.
    baseline_ms: float | None = None
    variant_ms: float | None = None
    pairs: int = 0

    @property
    def low(self) -> float:
        """Lower end of the band: the speedup that is safe to claim."""
        return self.speedup - self.noise

    @property
    def high(self) -> float:
        return self.speedup * math.exp(self.log_width)

    def describe(self) -> str:
        return f"{self.speedup:.2f}x ± {self.noise:.2f}"


def paired_runs(
    baseline_runs: Sequence[RunSample], variant_runs: Sequence[RunSample]
) -> list[tuple[RunSample, RunSample]]:
    """Pair run k with run k; pairs where either side has no usable timing are dropped."""
    return [
        (b, v) for b, v in zip(baseline_runs, variant_runs, strict=False) if b.usable and v.usable
    ]


def adjacent_baselines(
    run_order: Sequence[str], baseline_runs: Sequence[str], variant_runs: Sequence[str]
) -> list[str]:
    """For each run of one variant, the baseline run of its round: the latest baseline run
    before it (else the first one after it), each used once for this variant. These are the
    pairs for `compare_variant`, also for a variant measured long after the first baseline
    runs (the stacked one)."""
    position = {run: index for index, run in enumerate(run_order)}
    free = sorted((b for b in baseline_runs if b in position), key=position.__getitem__)
    paired: list[str] = []
    for run in variant_runs:
        if run not in position or not free:
            continue
        before = [b for b in free if position[b] < position[run]]
        chosen = before[-1] if before else free[0]
        free.remove(chosen)
        paired.append(chosen)
    return paired


def _run_value(step_ms: Sequence[float], statistic: str) -> float:
    """A run's per-step time by the engine's statistic: its median step, or (throughput
    windows, for bursty steps) its wall time over its steps."""
    if statistic == THROUGHPUT_WINDOWS:
        return statistics.fmean(step_ms)
    return statistics.median(step_ms)


def _log_ratio(
    baseline_ms: Sequence[float], variant_ms: Sequence[float], statistic: str = PAIRED_MEDIANS
) -> float:
    return math.log(_run_value(baseline_ms, statistic) / _run_value(variant_ms, statistic))


def paired_medians(
    pairs: Sequence[tuple[RunSample, RunSample]], statistic: str = PAIRED_MEDIANS
) -> tuple[float, float]:
    """The geometric means of the paired runs' median steps (or wall time over steps, for
    throughput windows), baseline side and variant side: the two step times whose ratio is
    the speedup (exp of the mean pair log ratio)."""
    base = statistics.fmean(math.log(_run_value(b.step_ms, statistic)) for b, _ in pairs)
    var = statistics.fmean(math.log(_run_value(v.step_ms, statistic)) for _, v in pairs)
    return math.exp(base), math.exp(var)


def _bootstrap_log_ratios(
    pairs: Sequence[tuple[RunSample, RunSample]],
    resamples: int,
    seed: int,
    statistic: str = PAIRED_MEDIANS,
) -> list[float]:
    """The mean pair log ratio of each bootstrap resample."""
    if all(
        len(b.step_ms) <= BOOTSTRAP_MAX_STEPS and len(v.step_ms) <= BOOTSTRAP_MAX_STEPS
        for b, v in pairs
    ):
        # Every step resampled, draw for draw as before long runs had their own path.
        rng = random.Random(seed)
        return [
            statistics.fmean(
                _log_ratio(
                    rng.choices(b.step_ms, k=len(b.step_ms)),
                    rng.choices(v.step_ms, k=len(v.step_ms)),
                    statistic,
                )
                for b, v in pairs
            )
            for _ in range(resamples)
        ]
    gen = np.random.default_rng(seed)
    total = np.zeros(resamples)
    for b, v in pairs:
        total += _resampled_log_values(gen, b.step_ms, resamples, statistic)
        total -= _resampled_log_values(gen, v.step_ms, resamples, statistic)
    return [float(x) for x in total / len(pairs)]


def _resampled_log_values(
    gen: np.random.Generator, step_ms: Sequence[float], k: int, statistic: str
) -> np.ndarray:
    """log values (median, or mean for throughput windows) of k bootstrap resamples of one
    run's steps; m-out-of-n above BOOTSTRAP_MAX_STEPS: m steps drawn, the distance from the
    run's own log value rescaled by sqrt(m/n) to the run's length. Memory: _BLOCK x m draws
    at a time, whatever the run's length."""
    steps = np.asarray(step_ms, dtype=np.float64)
    n = len(steps)
    m = min(n, BOOTSTRAP_MAX_STEPS)
    reduce = np.mean if statistic == THROUGHPUT_WINDOWS else np.median
    # In blocks of resamples: k x m draws at once would be 64 MB of indices and values.
    drawn = np.concatenate(
        [
            np.log(reduce(steps[gen.integers(0, n, size=(rows, m))], axis=1))
            for rows in [_BLOCK] * (k // _BLOCK) + ([k % _BLOCK] if k % _BLOCK else [])
        ]
    )
    if m == n:
        return drawn
    full = math.log(float(reduce(steps)))
    return full + (drawn - full) * math.sqrt(m / n)


# A step above this percentile of its run counts at the percentile's value in the
# wall-clock time per step: a one-off stall should not move it, periodic work must.
WALL_CLOCK_CLIP_PERCENTILE = 95.0


def wall_clock_step_ms(step_ms: Sequence[float]) -> float:
    """Time per step as the run's wall clock sees it: the mean step, every step counted,
    with the few slowest clipped to the 95th percentile. A median over steps leaves out work
    that comes every few steps (an evaluation every 5th step, logging every 10th) whenever
    it lands in fewer than half of them, so the median's speedup can lie far from the one
    the script's own timer reports."""
    cap = percentile(step_ms, WALL_CLOCK_CLIP_PERCENTILE)
    return statistics.fmean(min(ms, cap) for ms in step_ms)


def estimate_speedup(
    baseline_runs: Sequence[RunSample],
    variant_runs: Sequence[RunSample],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    between_rounds: bool = False,
    statistic: str = PAIRED_MEDIANS,
) -> SpeedEstimate | None:
    """Ratios are combined and bounded in log space, where run-to-run noise is additive (a
    machine that is 30% slower for one run scales every step of it): the pairs combine by
    the mean of their log ratios (the geometric mean of the pair ratios), and the band is
    speedup x exp(-w) .. speedup x exp(w) with w = bootstrap half-width + baseline spread
    + statistic gap.

    The bootstrap resamples steps inside each run, so it sees neither the noise between runs
    nor how far the median step is from the wall-clock time per step. The baseline spread
    stands for the first; with `between_rounds` (a variant's verdict) the pair ratios' own
    half-range does when it is larger: how far the ratio itself moved from round to round,
    which a variant that drifts while the baseline does not shows and the baseline's
    medians do not. (The regression gate, comparing two sessions of one script, keeps the
    baseline spread and widens by its own rule.) The statistic gap is the distance between
    this speedup and the same pairs' ratio of wall_clock_step_ms: on tabular_mlp_debug with
    anomaly-off the median's 2.61x band (low end 2.05) lay above every ratio of the script's
    own ms/step (1.76-1.88x), because anomaly mode slows the evaluation step (every 5th) far
    less than a training step, and a median over steps sees training steps only
    (benchmarks/README.md, "speedup band").

    `statistic` (optimize/engine.py): "throughput-windows" for bursty steps takes each run's
    wall time over its steps instead of its median step; the statistic gap is then 0 (the
    statistic is the wall clock's)."""
    pairs = paired_runs(baseline_runs, variant_runs)
    if not pairs:
        return None
    logs = [_log_ratio(b.step_ms, v.step_ms, statistic) for b, v in pairs]
    baseline_ms, variant_ms = paired_medians(pairs, statistic)
    center = math.log(baseline_ms / variant_ms)  # == mean(logs), up to rounding

    boot = _bootstrap_log_ratios(pairs, resamples, seed, statistic)
    tail = (1.0 - confidence) / 2.0 * 100.0
    half_width = (percentile(boot, 100.0 - tail) - percentile(boot, tail)) / 2.0
    wall_clock = statistics.fmean(
        math.log(wall_clock_step_ms(b.step_ms) / wall_clock_step_ms(v.step_ms)) for b, v in pairs
    )
    gap = 0.0 if statistic == THROUGHPUT_WINDOWS else abs(wall_clock - center)
    ratio_spread = (max(logs) - min(logs)) / 2.0
    spread = run_medians_spread(baseline_runs)
    run_to_run = max(spread, ratio_spread) if between_rounds else spread
    width = half_width + run_to_run + gap
    speedup = baseline_ms / variant_ms  # exactly the ratio of the two shown step times
    return SpeedEstimate(
        speedup=speedup,
        noise=speedup - math.exp(center - width),
        pair_ratios=tuple(math.exp(x) for x in logs),
        bootstrap_half_width=half_width,
        baseline_spread=spread,
        log_width=width,
        wall_clock_speedup=math.exp(wall_clock),
        statistic_gap=gap,
        ratio_spread=ratio_spread,
        baseline_ms=baseline_ms,
        variant_ms=variant_ms,
        pairs=len(pairs),
    )


def widened_estimate(a: Sequence[RunSample], b: Sequence[RunSample]) -> SpeedEstimate | None:
    """The re-runs' speed estimate with B's own run-to-run spread added to its band: for two
    runs not known to share a machine or its conditions (`perfdoctor compare`, the gate)."""
    estimate = estimate_speedup(a, b)
    spread = run_medians_spread(b)
    if estimate is None or spread == 0.0:
        return estimate
    width = estimate.log_width + spread
    noise = estimate.speedup - estimate.speedup * math.exp(-width)
    return replace(estimate, noise=noise, log_width=width)

"""The measurement engine: paired observations from any source, one sequential test.

A fix is measured against the script as it is by pairs of observations taken close together
in time, so that load which drifts over minutes cancels out of each pair:

    blocks   two arms switched between steps inside one process (collect/ab_switch.py):
             a pair is one block of each arm in the same round
    runs     whole child runs alternated A B A B (pipeline.py): a pair is run k of each side

Every pair is one (reference, test) couple of per-step times computed by the same statistic.
Pairs from several processes pool: a script that ends before the test decides (a 100-step
script, an epoch of 128 batches) is started again, and the new pairs join the old ones in
the same test, with the same looks and the same error budget (`Looks`).

The statistic is chosen per workload (`choose_statistic`):

    paired-medians      the median step of each block or run: a stall of one step does not
                        move it. For steady steps.
    throughput-windows  wall time over steps (the mean step) of a window of at least
                        WINDOW_MIN_STEPS steps and WINDOW_MIN_S seconds. Where steps are bursty
                        (a prefetching DataLoader hands out several batches at once, then one
                        long wait; periodic evaluation or logging), the median of a handful
                        of steps sees the quick ones and misses the waits, which are what the
                        fix changes; the window's wall time sees both.

The estimate (`estimate`): d = log(reference / test) per pair; the speedup is exp(Yuen's 20%
trimmed mean of d), its interval Student's t with the winsorized standard deviation, so the
pairs a burst of load hit do not swing it.

The stopping rule (`Looks`): the interval is looked at when the pooled pairs reach a count of
the source's schedule (whichever process brought them), plus one last look when the budget or
the processes run out; each look is taken at confidence 1 - ALPHA / looks (Bonferroni), so the
chance of a false "faster" or "slower" over all of them stays within ALPHA. The schedules:

    blocks  LOOK_SCHEDULE, from 9 pairs: a block of 0.4 s can be hit whole by a burst of
            another process's load, and looks at 3 and 5 pairs (2 degrees of freedom after
            the trim) let such bursts through (benchmarks/README.md, "A/A"). Blocks of
            LONG_BLOCK_S or more (slow steps: the README demo's 8 steps of 0.29 s) are
            judged like whole runs, from 3 pairs (`block_looks`): a burst does not fill one,
            and at 9 pairs first such a script needed 4 processes before any look
    runs    RUN_LOOK_SCHEDULE, from 3 pairs (or --repeat): a pair is two whole runs, each
            value a run's median or wall time over dozens of steps and seconds, which a
            burst does not move alone; and each pair costs two launches, so every count is
            a look (`rerun_looks`)

Verdict words (`verdict_words`), speed only (numerics are checked by the caller first):

    accepted    the interval lies above 1x
    rejected    the interval lies below 1x (slower), or it straddles 1x within +-NARROW (no
                gain worth having)
    undecided   anything else: what was seen, and what would decide it (about how many more
                steps, or a quieter machine). "Rejected" never stands for "could not tell".

Pure: no torch.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from perfdoctor.model import Verdict

Statistic = Literal["paired-medians", "throughput-windows"]
PAIRED_MEDIANS: Statistic = "paired-medians"
THROUGHPUT_WINDOWS: Statistic = "throughput-windows"

# Step times whose p90 is this many times their p50 are bursty: a prefetching loader's waits
# (the bursty-loader script: 2.5x), a periodic evaluation. Steady CPU steps on a busy
# 2-core machine stay near 1.2-1.3x (benchmarks/README.md, "statistic per workload").
BURSTY_P90_P50 = 1.5
# A throughput window spans at least this many steps and seconds: several prefetch cycles of
# a loader with a few workers (2 batches in flight per worker), and long enough that the
# switch's first cost and a timer's resolution are small beside it.
WINDOW_MIN_STEPS = 8
WINDOW_MIN_S = 0.5
WINDOW_MAX_STEPS = 64
# Paired-median blocks: about this much time, and between MIN and MAX counted steps.
BLOCK_TARGET_S = 0.4
MIN_BLOCK_STEPS = 3
MAX_BLOCK_STEPS = 10

# The error budget every look of one comparison shares (false faster + false slower).
ALPHA = 0.05
# An interval narrower than this on each side of its centre (log space) that straddles 1x
# says "no gain worth having".
NARROW = math.log(1.05)
# Pair counts at which the interval is looked at, whichever process brought the pairs. The
# first look waits for 9 pairs: with looks after 3 and 5 pairs (2 degrees of freedom after
# the trim) a burst of load passed them in 1 of 40 A/A runs (benchmarks/README.md, "A/A").
LOOK_SCHEDULE: tuple[int, ...] = (9, 13, 19, 28, 40, 60, 90, 135, 200, 300)
# Pair counts at which a comparison of whole runs (re-runs) is looked at: after every round
# from the third, then more sparsely (a session rarely allows more than --max-rounds 6).
RUN_LOOK_SCHEDULE: tuple[int, ...] = (3, 4, 5, 6, 8, 10, 13, 16, 20, 25, 30, 40, 50)
# --max-rounds by default: the most whole-run pairs one re-run comparison gets.
DEFAULT_MAX_ROUNDS = 6
# Share of the pairs trimmed at each end of the sorted log ratios (Yuen's trimmed mean).
TRIM = 0.2
# Fewer pairs than this give no interval at all (t with 1 degree of freedom is useless).
MIN_PAIRS = 3
# Past this many times the pairs already measured, more pairs are not what would decide it:
# the noise is (a quieter machine, or a larger effect, would be).
MAX_PAIRS_FACTOR = 8.0

Decision = Literal["faster", "slower", "no-gain", "undecided"]


# --------------------------------------------------------------------------- statistic


@dataclass(frozen=True)
class StatisticChoice:
    name: Statistic
    why: str


def burstiness(step_ms: Sequence[float]) -> float | None:
    """p90 / p50 of the steps (None with fewer than 5 steps)."""
    values = sorted(v for v in step_ms if v > 0 and math.isfinite(v))
    if len(values) < 5:
        return None
    p50 = _percentile(values, 50.0)
    return _percentile(values, 90.0) / p50 if p50 > 0 else None


def choose_statistic(step_ms: Sequence[float], *, prefetching: bool = False) -> StatisticChoice:
    """The statistic for comparisons on a workload with these (baseline) step times.
    `prefetching`: a candidate changes how batches arrive (DataLoader workers): its steps are
    bursty whatever the baseline's are."""
    ratio = burstiness(step_ms)
    if ratio is not None and ratio >= BURSTY_P90_P50:
        return StatisticChoice(
            THROUGHPUT_WINDOWS,
            f"step p90/p50 {ratio:.2f} >= {BURSTY_P90_P50:g}: bursty steps, so wall time over "
            f"windows of >= {WINDOW_MIN_STEPS} steps and {WINDOW_MIN_S:g}s",
        )
    if prefetching:
        return StatisticChoice(
            THROUGHPUT_WINDOWS,
            "a DataLoader fix hands out prefetched batches in bursts: wall time over windows "
            f"of >= {WINDOW_MIN_STEPS} steps and {WINDOW_MIN_S:g}s",
        )
    seen = f"step p90/p50 {ratio:.2f}" if ratio is not None else "too few steps to see bursts"
    return StatisticChoice(PAIRED_MEDIANS, f"{seen}: steady steps, so paired medians")


def window_value(step_ms: Sequence[float], statistic: str) -> float | None:
    """The per-step time of one block or run under `statistic` (None: no step)."""
    values = [v for v in step_ms if v > 0 and math.isfinite(v)]
    if not values:
        return None
    if statistic == THROUGHPUT_WINDOWS:
        return math.fsum(values) / len(values)
    return statistics.median(values)


def block_steps_for(step_s: float | None, statistic: str = PAIRED_MEDIANS) -> int:
    """Counted steps per block, from the warm-up's median step time."""
    known = step_s is not None and step_s > 0 and math.isfinite(step_s)
    if statistic == THROUGHPUT_WINDOWS:
        if not known:
            return WINDOW_MIN_STEPS * 2
        assert step_s is not None
        return max(WINDOW_MIN_STEPS, min(WINDOW_MAX_STEPS, math.ceil(WINDOW_MIN_S / step_s)))
    if not known:
        return 5
    assert step_s is not None
    return max(MIN_BLOCK_STEPS, min(MAX_BLOCK_STEPS, math.ceil(BLOCK_TARGET_S / step_s)))


def block_steps_to_fit(
    script_steps: int,
    warmup: int,
    arms: int,
    settle: int,
    wanted_rounds: int,
    statistic: str,
    warmup_arms: int | None = None,
) -> int | None:
    """Counted steps per block so that a script of `script_steps` steps holds the warm-up,
    a first block of each of the `warmup_arms` arms that need one (all `arms` when None;
    optimize/switchable.needs_warmup_block), and `wanted_rounds` rounds (None: no block fits
    at all). The statistic's floor holds: a throughput window keeps its WINDOW_MIN_STEPS."""
    floor = WINDOW_MIN_STEPS if statistic == THROUGHPUT_WINDOWS else MIN_BLOCK_STEPS
    firsts = arms if warmup_arms is None else max(0, min(arms, warmup_arms))
    room = script_steps - warmup
    length = room // max(1, arms * wanted_rounds + firsts)
    counted = length - settle
    if counted >= floor:
        return counted
    return floor if room >= (arms + firsts) * (floor + settle) else None


# --------------------------------------------------------------------------- estimate


@dataclass(frozen=True)
class Pair:
    """One paired observation: per-step times of the two sides, taken close together."""

    reference_ms: float
    test_ms: float
    process: int = 0  # which child process measured it (pooled pairs come from several)


@dataclass(frozen=True)
class PairedEstimate:
    speedup: float  # > 1: the test side is faster
    low: float
    high: float
    pairs: int
    confidence: float
    reference_ms: float  # geometric mean of the reference side's values (kept pairs)
    test_ms: float
    decision: Decision
    trimmed: int = 0  # pairs left out of the mean (TRIM at each end)

    @property
    def half_width_log(self) -> float:
        return (math.log(self.high) - math.log(self.low)) / 2.0

    @property
    def centre_log(self) -> float:
        return (math.log(self.high) + math.log(self.low)) / 2.0

    def describe(self) -> str:
        return (
            f"{self.speedup:.2f}x [{self.low:.2f}x, {self.high:.2f}x] "
            f"({self.reference_ms:.3g} -> {self.test_ms:.3g} ms, {self.pairs} pairs)"
        )


@functools.lru_cache(maxsize=1024)
def t_quantile(confidence: float, dof: int) -> float:
    """Two-sided Student-t quantile (the inverse by bisection on the regularized incomplete
    beta function): exact enough for intervals, and no scipy."""
    if dof <= 0:
        return math.inf
    tail = (1.0 - confidence) / 2.0

    def upper_tail(t: float) -> float:
        x = dof / (dof + t * t)
        return 0.5 * _betainc(dof / 2.0, 0.5, x)

    lo, hi = 0.0, 1.0
    while upper_tail(hi) > tail:
        hi *= 2.0
        if hi > 1e9:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if upper_tail(mid) > tail:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) by its continued fraction (Numerical Recipes)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-12:
            break
    return math.exp(log_front) * h / a


def estimate(
    pairs: Sequence[tuple[float, float]] | Sequence[Pair], confidence: float
) -> PairedEstimate | None:
    """Yuen's trimmed mean of the log ratios with its interval (None below MIN_PAIRS)."""
    values = [(p.reference_ms, p.test_ms) if isinstance(p, Pair) else p for p in pairs]
    values = [(r, t) for r, t in values if r > 0 and t > 0]
    if len(values) < MIN_PAIRS:
        return None
    ordered = sorted(values, key=lambda p: math.log(p[0] / p[1]))
    logs = [math.log(r / t) for r, t in ordered]
    n = len(logs)
    g = int(TRIM * n)
    kept = logs[g : n - g]
    mean = statistics.fmean(kept)
    # Winsorized variance: the trimmed values replaced by the nearest kept ones.
    winsorized = [kept[0]] * g + kept + [kept[-1]] * g
    sd_w = statistics.stdev(winsorized)
    h = n - 2 * g
    half = t_quantile(confidence, h - 1) * sd_w / ((1.0 - 2.0 * g / n) * math.sqrt(n))
    low, high = math.exp(mean - half), math.exp(mean + half)
    middle = ordered[g : n - g]
    ref_ms = math.exp(statistics.fmean(math.log(r) for r, _ in middle))
    test_ms = math.exp(statistics.fmean(math.log(t) for _, t in middle))
    decision: Decision
    if low > 1.0:
        decision = "faster"
    elif high < 1.0:
        decision = "slower"
    elif half < NARROW:
        decision = "no-gain"
    else:
        decision = "undecided"
    return PairedEstimate(
        speedup=math.exp(mean),
        low=low,
        high=high,
        pairs=n,
        trimmed=2 * g,
        confidence=confidence,
        reference_ms=ref_ms,
        test_ms=test_ms,
        decision=decision,
    )


# --------------------------------------------------------------------------- stopping


@dataclass(frozen=True)
class Looks:
    """The sequential test's looks for a comparison allowed at most `max_pairs` pairs:
    the counts of `schedule` from `first` on (`first` itself always one of them)."""

    max_pairs: int
    schedule: tuple[int, ...] = LOOK_SCHEDULE
    first: int | None = None

    @property
    def at(self) -> tuple[int, ...]:
        start = self.first if self.first is not None else self.schedule[0]
        counts = {start, *(n for n in self.schedule if n >= start)}
        return tuple(sorted(n for n in counts if n <= self.max_pairs))

    @property
    def first_look(self) -> int:
        """The pairs the first look waits for."""
        return self.first if self.first is not None else self.schedule[0]

    @property
    def confidence(self) -> float:
        """Each look's confidence: the scheduled looks and the last one share ALPHA."""
        return 1.0 - ALPHA / (len(self.at) + 1)

    def due(self, pairs: int) -> bool:
        return pairs in self.at


# Counted seconds per block (its counted steps x the baseline's median step) from which
# blocks are looked at like whole runs (RUN_LOOK_SCHEDULE from MIN_PAIRS): a re-run's value
# spans dozens of steps and seconds too.
LONG_BLOCK_S = 2.0


def block_looks(max_pairs: int, long_blocks: bool = False) -> Looks:
    """The looks of a comparison of blocks in one process: LOOK_SCHEDULE, or for blocks of
    LONG_BLOCK_S or more the whole runs' schedule from MIN_PAIRS."""
    if long_blocks:
        return Looks(max_pairs, RUN_LOOK_SCHEDULE, MIN_PAIRS)
    return Looks(max_pairs)


def long_blocks(step_s: float | None, statistic: str) -> bool:
    """Whether blocks sized for a median step of `step_s` (block_steps_for) last
    LONG_BLOCK_S or more of counted time."""
    if step_s is None or not step_s > 0 or not math.isfinite(step_s):
        return False
    return block_steps_for(step_s, statistic) * step_s >= LONG_BLOCK_S


def rerun_looks(repeat: int, max_rounds: int) -> Looks:
    """The looks of a comparison of whole runs: from --repeat rounds (at least MIN_PAIRS,
    the fewest an interval needs) up to the rounds allowed, --max-rounds or --repeat if more.
    Fewer rounds allowed than the first look needs (--max-rounds 1, to bound a test) leave
    no look: the rounds run, and the verdict says how many more would decide it."""
    return Looks(max(1, repeat, max_rounds), RUN_LOOK_SCHEDULE, max(MIN_PAIRS, repeat))


def run_pairs(
    reference: Sequence[Sequence[float]], test: Sequence[Sequence[float]], statistic: str
) -> list[Pair]:
    """One pair per round of whole runs: run k of each side (their timed steps), by the
    statistic (a run's median step, or its wall time over its steps). Runs without a
    usable step are left out, with their round."""
    pairs = []
    for k, (ref_steps, test_steps) in enumerate(zip(reference, test, strict=False)):
        ref, tst = window_value(ref_steps, statistic), window_value(test_steps, statistic)
        if ref is not None and tst is not None and ref > 0 and tst > 0:
            pairs.append(Pair(ref, tst, process=k))
    return pairs


def point_speedup(pairs: Sequence[Pair]) -> float | None:
    """The geometric mean of the pairs' ratios: the speedup to show where too few pairs
    were measured for an interval (no verdict rests on it)."""
    if not pairs:
        return None
    return math.exp(statistics.fmean(math.log(p.reference_ms / p.test_ms) for p in pairs))


def pairs_needed(est: PairedEstimate) -> int | None:
    """About how many pairs in all the interval would need to decide (to clear 1x, or to
    narrow within ±NARROW), the spread staying as it is; None: it is decided already."""
    if est.decision != "undecided":
        return None
    half = est.half_width_log
    distance = max(abs(est.centre_log), NARROW)
    # The half-width shrinks as 1/sqrt(n) (the t quantile barely moves past 10 pairs).
    return max(est.pairs + 1, math.ceil(est.pairs * (half / distance) ** 2))


@dataclass(frozen=True)
class Basis:
    """What one pair costs and where it was measured, for the undecided verdict's advice."""

    steps_per_pair: float | None = None  # script steps one more pair takes (both sides)
    load: str | None = None  # "at 1.5 other busy cores of 2"
    busy: bool = False  # other processes kept the machine busy
    first_look: int = LOOK_SCHEDULE[0]  # the pairs the first look waits for
    # Whole runs are the pairs (re-runs): more of them are more A/B rounds.
    rounds: bool = False


def what_would_decide(est: PairedEstimate | None, basis: Basis) -> str:
    """The undecided verdict's advice: more steps, or a quieter machine."""
    if est is None:
        first = basis.first_look
        if basis.rounds:
            return f"{first} A/B rounds, the first look (--repeat, --max-rounds)"
        steps = (
            f" (about {first * basis.steps_per_pair:.0f} more steps)"
            if basis.steps_per_pair
            else ""
        )
        return f"about {first} pairs, the first look{steps}"
    needed = pairs_needed(est)
    if needed is None:
        return "nothing more"
    more = needed - est.pairs
    if needed > MAX_PAIRS_FACTOR * est.pairs and basis.busy:
        return "a quieter machine: the load's noise hides any difference this size"
    if basis.rounds:
        return f"about {more} more A/B rounds (--max-rounds, --round-budget)"
    if basis.steps_per_pair:
        return f"about {more * basis.steps_per_pair:.0f} more steps ({more} more pairs)"
    return f"about {more} more pairs"


def verdict_words(
    est: PairedEstimate | None, basis: Basis, *, figures: str | None = None
) -> tuple[Verdict, str]:
    """The speed verdict and its one-line reason. `figures`: how the caller shows the
    estimate (est.describe() by default)."""
    at = f" at {basis.load}" if basis.load else ""
    if est is None:
        return (
            "undecided",
            f"undecided: fewer than {MIN_PAIRS} pairs were measured{at}; "
            f"would decide it: {what_would_decide(None, basis)}",
        )
    text = (figures or est.describe()) + at
    if est.decision == "faster":
        return "accepted", f"faster: {text}"
    if est.decision == "slower":
        return "rejected", f"slower: {text}"
    if est.decision == "no-gain":
        return "rejected", f"no gain beyond ±{math.expm1(NARROW):.0%}: {text}"
    return "undecided", f"undecided: {text}; would decide it: {what_would_decide(est, basis)}"


def _percentile(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

"""In-process A/B: the design, the paired statistic and the stopping rule.

One child run carries a reference arm (the script as it is) and one or more test arms (a fix,
or a stack of fixes, switched on). From the warm-up on, the child runs rounds; a round is one
block of steps of each arm still needed, in a random order drawn from a seeded generator. The
first `settle_steps` of every block do not count (the switch's first cost: a compile's first
calls, cuDNN's autotuning, the allocator's first allocations), and each arm's very first block
does not count at all (its first activation: a whole compile, say).

The statistic. For a comparison (reference arm R, test arm T) and a round r in which both
ran, d_r = log(median of R's counted steps / median of T's counted steps): a paired ratio of
block medians taken seconds apart, so load that drifts over minutes cancels, and a stall of
one step does not move a median. The speedup is exp(trimmed mean of the d_r): Yuen's 20%
trimmed mean, so the rounds a burst of load hit do not swing it; the two step times shown
beside it are the geometric means of the block medians over the same (kept) rounds, whose
ratio is that speedup exactly. The interval is Yuen's: Student's t with the winsorized
standard deviation.

Stopping (sequential). The interval is looked at only after the rounds of LOOK_SCHEDULE
that the design's `max_rounds` allows, plus one last look when the time budget ends the
comparison; every look is taken at confidence 1 - ALPHA / looks (Bonferroni), so the chance
of a false "faster" or "slower" over all looks stays within ALPHA. A comparison ends when:

    faster       the interval lies above 1x (and, to size the gain, is narrower than
                 ±PRECISE or REFINE_S of measurement have passed)
    slower       the interval lies below 1x (the same)
    no-gain      the interval straddles 1x but is narrower than ±NARROW (5%): a difference
                 too small to matter
    budget       the time budget is spent: undecided unless the last look decides

Pure: no torch. The child (collect/ab_switch.py) and the report use these same functions.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from perfdoctor.model import ABDesign, Arm, Comparison

__all__ = ["ABDesign", "Arm", "Comparison"]

# The error budget every look of one comparison shares (false faster + false slower).
ALPHA = 0.05
# An interval narrower than this on each side of its centre (log space) that straddles 1x
# says "no gain worth having": more rounds would only resolve differences too small to matter.
NARROW = math.log(1.05)
# Rounds after which the interval is looked at; a geometric schedule, so the looks that
# share the error budget are few (each is then barely stricter) and the first comes early
# enough for a large effect (anomaly detection: 2x) to be decided in a few seconds. The first
# look waits for 8 pairs: with looks after 3 and 5 pairs (2 degrees of freedom after the
# trim) a burst of load passed them in 1 of 40 A/A runs (benchmarks/README.md, "A/A").
LOOK_SCHEDULE: tuple[int, ...] = (9, 13, 19, 28, 40, 60, 90, 135, 200, 300)
# A decided comparison keeps measuring until its interval is this narrow on each side of its
# centre (log space, ~ +-10%) or REFINE_S of measurement have passed: a verdict should also
# say how much the fix buys, and a first decisive look (3 pairs) often spans 1.2x-2.6x.
PRECISE = math.log(1.10)
REFINE_S = 5.0
# Share of the rounds trimmed at each end of the sorted log ratios (Yuen's trimmed mean): a
# block that a load spike hit (a step 10x slower on a busy machine) moves a plain mean and
# its standard deviation; measured on tabular_mlp_debug under load, the log ratios spread
# from -1.3 to +2.3 around 0.6.
TRIM = 0.2
# Fewer pairs than this give no interval at all (t with 1 degree of freedom is useless).
MIN_PAIRS = 3

Decision = Literal["faster", "slower", "no-gain", "undecided"]


def looks(design: ABDesign) -> tuple[int, ...]:
    """The rounds after which the design's comparisons are looked at."""
    return tuple(n for n in LOOK_SCHEDULE if n <= design.max_rounds)


def look_confidence(design: ABDesign) -> float:
    """Confidence of each look: the scheduled looks and the last one share ALPHA."""
    return 1.0 - ALPHA / (len(looks(design)) + 1)


# A block is worth this much time at least, so the switch and the settling step are small
# next to it; and at most MAX/at least MIN counted steps.
BLOCK_TARGET_S = 0.4
MIN_BLOCK_STEPS = 3
MAX_BLOCK_STEPS = 10


def block_steps_for(step_s: float | None) -> int:
    """Counted steps per block, from the warm-up's median step time."""
    if step_s is None or step_s <= 0 or not math.isfinite(step_s):
        return 5
    wanted = math.ceil(BLOCK_TARGET_S / step_s)
    return max(MIN_BLOCK_STEPS, min(MAX_BLOCK_STEPS, wanted))


@dataclass(frozen=True)
class Block:
    """One block of one arm, as the child ran it (ab.json)."""

    round: int
    arm: int
    first_step: int
    step_ms: tuple[float, ...]  # every step of the block, settling ones first
    settle: int  # how many of step_ms do not count
    arm_warmup: bool = False  # the arm's first block: none of it counts

    @property
    def counted_ms(self) -> tuple[float, ...]:
        return () if self.arm_warmup else self.step_ms[self.settle :]


@dataclass(frozen=True)
class Quartiles:
    p25: float
    p50: float
    p75: float
    steps: int


@dataclass(frozen=True)
class PairedEstimate:
    speedup: float  # > 1: the test arm is faster
    low: float
    high: float
    pairs: int
    confidence: float
    reference_ms: float  # geometric mean of the reference arm's block medians (same rounds)
    test_ms: float
    decision: Decision
    trimmed: int = 0  # rounds left out of the mean (TRIM at each end)

    @property
    def half_width_log(self) -> float:
        return (math.log(self.high) - math.log(self.low)) / 2.0

    def describe(self) -> str:
        return (
            f"{self.speedup:.2f}x [{self.low:.2f}x, {self.high:.2f}x] "
            f"({self.reference_ms:.3g} -> {self.test_ms:.3g} ms, {self.pairs} pairs)"
        )


def _block_medians(blocks: Iterable[Block], arm: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for block in blocks:
        counted = block.counted_ms
        if block.arm == arm and counted:
            out[block.round] = statistics.median(counted)
    return out


def paired_medians(blocks: Sequence[Block], comparison: Comparison) -> list[tuple[float, float]]:
    """(reference median, test median) per round in which both arms counted steps."""
    ref = _block_medians(blocks, comparison.reference)
    test = _block_medians(blocks, comparison.test)
    return [(ref[r], test[r]) for r in sorted(ref) if r in test and ref[r] > 0 and test[r] > 0]


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


def estimate(pairs: Sequence[tuple[float, float]], confidence: float) -> PairedEstimate | None:
    """The paired estimate of the module docstring (None with fewer than MIN_PAIRS): Yuen's
    trimmed mean of the log ratios, with its interval (TRIM of the rounds at each end)."""
    if len(pairs) < MIN_PAIRS:
        return None
    ordered = sorted(pairs, key=lambda p: math.log(p[0] / p[1]))
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


def look(
    design: ABDesign, blocks: Sequence[Block], comparison: Comparison
) -> PairedEstimate | None:
    """The comparison's estimate at the design's per-look confidence."""
    return estimate(paired_medians(blocks, comparison), look_confidence(design))


def quartiles(blocks: Iterable[Block], arm: int) -> Quartiles | None:
    """p25/p50/p75 over every counted step of an arm (descriptive: not the verdict's pool)."""
    values = sorted(ms for b in blocks if b.arm == arm for ms in b.counted_ms)
    if not values:
        return None
    return Quartiles(
        p25=_percentile(values, 25.0),
        p50=_percentile(values, 50.0),
        p75=_percentile(values, 75.0),
        steps=len(values),
    )


def _percentile(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class ComparisonState:
    """Where one comparison stands in the child: open, or ended with its reason."""

    comparison: Comparison
    ended: str | None = None  # "faster" / "slower" / "no-gain" / "budget" / "script ended" ...
    estimate: PairedEstimate | None = None
    looks_taken: int = 0
    rounds: int = 0  # the rounds it had when it ended: its figures count these only


@dataclass
class StoppingState:
    """The sequential rule over all comparisons of one design (used by the child)."""

    design: ABDesign
    states: list[ComparisonState] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.states:
            self.states = [ComparisonState(c) for c in self.design.comparisons]

    @property
    def open(self) -> list[ComparisonState]:
        return [s for s in self.states if s.ended is None]

    def arms_needed(self) -> list[int]:
        """The arms the open comparisons still need, in arm order."""
        needed = {i for s in self.open for i in (s.comparison.reference, s.comparison.test)}
        return sorted(needed)

    def after_round(self, rounds: int, blocks: Sequence[Block], measure_s: float) -> None:
        """Take a look if the schedule has one after `rounds` rounds. Every interval is valid
        at every look (the looks share ALPHA), so a decided comparison may go on to narrow
        its interval, and its last look gives both its decision and its figures."""
        if rounds not in looks(self.design):
            return
        for state in self.open:
            result = look(self.design, blocks, state.comparison)
            state.looks_taken += 1
            state.estimate = result
            if result is None or result.decision == "undecided":
                continue
            sized = result.half_width_log <= PRECISE or measure_s >= REFINE_S
            if result.decision == "no-gain" or sized:
                state.ended = result.decision
                state.rounds = rounds

    def end(self, label: str, why: str, rounds: int) -> None:
        """End one comparison without a look (its fix was refused, cannot switch, ...)."""
        for state in self.open:
            if state.comparison.label == label:
                state.ended, state.rounds = why, rounds

    def close_all(self, rounds: int, blocks: Sequence[Block], why: str) -> None:
        """The last look (budget spent, rounds exhausted, script ended)."""
        for state in self.open:
            result = look(self.design, blocks, state.comparison)
            state.looks_taken += 1
            state.estimate = result
            state.ended = result.decision if result and result.decision != "undecided" else why
            state.rounds = rounds


def final_estimate(
    design: ABDesign, blocks: Sequence[Block], comparison: Comparison, rounds: int
) -> PairedEstimate | None:
    """A comparison's figures from the saved blocks: the rounds up to where the child ended
    it (its arms may have run on for other comparisons; those rounds are not its)."""
    mine = [b for b in blocks if b.round <= rounds] if rounds > 0 else list(blocks)
    return look(design, mine, comparison)


def arm_quartiles(blocks: Sequence[Block], arm: int, rounds: int) -> Quartiles | None:
    return quartiles((b for b in blocks if rounds <= 0 or b.round <= rounds), arm)


# --------------------------------------------------------------------------- ab.json


@dataclass(frozen=True)
class ComparisonEnd:
    label: str
    ended: str | None = None
    rounds: int = 0
    looks: int = 0


@dataclass(frozen=True)
class ABLog:
    """ab.json as the child wrote it (collect/ab_switch.py)."""

    design: ABDesign
    block_steps: int = 0
    rounds: int = 0
    measure_s: float = 0.0
    warmup_blocks_s: float = 0.0
    stop_reason: str | None = None
    comparisons: tuple[ComparisonEnd, ...] = ()
    blocks: tuple[Block, ...] = ()

    def end_of(self, label: str) -> ComparisonEnd | None:
        return next((c for c in self.comparisons if c.label == label), None)

    def comparison(self, label: str) -> Comparison | None:
        return next((c for c in self.design.comparisons if c.label == label), None)


def load_ab_log(run_dir: Path) -> ABLog | None:
    """The run's ab.json, None when it has none; a corrupt one raises CorruptArtifact."""
    from perfdoctor.errors import CorruptArtifact
    from perfdoctor.rundir import AB_FILE, read_json

    path = run_dir / AB_FILE
    if not path.is_file():
        return None
    try:
        return msgspec.convert(read_json(path), ABLog)
    except (ValueError, RecursionError, msgspec.ValidationError) as err:
        raise CorruptArtifact(f"{path}: {err}") from None

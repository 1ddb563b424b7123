"""In-process A/B: blocks of arms switched between steps, as a source of the engine's pairs.

One child run carries a reference arm (the script as it is) and one or more test arms (a fix,
or a stack of fixes, switched on). From the warm-up on, the child runs rounds; a round is one
block of steps of each arm still needed, in a random order drawn from a seeded generator. The
first `settle_steps` of every block do not count (the switch's first cost: a compile's first
calls, cuDNN's autotuning, the allocator's first allocations), and each arm's very first block
does not count at all (its first activation: a whole compile, say).

A comparison (reference arm R, test arm T) gets one pair per round in which both ran: the
per-step time of R's block and of T's, by the design's statistic (optimize/engine.py: the
block median, or the block's wall time over its steps where steps are bursty), taken seconds
apart so load that drifts over minutes cancels. The estimate, its interval, the looks and the
verdict words are the engine's.

Across processes. A script that ends before a comparison decides ("script ended") is started
again by the parent with the comparisons still open, and the new run's design names the
earlier runs (`ABDesign.prior_runs`): their pairs come first in the pool, so the looks count
pooled pairs and the error budget is the same one test's. A comparison decided at a look
ends where it is (after narrowing its interval to +-PRECISE or REFINE_S of measurement).

Pure: no torch. The child (collect/ab_switch.py) and the report use these same functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from perfdoctor.model import ABDesign, Arm, Comparison
from perfdoctor.optimize.engine import (
    ALPHA,
    LOOK_SCHEDULE,
    MAX_BLOCK_STEPS,
    MIN_BLOCK_STEPS,
    MIN_PAIRS,
    NARROW,
    PAIRED_MEDIANS,
    TRIM,
    Decision,
    Looks,
    Pair,
    PairedEstimate,
    block_looks,
    block_steps_for,
    estimate,
    t_quantile,
    window_value,
)

__all__ = [
    "ALPHA",
    "LOOK_SCHEDULE",
    "MAX_BLOCK_STEPS",
    "MIN_BLOCK_STEPS",
    "MIN_PAIRS",
    "NARROW",
    "TRIM",
    "ABDesign",
    "Arm",
    "Comparison",
    "Decision",
    "PairedEstimate",
    "block_steps_for",
    "estimate",
    "t_quantile",
]

# A decided comparison keeps measuring until its interval is this narrow on each side of its
# centre (log space, ~ +-10%) or REFINE_S of measurement have passed: a verdict should also
# say how much the fix buys, and a first decisive look often spans 1.2x-2.6x.
PRECISE = math.log(1.10)
REFINE_S = 5.0
# The budget is looked at after each round; a round whose blocks a loaded machine slows
# many times over can run far past it (one ran 168 s past a 60 s budget at a load of 25).
# Past this multiple of the budget the round ends at its current block: the pairs of the
# arms that ran in it count, the others' blocks of that round are not paired.
ROUND_OVERRUN_FACTOR = 1.25


def design_looks(design: ABDesign) -> Looks:
    """The design's looks: engine.block_looks, from 3 pairs for long blocks."""
    return block_looks(design.max_rounds, design.long_blocks)


def looks(design: ABDesign) -> tuple[int, ...]:
    """The pooled pair counts at which the design's comparisons are looked at."""
    return design_looks(design).at


def look_confidence(design: ABDesign) -> float:
    """Confidence of each look: the scheduled looks and the last one share ALPHA."""
    return design_looks(design).confidence


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


def _block_values(blocks: Iterable[Block], arm: int, statistic: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for block in blocks:
        if block.arm != arm:
            continue
        value = window_value(block.counted_ms, statistic)
        if value is not None:
            out[block.round] = value
    return out


def block_pairs(
    blocks: Sequence[Block], comparison: Comparison, statistic: str = PAIRED_MEDIANS
) -> list[tuple[float, float]]:
    """(reference, test) per-step time per round in which both arms counted steps."""
    ref = _block_values(blocks, comparison.reference, statistic)
    test = _block_values(blocks, comparison.test, statistic)
    return [(ref[r], test[r]) for r in sorted(ref) if r in test and ref[r] > 0 and test[r] > 0]


def paired_medians(blocks: Sequence[Block], comparison: Comparison) -> list[tuple[float, float]]:
    """(reference median, test median) per round in which both arms counted steps."""
    return block_pairs(blocks, comparison, PAIRED_MEDIANS)


def look(
    design: ABDesign,
    blocks: Sequence[Block],
    comparison: Comparison,
    prior: Sequence[Pair] = (),
) -> PairedEstimate | None:
    """The comparison's estimate at the design's per-look confidence, over the pairs of
    earlier processes (`prior`) and these blocks."""
    pairs = [*((p.reference_ms, p.test_ms) for p in prior)]
    pairs += block_pairs(blocks, comparison, design.statistic)
    return estimate(pairs, look_confidence(design))


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
    prior: tuple[Pair, ...] = ()  # pairs of earlier processes, pooled before this run's


# Why a comparison stopped without a decision because its process ended: the parent starts
# the script again and pools (or, out of budget, takes the last look itself).
SCRIPT_ENDED = "script ended"
# Why a comparison stopped when an accepted one was faster beyond both intervals.
OUTPERFORMED = "outperformed beyond both intervals by "


@dataclass
class StoppingState:
    """The sequential rule over all comparisons of one design (used by the child)."""

    design: ABDesign
    states: list[ComparisonState] = field(default_factory=list)
    prior: dict[str, tuple[Pair, ...]] = field(default_factory=dict)
    prior_measure_s: float = 0.0  # measurement time of the earlier processes

    def __post_init__(self) -> None:
        if not self.states:
            self.states = [
                ComparisonState(c, prior=self.prior.get(c.label, ()))
                for c in self.design.comparisons
            ]

    @property
    def open(self) -> list[ComparisonState]:
        return [s for s in self.states if s.ended is None]

    def arms_needed(self) -> list[int]:
        """The arms the open comparisons still need, in arm order."""
        needed = {i for s in self.open for i in (s.comparison.reference, s.comparison.test)}
        return sorted(needed)

    def pooled_pairs(self, state: ComparisonState, blocks: Sequence[Block]) -> int:
        return len(state.prior) + len(block_pairs(blocks, state.comparison, self.design.statistic))

    def after_round(self, rounds: int, blocks: Sequence[Block], measure_s: float) -> None:
        """Take a look at each comparison whose pooled pairs reached a scheduled count. Every
        interval is valid at every look (the looks share ALPHA), so a decided comparison may
        go on to narrow its interval, and its last look gives its decision and its figures."""
        due = design_looks(self.design)
        for state in self.open:
            if not due.due(self.pooled_pairs(state, blocks)):
                continue
            result = look(self.design, blocks, state.comparison, state.prior)
            state.looks_taken += 1
            state.estimate = result
            if result is None or result.decision == "undecided":
                continue
            spent = measure_s + self.prior_measure_s
            sized = result.half_width_log <= PRECISE or spent >= REFINE_S
            if result.decision == "no-gain" or sized:
                state.ended = result.decision
                state.rounds = rounds
        self._stop_outperformed(rounds)

    def _stop_outperformed(self, rounds: int) -> None:
        """An open comparison whose whole interval lies below an accepted one's (against the
        same reference) cannot be the fix to take: it stops, undecided, and leaves the
        budget (and the script's steps) to what can still change the answer."""
        winners = [s for s in self.states if s.ended == "faster" and s.estimate is not None]
        for state in self.open:
            est = state.estimate
            if est is None:
                continue
            for winner in winners:
                assert winner.estimate is not None
                same_reference = winner.comparison.reference == state.comparison.reference
                if same_reference and winner.estimate.low > est.high:
                    state.ended = f"{OUTPERFORMED}{winner.comparison.label}"
                    state.rounds = rounds
                    break

    def end(self, label: str, why: str, rounds: int) -> None:
        """End one comparison without a look (its fix was refused, cannot switch, ...)."""
        for state in self.open:
            if state.comparison.label == label:
                state.ended, state.rounds = why, rounds

    def close_all(self, rounds: int, blocks: Sequence[Block], why: str) -> None:
        """The last look (budget spent, rounds exhausted). When the script ended, no look is
        taken: the parent pools this run with the next one, or takes the last look itself."""
        for state in self.open:
            result = look(self.design, blocks, state.comparison, state.prior)
            state.estimate = result
            state.rounds = rounds
            if why == SCRIPT_ENDED:
                state.ended = why
                continue
            state.looks_taken += 1
            state.ended = result.decision if result and result.decision != "undecided" else why


def final_estimate(
    design: ABDesign,
    blocks: Sequence[Block],
    comparison: Comparison,
    rounds: int,
    prior: Sequence[Pair] = (),
) -> PairedEstimate | None:
    """A comparison's figures from the saved blocks: the rounds up to where the child ended
    it (its arms may have run on for other comparisons; those rounds are not its)."""
    return look(design, own_blocks(blocks, rounds), comparison, prior)


def own_blocks(blocks: Sequence[Block], rounds: int) -> list[Block]:
    return [b for b in blocks if b.round <= rounds] if rounds > 0 else list(blocks)


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


# --------------------------------------------------------------------------- pooling


@dataclass(frozen=True)
class Pooled:
    """One comparison over every A/B process that measured it, in run order."""

    label: str
    pairs: tuple[Pair, ...]
    processes: int  # A/B child runs that measured it
    measure_s: float  # counted blocks' time over those runs
    ended: str | None  # how the last run ended it
    design: ABDesign  # the last run's design (its looks, its statistic)
    steps_per_pair: float | None  # script steps one pair took in the last run (all arms)
    reference_quartiles: Quartiles | None = None
    test_quartiles: Quartiles | None = None


def pool(logs: Sequence[ABLog], label: str) -> Pooled | None:
    """The comparison `label` over the A/B logs of one chain of processes (first run first).
    Each run's pairs are its blocks' up to where it ended the comparison."""
    pairs: list[Pair] = []
    ref_steps: list[float] = []
    test_steps: list[float] = []
    processes, measure_s, ended = 0, 0.0, None
    last: ABLog | None = None
    for index, log in enumerate(logs):
        comparison = log.comparison(label)
        if comparison is None:
            continue
        end = log.end_of(label)
        rounds = end.rounds if end is not None else 0
        mine = own_blocks(log.blocks, rounds)
        pairs += [
            Pair(r, t, process=index)
            for r, t in block_pairs(mine, comparison, log.design.statistic)
        ]
        ref_steps += [ms for b in mine if b.arm == comparison.reference for ms in b.counted_ms]
        test_steps += [ms for b in mine if b.arm == comparison.test for ms in b.counted_ms]
        processes += 1
        measure_s += log.measure_s
        ended = end.ended if end is not None else log.stop_reason
        last = log
    if last is None:
        return None
    arms = len(last.design.arms)
    block = (last.block_steps or 0) + last.design.settle_steps
    return Pooled(
        label=label,
        pairs=tuple(pairs),
        processes=processes,
        measure_s=round(measure_s, 3),
        ended=ended,
        design=last.design,
        steps_per_pair=float(arms * block) if block else None,
        reference_quartiles=_steps_quartiles(ref_steps),
        test_quartiles=_steps_quartiles(test_steps),
    )


def pooled_estimate(pooled: Pooled) -> PairedEstimate | None:
    """The pooled comparison's estimate at the per-look confidence (the last look when no
    scheduled look ended it)."""
    return estimate(list(pooled.pairs), look_confidence(pooled.design))


def prior_pairs(logs: Sequence[ABLog]) -> dict[str, tuple[Pair, ...]]:
    """What a continuation run starts from: each comparison's pooled pairs so far."""
    labels = {c.label for log in logs for c in log.design.comparisons}
    out: dict[str, tuple[Pair, ...]] = {}
    for label in labels:
        pooled = pool(logs, label)
        if pooled is not None:
            out[label] = pooled.pairs
    return out


def _steps_quartiles(values: Sequence[float]) -> Quartiles | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return Quartiles(
        p25=_percentile(ordered, 25.0),
        p50=_percentile(ordered, 50.0),
        p75=_percentile(ordered, 75.0),
        steps=len(ordered),
    )

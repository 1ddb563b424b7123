"""More A/B rounds for a variant whose verdict is not decided yet (sequential testing).

After the planned `--repeat` rounds, a speed variant judged "within noise" with a wide band
neither helps nor hurts as far as we know: its band straddles 1x and is wider than a gain
worth having. Such a variant gets one more alternating round (a baseline run and a variant
run) at a time, and the verdict is taken again after each, until one of:

    decided      the band lies wholly above 1x (accepted) or below it (slower)
    narrow       the band straddles 1x but is narrower than ±NARROW_LOG_WIDTH: any
                 difference is too small to matter, "within noise" is the answer
    max rounds   the variant has had --max-rounds rounds
    time budget  one more round (its duration guessed from the last one) would overrun the
                 budget for the extra rounds

The band of an extended variant is run-level: with n >= 3 pairs, the half-width (log space)
is the larger of the within-run bootstrap half-width and t(n-1) x sd(pair log ratios)/sqrt(n),
the Student-t interval of the mean pair log ratio, which shrinks as rounds are added (the
planned rounds' band adds the half-range of the baseline run medians instead, which only
grows with more runs). Looking again after every round would inflate the chance of a false
decision; the extra looks therefore share one 5% error budget (Bonferroni): each is taken at
confidence 1 - 0.05/m, m the most extra looks --max-rounds allows. The first look, at the
end of the planned rounds, keeps its 95% band, so sessions that decide there are unchanged.

Pure: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfdoctor.model import VariantResult
from perfdoctor.optimize.verdicts import WITHIN_NOISE

# A band that straddles 1x yet is narrower than this (log space, ~ +-5%) is a decided
# "no gain worth having": more rounds would only resolve differences too small to matter.
NARROW_LOG_WIDTH = math.log(1.05)
# Default time budget of the extra rounds, as a multiple of what the planned rounds took:
# an undecided variant can at most triple the A/B phase (the first extra look, on 3 pairs,
# rarely decides: t(2) is wide, so a budget of one extra round would be wasted).
DEFAULT_BUDGET_FACTOR = 2.0
# The error budget all the extra looks share.
EXTRA_LOOKS_ALPHA = 0.05


@dataclass(frozen=True)
class RoundsPolicy:
    """How far a session may extend an undecided variant."""

    planned_rounds: int  # --repeat
    max_rounds: int  # --max-rounds; <= planned_rounds turns extension off
    budget_s: float | None  # seconds the extra rounds may take in all; None: no limit

    @property
    def max_extra_looks(self) -> int:
        return max(0, self.max_rounds - self.planned_rounds)


def extended_confidence(max_extra_looks: int) -> float:
    """Confidence of each extra look, so that all of them together stay within the budget."""
    return 1.0 - EXTRA_LOOKS_ALPHA / max(1, max_extra_looks)


def band_log_width(result: VariantResult) -> float | None:
    """The band's half-width in log space, from the speedup and its distance to the low end."""
    if result.speedup is None or result.speedup_noise is None or result.speedup <= 0:
        return None
    low = result.speedup - result.speedup_noise
    if low <= 0:
        return math.inf
    return math.log(result.speedup) - math.log(low)


def undecided(result: VariantResult) -> bool:
    """A speed verdict of "within noise" whose band is too wide to call it no gain."""
    if result.verdict not in ("rejected", "undecided") or not result.reason.startswith(
        WITHIN_NOISE
    ):
        return False
    width = band_log_width(result)
    return width is not None and width > NARROW_LOG_WIDTH


def stop_reason(
    result: VariantResult,
    *,
    rounds: int,
    policy: RoundsPolicy,
    spent_s: float,
    next_round_s: float,
) -> str | None:
    """Why no further round is run for this variant (None: run another one).

    `rounds`: the rounds the variant has had; `spent_s`: seconds the extra rounds took so
    far; `next_round_s`: what one more round is expected to take (the last one's duration).
    """
    if result.verdict not in ("rejected", "undecided") or not result.reason.startswith(
        WITHIN_NOISE
    ):
        return f"decided after {rounds} rounds"
    if not undecided(result):
        return (
            f"band narrower than ±{math.exp(NARROW_LOG_WIDTH) - 1:.0%} after {rounds} rounds: "
            "any difference is too small to matter"
        )
    if rounds >= policy.max_rounds:
        return f"still undecided after {rounds} rounds: --max-rounds {policy.max_rounds} reached"
    if policy.budget_s is not None and spent_s + next_round_s > policy.budget_s:
        return (
            f"still undecided after {rounds} rounds: another round (~{next_round_s:.0f}s) "
            f"would overrun the {policy.budget_s:.0f}s budget for extra rounds (--round-budget)"
        )
    return None

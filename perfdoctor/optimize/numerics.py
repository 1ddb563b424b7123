"""The numerics guard: does a variant's loss trajectory stay with the baseline's?

Baseline and variant run with the same seed, so their per-step losses are directly
comparable. A variant is rejected when its loss is NaN/inf where the baseline's is finite, or
when it drifts beyond a tolerance. Drift is measured two ways, because each misses something:

* the EMA of the per-step signed relative difference catches a systematic departure anywhere
  in the run while letting step-to-step noise of opposite signs cancel;
* the relative difference of the final-window means catches where training ends up.

The tolerance is the larger of the optimization's category (catalog.TOLERANCES) and a multiple
of the baseline's own run-to-run spread, so a script that is not reproducible run to run
(non-deterministic kernels, unseeded augmentation) does not fail every variant. Both
`perfdoctor profile` (verdicts.py) and `perfdoctor compare` (compare_runs.py) derive it here,
from the category of what changed between the two sides, and word it with describe_tolerance.

Pure: no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TypeGuard

from perfdoctor.model import LossTolerance

LossSeries = Sequence[float | None]

# EMA weight of the newest step: about a 5-step memory, short enough for 20-step plans.
EMA_ALPHA = 0.2
# Final window: the last fifth of the compared steps, at least this many.
MIN_FINAL_WINDOW = 3
# A variant may differ from the baseline by this many times the baseline's own spread.
SPREAD_FACTOR = 2.0
# Relative differences are taken against max(|baseline|, this share of the largest baseline
# loss), so a loss that approaches 0 does not turn tiny absolute differences into huge ratios.
SCALE_FLOOR_FRAC = 1e-3


@dataclass(frozen=True)
class Drift:
    """How far one loss series departs from a reference series."""

    max_ema: float  # largest |EMA of the signed relative difference|
    max_ema_step: int | None  # step index where it peaked
    final: float  # signed relative difference of the final-window means
    compared_steps: int

    @property
    def worst(self) -> float:
        return max(self.max_ema, abs(self.final))


@dataclass(frozen=True)
class NumericsCheck:
    ok: bool
    checked: bool  # False when no comparable losses were captured
    reason: str  # one line; "" when ok and checked
    tolerance: float
    derived: LossTolerance | None = None  # how `tolerance` was derived
    loss_delta: float | None = None  # signed final-window relative difference
    max_drift: float | None = None
    drift_step: int | None = None
    non_finite_step: int | None = None


def is_finite(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value)


def first_non_finite(variant: LossSeries, baseline: LossSeries = ()) -> int | None:
    """First step where the variant's loss is NaN/inf and the baseline's is not."""
    for index, value in enumerate(variant):
        if value is None or math.isfinite(value):
            continue
        base = baseline[index] if index < len(baseline) else None
        if base is None or math.isfinite(base):
            return index
    return None


def reference_trajectory(runs: Sequence[LossSeries]) -> list[float | None]:
    """Per-step median of the finite losses of several runs (None where none is finite)."""
    length = max((len(r) for r in runs), default=0)
    reference: list[float | None] = []
    for index in range(length):
        values = [value for r in runs if index < len(r) and is_finite(value := r[index])]
        reference.append(statistics.median(values) if values else None)
    return reference


def drift(series: LossSeries, reference: LossSeries) -> Drift | None:
    """Drift of `series` from `reference` over the steps where both are finite."""
    pairs = [
        (index, value, base)
        for index, (value, base) in enumerate(zip(series, reference, strict=False))
        if is_finite(value) and is_finite(base)
    ]
    if not pairs:
        return None
    floor = SCALE_FLOOR_FRAC * max(abs(b) for _, _, b in pairs) or 1e-12
    ema: float | None = None
    max_ema, max_step = 0.0, None
    for index, value, base in pairs:
        rel = (value - base) / max(abs(base), floor)
        ema = rel if ema is None else EMA_ALPHA * rel + (1.0 - EMA_ALPHA) * ema
        if abs(ema) > max_ema:
            max_ema, max_step = abs(ema), index
    window = max(MIN_FINAL_WINDOW, len(pairs) // 5)
    tail = pairs[-window:]
    mean_value = statistics.fmean(v for _, v, _ in tail)
    mean_base = statistics.fmean(b for _, _, b in tail)
    final = (mean_value - mean_base) / max(abs(mean_base), floor)
    return Drift(max_ema=max_ema, max_ema_step=max_step, final=final, compared_steps=len(pairs))


def baseline_spread(runs: Sequence[LossSeries]) -> float:
    """Largest drift between any two baseline runs (0 with fewer than two runs)."""
    worst = 0.0
    for a, b in combinations(runs, 2):
        measured = drift(a, b)
        if measured is not None:
            worst = max(worst, measured.worst)
    return worst


def derive_tolerance(category_tolerance: float, baseline_runs: Sequence[LossSeries]) -> float:
    return max(category_tolerance, SPREAD_FACTOR * baseline_spread(baseline_runs))


def loss_tolerance(
    category: str, category_value: float, baseline_runs: Sequence[LossSeries]
) -> LossTolerance:
    """derive_tolerance, with what it was derived from (for the reports to state)."""
    spread = baseline_spread(baseline_runs)
    return LossTolerance(
        value=max(category_value, SPREAD_FACTOR * spread),
        category=category,
        category_value=category_value,
        spread_factor=SPREAD_FACTOR,
        baseline_spread=spread,
        baseline_runs=len(baseline_runs),
    )


def describe_tolerance(tolerance: LossTolerance) -> str:
    """The same words in `profile` and `compare`: the value, and the category and the spread
    (with its factor) it is the larger of, e.g. "tolerance 1.0e-04 = max(exact category
    1.0e-04, 2 x the baseline's run-to-run loss spread 3.0e-06 over 3 runs)"."""
    category = (
        f"given {tolerance.category_value:.1e}"
        if tolerance.category == "given"
        else f"{tolerance.category} category {tolerance.category_value:.1e}"
    )
    factor = f"{tolerance.spread_factor:g} x the baseline's run-to-run loss spread"
    if tolerance.baseline_runs < 2:
        runs = f"{tolerance.baseline_runs} baseline run" + (
            "" if tolerance.baseline_runs == 1 else "s"
        )
        spread = f"{factor}: not measured, {runs}"
    else:
        spread = f"{factor} {tolerance.baseline_spread:.1e} over {tolerance.baseline_runs} runs"
    return f"tolerance {tolerance.value:.1e} = max({category}, {spread})"


def check_losses(
    baseline_runs: Sequence[LossSeries],
    variant_runs: Sequence[LossSeries],
    category_tolerance: float,
    category: str | None = None,
) -> NumericsCheck:
    """Judge every variant run against the per-step median of the baseline runs.
    `category`: the catalog category `category_tolerance` is (named by its value when not
    given, else "given")."""
    derived = loss_tolerance(
        category or _category_name(category_tolerance), category_tolerance, baseline_runs
    )
    tolerance = derived.value
    said = describe_tolerance(derived)
    reference = reference_trajectory(baseline_runs)
    for series in variant_runs:
        bad = first_non_finite(series, reference)
        if bad is not None:
            return NumericsCheck(
                ok=False,
                checked=True,
                reason=f"loss is {_describe(series[bad])} at step {bad} (baseline finite)",
                tolerance=tolerance,
                derived=derived,
                non_finite_step=bad,
            )

    measured = [d for d in (drift(s, reference) for s in variant_runs) if d is not None]
    if not measured:
        return NumericsCheck(
            ok=True,
            checked=False,
            reason="loss not captured: numerics not checked",
            tolerance=tolerance,
            derived=derived,
        )
    worst = max(measured, key=lambda d: d.worst)
    if worst.max_ema > tolerance:
        return NumericsCheck(
            ok=False,
            checked=True,
            reason=(
                f"loss drifts {worst.max_ema:.1e} from the baseline at step {worst.max_ema_step} "
                f"({said})"
            ),
            tolerance=tolerance,
            derived=derived,
            loss_delta=worst.final,
            max_drift=worst.max_ema,
            drift_step=worst.max_ema_step,
        )
    if abs(worst.final) > tolerance:
        return NumericsCheck(
            ok=False,
            checked=True,
            reason=(f"final loss differs {worst.final:+.1e} from the baseline ({said})"),
            tolerance=tolerance,
            derived=derived,
            loss_delta=worst.final,
            max_drift=worst.max_ema,
            drift_step=worst.max_ema_step,
        )
    return NumericsCheck(
        ok=True,
        checked=True,
        reason="",
        tolerance=tolerance,
        derived=derived,
        loss_delta=worst.final,
        max_drift=worst.max_ema,
        drift_step=worst.max_ema_step,
    )


def _category_name(value: float) -> str:
    from perfdoctor.optimize.catalog import TOLERANCES

    return next((name for name, v in TOLERANCES.items() if v == value), "given")


def _describe(value: float | None) -> str:
    if value is None:
        return "missing"
    return "NaN" if math.isnan(value) else ("+inf" if value > 0 else "-inf")

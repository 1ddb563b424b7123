"""A/B verdicts: is a variant faster beyond the noise, and are its numbers sane?

Verdicts, first match wins, each with a one-line reason:
    failed     a variant run crashed, OOMed, timed out, or recorded no timed step
    rejected   an applier refused or its check failed ("not applied: ...")
    rejected   NaN/inf loss, or the loss trajectory drifts beyond tolerance (numerics.py)
    accepted   speed goal: speedup - noise > 1 (estimate.py);  memory goal: peak memory
               down >= 5%
    rejected   "slower: 0.91x ± 0.03", or "within noise: 1.02x ± 0.04" with a band within
               ±5% (no gain worth having)
    undecided  "within noise: 1.10x ± 0.30": a band that straddles 1x wider than ±5%

`perfdoctor profile`'s re-runs are judged by the measurement engine (`looks` given,
optimize/engine.py): one pair per round of whole runs, Yuen's trimmed mean of their log
ratios and its interval at the looks' confidence, the engine's verdict words (accepted above
1x, rejected below it or within ±5%, undecided with what would decide it). The pipeline adds
rounds while a variant is undecided, looking at the engine's schedule for whole runs, within
--max-rounds and --round-budget. Without `looks` (`perfdoctor compare`, the CI gate, the batch
plan: two recordings not made to be paired round by round) the bootstrap band of estimate.py
decides.

Every figure a verdict reports is analyze/run_stats.py's, for the baseline and the variant
alike. Pure: no torch.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import replace

from perfdoctor.analyze.run_stats import (
    OK_STATUSES,
    RunSample,
    pool_figures,
    pooled_peak_memory,
    usable,
)
from perfdoctor.model import VariantResult, Verdict
from perfdoctor.optimize import numerics
from perfdoctor.optimize.catalog import CATALOG, tolerance_category_for, tolerance_for
from perfdoctor.optimize.engine import (
    NARROW,
    PAIRED_MEDIANS,
    Basis,
    Looks,
    PairedEstimate,
    estimate,
    point_speedup,
    run_pairs,
    verdict_words,
)
from perfdoctor.optimize.estimate import (
    BOOTSTRAP_SEED,
    SpeedEstimate,
    estimate_speedup,
    paired_runs,
)
from perfdoctor.rules.measurement import busy_limit
from perfdoctor.units import format_bytes

log = logging.getLogger(__name__)

# A memory optimization must cut the peak by at least this share to be worth its cost.
MIN_MEMORY_SAVING_FRAC = 0.05
# How speed_verdict begins an undecided verdict (`undecided` reads it).
WITHIN_NOISE = "within noise"
# What the reason of an undecided engine verdict says would decide it, after this.
WOULD_DECIDE = "would decide it: "


def not_applied_reason(
    variant_runs: Sequence[RunSample], optimization_ids: Sequence[str]
) -> str | None:
    """Why an optimization did not demonstrably take effect in some run (None: all did)."""
    for run in usable(variant_runs):
        by_id = {a.id: a for a in run.applied}
        for opt_id in optimization_ids:
            result = by_id.get(opt_id)
            if result is None:
                return f"{opt_id}: the child reported no applier result"
            if not result.applied:
                return f"{opt_id}: {result.detail}"
            if not result.verified:
                return f"{opt_id}: check failed: {result.detail}"
    return None


def _goal(optimization_ids: Sequence[str]) -> str:
    goals = {CATALOG[i].goal for i in optimization_ids if i in CATALOG}
    # A stack that contains any speed optimization is judged on speed.
    return "memory" if goals == {"memory"} else "speed"


def memory_verdict(
    baseline_runs: Sequence[RunSample],
    variant_runs: Sequence[RunSample],
    speed: SpeedEstimate | PairedEstimate | None,
) -> tuple[Verdict, str]:
    """Accepted when the peak (reserved where both sides measured it) drops enough."""
    use_reserved = (
        pooled_peak_memory(baseline_runs, True) is not None
        and pooled_peak_memory(variant_runs, True) is not None
    )
    base = pooled_peak_memory(baseline_runs, use_reserved)
    var = pooled_peak_memory(variant_runs, use_reserved)
    what = "reserved" if use_reserved else "peak"
    speed_note = f"; speed {speed.describe()}" if speed else ""
    if not base or var is None:
        return "rejected", f"memory optimization, but peak memory was not measured{speed_note}"
    saved = 1.0 - var / base
    change = f"{what} memory {format_bytes(base)} -> {format_bytes(var)} ({-saved:+.0%})"
    if saved >= MIN_MEMORY_SAVING_FRAC:
        return "accepted", f"{change}{speed_note}"
    return "rejected", f"{change}: less than {MIN_MEMORY_SAVING_FRAC:.0%} saved{speed_note}"


def speed_verdict(speed: SpeedEstimate | None, extra: str) -> tuple[Verdict, str]:
    """accepted above 1x, rejected below it or within ±5% (no gain worth having), else
    undecided: "rejected" never stands for "could not tell" (optimize/engine.py)."""
    if speed is None:
        return "undecided", "undecided: no paired timing to compare"
    if speed.low > 1.0:
        return "accepted", f"faster: {speed.describe()}{extra}"
    if speed.high < 1.0:
        return "rejected", f"slower: {speed.describe()}{extra}"
    if speed.low > 0 and math.log(speed.speedup / speed.low) <= NARROW:
        return "rejected", f"{WITHIN_NOISE}: {speed.describe()}{extra}"
    return "undecided", f"{WITHIN_NOISE}: {speed.describe()}{extra}"


def compare_variant(
    baseline_runs: Sequence[RunSample],
    variant_runs: Sequence[RunSample],
    optimization_ids: Sequence[str],
    tolerance: float | None = None,
    *,
    label: str | None = None,
    seed: int = BOOTSTRAP_SEED,
    looks: Looks | None = None,
    rounds_note: str | None = None,
    statistic: str | None = None,
    statistic_why: str | None = None,
) -> VariantResult:
    """Verdict for one variant. `tolerance` overrides the catalog's loss tolerance category
    (the loosest of `optimization_ids`); the baseline's run-to-run spread can still widen it.
    Pass the runs in run order: baseline run k is paired with variant run k.
    `looks`: the engine's looks of `perfdoctor profile`'s rounds (engine.rerun_looks): the
    speed is judged by the engine over the round pairs; without it, by estimate.py's
    bootstrap band. `rounds_note` says why the rounds stopped, appended to a speed
    verdict's reason."""
    ids = tuple(optimization_ids)
    name = label or (variant_runs[0].label if variant_runs else "+".join(ids))
    category_tolerance = tolerance if tolerance is not None else tolerance_for(ids)
    category = "given" if tolerance is not None else tolerance_category_for(ids)
    ok_runs = usable(variant_runs)
    applied = next((r.applied for r in variant_runs if r.applied), ())
    figures, base = pool_figures(variant_runs), pool_figures(baseline_runs)
    # What every outcome reports; each return below fills in the verdict and its evidence.
    result = VariantResult(
        label=name,
        optimizations=ids,
        step_ms_p50=None,  # the paired medians, once there are pairs (below)
        step_ms_p90=figures.step_ms_p90,
        speedup=None,
        speedup_noise=None,
        peak_memory_bytes=figures.peak_memory_bytes,
        loss_delta=None,
        verdict="failed",
        reason="",
        throughput_samples_s=figures.throughput_samples_s,
        energy_j_per_step=figures.energy_j_per_step,
        applied=applied,
        run_dirs=tuple(r.run_dir for r in variant_runs),
        pooled=f"{figures.pooled}; baseline {base.pooled}" if figures.steps and base.steps else "",
        pooled_step_ms_p50=figures.step_ms_p50,
        statistic=statistic or PAIRED_MEDIANS,
        statistic_why=statistic_why,
        load_busy_cores=_mean_load([*baseline_runs, *variant_runs]),
        load_cores=next((r.cpu_cores for r in variant_runs if r.cpu_cores), None),
    )

    broken = next((r for r in variant_runs if not r.usable), None)
    if not variant_runs or broken is not None:
        reason = broken.failure_line() if broken else "the variant never ran"
        return replace(result, reason=reason)

    if looks is not None:
        return _judged_by_engine(
            result, baseline_runs, ok_runs, ids, category_tolerance, category, looks, rounds_note
        )
    speed = estimate_speedup(
        baseline_runs,
        ok_runs,
        seed=seed,
        between_rounds=True,
        statistic=statistic or PAIRED_MEDIANS,
    )
    result = replace(
        result,
        speedup=speed.speedup if speed else None,
        speedup_noise=speed.noise if speed else None,
        # The two step times the speedup is the ratio of (estimate.py's paired medians).
        step_ms_p50=speed.variant_ms if speed else None,
        baseline_step_ms_p50=speed.baseline_ms if speed else None,
        paired_runs=speed.pairs if speed else 0,
    )
    missing = not_applied_reason(ok_runs, ids)
    if missing is not None:
        return replace(result, verdict="rejected", reason=f"not applied: {missing}")

    guard = numerics.check_losses(
        [r.losses for r in baseline_runs if r.status in OK_STATUSES and r.losses],
        [r.losses for r in ok_runs if r.losses],
        category_tolerance,
        category,
    )
    result = replace(result, loss_tolerance=guard.derived)
    if not guard.ok:
        return replace(result, loss_delta=guard.loss_delta, verdict="rejected", reason=guard.reason)

    extra = "" if guard.checked else f" ({guard.reason})"
    verdict: Verdict
    if _goal(ids) == "memory":
        verdict, reason = memory_verdict(baseline_runs, ok_runs, speed)
        reason += extra
    else:
        verdict, reason = speed_verdict(speed, extra)
        if rounds_note:
            reason += f"; {rounds_note}"
    # Step times move with other load; a memory verdict does not.
    low_confidence = (
        None if _goal(ids) == "memory" else busy_machine_note([*baseline_runs, *ok_runs])
    )
    if low_confidence:
        reason += f"; low confidence: {low_confidence}"
    load_bound = bool(
        verdict == "accepted" and low_confidence and _gives_cores_back(ok_runs[0].applied)
    )
    if load_bound:
        reason += (
            "; load-bound: it wins by leaving contended cores to the other processes, and "
            "may not hold on a quiet machine"
        )
    log.debug("variant %s: %s (%s)", name, verdict, reason)
    return replace(
        result,
        loss_delta=guard.loss_delta,
        verdict=verdict,
        reason=reason,
        low_confidence=low_confidence,
        load_bound=load_bound,
    )


def _judged_by_engine(
    result: VariantResult,
    baseline_runs: Sequence[RunSample],
    ok_runs: Sequence[RunSample],
    ids: tuple[str, ...],
    category_tolerance: float,
    category: str,
    looks: Looks,
    rounds_note: str | None,
) -> VariantResult:
    """A re-runs verdict of `perfdoctor profile`: one pair per round (baseline run k, variant
    run k), judged by the measurement engine at the looks' confidence (optimize/engine.py)."""
    from perfdoctor.optimize.inprocess_verdict import is_busy, load_phrase, measured_load

    statistic = result.statistic or PAIRED_MEDIANS
    rounds = paired_runs(baseline_runs, ok_runs)
    pairs = run_pairs([b.step_ms for b, _ in rounds], [v.step_ms for _, v in rounds], statistic)
    est = estimate(pairs, looks.confidence)
    point = est.speedup if est else point_speedup(pairs)
    ref_ms = est.reference_ms if est else _geomean([p.reference_ms for p in pairs])
    test_ms = est.test_ms if est else _geomean([p.test_ms for p in pairs])
    busy, cores = measured_load([*baseline_runs, *ok_runs])
    result = replace(
        result,
        speedup=point,
        speedup_noise=(est.speedup - est.low) if est else None,
        # The two step times the speedup is the ratio of (the kept pairs' geometric means).
        step_ms_p50=test_ms,
        baseline_step_ms_p50=ref_ms,
        paired_runs=len(pairs),
        interval=(est.low, est.high) if est else None,
        confidence=est.confidence if est else None,
        pairs=len(pairs),
    )
    missing = not_applied_reason(ok_runs, ids)
    if missing is not None:
        return replace(result, verdict="rejected", reason=f"not applied: {missing}")
    guard = numerics.check_losses(
        [r.losses for r in baseline_runs if r.status in OK_STATUSES and r.losses],
        [r.losses for r in ok_runs if r.losses],
        category_tolerance,
        category,
    )
    result = replace(result, loss_tolerance=guard.derived, loss_delta=guard.loss_delta)
    if not guard.ok:
        return replace(result, verdict="rejected", reason=guard.reason)
    extra = "" if guard.checked else f" ({guard.reason})"
    if _goal(ids) == "memory":
        verdict, reason = memory_verdict(baseline_runs, ok_runs, est)
        return replace(result, verdict=verdict, reason=reason + extra)
    basis = Basis(
        load=load_phrase(busy, cores),
        busy=is_busy(busy, cores),
        first_look=looks.first_look,
        rounds=True,
    )
    figures = None
    if est is not None:
        figures = (
            f"{est.speedup:.2f}x [{est.low:.2f}x, {est.high:.2f}x] "
            f"({est.reference_ms:.3g} -> {est.test_ms:.3g} ms, {est.pairs} rounds of re-runs)"
        )
    verdict, reason = verdict_words(est, basis, figures=figures)
    would = reason.split(WOULD_DECIDE, 1)[1] if verdict == "undecided" else None
    reason += extra
    if rounds_note:
        reason += f" ({rounds_note})"
    # Pairs of whole runs are minutes apart at most, not seconds: load that came and went
    # between them is not shared, so a busy machine still lowers the confidence.
    low_confidence = busy_machine_note([*baseline_runs, *ok_runs])
    if low_confidence:
        reason += f"; low confidence: {low_confidence}"
    load_bound = bool(
        verdict == "accepted" and low_confidence and _gives_cores_back(ok_runs[0].applied)
    )
    if load_bound:
        reason += (
            "; load-bound: it wins by leaving contended cores to the other processes, and "
            "may not hold on a quiet machine"
        )
    return replace(
        result,
        verdict=verdict,
        reason=reason,
        would_decide=would,
        low_confidence=low_confidence,
        load_bound=load_bound,
    )


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def undecided(result: VariantResult) -> bool:
    """A speed verdict that could not tell: the engine's "undecided", or a bootstrap band
    "within noise" that straddles 1x wider than ±5% (`perfdoctor compare`)."""
    if result.verdict == "undecided":
        return True
    if result.verdict != "rejected" or not result.reason.startswith(WITHIN_NOISE):
        return False
    if result.speedup is None or result.speedup_noise is None or result.speedup <= 0:
        return False
    low = result.speedup - result.speedup_noise
    return low <= 0 or math.log(result.speedup / low) > NARROW


def _gives_cores_back(applied: Sequence[object]) -> bool:
    from perfdoctor.optimize.inprocess_verdict import gives_cores_back

    return gives_cores_back(applied)  # type: ignore[arg-type]


def _mean_load(runs: Sequence[RunSample]) -> float | None:
    loads = [r.other_busy_cores for r in runs if r.other_busy_cores is not None]
    return round(statistics.fmean(loads), 2) if loads else None


def busy_machine_note(runs: Sequence[RunSample]) -> str | None:
    """Why the timings of these runs are suspect, when other processes kept the machine
    busy during any of them (rules/measurement.py holds the limit), else None."""
    worst = max(
        (r for r in runs if r.other_busy_cores is not None),
        key=lambda r: r.other_busy_cores or 0.0,
        default=None,
    )
    if worst is None or worst.other_busy_cores is None:
        return None
    if worst.other_busy_cores < busy_limit(worst.cpu_cores):
        return None
    of_cores = f" of {worst.cpu_cores}" if worst.cpu_cores else ""
    return (
        f"other processes kept {worst.other_busy_cores:.1f}{of_cores} cores busy during "
        "these runs; re-run on a quiet machine"
    )


def stack_candidates(results: Sequence[VariantResult]) -> list[str]:
    """Accepted single optimizations to stack, best first; of mutually exclusive ones
    (amp-bf16/amp-fp16, compile/compile-cudagraphs) only the faster is kept."""
    accepted = [
        r
        for r in results
        if r.verdict == "accepted"
        and len(r.optimizations) == 1
        and r.optimizations[0] in CATALOG
        and r.peel_of is None
    ]
    accepted.sort(key=lambda r: -(r.speedup or 0.0))
    chosen: list[str] = []
    for result in accepted:
        opt_id = result.optimizations[0]
        if excluded_by(opt_id, chosen):
            continue
        chosen.append(opt_id)
    return chosen


def excluded_by(opt_id: str, chosen: Sequence[str]) -> bool:
    """`opt_id` and one of `chosen` are mutually exclusive (amp-bf16/amp-fp16, ...)."""
    return any(opt_id in CATALOG[c].excludes or c in CATALOG[opt_id].excludes for c in chosen)

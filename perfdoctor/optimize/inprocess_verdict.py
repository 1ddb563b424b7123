"""The verdict of a fix measured in one process (optimize/inprocess.py), from saved runs.

Speed comes from the A/B child's paired block medians; whether the fix took effect from its
appliers' checks in the A/B child's on-blocks and in the variant's own seeded run; numerics
from that seeded run against the baseline's, with the tolerance `numerics.check_losses`
derives (the catalog category, widened by the baseline's own run-to-run spread), because
switching arms within one run mixes the two training trajectories and its losses can prove
nothing.

Verdicts, first match wins:
    failed     the A/B child or the seeded run crashed, timed out, or recorded no step
    rejected   an applier refused, could not be switched, or its check failed
    rejected   NaN/inf loss, or the loss drifts beyond tolerance in the seeded run
    accepted   the interval lies above 1x
    rejected   below 1x ("slower"), within ±5% ("no gain"), or still straddling 1x when
               the budget ran out ("cannot tell")

Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from perfdoctor.analyze.run_stats import OK_STATUSES, RunSample, pool_figures, usable
from perfdoctor.model import VariantResult, Verdict
from perfdoctor.optimize import numerics
from perfdoctor.optimize.catalog import tolerance_category_for, tolerance_for
from perfdoctor.optimize.inprocess import (
    NARROW,
    ABLog,
    PairedEstimate,
    Quartiles,
    arm_quartiles,
    final_estimate,
)
from perfdoctor.optimize.numerics import describe_tolerance
from perfdoctor.optimize.verdicts import busy_machine_note, not_applied_reason

METHOD = "in-process"
NARROW_PCT = f"{math.expm1(NARROW):.0%}"


def _quartiles(q: Quartiles | None) -> tuple[float, float, float] | None:
    return (q.p25, q.p50, q.p75) if q is not None else None


def _load(run: RunSample) -> str | None:
    """The load the A/B run was measured at. Both arms ran under it, a few seconds apart, so
    it does not bias the comparison; but a fix's gain can depend on it (threads on a busy
    machine), so the figures are said to hold at this load."""
    if run.other_busy_cores is None:
        return None
    of = f" of {run.cpu_cores}" if run.cpu_cores else ""
    busy = busy_machine_note([run]) is not None
    return f"other processes kept {run.other_busy_cores:.1f}{of} cores busy" + (
        "; both arms ran under it, so the comparison holds at this load" if busy else ""
    )


def describe(est: PairedEstimate, measure_s: float | None) -> str:
    took = ""
    if measure_s is not None:
        took = f" in {measure_s:.0f}s" if measure_s >= 10 else f" in {measure_s:.1f}s"
    return (
        f"{est.speedup:.2f}x [{est.low:.2f}x, {est.high:.2f}x] "
        f"({est.reference_ms:.3g} -> {est.test_ms:.3g} ms, {est.pairs} pairs{took}, "
        "in one process)"
    )


def speed_verdict(
    est: PairedEstimate | None, ended: str | None, measure_s: float | None
) -> tuple[Verdict, str]:
    if est is None:
        why = f" ({ended})" if ended else ""
        return "rejected", f"cannot tell: fewer than 3 paired blocks were measured{why}"
    text = describe(est, measure_s)
    if est.decision == "faster":
        return "accepted", f"faster: {text}"
    if est.decision == "slower":
        return "rejected", f"slower: {text}"
    if est.decision == "no-gain":
        return "rejected", f"no gain beyond ±{NARROW_PCT}: {text}"
    why = f"; stopped: {ended}" if ended and ended not in ("undecided",) else ""
    return "rejected", f"cannot tell from noise: {text}{why}"


def compare_in_process(
    baseline_runs: Sequence[RunSample],
    ab_run: RunSample,
    ab: ABLog | None,
    numerics_runs: Sequence[RunSample],
    optimization_ids: Sequence[str],
    *,
    label: str,
    numerics_note: str | None = None,
    peel_of: str | None = None,
) -> VariantResult:
    """The verdict of comparison `label` of the A/B child. `numerics_runs`: the variant's
    seeded run(s); empty where another comparison's run holds the check (`numerics_note`
    says which: a peel comparison's fixes are checked by the stack's seeded run).
    `peel_of`: the comparison is the stack against the stack without this fix."""
    ids = tuple(optimization_ids)
    comparison = ab.comparison(label) if ab is not None else None
    end = ab.end_of(label) if ab is not None else None
    rounds = end.rounds if end is not None else 0
    est = (
        final_estimate(ab.design, ab.blocks, comparison, rounds)
        if ab is not None and comparison is not None
        else None
    )
    ref_q = test_q = None
    if ab is not None and comparison is not None:
        ref_q = arm_quartiles(ab.blocks, comparison.reference, rounds)
        test_q = arm_quartiles(ab.blocks, comparison.test, rounds)
    load = _load(ab_run)
    result = VariantResult(
        label=label,
        optimizations=ids,
        step_ms_p50=est.test_ms if est else None,
        step_ms_p90=None,
        speedup=est.speedup if est else None,
        speedup_noise=(est.speedup - est.low) if est else None,
        # Peak memory and energy are the seeded run's: the switched run mixes the arms.
        peak_memory_bytes=pool_figures(numerics_runs).peak_memory_bytes if numerics_runs else None,
        loss_delta=None,
        verdict="failed",
        reason="",
        applied=next((r.applied for r in (ab_run, *numerics_runs) if r.applied), ()),
        run_dirs=(ab_run.run_dir, *(r.run_dir for r in numerics_runs)),
        baseline_step_ms_p50=est.reference_ms if est else None,
        pooled=(f"geometric means of {est.pairs} paired block medians, one process" if est else ""),
        method=METHOD,
        interval=(est.low, est.high) if est else None,
        confidence=est.confidence if est else None,
        pairs=est.pairs if est else 0,
        measure_s=ab.measure_s if ab is not None else None,
        pooled_step_ms_p50=test_q.p50 if test_q is not None else None,
        baseline_quartiles_ms=_quartiles(ref_q),
        quartiles_ms=_quartiles(test_q),
        load=load,
        peel_of=peel_of,
    )
    if ab is None or comparison is None:
        reason = ab_run.failure_line() if not ab_run.usable else "the A/B run left no ab.json"
        return replace(result, reason=reason)
    broken = next((r for r in numerics_runs if not r.usable), None)
    if broken is not None:
        return replace(result, reason=f"seeded run: {broken.failure_line()}")
    if end is not None and end.ended and end.ended.startswith(("not applied", "cannot switch")):
        return replace(result, verdict="rejected", reason=end.ended)
    if not ab_run.usable and est is None:
        return replace(result, reason=ab_run.failure_line())
    missing = not_applied_reason([r for r in (ab_run, *numerics_runs) if r.applied], ids)
    if missing is not None:
        return replace(result, verdict="rejected", reason=f"not applied: {missing}")

    if numerics_runs:
        guard = numerics.check_losses(
            [r.losses for r in baseline_runs if r.status in OK_STATUSES and r.losses],
            [r.losses for r in usable(numerics_runs) if r.losses],
            tolerance_for(ids),
            tolerance_category_for(ids),
        )
        how = (
            "seeded run against the seeded baseline, "
            + (
                describe_tolerance(guard.derived)
                if guard.derived
                else f"tolerance {guard.tolerance:.1e}"
            )
            if guard.checked
            else guard.reason
        )
        result = replace(
            result, loss_delta=guard.loss_delta, numerics=how, loss_tolerance=guard.derived
        )
        if not guard.ok:
            return replace(result, verdict="rejected", reason=guard.reason)
    else:
        result = replace(result, numerics=numerics_note or "not checked")
    verdict, reason = speed_verdict(est, end.ended if end else None, ab.measure_s)
    if peel_of is not None:
        reason = _peel_reason(peel_of, est, reason)
    return replace(result, verdict=verdict, reason=reason)


def _peel_reason(fix: str, est: PairedEstimate | None, reason: str) -> str:
    """A peel comparison prices `fix` on top of the rest of the stack: say what that means
    for the stack (keep it, or drop it and why)."""
    decision = est.decision if est is not None else "undecided"
    if decision == "faster":
        return f"keep {fix}: it still pays on top of the rest of the stack; {reason}"
    if decision == "slower":
        return f"drop {fix}: it hurts in combination with the rest of the stack; {reason}"
    if decision == "no-gain":
        return (
            f"drop {fix}: it adds nothing on top of the rest of the stack (its gain overlaps "
            f"with theirs); {reason}"
        )
    return f"cannot tell what {fix} adds on top of the rest of the stack; {reason}"

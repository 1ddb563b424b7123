"""The verdict of a fix measured in one process (optimize/inprocess.py), from saved runs.

Speed comes from the A/B children's pairs, pooled over every process of the chain (a script
that ended before a decision was started again, optimize/engine.py); whether the fix took
effect from its appliers' checks in the A/B children's on-blocks and in the variant's own
seeded run; numerics from that seeded run against the baseline's, with the tolerance
`numerics.check_losses` derives (the catalog category, widened by the baseline's own
run-to-run spread), because switching arms within one run mixes the two training
trajectories and its losses can prove nothing.

Verdicts, first match wins:
    failed     the A/B child or the seeded run crashed, timed out, or recorded no step
    rejected   an applier refused, could not be switched, or its check failed
    rejected   NaN/inf loss, or the loss drifts beyond tolerance in the seeded run
    accepted   the interval lies above 1x
    rejected   below 1x ("slower"), or within ±5% ("no gain")
    undecided  the interval still straddles 1x, wider than ±5%: what was seen, and what
               would decide it (engine.verdict_words)

Every speed verdict states the load it holds at (both arms ran under it, seconds apart, so it
does not bias the comparison; but a fix's gain can depend on it), and a fix that gives back
cores the load contends for (fewer threads) is labelled load-bound.

Pure: no torch.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import replace

from perfdoctor.analyze.run_stats import OK_STATUSES, RunSample, pool_figures, usable
from perfdoctor.model import AppliedOptimization, VariantResult, Verdict
from perfdoctor.optimize import numerics
from perfdoctor.optimize.catalog import tolerance_category_for, tolerance_for
from perfdoctor.optimize.engine import Basis, PairedEstimate, point_speedup, verdict_words
from perfdoctor.optimize.inprocess import (
    LOOK_SCHEDULE,
    NARROW,
    SCRIPT_ENDED,
    ABLog,
    Quartiles,
    design_looks,
    pool,
    pooled_estimate,
)
from perfdoctor.optimize.numerics import describe_tolerance
from perfdoctor.optimize.verdicts import not_applied_reason
from perfdoctor.rules.measurement import busy_limit

METHOD = "in-process"
NARROW_PCT = f"{math.expm1(NARROW):.0%}"


def _quartiles(q: Quartiles | None) -> tuple[float, float, float] | None:
    return (q.p25, q.p50, q.p75) if q is not None else None


def measured_load(runs: Sequence[RunSample]) -> tuple[float | None, int | None]:
    """Cores other processes kept busy over the runs (the mean of theirs), and of how many."""
    loads = [r.other_busy_cores for r in runs if r.other_busy_cores is not None]
    cores = next((r.cpu_cores for r in runs if r.cpu_cores), None)
    return (statistics.fmean(loads) if loads else None), cores


def load_phrase(busy: float | None, cores: int | None) -> str | None:
    """ "1.5 other busy cores of 2": what the verdict holds at."""
    if busy is None:
        return None
    of = f" of {cores}" if cores else ""
    return f"{busy:.1f} other busy cores{of}"


def is_busy(busy: float | None, cores: int | None) -> bool:
    return busy is not None and busy >= busy_limit(cores)


_HELD = re.compile(r"held at (\d+)")
_STARTUP = re.compile(r"(\d+) at startup")


def gives_cores_back(applied: Sequence[AppliedOptimization]) -> bool:
    """The fix runs fewer intra-op threads than the script did (cpu-threads' detail): on a
    busy machine it wins by leaving the contended cores to the load."""
    for a in applied:
        if a.id != "cpu-threads" or not a.applied:
            continue
        held, startup = _HELD.search(a.detail), _STARTUP.search(a.detail)
        if held and startup and int(held.group(1)) < int(startup.group(1)):
            return True
    return False


def describe(est: PairedEstimate, measure_s: float | None, processes: int = 1) -> str:
    took = ""
    if measure_s is not None:
        took = f" in {measure_s:.0f}s" if measure_s >= 10 else f" in {measure_s:.1f}s"
    where = "in one process" if processes <= 1 else f"pooled over {processes} processes"
    return (
        f"{est.speedup:.2f}x [{est.low:.2f}x, {est.high:.2f}x] "
        f"({est.reference_ms:.3g} -> {est.test_ms:.3g} ms, {est.pairs} pairs{took}, {where})"
    )


def speed_verdict(
    est: PairedEstimate | None,
    ended: str | None,
    measure_s: float | None,
    *,
    processes: int = 1,
    basis: Basis | None = None,
) -> tuple[Verdict, str]:
    """The engine's verdict words over the pooled pairs (`ended`: how the last process ended
    the comparison, said where the verdict is undecided)."""
    figures = describe(est, measure_s, processes) if est is not None else None
    verdict, reason = verdict_words(est, basis or Basis(), figures=figures)
    if verdict == "undecided" and ended == "budget":
        reason += " (stopped: the measurement budget was spent)"
    elif verdict == "undecided" and ended and ended != "undecided":
        reason += f" (stopped: {ended})"
    return verdict, reason


def compare_in_process(
    baseline_runs: Sequence[RunSample],
    ab_run: RunSample | Sequence[RunSample],
    ab: ABLog | Sequence[ABLog | None] | None,
    numerics_runs: Sequence[RunSample],
    optimization_ids: Sequence[str],
    *,
    label: str,
    numerics_note: str | None = None,
    peel_of: str | None = None,
    chain_stop: str | None = None,
) -> VariantResult:
    """The verdict of comparison `label` over the A/B children of one chain (`ab_run` and
    `ab`: one child, or every child in run order, whose pairs pool). `numerics_runs`: the
    variant's seeded run(s); empty where another comparison's run holds the check
    (`numerics_note` says which: a peel comparison's fixes are checked by the stack's seeded
    run). `peel_of`: the comparison is the stack against the stack without this fix."""
    ids = tuple(optimization_ids)
    ab_runs = [ab_run] if isinstance(ab_run, RunSample) else list(ab_run)
    logs = [ab] if ab is None or isinstance(ab, ABLog) else list(ab)
    found = [log for log in logs if log is not None and log.comparison(label) is not None]
    pooled = pool(found, label) if found else None
    est = pooled_estimate(pooled) if pooled is not None else None
    last_run = ab_runs[-1]
    busy, cores = measured_load(ab_runs)
    basis = Basis(
        steps_per_pair=pooled.steps_per_pair if pooled is not None else None,
        load=load_phrase(busy, cores),
        busy=is_busy(busy, cores),
        first_look=(
            design_looks(pooled.design).first_look if pooled is not None else LOOK_SCHEDULE[0]
        ),
    )
    design = pooled.design if pooled is not None else None
    statistic = design.statistic if design is not None else None
    result = VariantResult(
        label=label,
        optimizations=ids,
        step_ms_p50=est.test_ms if est else None,
        step_ms_p90=None,
        # Below 3 pairs no interval: the speedup seen is still shown (no verdict rests on it).
        speedup=est.speedup if est else point_speedup(pooled.pairs if pooled else ()),
        speedup_noise=(est.speedup - est.low) if est else None,
        # Peak memory and energy are the seeded run's: the switched run mixes the arms.
        peak_memory_bytes=pool_figures(numerics_runs).peak_memory_bytes if numerics_runs else None,
        loss_delta=None,
        verdict="failed",
        reason="",
        applied=next((r.applied for r in (*ab_runs, *numerics_runs) if r.applied), ()),
        run_dirs=(*(r.run_dir for r in ab_runs), *(r.run_dir for r in numerics_runs)),
        baseline_step_ms_p50=est.reference_ms if est else None,
        pooled=(_pooled_text(est.pairs, statistic, pooled.processes) if est and pooled else ""),
        method=METHOD,
        interval=(est.low, est.high) if est else None,
        confidence=est.confidence if est else None,
        pairs=est.pairs if est else len(pooled.pairs) if pooled else 0,
        measure_s=pooled.measure_s if pooled is not None else None,
        pooled_step_ms_p50=(
            pooled.test_quartiles.p50 if pooled and pooled.test_quartiles else None
        ),
        baseline_quartiles_ms=_quartiles(pooled.reference_quartiles if pooled else None),
        quartiles_ms=_quartiles(pooled.test_quartiles if pooled else None),
        load=_load_text(busy, cores),
        peel_of=peel_of,
        statistic=statistic,
        statistic_why=(design.statistic_why or None) if design is not None else None,
        processes=pooled.processes if pooled is not None else len(ab_runs),
        load_busy_cores=round(busy, 2) if busy is not None else None,
        load_cores=cores,
    )
    if pooled is None:
        reason = last_run.failure_line() if not last_run.usable else "the A/B run left no ab.json"
        return replace(result, reason=reason)
    broken = next((r for r in numerics_runs if not r.usable), None)
    if broken is not None:
        return replace(result, reason=f"seeded run: {broken.failure_line()}")
    refused = next(
        (
            end.ended
            for log in found
            if (end := log.end_of(label)) is not None
            and end.ended
            and end.ended.startswith(("not applied", "cannot switch"))
        ),
        None,
    )
    if refused is not None:
        return replace(result, verdict="rejected", reason=refused)
    if not last_run.usable and est is None:
        return replace(result, reason=last_run.failure_line())
    missing = not_applied_reason([r for r in (*ab_runs, *numerics_runs) if r.applied], ids)
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
    ended = pooled.ended
    if ended == SCRIPT_ENDED and chain_stop:
        ended = f"the script ended, {chain_stop}"
    verdict, reason = speed_verdict(
        est, ended, pooled.measure_s, processes=pooled.processes, basis=basis
    )
    would = None
    if verdict == "undecided":
        would = reason.split("would decide it: ", 1)[-1].split(" (stopped", 1)[0]
    # Only this variant's own appliers: the A/B process installs every arm's, so a
    # cpu-threads arm beside it would otherwise label anomaly-off load-bound too.
    own = [a for a in result.applied if a.id in result.optimizations]
    load_bound = verdict == "accepted" and basis.busy and gives_cores_back(own)
    if load_bound:
        reason += (
            "; load-bound: it wins by leaving contended cores to the other processes, and "
            "may not hold on a quiet machine"
        )
    if peel_of is not None:
        reason = _peel_reason(peel_of, est, reason)
    return replace(
        result, verdict=verdict, reason=reason, would_decide=would, load_bound=load_bound
    )


def _pooled_text(pairs: int, statistic: str | None, processes: int) -> str:
    what = "block wall times over steps" if statistic == "throughput-windows" else "block medians"
    where = "one process" if processes <= 1 else f"{processes} processes"
    return f"geometric means of {pairs} paired {what}, {where}"


def _load_text(busy: float | None, cores: int | None) -> str | None:
    if busy is None:
        return None
    of = f" of {cores}" if cores else ""
    text = f"other processes kept {busy:.1f}{of} cores busy"
    if is_busy(busy, cores):
        text += "; both arms ran under it, so the comparison holds at this load"
    return text


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

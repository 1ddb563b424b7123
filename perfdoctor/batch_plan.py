"""`perfdoctor profile --plan-batch`: which batch fits, and which is fastest, measured.

After the baseline (and the fixes, when they are tried), the plan runs the script again at
other batch sizes, each a fresh child run without the profiler (its buffers would count in
the peak), with the batch-size applier measuring the peaks (collect/appliers/batch.py):

1. the knob: the script's batch-size argument, else its DataLoader rebuilt
   (optimize/batch_knob.py); neither, and the plan says so in one line and stops;
2. the fit: runs at half, the script's own and double its batch; peak = fixed +
   per_sample x batch (optimize/batch_fit.py); the limit where it runs out;
3. the check: one run at the predicted limit, or at a batch the fit did not measure;
   the prediction against the measured peak; a miss beyond 15% is refitted with the
   check's run and checked once more at twice its batch (_recheck), and the plan states
   how far its prediction holds (batch_fit.prediction_confidence);
4. the curve: samples/s and peak per batch; the fastest within the limit;
5. the confirmation: the fastest against the script's batch, in paired re-runs
   alternating A B / B A, judged by the A/B machinery's estimate_speedup and
   speed_verdict on time per sample (not per step), --repeat pairs (default 2).
   Re-runs, not the in-process A/B: a batch size cannot be switched between steps (a
   DataLoader's batches are drawn by its iterator, a script reads its argument once);
6. when the wanted batch (--want-batch, else the script's) does not fit: each way to
   make it fit measured at that batch (activation checkpointing, AMP on CUDA, a fused
   optimizer), and gradient accumulation from the curve (the micro-batch's own run).

It runs with --plan-batch, or on its own after the fixes of an applying session whose
diagnosis is about memory capacity or a larger batch (auto_reason), within a budget
(AUTO_BUDGET_FACTOR; _Planner.afford skips the stages past it); --no-plan-batch never.

Everything goes to batch_plan.json (run_schema.BatchPlan); the report's batch section
reads it (render/batch_section.py).
"""

from __future__ import annotations

import importlib.util
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from perfdoctor import rundir
from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.run_stats import RunSample, timed_steps
from perfdoctor.diagnose import Diagnosis
from perfdoctor.model import Finding, RunManifest, Target
from perfdoctor.optimize import batch_fit
from perfdoctor.optimize.batch_knob import (
    ACCUMULATE_ENV,
    BATCH_ENV,
    BATCH_FROM_ENV,
    BatchKnob,
    argv_with_batch,
    find_knob,
)
from perfdoctor.optimize.estimate import estimate_speedup
from perfdoctor.optimize.run_samples import run_sample_from_record
from perfdoctor.optimize.verdicts import speed_verdict
from perfdoctor.run_schema import BatchPlan, BatchPlanOption, BatchPlanPoint, BatchProbe
from perfdoctor.units import format_bytes

log = logging.getLogger(__name__)

APPLIER = "batch-size"
RECIPE_NOTE = (
    "A different batch size changes the training recipe: scale the learning rate with it "
    "(linearly for SGD, about with the square root for Adam), and BatchNorm's statistics "
    "come from batches of the new size. With --keep-effective-batch the plan keeps the "
    "effective batch and reaches it by gradient accumulation."
)
# Findings whose fixes the plan measures: offered when it was not asked for.
PLAN_FIXES = {"larger-batch", "grad-accumulation", "activation-checkpointing"}
# Findings about memory capacity (rules/memory.py): what fits is the plan's first question.
# Memory growth (a leak) and allocator churn (empty_cache in the loop) are not: their fix is
# in the script, at any batch size.
MEMORY_CAPACITY_RULES = frozenset(
    {"memory-near-capacity", "allocator-retries", "memory-fragmentation", "memory-underused"}
)
# The fix a throughput finding must lead with for the plan to run on its own: a finding whose
# first fix is compile or CUDA graphs (launch-bound) is answered by those, not by the plan.
BATCH_FIX = "larger-batch"
# Caveats about the measurement, not the script (render/summary.py): never a headline here.
_MEASUREMENT_CAVEATS = frozenset({"busy-machine"})
# An automatic plan (apply, without --plan-batch) gets this multiple of the time the apply's
# runs took before it; its stages (fit, check, confirmation, the ways to fit) stop where the
# next one would overrun it. At least AUTO_MIN_BUDGET_S, so the fit and its check can run.
AUTO_BUDGET_FACTOR = 1.0
AUTO_MIN_BUDGET_S = 120.0


class Runner(Protocol):
    """The part of pipeline._Runner the plan uses."""

    session_dir: Path
    started: int

    def run(
        self,
        label: str,
        optimizations: Sequence[str],
        *,
        repeat: int,
        planned_runs: int,
        target: Target | None = None,
        env: dict[str, str] | None = None,
        profile: bool = True,
    ) -> RunManifest: ...


class Sink(Protocol):
    def note(self, message: str) -> None: ...


def offer(diagnosis: Diagnosis, sink: Sink) -> None:
    """A finding the batch plan addresses, when --plan-batch was not asked for: say so."""
    wanted = sorted({f.rule_id for f in diagnosis.findings if PLAN_FIXES & set(f.optimizations)})
    if wanted:
        sink.note(
            f"{', '.join(wanted)}: `perfdoctor profile --plan-batch` measures the peak memory "
            "and samples/s per batch size, and which batch fits and is fastest"
        )


def auto_reason(findings: Sequence[Finding]) -> str | None:
    """Why apply runs the batch plan without --plan-batch (one phrase), or None: the
    headline (the top finding about the script) or a warning/critical finding is about memory
    capacity, or leads with a larger batch as its fix."""
    script = [f for f in findings if f.rule_id not in _MEASUREMENT_CAVEATS]
    for rank, finding in enumerate(script):
        where = "the headline" if rank == 0 else f"a {finding.severity} finding"
        if rank > 0 and finding.severity not in ("warning", "critical"):
            continue
        if finding.rule_id in MEMORY_CAPACITY_RULES:
            return f"{where} is about memory ({finding.rule_id})"
        if finding.optimizations[:1] == (BATCH_FIX,):
            return f"{where} recommends a larger batch ({finding.rule_id})"
    return None


def mem_available_bytes() -> int | None:
    """MemAvailable now, before the plan's runs (no child of ours holds memory), or the
    address-space limit the runs inherit (`ulimit -v`, RLIMIT_AS) when that is lower: a run
    over it fails to allocate however much RAM is free."""
    found = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        found = None
    limit = address_space_limit()
    if limit is not None and (found is None or limit < found):
        return limit
    return found


def address_space_limit() -> int | None:
    """The soft RLIMIT_AS (`ulimit -v`) children inherit; None when unlimited."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


def _script_source(target: Target, cwd: Path) -> str | None:
    if target.kind != "script":
        return None
    try:
        return (cwd / target.name).read_text(errors="replace")
    except OSError:
        return None


def _observed_batch(diagnosis: Diagnosis) -> int | None:
    sizes = [s.batch_size for s in timed_steps(diagnosis.record.steps) if s.batch_size]
    return int(statistics.median(sizes)) if sizes else None


class _Planner:
    def __init__(
        self,
        runner: Runner,
        sink: Sink,
        target: Target,
        knob: BatchKnob,
        *,
        on_cuda: bool,
        rounds: int,
        observed: int | None = None,
    ) -> None:
        self.runner, self.sink, self.target, self.knob = runner, sink, target, knob
        self.observed = observed  # the batch the baseline's steps saw
        self.on_cuda = on_cuda
        self.rounds = max(1, rounds)
        self.notes: list[str] = []
        # An automatic plan's time budget (None: --plan-batch, no budget), and what its runs
        # took so far (the estimate of the next ones).
        self.budget_s: float | None = None
        self.started_at = time.monotonic()
        self.run_s: list[float] = []
        self.stopped: str | None = None

    def afford(self, runs: int, stage: str) -> bool:
        """Whether `runs` more runs fit the budget; if not, the plan stops and says so."""
        if self.stopped is not None:
            return False
        if self.budget_s is None or runs <= 0:
            return True
        spent = time.monotonic() - self.started_at
        each = statistics.median(self.run_s) if self.run_s else 0.0
        if spent + runs * each <= self.budget_s:
            return True
        self.stopped = (
            f"stopped before {stage}: {runs} more run(s) of about {each:.0f} s would overrun "
            f"the automatic plan's budget of {self.budget_s:.0f} s ({spent:.0f} s spent; "
            "--plan-batch runs the whole plan)"
        )
        self.sink.note(f"batch plan: {self.stopped}")
        return False

    def run(
        self, batch: int, extra: Sequence[str] = (), *, repeat: int = 1, accumulate: int = 1
    ) -> tuple[RunSample | None, BatchProbe | None, str]:
        """One child run at `batch` with `extra` fixes (and `accumulate` micro-batches per
        optimizer step); its sample, probe and directory."""
        assert self.knob.batch is not None
        head = f"batch-{batch}" + (f"x{accumulate}" if accumulate > 1 else "")
        label = "+".join([head, *extra])
        env: dict[str, str] = {ACCUMULATE_ENV: str(accumulate)} if accumulate > 1 else {}
        target = None
        if self.knob.kind == "argument" and self.knob.option is not None:
            target = replace(
                self.target, argv=argv_with_batch(self.target.argv, self.knob.option, batch)
            )
        else:  # the DataLoader rebuilt, at the script's own batch too (its check then holds)
            env.update({BATCH_ENV: str(batch), BATCH_FROM_ENV: str(self.knob.batch)})
        began = time.monotonic()
        self.runner.run(
            label,
            (APPLIER, *extra),
            repeat=repeat,
            planned_runs=self.runner.started + 1,
            target=target,
            env=env,
            profile=False,
        )
        self.run_s.append(time.monotonic() - began)
        run_dir = rundir.child_dir(self.runner.session_dir, label, repeat)
        rel = str(run_dir.relative_to(self.runner.session_dir))
        try:
            record = load_run(run_dir, with_trace=False)
        except Exception as exc:  # a run that left no usable record is a failed point
            log.warning("plan run %s unreadable: %s", rel, exc)
            return None, None, rel
        sample = run_sample_from_record(record)
        steps = timed_steps(record.steps)
        seen = [s.batch_size for s in steps if s.batch_size]
        # The batch the probes read is the first dimension of the model's input; where it
        # followed the script's batch in the baseline, it must follow the plan's too.
        tracked = self.knob.kind == "dataloader" or self.observed == self.knob.batch
        if tracked and seen and int(statistics.median(seen)) != batch:
            self.notes.append(
                f"{label}: the steps saw batch {int(statistics.median(seen))}, not {batch}"
            )
            sample = replace(sample, status="batch_not_changed")
        # Samples per step from the batch the run was given (the probes may read another
        # dimension, e.g. a (time, batch) input), times the micro-batches per step.
        micro = statistics.median([max(1, s.micro_batches) for s in steps]) if steps else 1
        sample = replace(sample, samples_per_step=float(batch * micro))
        return sample, _probe(run_dir), rel

    def peak(self, sample: RunSample | None, probe: BatchProbe | None) -> int | None:
        if probe is not None:
            if self.on_cuda and probe.cuda_max_reserved_bytes:
                return probe.cuda_max_reserved_bytes
            if not self.on_cuda and probe.rss_train_peak_bytes:
                return probe.rss_train_peak_bytes
        return sample.peak_memory_bytes if sample is not None else None


def _probe(run_dir: Path) -> BatchProbe | None:
    path = run_dir / rundir.BATCH_PROBE_FILE
    if not path.is_file():
        return None
    try:
        import msgspec

        return msgspec.json.decode(path.read_bytes(), type=BatchProbe)
    except (OSError, ValueError) as exc:
        log.warning("unreadable %s: %s", path, exc)
        return None


def _samples_s(sample: RunSample | None) -> float | None:
    if sample is None or not sample.usable or not sample.samples_per_step:
        return None
    step = statistics.median(sample.step_ms)
    return sample.samples_per_step * 1000.0 / step if step > 0 else None


def per_sample(sample: RunSample) -> RunSample:
    """The run with its step times per sample, so the A/B machinery compares samples/s:
    a speedup of the time per sample is the ratio of samples/s."""
    size = sample.samples_per_step or 1.0
    return replace(sample, step_ms=tuple(ms / size for ms in sample.step_ms))


def plan_batch(
    runner: Runner,
    sink: Sink,
    diagnosis: Diagnosis,
    *,
    target: Target,
    cwd: Path,
    rounds: int,
    memory_limit: int | None = None,
    want_batch: int | None = None,
    keep_effective: bool = False,
    trigger: str = "--plan-batch",
    budget_s: float | None = None,
) -> BatchPlan:
    """Measure, fit, check, choose and confirm; writes batch_plan.json and returns it.
    `trigger`: why the plan runs (--plan-batch, or the finding that made apply run it);
    `budget_s`: an automatic plan's time budget (its later stages are skipped past it)."""
    record = diagnosis.record
    manifest = record.manifest
    on_cuda = bool(manifest and manifest.device and manifest.device.kind == "cuda")
    observed = _observed_batch(diagnosis)
    knob = find_knob(
        target.argv, _script_source(target, cwd), record.observed.dataloaders or [], observed
    )
    plan = BatchPlan(
        knob=knob.kind,
        knob_detail=knob.why,
        script_batch=knob.batch,
        device="cuda" if on_cuda else "cpu",
        peak_kind="cuda_reserved" if on_cuda else "rss",
        recipe_note=RECIPE_NOTE,
        keep_effective_batch=keep_effective,
        wanted_batch=want_batch,
        trigger=trigger,
        budget_s=budget_s,
    )
    if not knob.changeable or knob.batch is None:
        sink.note(f"batch plan: {knob.why}")
        return _save(runner.session_dir, plan)
    b0 = knob.batch
    sink.note(f"batch plan: batch {b0}, changed through {knob.why}")
    available = mem_available_bytes()
    planner = _Planner(
        runner, sink, target, knob, on_cuda=on_cuda, rounds=rounds, observed=observed
    )
    planner.budget_s = budget_s

    points: list[BatchPlanPoint] = []
    samples: dict[int, RunSample] = {}
    for batch in batch_fit.measurement_batches(b0):
        points.append(_point(planner, batch, "fit", samples))
    fit = batch_fit.fit_memory(
        [batch_fit.MemoryPoint(p.batch, p.peak_bytes) for p in points if p.peak_bytes and _ok(p)]
    )
    device_total = next(
        (pr.cuda_total_bytes for pr in _probes(runner.session_dir, points) if pr.cuda_total_bytes),
        None,
    )
    limit, source = batch_fit.memory_limit_bytes(
        on_cuda=on_cuda, device_total=device_total, available=available, user_limit=memory_limit
    )
    if source.startswith("available RAM") and available == address_space_limit():
        source = source.replace("available RAM", "the address-space limit (ulimit -v)")
    plan.limit_bytes, plan.limit_source = limit, source
    plan.activations_per_sample_bytes = _snapshot_activations(diagnosis, b0)
    if fit is None:
        plan.notes = [*planner.notes, "no fit: fewer than two batch sizes measured a peak"]
        plan.curve = points
        return _save(runner.session_dir, plan)
    plan.fixed_bytes, plan.per_sample_bytes = fit.fixed_bytes, fit.per_sample_bytes
    plan.fit_worst_residual_frac = fit.worst_residual_frac
    limit_batch = batch_fit.max_batch(fit, limit) if limit is not None else None
    plan.limit_batch = limit_batch
    sink.note(
        f"batch plan: peak = {format_bytes(int(fit.fixed_bytes))} + "
        f"{format_bytes(int(fit.per_sample_bytes))} x batch"
        + (f"; predicted limit batch {limit_batch} ({source})" if limit_batch is not None else "")
    )
    verify = batch_fit.verification_batch(b0, [p.batch for p in points], limit_batch)
    if verify is not None and planner.afford(1, "the check of the prediction"):
        batch, why = verify
        point = _point(planner, batch, "verify", samples)
        points.append(point)
        plan.verify_batch, plan.verify_why = batch, why
        if point.peak_bytes and _ok(point):
            predicted = fit.predict(batch)
            plan.verify_error_frac = batch_fit.prediction_error(predicted, point.peak_bytes)
            sink.note(
                f"batch plan: batch {batch} ({why}) predicted {format_bytes(int(predicted))}, "
                f"measured {format_bytes(point.peak_bytes)} ({plan.verify_error_frac:+.1%})"
            )
    for p in points:
        p.predicted_bytes = fit.predict(p.batch)
    refit = batch_fit.fit_memory(
        [batch_fit.MemoryPoint(p.batch, p.peak_bytes) for p in points if p.peak_bytes and _ok(p)]
    )
    if refit is not None and refit.points > fit.points and limit is not None:
        # The check's point joins the fit for the limit: a run at the predicted limit that
        # went over it moves the limit down (the prediction's error stays as measured).
        # The model shown stays the one the check tested; the note gives the refit.
        plan.limit_batch = batch_fit.max_batch(refit, limit)
        if plan.limit_batch != limit_batch:
            before = (
                f"not {limit_batch}"
                if limit_batch is not None
                else "the fit alone saw no growth with the batch"
            )
            planner.notes.append(
                f"refitted with the check's run ({format_bytes(int(refit.fixed_bytes))} + "
                f"{format_bytes(int(refit.per_sample_bytes))} per sample): the limit is "
                f"batch {plan.limit_batch}; {before}"
            )
    error = plan.verify_error_frac
    if (
        refit is not None
        and refit.points > fit.points
        and error is not None
        and abs(error) > batch_fit.PREDICTION_TOLERANCE
    ):
        _recheck(planner, plan, refit, limit, points, samples)
    points.sort(key=lambda p: p.batch)
    _cap_by_failures(planner, plan, points)
    plan.curve = points
    effective = want_batch or b0
    curve = [
        batch_fit.CurvePoint(p.batch, p.samples_s, p.peak_bytes, p.predicted_bytes, _ok(p))
        for p in points
    ]
    best = batch_fit.fastest_within(
        curve, limit, b0, keep_effective=effective if keep_effective else None
    )
    if best is not None:
        plan.best_batch = best.batch
        if keep_effective:
            plan.accumulation_steps = batch_fit.accumulation_steps(effective, best.batch)
        _confirm(planner, plan, b0, best.batch, plan.accumulation_steps or 1)
    _fit_options(planner, plan, fit, limit, effective, points, samples)
    confidence = batch_fit.prediction_confidence(
        [batch_fit.MemoryPoint(p.batch, p.peak_bytes) for p in points if p.peak_bytes and _ok(p)],
        fit,
        plan.verify_batch,
        plan.verify_error_frac,
        rss=not on_cuda,
        recheck=(plan.recheck_batch, plan.recheck_error_frac),
    )
    plan.prediction_confidence, plan.confidence_why = confidence
    plan.stopped = planner.stopped
    if planner.notes:
        plan.notes = planner.notes
    return _save(runner.session_dir, plan)


def _recheck(
    planner: _Planner,
    plan: BatchPlan,
    refit: batch_fit.MemoryFit,
    limit: int | None,
    points: list[BatchPlanPoint],
    samples: dict[int, RunSample],
) -> None:
    """The check missed: the refit with its run is checked once more, at a larger batch
    (batch_fit.recheck_batch), so the plan says whether the refitted model holds instead of
    trusting a line through a point it was made to pass near. On a CPU the first fit can
    miss where the batch's largest tensors cross glibc's mmap threshold; beyond it the RSS
    is linear again (benchmarks/README.md, word_language_model)."""
    if plan.verify_batch is None:
        return
    limit_batch = batch_fit.max_batch(refit, limit) if limit is not None else None
    batch = batch_fit.recheck_batch(plan.verify_batch, [p.batch for p in points], limit_batch)
    if batch is None or not planner.afford(1, "the check of the refitted model"):
        return
    point = _point(planner, batch, "recheck", samples)
    point.predicted_bytes = refit.predict(batch)
    points.append(point)
    plan.refit_fixed_bytes, plan.refit_per_sample_bytes = (
        refit.fixed_bytes,
        refit.per_sample_bytes,
    )
    plan.recheck_batch = batch
    if not (point.peak_bytes and _ok(point)):
        return
    plan.recheck_error_frac = batch_fit.prediction_error(point.predicted_bytes, point.peak_bytes)
    planner.sink.note(
        f"batch plan: refitted with batch {plan.verify_batch}, batch {batch} predicted "
        f"{format_bytes(int(point.predicted_bytes))}, measured "
        f"{format_bytes(point.peak_bytes)} ({plan.recheck_error_frac:+.1%})"
    )
    final = batch_fit.fit_memory(
        [batch_fit.MemoryPoint(p.batch, p.peak_bytes) for p in points if p.peak_bytes and _ok(p)]
    )
    if final is not None and limit is not None:
        before, plan.limit_batch = plan.limit_batch, batch_fit.max_batch(final, limit)
        if plan.limit_batch != before:
            planner.notes.append(
                f"with batch {batch} too ({format_bytes(int(final.fixed_bytes))} + "
                f"{format_bytes(int(final.per_sample_bytes))} per sample): the limit is batch "
                f"{plan.limit_batch}"
            )


def _ok(point: BatchPlanPoint) -> bool:
    return point.status == "completed"


def _cap_by_failures(planner: _Planner, plan: BatchPlan, points: list[BatchPlanPoint]) -> None:
    """A batch that failed to run (its check ran out of memory at batch 32) caps the limit
    below it, whatever the fit predicts (it predicted 390): the limit is the largest batch
    that ran, below the smallest that failed."""
    failed = [p.batch for p in points if not _ok(p)]
    if not failed or plan.limit_batch is None:
        return
    first = min(failed)
    ran = [p.batch for p in points if _ok(p) and p.batch < first]
    cap = max(ran) if ran else 0
    if plan.limit_batch <= cap:
        return
    planner.notes.append(
        f"batch {first} failed to run: the limit is batch {cap} (the largest that ran below "
        f"it), not the {plan.limit_batch} the fit predicted"
    )
    plan.limit_batch = cap


def _point(
    planner: _Planner, batch: int, role: str, samples: dict[int, RunSample]
) -> BatchPlanPoint:
    sample, probe, rel = planner.run(batch)
    if sample is not None:
        samples[batch] = sample
    status = sample.status if sample is not None else "unreadable"
    if sample is not None and sample.usable and status not in ("batch_not_changed",):
        status = "completed"
    elif sample is not None and not sample.usable:
        # Out of memory, or the script's own failure at that batch (e.g. a divergent loss):
        # the point is left out of the fit and the choice, and the report says why.
        planner.notes.append(f"batch {batch}: the run ended {status}: {sample.error or '?'}")
    return BatchPlanPoint(
        batch=batch,
        run=rel,
        samples_s=_samples_s(sample),
        peak_bytes=planner.peak(sample, probe),
        role=role,
        status=status,
    )


def _probes(session_dir: Path, points: Sequence[BatchPlanPoint]) -> list[BatchProbe]:
    found = (_probe(session_dir / p.run) for p in points if p.run)
    return [p for p in found if p is not None]


def _snapshot_activations(diagnosis: Diagnosis, batch: int) -> float | None:
    """Activation bytes per sample at the baseline's peak, from its CUDA memory snapshot's
    categories (analyze/memory.py): the fit's per-sample figure should be near it."""
    memory = diagnosis.record.memory
    categories = getattr(memory, "categories_at_peak", None) or {}
    activations = categories.get("activations")
    return activations / batch if activations and batch else None


def _confirm(planner: _Planner, plan: BatchPlan, b0: int, best: int, accumulate: int) -> None:
    """The fastest batch against the script's, in paired re-runs (A B, then B A). With
    --keep-effective-batch the faster one runs with its gradient accumulation."""
    plan.recommended_batch = b0
    if best == b0:
        plan.confirmation = "the script's own batch is the fastest measured within memory"
        return
    if not planner.afford(2 * planner.rounds, "the paired confirmation"):
        plan.confirmation = f"not confirmed: {planner.stopped}"
        return
    base_runs: list[RunSample] = []
    best_runs: list[RunSample] = []
    for r in range(planner.rounds):
        order = (b0, best) if r % 2 == 0 else (best, b0)
        for batch in order:
            acc = accumulate if batch == best else 1
            sample, _, _ = planner.run(batch, repeat=r + 2 if acc == 1 else r + 1, accumulate=acc)
            if sample is not None:
                (base_runs if batch == b0 else best_runs).append(sample)
    speed = estimate_speedup(
        [per_sample(s) for s in base_runs], [per_sample(s) for s in best_runs], between_rounds=True
    )
    verdict, reason = speed_verdict(speed, "")
    plan.confirmation = f"{verdict}: samples/s {reason} (batch {best} against {b0})"
    if speed is not None:
        plan.confirmation_speedup, plan.confirmation_low = speed.speedup, speed.low
    if verdict == "accepted":
        plan.recommended_batch = best
    planner.sink.note(f"batch plan: {plan.confirmation}")


def _fit_options(
    planner: _Planner,
    plan: BatchPlan,
    fit: batch_fit.MemoryFit,
    limit: int | None,
    wanted: int,
    points: list[BatchPlanPoint],
    samples: dict[int, RunSample],
) -> None:
    """When the wanted batch does not fit: each way to make it fit, measured at it."""
    if limit is None:
        return
    at_wanted = next((p for p in points if p.batch == wanted), None)
    fits = (
        at_wanted.peak_bytes <= limit
        if at_wanted is not None and at_wanted.peak_bytes and _ok(at_wanted)
        else fit.predict(wanted) <= limit
    )
    plan.wanted_batch, plan.wanted_fits = wanted, fits
    if fits:
        return
    if not planner.afford(5, "the ways to make the wanted batch fit"):
        return
    if at_wanted is None:
        at_wanted = _point(planner, wanted, "extra", samples)
        at_wanted.predicted_bytes = fit.predict(wanted)
        points.append(at_wanted)
        points.sort(key=lambda p: p.batch)
    base_peak, base_speed = at_wanted.peak_bytes, at_wanted.samples_s
    ids = ["activation-checkpointing", "fused-optimizer"]
    if planner.on_cuda:
        ids.insert(0, "amp-bf16")
    options: list[BatchPlanOption] = []
    for opt_id in ids:
        sample, probe, _ = planner.run(wanted, (opt_id,))
        peak = planner.peak(sample, probe)
        speed = _samples_s(sample)
        refused = _refusal(sample, opt_id)
        if refused is not None:  # nothing changed: its figures would be the noise's
            options.append(BatchPlanOption(id=opt_id, batch=wanted, note=refused))
            continue
        options.append(
            BatchPlanOption(
                id=opt_id,
                batch=wanted,
                peak_bytes=peak,
                saved_bytes=(base_peak - peak) if base_peak and peak else None,
                samples_s=speed,
                time_cost_frac=(1 - speed / base_speed) if speed and base_speed else None,
                fits=peak <= limit if peak else None,
            )
        )
    options.append(_accumulation(planner, wanted, limit, points, base_peak, base_speed))
    if importlib.util.find_spec("bitsandbytes") is None:
        options.append(
            BatchPlanOption(
                id="8bit-optimizer",
                batch=wanted,
                note="not measured: bitsandbytes is not installed",
            )
        )
    plan.options = options


def _refusal(sample: RunSample | None, opt_id: str) -> str | None:
    if sample is None:
        return "the run left no record"
    if not sample.usable:
        return f"the run {sample.status}: {sample.error or ''}".strip()
    for item in sample.applied:
        if item.id == opt_id and not item.applied:
            return f"not applied: {item.detail}"
    return None


def _accumulation(
    planner: _Planner,
    wanted: int,
    limit: int,
    points: Sequence[BatchPlanPoint],
    base_peak: int | None,
    base_speed: float | None,
) -> BatchPlanOption:
    """Gradient accumulation keeps the wanted effective batch with micro-batches that fit:
    the largest measured batch within the limit that divides it, run with k micro-batches
    per optimizer step (collect/appliers/batch.py)."""
    micro = [
        p
        for p in points
        if _ok(p)
        and p.peak_bytes
        and p.peak_bytes <= limit
        and p.batch < wanted
        and batch_fit.accumulation_steps(wanted, p.batch) is not None
    ]
    if not micro:
        return BatchPlanOption(
            id="grad-accumulation",
            batch=wanted,
            note="no measured micro-batch that divides the batch fits",
        )
    best = max(micro, key=lambda p: p.batch)
    steps = wanted // best.batch
    sample, probe, _ = planner.run(best.batch, accumulate=steps)
    peak, speed = planner.peak(sample, probe), _samples_s(sample)
    return BatchPlanOption(
        id="grad-accumulation",
        batch=best.batch,
        peak_bytes=peak,
        saved_bytes=(base_peak - peak) if base_peak and peak else None,
        samples_s=speed,
        time_cost_frac=(1 - speed / base_speed) if speed and base_speed else None,
        fits=peak <= limit if peak else None,
        note=_refusal(sample, APPLIER)
        or f"{steps} micro-batches of {best.batch} per optimizer step",
    )


def _save(session_dir: Path, plan: BatchPlan) -> BatchPlan:
    import msgspec

    (session_dir / rundir.BATCH_PLAN_FILE).write_bytes(msgspec.json.encode(plan))
    return plan

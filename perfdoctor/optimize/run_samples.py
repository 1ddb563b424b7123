"""Child run directories -> RunSample: the one loader of what the A/B statistics need.

Runs are read with analyze.record.load_run, so a corrupt artifact raises CorruptArtifact and
a directory that is no run raises BadRunDir here as everywhere else. The figures themselves
are analyze/run_stats.py's definitions. Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from perfdoctor.analyze import run_stats
from perfdoctor.analyze.facts import batch_size
from perfdoctor.analyze.record import RunRecord, load_run
from perfdoctor.analyze.run_stats import RunSample
from perfdoctor.model import AppliedOptimization, StepRecord
from perfdoctor.run_schema import CudaMemoryInfo


def load_run_samples(run_dirs: Iterable[Path], *, with_trace: bool = True) -> list[RunSample]:
    return [run_sample_from_record(load_run(Path(d), with_trace=with_trace)) for d in run_dirs]


def _job_losses(
    ordered: Sequence[StepRecord], rank_steps: Sequence[Sequence[StepRecord]]
) -> tuple[float | None, ...]:
    """Per step, the mean of every rank's loss: NaN on any rank makes the step's NaN, so the
    numerics guard sees every rank's loss (the lead's own when it is the only one)."""

    def value(s: StepRecord) -> float | None:
        return math.nan if s.loss_finite is False else s.loss

    others = [{s.index: value(s) for s in steps} for steps in rank_steps]
    out: list[float | None] = []
    for s in ordered:
        values = [value(s), *(o[s.index] for o in others if s.index in o)]
        known = [v for v in values if v is not None]
        out.append(sum(known) / len(known) if known else None)
    return tuple(out)


def _applied(record: RunRecord) -> tuple[AppliedOptimization, ...]:
    if record.manifest is not None and record.manifest.applied:
        return record.manifest.applied
    # The child writes applier results into observations; the manifest's copy is preferred.
    return tuple(
        AppliedOptimization(
            id=str(row.id),
            applied=bool(row.applied),
            verified=bool(row.verified),
            detail=row.detail if row.detail is not None else "",
        )
        for row in record.observed.applied or ()
    )


def run_sample_from_record(record: RunRecord) -> RunSample:
    """A RunSample from a loaded child run (analyze.record.load_run)."""
    ordered = sorted(record.steps, key=lambda s: s.index)
    rank_steps = [r.steps for r in record.ranks]
    cuda_memory = record.observed.cuda_memory or CudaMemoryInfo()
    snapshot = record.memory
    cuda_peak = run_stats.cuda_peak_bytes(
        snapshot.peak_allocated_bytes if snapshot else None,
        cuda_memory.max_allocated_bytes,
        run_stats.step_cuda_peak(ordered),
    )
    reserved = run_stats.cuda_peak_bytes(
        snapshot.peak_reserved_bytes if snapshot else None, cuda_memory.max_reserved_bytes
    )
    timed = run_stats.timed_steps(ordered)
    sampled = run_stats.timed_samples_summary(record.samples, record.progress, len(timed))
    manifest = record.manifest
    return RunSample(
        label=manifest.label if manifest is not None else Path(record.dir).name,
        step_ms=tuple(run_stats.timed_step_ms(ordered, rank_steps)),
        losses=_job_losses(ordered, rank_steps),
        peak_memory_bytes=run_stats.peak_memory_bytes(
            cuda_peak, run_stats.peak_rss(ordered, record.samples)
        ),
        peak_reserved_bytes=reserved,
        energy_j_per_step=sampled.energy_j_per_step,
        samples_per_step=run_stats.samples_per_step(timed, batch_size(record)),
        status=manifest.status if manifest is not None else "launch_failed",
        exit_code=manifest.exit_code if manifest is not None else 1,
        error=manifest.error if manifest is not None else "the run left no manifest",
        applied=_applied(record),
        run_dir=str(record.dir),
        other_busy_cores=sampled.other_busy_cores,
        cpu_cores=sampled.cpu_cores,
    )

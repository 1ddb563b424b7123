"""The one set of definitions behind every run figure the reports show.

The baseline's facts and summary, each variant's A/B figures and `perfdoctor compare`'s two
sides all come from here, so a figure means the same thing wherever it is shown:

- step-time pool: the timed steps only (warm-up steps carry compilation, allocator growth and
  cold caches; profiled steps carry the profiler's overhead); under several ranks a step
  lasts as long as its slowest rank's. Runs pool by concatenating their timed steps.
- step time: the median (p50) and the linear-interpolation p90 of a pool; a run's spread is
  half the range of the log of its run medians (0 with one run).
- throughput: samples per step (batch x micro-batches, the median over the timed steps; the
  median over runs when pooling) over the median step, in samples/s.
- peak memory: CUDA max allocated (the largest of what the child, the per-step maxima and the
  memory snapshot saw); the process RSS peak on a CPU run.
- phase breakdown: the median ms per step of each measured phase, `other` being what they
  leave of the median step.
- energy per step: NVML's energy counter over the timed window, the mean over runs.

Pure: no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.analyze.samples import SamplesSummary, summarize_samples, timed_window
from perfdoctor.model import AppliedOptimization, StepRecord
from perfdoctor.run_schema import CpuSample, ProgressRow, SampleRow

# Run statuses whose timed steps count.
OK_STATUSES = ("completed", "finished_early")
MEASURED_PHASES = (
    ("data", "data_wait_ms"),
    ("forward", "forward_ms"),
    ("backward", "backward_ms"),
    ("optimizer", "optimizer_ms"),
)


@dataclass(frozen=True)
class RunSample:
    """What the statistics need from one child run (baseline or variant)."""

    label: str
    step_ms: tuple[float, ...]  # the run's step-time pool (timed_step_ms)
    losses: tuple[float | None, ...] = ()  # one per step from step 0, None where not captured
    peak_memory_bytes: int | None = None  # peak_memory_bytes()
    peak_reserved_bytes: int | None = None  # CUDA max reserved
    energy_j_per_step: float | None = None
    samples_per_step: float | None = None  # samples_per_step()
    status: str = "completed"
    exit_code: int = 0
    error: str | None = None  # one line
    applied: tuple[AppliedOptimization, ...] = ()
    run_dir: str = ""
    other_busy_cores: float | None = None  # cores other processes used in the timed window
    cpu_cores: int | None = None

    @property
    def usable(self) -> bool:
        return self.status in OK_STATUSES and len(self.step_ms) > 0

    def failure_line(self) -> str:
        if self.status in OK_STATUSES:
            return "no timed step was recorded"
        detail = self.error or f"exit code {self.exit_code}"
        return f"{self.status.replace('_', ' ')}: {detail}"


@dataclass(frozen=True)
class PoolFigures:
    """The figures of one side (a baseline, a variant, one side of `compare`) over its runs."""

    runs: int  # usable runs in the pool
    steps: int  # timed steps in the pool
    step_ms_p50: float | None
    step_ms_p90: float | None
    throughput_samples_s: float | None
    peak_memory_bytes: int | None
    energy_j_per_step: float | None

    @property
    def pooled(self) -> str:
        """How the median was taken: "median of 40 steps over 2 runs"."""
        return f"median of {self.steps} steps over {self.runs} run" + (
            "" if self.runs == 1 else "s"
        )


# --------------------------------------------------------------------------- numbers


def step_at_speedup(baseline_step_ms: float | None, speedup: float | None) -> float | None:
    """A variant's step time stated against the report's one baseline step time (the
    profiled baseline run's p50, BaselineSummary.step_ms_p50): that step divided by the
    variant's measured speedup. Every report shows this one baseline figure; the paired
    medians the speedup is the ratio of stay in the measurement details, where their own
    pool (blocks of one process, or A/B runs) is named."""
    if baseline_step_ms is None or speedup is None or speedup <= 0:
        return None
    if not (math.isfinite(baseline_step_ms) and math.isfinite(speedup)):
        return None
    return baseline_step_ms / speedup


def finite_numbers(values: Iterable[Any]) -> list[float]:
    """The finite int/float values of `values` as floats (bools, None and NaN left out)."""
    return [
        float(v)
        for v in values
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sequence")
    position = (len(ordered) - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def median_or_none(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def log_half_range(values: Sequence[float]) -> float:
    """Half the range of the values in log space (0 with fewer than two): the spread of a
    side's run medians or run peaks, as a ratio band exp(-w) .. exp(w)."""
    positive = [v for v in values if v > 0]
    if len(positive) < 2:
        return 0.0
    return (math.log(max(positive)) - math.log(min(positive))) / 2.0


# --------------------------------------------------------------------------- one run


def timed_steps(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """The steps whose times count, in step order."""
    return sorted((s for s in steps if s.phase == "timed"), key=lambda s: s.index)


def timed_step_ms(
    steps: Sequence[StepRecord], rank_steps: Sequence[Sequence[StepRecord]] = ()
) -> list[float]:
    """A run's step-time pool: its timed steps' times as the job sees them.

    Under a process group the ranks move in lockstep, so a step lasts as long as its
    slowest rank's; a step some rank did not time keeps the lead's own time.
    """
    others = [{s.index: s.step_ms for s in ranked if s.phase == "timed"} for ranked in rank_steps]
    return [
        max([s.step_ms, *(o[s.index] for o in others if s.index in o)]) for s in timed_steps(steps)
    ]


def samples_per_step(steps: Sequence[StepRecord], default_batch: int | None = None) -> float | None:
    """The median over the timed steps of batch x micro-batches; a step whose batch size was
    not seen counts `default_batch` (the training DataLoader's), None when neither is known."""
    sizes = [
        batch * max(1, s.micro_batches)
        for s in timed_steps(steps)
        if (batch := s.batch_size or default_batch)
    ]
    return float(statistics.median(sizes)) if sizes else None


def throughput_samples_s(step_ms: Sequence[float], per_step: float | None) -> float | None:
    """Samples per second at the median step."""
    p50 = median_or_none(finite_numbers(step_ms))
    if per_step is None or p50 is None or p50 <= 0:
        return None
    return per_step * 1000.0 / p50


def peak_rss(steps: Sequence[StepRecord], samples: Sequence[SampleRow] = ()) -> int | None:
    """The process's RSS peak over the run: the largest of the RSS read at each step end
    and of the sampler's readings (10 per second, so between steps too). The report's peak
    and the memory chart's, which draws the sampled line, are then the same figure."""
    values = [s.rss_bytes for s in steps if s.rss_bytes]
    values += [
        row.rss_bytes
        for row in samples
        if isinstance(row, CpuSample) and isinstance(row.rss_bytes, int)
    ]
    return max(values) if values else None


def cuda_peak_bytes(*candidates: Any) -> int | None:
    """CUDA max allocated (or reserved) over the run: the largest of what was seen. The memory
    snapshot covers the profiled window only and the per-step maxima the steps only; the
    child's torch.cuda.max_memory_allocated covers the whole run."""
    return max(
        (int(c) for c in candidates if isinstance(c, int) and not isinstance(c, bool)),
        default=None,
    )


def step_cuda_peak(steps: Sequence[StepRecord]) -> int | None:
    return max(
        (s.cuda_max_allocated_bytes for s in steps if s.cuda_max_allocated_bytes), default=None
    )


def peak_memory_bytes(cuda_peak: int | None, rss_peak: int | None) -> int | None:
    """A run's peak memory: CUDA max allocated on a CUDA run, the process RSS peak on CPU."""
    return cuda_peak if cuda_peak else rss_peak


def timed_samples_summary(
    samples: Sequence[SampleRow],
    progress: Sequence[ProgressRow],
    steps_timed: int,
) -> SamplesSummary:
    """The device and CPU samples of the timed window (energy per step among them)."""
    window, steps = timed_window(progress)
    if window is None:
        steps = steps_timed
    return summarize_samples(samples, window, steps)


def phase_medians(steps: Sequence[StepRecord]) -> dict[str, float]:
    """Median ms per step of each measured phase (a phase never measured is absent)."""
    out: dict[str, float] = {}
    for name, attr in MEASURED_PHASES:
        values = finite_numbers([getattr(s, attr) for s in steps])
        if values:
            out[name] = float(statistics.median(values))
    return out


def breakdown_ms(steps: Sequence[StepRecord]) -> dict[str, float]:
    """Median ms per step in each phase; `other` is what they leave of the median step.
    The same medians give the *_frac facts, so the chart, the table and the facts agree."""
    walls = finite_numbers([s.wall_ms for s in steps])
    if not walls:
        return {}
    out = phase_medians(steps)
    for name, _ in MEASURED_PHASES:
        out.setdefault(name, 0.0)
    out["other"] = max(0.0, float(statistics.median(walls)) - sum(out.values()))
    return out


# --------------------------------------------------------------------------- pools of runs


def usable(runs: Sequence[RunSample]) -> list[RunSample]:
    return [r for r in runs if r.usable]


def pooled_step_ms(runs: Sequence[RunSample]) -> list[float]:
    return [ms for r in usable(runs) for ms in r.step_ms]


def run_medians_spread(runs: Sequence[RunSample]) -> float:
    """Half the range of the runs' median step times, in log space (0 with one run)."""
    return log_half_range([statistics.median(r.step_ms) for r in usable(runs)])


def pooled_throughput(runs: Sequence[RunSample]) -> float | None:
    sizes = [r.samples_per_step for r in usable(runs) if r.samples_per_step]
    return throughput_samples_s(pooled_step_ms(runs), median_or_none(sizes))


def pooled_peak_memory(runs: Sequence[RunSample], reserved: bool = False) -> int | None:
    """The largest peak of the runs that ended normally (a run may peak before it has timed
    a step)."""
    return max(
        (
            value
            for r in runs
            if r.status in OK_STATUSES
            for value in ((r.peak_reserved_bytes if reserved else r.peak_memory_bytes),)
            if value is not None
        ),
        default=None,
    )


def pooled_energy(runs: Sequence[RunSample]) -> float | None:
    known = [r.energy_j_per_step for r in usable(runs) if r.energy_j_per_step is not None]
    return statistics.fmean(known) if known else None


def pool_figures(runs: Sequence[RunSample]) -> PoolFigures:
    """Every figure of one side, from its runs: what the baseline, each variant and each side
    of `perfdoctor compare` report."""
    pooled = pooled_step_ms(runs)
    return PoolFigures(
        runs=len(usable(runs)),
        steps=len(pooled),
        step_ms_p50=median_or_none(pooled),
        step_ms_p90=percentile(pooled, 90) if pooled else None,
        throughput_samples_s=pooled_throughput(runs),
        peak_memory_bytes=pooled_peak_memory(runs),
        energy_j_per_step=pooled_energy(runs),
    )

"""A/B statistics and verdicts: is a variant faster beyond the noise, and are its numbers sane?

Baseline and variant runs alternate (A B A B ...), so run k of the variant is paired with run
k of the baseline: a machine that drifts (thermal, a neighbour job) affects both members of a
pair alike. Per pair, ratio_k = median(baseline steps) / median(variant steps); the speedup is
the median of the pair ratios (in log space: the geometric mean of two pairs).

Noise band: the half-width of a 95% bootstrap interval of that speedup (steps resampled with
replacement within each run, fixed seed, so the same runs always give the same verdict),
widened by the run-to-run spread (half the range of the baseline run medians, or of the
pair ratios when those moved more) when at least two runs exist: the bootstrap alone only
sees step-to-step noise inside a run, not the run-to-run noise that separates two launches
of the same script; and widened by the gap to the same pairs' wall-clock speedup (mean
step, periodic work included; see wall_clock_step_ms). All are taken in log space (see
estimate_speedup); `speedup_noise` is the distance down to the band's lower end, so
"speedup - noise > 1" is exactly "the whole band is above 1".

Verdicts, first match wins, each with a one-line reason:
    failed     a variant run crashed, OOMed, timed out, or recorded no timed step
    rejected   an applier refused or its check failed ("not applied: ...")
    rejected   NaN/inf loss, or the loss trajectory drifts beyond tolerance (numerics.py)
    accepted   speed goal: speedup - noise > 1;  memory goal: peak memory down >= 5%
    rejected   otherwise: "slower: 0.91x ± 0.03" / "within noise: 1.02x ± 0.05"

Pure: no torch.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfdoctor import rundir
from perfdoctor.analyze.record import RunRecord
from perfdoctor.analyze.samples import summarize_samples, timed_window
from perfdoctor.model import AppliedOptimization, RunManifest, StepRecord, VariantResult
from perfdoctor.optimize import numerics
from perfdoctor.optimize.catalog import CATALOG, tolerance_for
from perfdoctor.rules.measurement import busy_limit

log = logging.getLogger(__name__)

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240601
CONFIDENCE = 0.95
# A memory optimization must cut the peak by at least this share to be worth its cost.
MIN_MEMORY_SAVING_FRAC = 0.05
# Run statuses whose timed steps can be compared.
OK_STATUSES = ("completed", "finished_early")


@dataclass(frozen=True)
class RunSample:
    """What the statistics need from one child run (baseline or variant)."""

    label: str
    step_ms: tuple[float, ...]  # timed steps only (no warm-up, no profiler window)
    losses: tuple[float | None, ...] = ()  # one per step from step 0, None where not captured
    peak_memory_bytes: int | None = None  # CUDA max allocated; process RSS peak on CPU
    peak_reserved_bytes: int | None = None  # CUDA max reserved
    energy_j_per_step: float | None = None
    batch_size: int | None = None  # samples per optimizer step
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
class SpeedEstimate:
    speedup: float  # > 1 is faster
    noise: float  # distance from `speedup` down to the band's lower end
    pair_ratios: tuple[float, ...]
    bootstrap_half_width: float  # in log space
    baseline_spread: float  # half-range of the log baseline run medians (0 with one run)
    log_width: float = 0.0  # bootstrap half-width + baseline spread + statistic gap
    wall_clock_speedup: float | None = None  # the same pairs on wall_clock_step_ms
    ratio_spread: float = 0.0  # half-range of the log pair ratios (0 with one pair)
    statistic_gap: float = 0.0  # |log wall_clock_speedup - log speedup|

    @property
    def low(self) -> float:
        """Lower end of the band: the speedup that is safe to claim."""
        return self.speedup - self.noise

    @property
    def high(self) -> float:
        return self.speedup * math.exp(self.log_width)

    def describe(self) -> str:
        return f"{self.speedup:.2f}x ± {self.noise:.2f}"


@dataclass(frozen=True)
class Deltas:
    """Variant against baseline, for the report's table (None = not measured on both)."""

    throughput_ratio: float | None = None
    peak_memory_delta_bytes: int | None = None
    peak_memory_ratio: float | None = None
    energy_delta_j_per_step: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of an empty sequence")
    position = (len(ordered) - 1) * q / 100.0
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def paired_runs(
    baseline_runs: Sequence[RunSample], variant_runs: Sequence[RunSample]
) -> list[tuple[RunSample, RunSample]]:
    """Pair run k with run k; pairs where either side has no usable timing are dropped."""
    return [
        (b, v) for b, v in zip(baseline_runs, variant_runs, strict=False) if b.usable and v.usable
    ]


def adjacent_baselines(
    run_order: Sequence[str], baseline_runs: Sequence[str], variant_runs: Sequence[str]
) -> list[str]:
    """For each run of one variant, the baseline run of its round: the latest baseline run
    before it (else the first one after it), each used once for this variant. These are the
    pairs for `compare_variant`, also for a variant measured long after the first baseline
    runs (the stacked one)."""
    position = {run: index for index, run in enumerate(run_order)}
    free = sorted((b for b in baseline_runs if b in position), key=position.__getitem__)
    paired: list[str] = []
    for run in variant_runs:
        if run not in position or not free:
            continue
        before = [b for b in free if position[b] < position[run]]
        chosen = before[-1] if before else free[0]
        free.remove(chosen)
        paired.append(chosen)
    return paired


def baseline_run_spread(baseline_runs: Sequence[RunSample]) -> float:
    """Half the range of the baseline run medians, in log space (0 with one run)."""
    medians = [statistics.median(r.step_ms) for r in baseline_runs if r.usable]
    if len(medians) < 2:
        return 0.0
    return (math.log(max(medians)) - math.log(min(medians))) / 2.0


def _log_ratio(baseline_ms: Sequence[float], variant_ms: Sequence[float]) -> float:
    return math.log(statistics.median(baseline_ms) / statistics.median(variant_ms))


# A step above this percentile of its run counts at the percentile's value in the
# wall-clock time per step: a one-off stall should not move it, periodic work must.
WALL_CLOCK_CLIP_PERCENTILE = 95.0


def wall_clock_step_ms(step_ms: Sequence[float]) -> float:
    """Time per step as the run's wall clock sees it: the mean step, every step counted,
    with the few slowest clipped to the 95th percentile. A median over steps leaves out work
    that comes every few steps (an evaluation every 5th step, logging every 10th) whenever
    it lands in fewer than half of them, so the median's speedup can lie far from the one
    the script's own timer reports."""
    cap = percentile(step_ms, WALL_CLOCK_CLIP_PERCENTILE)
    return statistics.fmean(min(ms, cap) for ms in step_ms)


def estimate_speedup(
    baseline_runs: Sequence[RunSample],
    variant_runs: Sequence[RunSample],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
    between_rounds: bool = False,
) -> SpeedEstimate | None:
    """Ratios are combined and bounded in log space, where run-to-run noise is additive (a
    machine that is 30% slower for one run scales every step of it): the pairs combine by
    the median of their log ratios (the geometric mean for two pairs), and the band is
    speedup x exp(-w) .. speedup x exp(w) with w = bootstrap half-width + baseline spread
    + statistic gap.

    The bootstrap resamples steps inside each run, so it sees neither the noise between runs
    nor how far the median step is from the wall-clock time per step. The baseline spread
    stands for the first; with `between_rounds` (a variant's verdict) the pair ratios' own
    half-range does when it is larger: how far the ratio itself moved from round to round,
    which a variant that drifts while the baseline does not shows and the baseline's
    medians do not. (The regression gate, comparing two sessions of one script, keeps the
    baseline spread and widens by its own rule.) The statistic gap is
    the distance between this speedup and the same pairs' ratio of wall_clock_step_ms: on
    tabular_mlp_debug with anomaly-off the median's 2.61x band (low end 2.05) lay above
    every ratio of the script's own ms/step (1.76-1.88x), because anomaly mode slows the
    evaluation step (every 5th) far less than a training step, and a median over steps sees
    training steps only (benchmarks/README.md, "speedup band")."""
    pairs = paired_runs(baseline_runs, variant_runs)
    if not pairs:
        return None
    logs = [_log_ratio(b.step_ms, v.step_ms) for b, v in pairs]
    center = statistics.median(logs)

    rng = random.Random(seed)
    boot: list[float] = []
    for _ in range(resamples):
        boot.append(
            statistics.median(
                _log_ratio(
                    rng.choices(b.step_ms, k=len(b.step_ms)),
                    rng.choices(v.step_ms, k=len(v.step_ms)),
                )
                for b, v in pairs
            )
        )
    tail = (1.0 - confidence) / 2.0 * 100.0
    half_width = (percentile(boot, 100.0 - tail) - percentile(boot, tail)) / 2.0
    spread = baseline_run_spread(baseline_runs)
    wall_clock = statistics.median(
        math.log(wall_clock_step_ms(b.step_ms) / wall_clock_step_ms(v.step_ms)) for b, v in pairs
    )
    gap = abs(wall_clock - center)
    ratio_spread = (max(logs) - min(logs)) / 2.0
    run_to_run = max(spread, ratio_spread) if between_rounds else spread
    width = half_width + run_to_run + gap
    speedup = math.exp(center)
    return SpeedEstimate(
        speedup=speedup,
        noise=speedup - math.exp(center - width),
        pair_ratios=tuple(math.exp(x) for x in logs),
        bootstrap_half_width=half_width,
        baseline_spread=spread,
        log_width=width,
        wall_clock_speedup=math.exp(wall_clock),
        statistic_gap=gap,
        ratio_spread=ratio_spread,
    )


def _pooled(runs: Sequence[RunSample]) -> list[float]:
    return [ms for r in runs if r.usable for ms in r.step_ms]


def pooled_text(runs: Sequence[RunSample]) -> str:
    """How a pooled median was taken: "median of 40 steps over 2 runs"."""
    usable = [r for r in runs if r.usable]
    steps = sum(len(r.step_ms) for r in usable)
    return f"median of {steps} steps over {len(usable)} run" + ("" if len(usable) == 1 else "s")


def _peak(runs: Sequence[RunSample], reserved: bool = False) -> int | None:
    values = [
        (r.peak_reserved_bytes if reserved else r.peak_memory_bytes)
        for r in runs
        if r.status in OK_STATUSES
    ]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _throughput(runs: Sequence[RunSample]) -> float | None:
    pooled = _pooled(runs)
    sizes = [r.batch_size for r in runs if r.usable and r.batch_size]
    if not pooled or not sizes:
        return None
    return statistics.median(sizes) * 1000.0 / statistics.median(pooled)


def deltas(baseline_runs: Sequence[RunSample], variant_runs: Sequence[RunSample]) -> Deltas:
    base_tp, var_tp = _throughput(baseline_runs), _throughput(variant_runs)
    base_mem, var_mem = _peak(baseline_runs), _peak(variant_runs)
    base_energy = _mean([r.energy_j_per_step for r in baseline_runs if r.usable])
    var_energy = _mean([r.energy_j_per_step for r in variant_runs if r.usable])
    return Deltas(
        throughput_ratio=var_tp / base_tp if base_tp and var_tp else None,
        peak_memory_delta_bytes=(
            var_mem - base_mem if base_mem is not None and var_mem is not None else None
        ),
        peak_memory_ratio=var_mem / base_mem if base_mem and var_mem is not None else None,
        energy_delta_j_per_step=(
            var_energy - base_energy if base_energy is not None and var_energy is not None else None
        ),
    )


# --------------------------------------------------------------------------- verdicts


def not_applied_reason(
    variant_runs: Sequence[RunSample], optimization_ids: Sequence[str]
) -> str | None:
    """Why an optimization did not demonstrably take effect in some run (None: all did)."""
    for run in variant_runs:
        if not run.usable:
            continue
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


def _fmt_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _memory_verdict(
    baseline_runs: Sequence[RunSample],
    variant_runs: Sequence[RunSample],
    speed: SpeedEstimate | None,
) -> tuple[str, str]:
    use_reserved = _peak(baseline_runs, True) is not None and _peak(variant_runs, True) is not None
    base = _peak(baseline_runs, use_reserved)
    var = _peak(variant_runs, use_reserved)
    what = "reserved" if use_reserved else "peak"
    speed_note = f"; speed {speed.describe()}" if speed else ""
    if not base or var is None:
        return "rejected", f"memory optimization, but peak memory was not measured{speed_note}"
    saved = 1.0 - var / base
    change = f"{what} memory {_fmt_bytes(base)} -> {_fmt_bytes(var)} ({-saved:+.0%})"
    if saved >= MIN_MEMORY_SAVING_FRAC:
        return "accepted", f"{change}{speed_note}"
    return "rejected", f"{change}: less than {MIN_MEMORY_SAVING_FRAC:.0%} saved{speed_note}"


def speed_verdict(speed: SpeedEstimate | None, extra: str) -> tuple[str, str]:
    if speed is None:
        return "rejected", "no paired timing to compare"
    if speed.low > 1.0:
        return "accepted", f"faster: {speed.describe()}{extra}"
    if speed.high < 1.0:
        return "rejected", f"slower: {speed.describe()}{extra}"
    return "rejected", f"within noise: {speed.describe()}{extra}"


def compare_variant(
    baseline_runs: Sequence[RunSample],
    variant_runs: Sequence[RunSample],
    optimization_ids: Sequence[str],
    tolerance: float | None = None,
    *,
    label: str | None = None,
    seed: int = BOOTSTRAP_SEED,
) -> VariantResult:
    """Verdict for one variant. `tolerance` overrides the catalog's loss tolerance category
    (the loosest of `optimization_ids`); the baseline's run-to-run spread can still widen it.
    Pass the runs in run order: baseline run k is paired with variant run k."""
    ids = tuple(optimization_ids)
    name = label or (variant_runs[0].label if variant_runs else "+".join(ids))
    category_tolerance = tolerance if tolerance is not None else tolerance_for(ids)
    usable = [r for r in variant_runs if r.usable]
    pooled = _pooled(usable)
    applied = next((r.applied for r in variant_runs if r.applied), ())
    base_pooled = _pooled(baseline_runs)
    common = {
        "label": name,
        "optimizations": ids,
        "baseline_step_ms_p50": statistics.median(base_pooled) if base_pooled else None,
        "pooled": (
            f"{pooled_text(usable)}; baseline {pooled_text(baseline_runs)}"
            if pooled and base_pooled
            else ""
        ),
        "step_ms_p50": statistics.median(pooled) if pooled else None,
        "step_ms_p90": percentile(pooled, 90) if pooled else None,
        "peak_memory_bytes": _peak(variant_runs),
        "throughput_samples_s": _throughput(usable),
        "energy_j_per_step": _mean([r.energy_j_per_step for r in usable]),
        "applied": applied,
        "run_dirs": tuple(r.run_dir for r in variant_runs),
    }

    broken = next((r for r in variant_runs if not r.usable), None)
    if not variant_runs or broken is not None:
        reason = broken.failure_line() if broken else "the variant never ran"
        return VariantResult(
            speedup=None,
            speedup_noise=None,
            loss_delta=None,
            verdict="failed",
            reason=reason,
            **common,
        )

    speed = estimate_speedup(baseline_runs, usable, seed=seed, between_rounds=True)
    speed_fields = {
        "speedup": speed.speedup if speed else None,
        "speedup_noise": speed.noise if speed else None,
    }
    missing = not_applied_reason(usable, ids)
    if missing is not None:
        return VariantResult(
            loss_delta=None,
            verdict="rejected",
            reason=f"not applied: {missing}",
            **speed_fields,
            **common,
        )

    guard = numerics.check_losses(
        [r.losses for r in baseline_runs if r.status in OK_STATUSES and r.losses],
        [r.losses for r in usable if r.losses],
        category_tolerance,
    )
    if not guard.ok:
        return VariantResult(
            loss_delta=guard.loss_delta,
            verdict="rejected",
            reason=guard.reason,
            **speed_fields,
            **common,
        )

    extra = "" if guard.checked else f" ({guard.reason})"
    if _goal(ids) == "memory":
        verdict, reason = _memory_verdict(baseline_runs, usable, speed)
        reason += extra
    else:
        verdict, reason = speed_verdict(speed, extra)
    # Step times move with other load; a memory verdict does not.
    low_confidence = (
        None if _goal(ids) == "memory" else busy_machine_note([*baseline_runs, *usable])
    )
    if low_confidence:
        reason += f"; low confidence: {low_confidence}"
    log.debug("variant %s: %s (%s)", name, verdict, reason)
    return VariantResult(
        loss_delta=guard.loss_delta,
        verdict=verdict,  # type: ignore[arg-type]
        reason=reason,
        low_confidence=low_confidence,
        **speed_fields,
        **common,
    )


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
        if r.verdict == "accepted" and len(r.optimizations) == 1 and r.optimizations[0] in CATALOG
    ]
    accepted.sort(key=lambda r: -(r.speedup or 0.0))
    chosen: list[str] = []
    for result in accepted:
        opt_id = result.optimizations[0]
        if any(opt_id in CATALOG[c].excludes or c in CATALOG[opt_id].excludes for c in chosen):
            continue
        chosen.append(opt_id)
    return chosen


# --------------------------------------------------------------------------- run directories


def run_sample_from_record(record: RunRecord) -> RunSample:
    """A RunSample from a loaded child run (analyze.record.load_run)."""
    return build_run_sample(
        run_dir=record.dir,
        manifest=record.manifest,
        steps=record.steps,
        observations=record.observations,
        samples=record.samples,
        progress=record.progress,
        rank_steps=tuple(r.steps for r in record.ranks),
    )


def load_run_sample(run_dir: Path) -> RunSample:
    """A RunSample straight from a child run directory, without parsing its trace."""
    manifest_path = run_dir / rundir.MANIFEST_FILE
    return build_run_sample(
        run_dir=run_dir,
        manifest=rundir.load_manifest(run_dir) if manifest_path.is_file() else None,
        steps=rundir.load_steps(run_dir),
        observations=_read_observations(run_dir),
        samples=tuple(rundir.read_jsonl(run_dir / rundir.SAMPLES_FILE)),
        progress=tuple(rundir.read_jsonl(run_dir / rundir.PROGRESS_FILE)),
        rank_steps=tuple(rundir.load_steps(path) for _, path in rundir.rank_dirs(run_dir)),
    )


def _job_step_ms(
    ordered: Sequence[StepRecord], rank_steps: Sequence[Sequence[StepRecord]]
) -> list[float]:
    """Timed step times as the job sees them: the slowest rank's, step by step.

    Under a process group the ranks move in lockstep, so a step lasts as long as its
    slowest rank's; a step some rank did not time keeps the lead's own time.
    """
    others = [{s.index: s.step_ms for s in steps if s.phase == "timed"} for steps in rank_steps]
    return [
        max([s.step_ms, *(o[s.index] for o in others if s.index in o)])
        for s in ordered
        if s.phase == "timed"
    ]


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


def build_run_sample(
    *,
    run_dir: Path,
    manifest: RunManifest | None,
    steps: Sequence[StepRecord],
    observations: Mapping[str, Any],
    samples: Sequence[Mapping[str, Any]] = (),
    progress: Sequence[Mapping[str, Any]] = (),
    rank_steps: Sequence[Sequence[StepRecord]] = (),
) -> RunSample:
    """Peak memory: CUDA max allocated (observations, else the per-step maxima) on CUDA runs,
    the process RSS peak on CPU runs. Energy per step: NVML's energy counter over the timed
    window (analyze.samples), None without a GPU."""
    ordered = sorted(steps, key=lambda s: s.index)
    timed = _job_step_ms(ordered, rank_steps)
    cuda_memory = observations.get("cuda_memory") or {}
    cuda_peaks = [s.cuda_max_allocated_bytes for s in ordered if s.cuda_max_allocated_bytes]
    rss_peak = peak_rss(ordered, samples)
    peak = cuda_memory.get("max_allocated_bytes") or (max(cuda_peaks) if cuda_peaks else rss_peak)
    window, steps_in_window = timed_window(progress)
    sampled = summarize_samples(samples, window, steps_in_window)
    batch_sizes = [s.batch_size * max(1, s.micro_batches) for s in ordered if s.batch_size]
    applied = manifest.applied if manifest is not None else ()
    if not applied:
        # The child writes applier results into observations; prefer the manifest's copy.
        applied = tuple(
            AppliedOptimization(
                id=str(row.get("id")),
                applied=bool(row.get("applied")),
                verified=bool(row.get("verified")),
                detail=str(row.get("detail", "")),
            )
            for row in observations.get("applied") or ()
            if isinstance(row, dict)
        )
    return RunSample(
        label=manifest.label if manifest is not None else Path(run_dir).name,
        step_ms=tuple(timed),
        losses=_job_losses(ordered, rank_steps),
        peak_memory_bytes=peak,
        peak_reserved_bytes=cuda_memory.get("max_reserved_bytes"),
        energy_j_per_step=sampled.energy_j_per_step,
        batch_size=int(statistics.median(batch_sizes)) if batch_sizes else None,
        status=manifest.status if manifest is not None else "launch_failed",
        exit_code=manifest.exit_code if manifest is not None else 1,
        error=manifest.error if manifest is not None else "the run left no manifest",
        applied=applied,
        run_dir=str(run_dir),
        other_busy_cores=sampled.other_busy_cores,
        cpu_cores=sampled.cpu_cores,
    )


def peak_rss(steps: Sequence[StepRecord], samples: Sequence[Mapping[str, Any]] = ()) -> int | None:
    """The process's RSS peak over the run: the largest of the RSS read at each step end
    and of the sampler's readings (10 per second, so between steps too). The report's peak
    and the memory chart's, which draws the sampled line, are then the same figure."""
    values = [s.rss_bytes for s in steps if s.rss_bytes]
    values += [
        int(row["rss_bytes"])
        for row in samples
        if isinstance(row, Mapping)
        and row.get("kind") == "cpu"
        and isinstance(row.get("rss_bytes"), int)
        and not isinstance(row.get("rss_bytes"), bool)
    ]
    return max(values) if values else None


def _read_observations(run_dir: Path) -> dict[str, Any]:
    path = run_dir / rundir.OBSERVATIONS_FILE
    if not path.is_file():
        return {}
    try:
        data = rundir.read_json(path)
    except ValueError:
        log.warning("unreadable %s in %s", rundir.OBSERVATIONS_FILE, run_dir)
        return {}
    return data if isinstance(data, dict) else {}

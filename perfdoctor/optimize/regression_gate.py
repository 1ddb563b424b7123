"""The CI regression gate of `perfdoctor compare A B --fail-if-slower PCT`.

B fails the gate (exit 70) only when it is worse than A by more than PCT *beyond the
noise*; it passes (exit 0) only when it is within PCT beyond the noise. A change that
cannot be told from noise at the limit is "cannot tell": the gate is then undecided (exit 71,
errors.EXIT_UNDECIDED) and asks for more runs per side, never a silent pass (a 2x slowdown
of two single runs with noisy steps had a band of -10% .. +260% against a 10% limit, and
passed). `--strict` makes an undecided gate fail as a regression does (exit 70).

Step time. The change is B's median step over A's (through the same paired, bootstrapped
speedup that `compare` reports, estimate.py), and its band is that speedup's band:
the bootstrap over steps, widened by each side's run-to-run spread (half the range of its
run medians, in log space). A side with a single run has no measured run-to-run spread, so
the gate assumes SINGLE_RUN_SPREAD_LOG for it: without repeats, the only noise a run shows
is step-to-step noise, and two launches of the same script differ by more than that (A/A
pairs of single runs measured 0.76x, 0.82x and 0.92x on a loaded 2-core CPU machine).
`perfdoctor profile --repeat N --no-apply train.py` records N runs per side, which
replaces the assumption with a measurement. With three runs or more in all (one or more on
each side) the band is run-level instead (`run_level_band`): each run one observation (its
median step, or its wall time over its steps where steps are bursty, optimize/engine.py), a
Student t interval on the difference of the sides' mean log run values (pooled variance: one
script, one machine, so a side of one run takes its scatter from the other side's runs),
which narrows as runs are added: an A/A of records of the same script passes a limit its
runs' scatter allows, and the runs of B that the gate measures by itself (gate_more.py)
narrow it even when A is a single run.

Peak memory. The change is the median of B's per-run peaks over A's (CUDA max allocated,
else the process RSS peak), with each side's half-range of its run peaks as its noise, or
SINGLE_RUN_MEMORY_SPREAD_LOG for a side with one run. A run's peak is taken over its warm-up
and timed steps: only the first run of a side carries the profiler window, whose buffers
would otherwise make it look bigger than the side's timing-only repeats.

Outcome per limit, with change band [low, high] in percent (positive: B is worse):
    regression   low > PCT: worse than the limit even at the band's favourable end
    pass         high <= PCT: within the limit even at the band's unfavourable end
    cannot_tell  the band straddles the limit
    unmeasured   a side has no usable run or no such measure: the gate fails, because a
                 gate that measured nothing must not pass a build silently

Pure: no torch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, TypedDict

from perfdoctor.analyze import run_stats
from perfdoctor.analyze.record import RunRecord
from perfdoctor.analyze.run_stats import OK_STATUSES, RunSample, usable
from perfdoctor.errors import EXIT_OK, EXIT_REGRESSION, EXIT_UNDECIDED
from perfdoctor.optimize.compare_runs import load_side, script_display
from perfdoctor.optimize.engine import choose_statistic, t_quantile, window_value
from perfdoctor.optimize.estimate import widened_estimate
from perfdoctor.optimize.run_samples import run_sample_from_record

# Assumed run-to-run half-spread (log space) of a side recorded with a single run: ±15%.
# Each of two single runs may be off by that much, so an A/A pair of single runs gets a band
# of about ±30%, which covers the 0.76x-0.92x A/A pairs measured on a loaded CPU machine.
SINGLE_RUN_SPREAD_LOG = 0.15
# The same for the peak memory of a single run: allocator and RSS peaks of identical runs
# differ by a few percent (page cache, allocator caching), not by tens of percent.
SINGLE_RUN_MEMORY_SPREAD_LOG = 0.03

METRIC_NAMES = {"step_time": "step time", "peak_memory": "peak memory"}
Outcome = Literal["pass", "regression", "cannot_tell", "unmeasured"]


@dataclass(frozen=True)
class GateLimits:
    slower_pct: float | None = None  # --fail-if-slower
    more_memory_pct: float | None = None  # --fail-if-more-memory
    strict: bool = False  # "cannot tell" fails as a regression (70), not undecided (71)

    @property
    def any(self) -> bool:
        return self.slower_pct is not None or self.more_memory_pct is not None


class _RunCounts(TypedDict):
    runs_a: int
    runs_b: int


@dataclass(frozen=True)
class GateCheck:
    metric: Literal["step_time", "peak_memory"]
    limit_pct: float
    outcome: Outcome
    reason: str  # one line
    change_pct: float | None = None  # B against A; positive: B is slower / uses more memory
    low_pct: float | None = None  # the band of the change
    high_pct: float | None = None
    runs_a: int = 0
    runs_b: int = 0
    noise_assumed: bool = False  # a side had one run: its run-to-run spread is assumed

    @property
    def failed(self) -> bool:
        return self.outcome in ("regression", "unmeasured")


GateOutcome = Literal["passed", "failed", "undecided"]


@dataclass(frozen=True)
class GateResult:
    checks: tuple[GateCheck, ...]
    strict: bool
    passed: bool  # every check passed: exit 0
    summary: str  # one line: what decided the gate
    hint: str | None = None  # how to get a decided verdict, when one was "cannot tell"
    # "failed": exit 70; "undecided": a check could not tell, none failed, not --strict:
    # exit 71; "passed": exit 0.
    outcome: GateOutcome = "passed"

    @property
    def exit_code(self) -> int:
        return {"passed": EXIT_OK, "failed": EXIT_REGRESSION, "undecided": EXIT_UNDECIDED}[
            self.outcome
        ]


def _outcome(low: float, high: float, limit: float) -> Outcome:
    if low > limit:
        return "regression"
    if high <= limit:
        return "pass"
    return "cannot_tell"


def _pct(ratio: float) -> float:
    return (ratio - 1.0) * 100.0


def _band_text(check: GateCheck) -> str:
    band = f"(band {check.low_pct:+.1f}% .. {check.high_pct:+.1f}%)"
    assert check.change_pct is not None
    if check.metric == "step_time":
        # The same estimate as compare's Verdict speedup, shown as that speedup too so that
        # the reader sees one figure, not two.
        speedup = 1.0 / (1.0 + check.change_pct / 100.0)
        return f"{speedup:.2f}x = {check.change_pct:+.1f}% step time {band}"
    return f"{check.change_pct:+.1f}% {band}"


def check_step_time(a: Sequence[RunSample], b: Sequence[RunSample], limit: float) -> GateCheck:
    runs_a, runs_b = len(usable(a)), len(usable(b))
    counts = _RunCounts(runs_a=runs_a, runs_b=runs_b)
    if not runs_a or not runs_b:
        side = "A" if not runs_a else "B"
        return GateCheck(
            "step_time", limit, "unmeasured", f"{side} has no run with timed steps", **counts
        )
    speed = widened_estimate(a, usable(b))
    if speed is None:
        return GateCheck("step_time", limit, "unmeasured", "no paired timing to compare", **counts)
    if runs_a + runs_b >= RUN_LEVEL_MIN_RUNS:
        level = run_level_band(usable(a), usable(b))
        if level is not None:
            log_ratio, width = level
            return _banded_check("step_time", limit, log_ratio, width, False, counts)
    assumed = (runs_a < 2) + (runs_b < 2)
    width = speed.log_width + assumed * SINGLE_RUN_SPREAD_LOG
    # Slowdown of B is the inverse of its speedup; the band's ends swap.
    return _banded_check("step_time", limit, -math.log(speed.speedup), width, assumed > 0, counts)


# The run-level band's confidence: the same 95% as every other band of the gate.
RUN_LEVEL_CONFIDENCE = 0.95
# Runs in all (at least one a side) for the run-level band: one degree of freedom. A side of
# one run (a plain `profile --no-apply` record) takes its scatter from the other side's runs
# (one pooled variance); with an assumed ±15% for it instead, an A/A of one-run records could
# never pass a 10% limit, whatever number of B's runs the gate measured by itself (a real A/A
# of makemore at load 19-34: 1 vs 7 runs, band -42% .. +104%, exit 71 after 6 more runs).
RUN_LEVEL_MIN_RUNS = 3


def run_level_band(a: Sequence[RunSample], b: Sequence[RunSample]) -> tuple[float, float] | None:
    """B's slowdown against A from whole runs, with two or more runs a side: the difference
    of the mean log run values (median step, or wall time over steps where A's steps are
    bursty: optimize/engine.py's statistic), and the half-width of its pooled t interval. Each
    run is one observation, so the interval is calibrated by what the runs themselves
    scatter: the bootstrap-plus-spreads band adds up noises that overlap, and an A/A of two
    records of 4 runs each at load 3.8 straddled a 10% limit with it (issue 32), while more
    runs narrow this one as 1/sqrt(n)."""
    statistic = choose_statistic([ms for r in a for ms in r.step_ms]).name
    log_a = [math.log(v) for r in a if (v := window_value(r.step_ms, statistic))]
    log_b = [math.log(v) for r in b if (v := window_value(r.step_ms, statistic))]
    n_a, n_b = len(log_a), len(log_b)
    if not n_a or not n_b or n_a + n_b < RUN_LEVEL_MIN_RUNS:
        return None
    diff = statistics.fmean(log_b) - statistics.fmean(log_a)
    # One pooled variance (Student's t, n_a + n_b - 2 degrees of freedom): both sides are
    # runs of one script on one machine, so their run-to-run scatter is one noise. Welch's
    # separate variances gave an A of 2 runs a single degree of freedom (t = 12.7): a band
    # of -99% .. +78,000% that no number of B's runs could narrow.
    pooled = (_sum_sq(log_a) + _sum_sq(log_b)) / (n_a + n_b - 2)
    se = math.sqrt(pooled * (1.0 / n_a + 1.0 / n_b))
    return diff, t_quantile(RUN_LEVEL_CONFIDENCE, n_a + n_b - 2) * se


def _sum_sq(values: Sequence[float]) -> float:
    """Squared deviations from the side's own mean: (n - 1) x its variance, 0 for one run."""
    mean = statistics.fmean(values)
    return sum((v - mean) ** 2 for v in values)


def _peaks(samples: Sequence[RunSample]) -> list[int]:
    return [
        s.peak_memory_bytes
        for s in samples
        if s.status in OK_STATUSES and s.peak_memory_bytes is not None and s.peak_memory_bytes > 0
    ]


def _half_range(values: Sequence[int]) -> float:
    if len(values) < 2:
        return SINGLE_RUN_MEMORY_SPREAD_LOG
    return run_stats.log_half_range(values)


def check_peak_memory(a: Sequence[RunSample], b: Sequence[RunSample], limit: float) -> GateCheck:
    peaks_a, peaks_b = _peaks(a), _peaks(b)
    counts = _RunCounts(runs_a=len(peaks_a), runs_b=len(peaks_b))
    if not peaks_a or not peaks_b:
        side = "A" if not peaks_a else "B"
        return GateCheck(
            "peak_memory", limit, "unmeasured", f"{side} has no peak memory measured", **counts
        )
    log_ratio = math.log(statistics.median(peaks_b) / statistics.median(peaks_a))
    width = _half_range(peaks_a) + _half_range(peaks_b)
    assumed = len(peaks_a) < 2 or len(peaks_b) < 2
    return _banded_check("peak_memory", limit, log_ratio, width, assumed, counts)


def _banded_check(
    metric: Literal["step_time", "peak_memory"],
    limit: float,
    log_ratio: float,
    width: float,
    noise_assumed: bool,
    counts: _RunCounts,
) -> GateCheck:
    """A measured check: B against A as a log ratio (positive: B is worse), its band
    log_ratio ± width, and the outcome against the limit."""
    change, low, high = (_pct(math.exp(log_ratio + d)) for d in (0.0, -width, width))
    outcome = _outcome(low, high, limit)
    check = GateCheck(
        metric,
        limit,
        outcome,
        "",
        change_pct=change,
        low_pct=low,
        high_pct=high,
        noise_assumed=noise_assumed,
        **counts,
    )
    return _with_reason(check, outcome, limit)


def _with_reason(check: GateCheck, outcome: str, limit: float) -> GateCheck:
    """The check's one-line reason: its band, and where that puts it against the limit."""
    words = {
        "regression": f"worse than the {limit:g}% limit beyond the noise",
        "pass": f"within the {limit:g}% limit beyond the noise",
        "cannot_tell": f"the band straddles the {limit:g}% limit",
    }[outcome]
    return replace(check, reason=f"{_band_text(check)}: {words}")


def evaluate_gate(
    a: Sequence[RunSample],
    b: Sequence[RunSample],
    limits: GateLimits,
    script: str | None = None,
) -> GateResult:
    """The gate over the runs of each side, repeat 1 first (pure: tests feed samples).
    `script`: the recorded script, named in the hint's command."""
    checks: list[GateCheck] = []
    if limits.slower_pct is not None:
        checks.append(check_step_time(a, b, limits.slower_pct))
    if limits.more_memory_pct is not None:
        checks.append(check_peak_memory(a, b, limits.more_memory_pct))
    failing = [c for c in checks if c.failed or (limits.strict and c.outcome == "cannot_tell")]
    undecided = [c for c in checks if c.outcome == "cannot_tell"]
    hint = more_runs_hint(undecided, script) if undecided else None
    outcome: GateOutcome
    if failing:
        first = failing[0]
        kind = "cannot tell (--strict)" if first.outcome == "cannot_tell" else first.outcome
        summary = f"FAILED: {METRIC_NAMES[first.metric]} {kind.replace('_', ' ')}"
        outcome = "failed"
    elif undecided:
        summary = (
            f"UNDECIDED: {METRIC_NAMES[undecided[0].metric]} cannot tell: its band straddles "
            f"the limit (exit {EXIT_UNDECIDED}: record more runs per side)"
        )
        outcome = "undecided"
    else:
        summary = "passed"
        outcome = "passed"
    return GateResult(
        checks=tuple(checks),
        strict=limits.strict,
        passed=outcome == "passed",
        summary=summary,
        hint=hint,
        outcome=outcome,
    )


# Runs per side the hint asks for at least: with 3 the run-to-run spread is measured, not
# assumed, and a median of run medians is no longer one run's.
MIN_SUGGESTED_REPEATS = 3


def more_runs_hint(undecided: Sequence[GateCheck], script: str | None = None) -> str:
    """How to turn "cannot tell" into a verdict: more runs per side, with the command for
    the recorded script (SCRIPT when it is not known)."""
    runs = max(max(c.runs_a, c.runs_b) for c in undecided)
    repeats = max(MIN_SUGGESTED_REPEATS, 2 * runs)
    text = (
        f"record {repeats} runs per side (now {undecided[0].runs_a} vs {undecided[0].runs_b}): "
        f"perfdoctor profile --no-apply --repeat {repeats} {script or 'SCRIPT'} records "
        f"{repeats} baseline "
        "runs, for each of A and B, to narrow the band"
    )
    if not any(c.noise_assumed for c in undecided):
        text += "; a quieter machine narrows it too"
    return text


_UNPROFILED_PHASES = ("warmup", "timed")


def unprofiled_peak(record: RunRecord) -> int | None:
    """The run's memory peak before any profiler window (run_stats.peak_memory_bytes over
    its warm-up and timed steps): CUDA max allocated, else RSS."""
    steps = [s for s in record.steps if s.phase in _UNPROFILED_PHASES]
    return run_stats.peak_memory_bytes(run_stats.step_cuda_peak(steps), run_stats.peak_rss(steps))


def gate_samples(records: Sequence[RunRecord]) -> list[RunSample]:
    """The runs of one side as the gate judges them: with the peak memory of their
    unprofiled steps."""
    samples = []
    for record in records:
        sample = run_sample_from_record(record)
        peak = unprofiled_peak(record)
        samples.append(replace(sample, peak_memory_bytes=peak) if peak else sample)
    return samples


def run_gate(run_a: Path, run_b: Path, limits: GateLimits) -> GateResult:
    """The gate over every run of each side (a session's baseline repeats, or one child run's
    repeats)."""
    a, b = load_side(Path(run_a)), load_side(Path(run_b))
    return evaluate_gate(
        gate_samples(a.records), gate_samples(b.records), limits, script_display(b.records[0])
    )

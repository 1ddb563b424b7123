"""`perfdoctor compare RUN_A RUN_B`: judge run B against run A, e.g. before and after a change.

The two runs may come from different sessions, scripts or machines. B is judged against A
with the statistics and verdict rules of the A/B re-runs (estimate.py, verdicts.py), and each
side's figures are analyze/run_stats.py's, as the session report's are: speedup as
the ratio of median step times, accepted only when its whole noise band is above 1.

Noise band. Within one session, baseline and variant runs alternate (A B A B), so each
variant run is paired with its adjacent baseline run. Across sessions no such pairing exists:
run k of A is paired with run k of B in repeat order (a longer side's extra runs feed only its
spread and its pooled figures). The band is the bootstrap interval of the speedup (steps
resampled within each run) widened by A's run-to-run spread, as in the re-runs, and by B's
own run-to-run spread as well, because B is not known to share A's machine or conditions.
With one run per side the band covers step-to-step noise only, and the result says so.

Numerics. The loss guard of the re-runs applies only when both sides ran the same script
with the same arguments and seed on the same kind of device: only then are their loss
trajectories expected to match step for step. Otherwise the final-loss difference is
reported for information and is no input to the verdict, and the reason says so.

Pure: no torch (the runs are read from their directories).
"""

from __future__ import annotations

import logging
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from perfdoctor import rundir
from perfdoctor.analyze.fact_catalog import FACTS
from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.record import RunRecord, load_run
from perfdoctor.analyze.run_stats import OK_STATUSES, RunSample, pool_figures, usable
from perfdoctor.diagnose import resolve_input, resolve_session_dir
from perfdoctor.errors import BadRunDir, CorruptArtifact
from perfdoctor.model import (
    DeviceInfo,
    Facts,
    Finding,
    RunStatus,
    Scalar,
    StepPlan,
    VariantResult,
)
from perfdoctor.optimize import numerics
from perfdoctor.optimize.catalog import TOLERANCES, tolerance_category_for
from perfdoctor.optimize.estimate import widened_estimate
from perfdoctor.optimize.run_samples import run_sample_from_record
from perfdoctor.optimize.verdicts import compare_variant, speed_verdict
from perfdoctor.rules import evaluate
from perfdoctor.rundir import BASELINE_LABEL, SCHEMA_VERSION, is_child_dir, repeat_dirs

log = logging.getLogger(__name__)

# A fact is listed as changed when it moved by at least this much: the symmetric relative
# change |b - a| / max(|a|, |b|) for most facts, the absolute change for shares of the step
# (`_frac`: 0.10 = 10 points), where a relative change of a tiny share means nothing.
MIN_FACT_CHANGE = 0.10
MAX_FACT_CHANGES = 12
# Shown side by side in the summary already (pooled over every run of a side); listing the
# profiled run's own value of the same measure again would show two different numbers.
SUMMARY_FACTS = frozenset(
    {"step_ms_p50", "step_ms_p90", "step_ms_mean", "throughput_samples_s", "data_wait_frac"}
)


@dataclass(frozen=True)
class RunSide:
    """One side of a comparison: what ran, where, and what it measured."""

    path: str  # the session or child run directory the side was read from
    run_dirs: tuple[str, ...]  # the child runs used, repeat 1 (the profiled one) first
    script: str  # as the user typed it; "-m pkg.mod" for a module
    argv: tuple[str, ...]
    cwd: str | None
    seed: int | None
    plan: StepPlan | None
    status: RunStatus | None  # of the profiled run
    exit_code: int | None
    error: str | None
    device: DeviceInfo | None
    versions: Mapping[str, str]
    runs: int  # runs with usable timed steps
    step_ms_p50: float | None  # pooled over the usable runs' timed steps
    step_ms_p90: float | None
    throughput_samples_s: float | None
    peak_memory_bytes: int | None  # CUDA max allocated; process RSS peak on CPU
    energy_j_per_step: float | None
    data_wait_frac: float | None  # of the profiled run
    step_detection: str | None
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class SetupDifference:
    """Something about how the two runs were made that is not the same."""

    name: str  # script, argv, seed, device, torch, python, cuda, plan, status
    a: str
    b: str


@dataclass(frozen=True)
class FactChange:
    name: str  # a fact name of analyze/fact_catalog.py
    a: Scalar
    b: Scalar
    unit: str
    absolute_change: float | None  # b - a, numeric facts only
    relative_change: float | None  # (b - a) / |a|; None when a is 0 or not a number


@dataclass(frozen=True)
class RunComparison:
    schema_version: int
    a: RunSide
    b: RunSide
    verdict: VariantResult  # B judged against A (speedup > 1: B is faster)
    numerics_judged: bool  # the loss guard was an input to the verdict
    numerics_note: str  # why the guard was or was not applied, one line
    loss_delta: float | None  # B's final-window loss relative to A's (judged or informative)
    differences: tuple[SetupDifference, ...]
    fact_changes: tuple[FactChange, ...]  # largest first
    facts_only_in_a: tuple[str, ...]  # measured in A, not in B (e.g. GPU facts)
    facts_only_in_b: tuple[str, ...]
    findings_fixed: tuple[Finding, ...]  # found in A, gone in B
    findings_introduced: tuple[Finding, ...]  # found in B, not in A
    findings_kept: tuple[str, ...]  # rule ids found in both
    notes: tuple[str, ...]
    # Set when A and B ran different scripts: they are unrelated runs, and the speedup
    # compares two workloads rather than one change.
    unrelated: str | None = None

    @property
    def usable(self) -> bool:
        """Both sides have timed steps: False means there is nothing to compare."""
        return self.verdict.verdict != "failed"


# --------------------------------------------------------------------------- loading


def side_run_dirs(path: Path) -> tuple[Path, list[Path]]:
    """The directory a side is named by, and the child runs it stands for.

    A child run directory (baseline/, a variant's, or one repeat-k) stands for itself and its
    own repeats; a session directory (or the `latest` link) for every baseline repeat."""
    resolved = resolve_input(Path(path))
    if resolved.is_dir() and is_child_dir(resolved):
        return resolved, repeat_dirs(resolved)
    session = resolve_session_dir(resolved)
    baseline = session / BASELINE_LABEL
    if not baseline.is_dir():
        raise BadRunDir(f"{session} has no {BASELINE_LABEL}/ run to compare")
    return session, repeat_dirs(baseline)


@dataclass(frozen=True)
class LoadedSide:
    """One side read from its directories: the runs, their samples, and its diagnosis."""

    path: Path
    records: tuple[RunRecord, ...]
    samples: tuple[RunSample, ...]
    facts: Facts
    findings: tuple[Finding, ...]


def _refuse_impossible_steps(records: Sequence[RunRecord]) -> None:
    """CorruptArtifact when no run of a side has a usable timed step because its steps
    record times no step can take (all 0, NaN, negative, 1e308 ms): invalid input, not a run
    that could not be measured, so no gate can read it as a pass or as undecided."""
    if any(r.timed_steps for r in records):
        return
    for record in records:
        impossible = rundir.read_steps(record.dir).impossible
        if impossible:
            raise CorruptArtifact(
                f"invalid input: {record.dir / rundir.STEPS_FILE} has no usable step: "
                f"{impossible} step(s) record a time no step can take (0, negative, NaN or "
                "beyond a year)"
            )


def load_side(path: Path) -> LoadedSide:
    where, dirs = side_run_dirs(path)
    records = tuple(load_run(d) for d in dirs)
    _refuse_impossible_steps(records)
    # Repeat 1 is the profiled run: the only one with a trace, so the one to diagnose.
    facts = derive_facts(records[0])
    return LoadedSide(
        path=where,
        records=records,
        samples=tuple(run_sample_from_record(r) for r in records),
        facts=facts,
        findings=tuple(evaluate(facts).findings),
    )


# --------------------------------------------------------------------------- summaries


def script_display(record: RunRecord) -> str:
    """The script as the user typed it (`-m pkg.mod` for a module)."""
    if record.spec is None:
        return str(record.dir)
    target = record.spec.target
    return target.name if target.kind != "module" else f"-m {target.name}"


def _summarize(loaded: LoadedSide) -> RunSide:
    first = loaded.records[0]
    spec, manifest = first.spec, first.manifest
    figures = pool_figures(loaded.samples)
    data_wait = loaded.facts.get("data_wait_frac")
    return RunSide(
        path=str(loaded.path),
        run_dirs=tuple(str(r.dir) for r in loaded.records),
        script=script_display(first),
        argv=tuple(spec.target.argv) if spec else (),
        cwd=spec.cwd if spec else None,
        seed=spec.seed if spec else None,
        plan=spec.plan if spec else None,
        status=manifest.status if manifest else None,
        exit_code=manifest.exit_code if manifest else None,
        error=manifest.error if manifest else "the run left no manifest",
        device=manifest.device if manifest else None,
        versions=dict(manifest.versions) if manifest else {},
        runs=figures.runs,
        step_ms_p50=figures.step_ms_p50,
        step_ms_p90=figures.step_ms_p90,
        throughput_samples_s=figures.throughput_samples_s,
        peak_memory_bytes=figures.peak_memory_bytes,
        energy_j_per_step=figures.energy_j_per_step,
        data_wait_frac=float(data_wait) if isinstance(data_wait, (int, float)) else None,
        step_detection=manifest.step_detection if manifest else None,
        findings=loaded.findings,
    )


# --------------------------------------------------------------------------- what differs


def _script_identity(record: RunRecord) -> str | None:
    """The script as a path resolved against the run's working directory, so "train.py"
    run from two different projects is two scripts; a module is its dotted name."""
    spec = record.spec
    if spec is None:
        return None
    if spec.target.kind == "module":
        return f"-m {spec.target.name}"
    if spec.target.kind == "command":
        return " ".join((spec.target.name, *spec.target.argv))
    return os.path.normpath(os.path.join(spec.cwd, spec.target.name))


def _device_text(device: DeviceInfo | None) -> str:
    if device is None:
        return "unknown"
    name = device.name if device.count <= 1 else f"{device.count}x {device.name}"
    return f"{device.kind}: {name}"


def _plan_text(plan: StepPlan | None) -> str:
    if plan is None:
        return "unknown"
    return (
        f"{plan.warmup_steps} warm-up + {plan.timed_steps} timed + "
        f"{plan.profiled_steps} profiled steps"
    )


def _setup_differences(a: RunSide, b: RunSide) -> tuple[SetupDifference, ...]:
    def version(side: RunSide, key: str) -> str:
        return str(side.versions.get(key) or "—")

    candidates = (
        ("script", a.script, b.script),
        ("argv", shlex.join(a.argv), shlex.join(b.argv)),
        ("seed", str(a.seed), str(b.seed)),
        ("device", _device_text(a.device), _device_text(b.device)),
        ("torch", version(a, "torch"), version(b, "torch")),
        ("cuda", version(a, "cuda"), version(b, "cuda")),
        ("python", version(a, "python"), version(b, "python")),
        ("plan", _plan_text(a.plan), _plan_text(b.plan)),
        ("status", str(a.status), str(b.status)),
    )
    return tuple(SetupDifference(name, x, y) for name, x, y in candidates if x != y)


def numerics_comparable(a: LoadedSide, b: LoadedSide) -> str | None:
    """None when the two loss trajectories should match step for step, else why not."""
    ra, rb = a.records[0], b.records[0]
    if ra.spec is None or rb.spec is None:
        return "a run has no spec.json"
    if _script_identity(ra) != _script_identity(rb):
        return "A and B ran different scripts"
    if tuple(ra.spec.target.argv) != tuple(rb.spec.target.argv):
        return "A and B ran with different arguments"
    if ra.spec.seed is None or rb.spec.seed is None:
        return "a run was not seeded (--no-seed)"
    if ra.spec.seed != rb.spec.seed:
        return f"A and B used different seeds ({ra.spec.seed} vs {rb.spec.seed})"
    kind_a = ra.manifest.device.kind if ra.manifest and ra.manifest.device else None
    kind_b = rb.manifest.device.kind if rb.manifest and rb.manifest.device else None
    if kind_a != kind_b:
        # CPU and CUDA draw different random numbers and use different kernels.
        return f"A and B ran on different devices ({kind_a} vs {kind_b})"
    return None


def _is_number(value: Scalar) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fact_change(name: str, a: Scalar, b: Scalar) -> tuple[float, FactChange] | None:
    """The change of one fact measured on both sides, with its ranking score."""
    unit = FACTS[name].unit if name in FACTS else ""
    if _is_number(a) and _is_number(b):
        x, y = float(a), float(b)  # type: ignore[arg-type]
        if not (math.isfinite(x) and math.isfinite(y)) or x == y:
            return None
        score = abs(y - x) if unit == "frac" else min(1.0, abs(y - x) / max(abs(x), abs(y)))
        relative = (y - x) / abs(x) if x != 0 else None
        return score, FactChange(name, a, b, unit, y - x, relative)
    if a == b:
        return None
    # A setting that flipped (a bool, an implementation, a dtype) is a change of kind.
    return 1.0, FactChange(name, a, b, unit, None, None)


def fact_changes(
    a: Facts, b: Facts
) -> tuple[tuple[FactChange, ...], tuple[str, ...], tuple[str, ...]]:
    """Facts that changed most (largest first), and those measured on one side only."""
    scored: list[tuple[float, FactChange]] = []
    only_a: list[str] = []
    only_b: list[str] = []
    for name in sorted(set(a.values) | set(b.values)):
        x, y = a.get(name), b.get(name)
        if x is None and y is None:
            continue
        if y is None:
            only_a.append(name)
            continue
        if x is None:
            only_b.append(name)
            continue
        if name in SUMMARY_FACTS:
            continue
        change = _fact_change(name, x, y)
        if change is not None and change[0] >= MIN_FACT_CHANGE:
            scored.append(change)
    scored.sort(key=lambda item: (-item[0], item[1].name))
    return tuple(c for _, c in scored[:MAX_FACT_CHANGES]), tuple(only_a), tuple(only_b)


def _rule_ids(findings: Sequence[Finding]) -> set[str]:
    """Headline ids and the ids merged into them: one root cause may be headlined under a
    different rule on the other side."""
    return {f.rule_id for f in findings} | {r for f in findings for r in f.related}


def finding_changes(
    a: Sequence[Finding], b: Sequence[Finding]
) -> tuple[tuple[Finding, ...], tuple[Finding, ...], tuple[str, ...]]:
    """(fixed: in A only, introduced: in B only, kept: rule ids in both)."""
    ids_a, ids_b = _rule_ids(a), _rule_ids(b)
    fixed = tuple(f for f in a if f.rule_id not in ids_b)
    introduced = tuple(f for f in b if f.rule_id not in ids_a)
    kept = tuple(f.rule_id for f in a if f.rule_id in ids_b)
    return fixed, introduced, kept


# --------------------------------------------------------------------------- the verdict


def _losses_of_ok_runs(samples: Sequence[RunSample]) -> list[tuple[float | None, ...]]:
    return [s.losses for s in samples if s.status in OK_STATUSES and s.losses]


def _losses_of_usable_runs(samples: Sequence[RunSample]) -> list[tuple[float | None, ...]]:
    return [s.losses for s in usable(samples) if s.losses]


def changed_ids(a: Sequence[RunSample], b: Sequence[RunSample]) -> tuple[str, ...]:
    """The optimizations B's runs applied and A's did not (perfdoctor's own, at runtime)."""

    def applied(samples: Sequence[RunSample]) -> set[str]:
        return {item.id for s in samples for item in s.applied if item.applied}

    return tuple(sorted(applied(b) - applied(a)))


def informative_loss_delta(a: Sequence[RunSample], b: Sequence[RunSample]) -> float | None:
    """B's final-window loss relative to A's, step by step where both have a loss."""
    reference = numerics.reference_trajectory(_losses_of_ok_runs(a))
    series = numerics.reference_trajectory(_losses_of_usable_runs(b))
    measured = numerics.drift(series, reference)
    return measured.final if measured is not None else None


@dataclass(frozen=True)
class Judgement:
    result: VariantResult
    numerics_judged: bool
    numerics_note: str
    loss_delta: float | None


def judge(
    a: Sequence[RunSample],
    b: Sequence[RunSample],
    *,
    why_not_comparable: str | None,
    tolerance: float | None = None,
    label: str = "B",
) -> Judgement:
    """B against A. compare_variant decides failures and the numerics guard; the speed
    verdict is then taken again, by the same rule, on the band widened by B's spread."""
    comparable = why_not_comparable is None
    if comparable:
        judged_a, judged_b = list(a), list(b)
        info_delta = None
    else:
        # Without losses the guard has nothing to judge; the delta is kept for the reader.
        info_delta = informative_loss_delta(a, b)
        judged_a = [replace(s, losses=()) for s in a]
        judged_b = [replace(s, losses=()) for s in b]

    result = compare_variant(judged_a, judged_b, (), tolerance, label=label)
    if not usable(a):
        broken = next((s for s in a if not s.usable), None)
        line = broken.failure_line() if broken else "no run"
        failed = replace(result, verdict="failed", reason=f"A has no usable run: {line}")
        return Judgement(failed, False, "A has no usable run", None)
    if result.verdict == "failed":
        return Judgement(result, False, "B has no usable run", None)

    nonfinite = _nonfinite_loss(b)
    if nonfinite is not None:
        # Never accepted, related runs or not: a NaN/inf loss means B no longer trains.
        rejected = replace(result, verdict="rejected", reason=nonfinite)
        return Judgement(rejected, comparable, nonfinite, None)

    speed = widened_estimate(judged_a, usable(judged_b))
    result = replace(
        result,
        speedup=speed.speedup if speed else None,
        speedup_noise=speed.noise if speed else None,
        step_ms_p50=speed.variant_ms if speed else None,
        baseline_step_ms_p50=speed.baseline_ms if speed else None,
        paired_runs=speed.pairs if speed else 0,
    )
    # The tolerance `profile` gives the same two runs: the category of what B applied that A
    # did not (a session's variant run against its baseline), else "exact".
    category = "given" if tolerance is not None else tolerance_category_for(changed_ids(a, b))
    guard = numerics.check_losses(
        _losses_of_ok_runs(judged_a),
        _losses_of_usable_runs(judged_b),
        tolerance if tolerance is not None else TOLERANCES[category],
        category,
    )
    result = replace(result, loss_tolerance=guard.derived if comparable else None)
    if comparable and not guard.ok:
        # The guard rejected B, with the tolerance of what B applied (compare_variant, given
        # no ids, judged by the exact category): its reason names this one.
        rejected = replace(
            result, verdict="rejected", reason=guard.reason, loss_delta=guard.loss_delta
        )
        return Judgement(rejected, True, f"same workload; {guard.reason}", guard.loss_delta)

    if comparable:
        said = numerics.describe_tolerance(guard.derived) if guard.derived else ""
        note = (
            f"same script, arguments and seed: loss within {said}"
            if guard.checked
            else guard.reason
        )
        extra = "" if guard.checked else f" ({guard.reason})"
    else:
        delta = (
            f"; final loss {info_delta:+.1%} vs A, for information"
            if info_delta is not None
            else ""
        )
        note = f"numerics not judged: {why_not_comparable}{delta}"
        extra = f" ({note})"
    verdict, reason = speed_verdict(speed, extra)
    if result.low_confidence:
        # The same busy-machine note compare_variant gives: it must survive the new reason.
        reason += f"; low confidence: {result.low_confidence}"
    judged = replace(result, verdict=verdict, reason=reason)
    if comparable:
        return Judgement(judged, guard.checked, note, guard.loss_delta)
    return Judgement(judged, False, note, info_delta)


def _nonfinite_loss(samples: Sequence[RunSample]) -> str | None:
    for sample in usable(samples):
        bad = next(
            (i for i, x in enumerate(sample.losses) if x is not None and not math.isfinite(x)),
            None,
        )
        if bad is not None:
            return f"B's loss is {sample.losses[bad]} at step {bad}: B no longer trains"
    return None


def unrelated_runs(a: RunSide, b: RunSide, why_not: str | None) -> str | None:
    """Why A and B are not two runs of one workload, when they ran different scripts.
    (Different arguments of one script are often the change being judged: --batch-size.)"""
    if why_not is None or "different scripts" not in why_not:
        return None
    return (
        f"{why_not} ({a.script} vs {b.script}): these are unrelated runs, and the speedup "
        "compares two workloads, not one change"
    )


def _runs(count: int) -> str:
    return f"{count} run" + ("" if count == 1 else "s")


def _notes(a: LoadedSide, b: LoadedSide, differences: Sequence[SetupDifference]) -> tuple[str, ...]:
    notes = []
    runs_a, runs_b = len(usable(a.samples)), len(usable(b.samples))
    if runs_a < 2 and runs_b < 2:
        notes.append(
            "one run per side: the noise band covers step-to-step noise only, not the "
            "run-to-run noise of launching a script twice"
        )
    else:
        notes.append(
            "noise band: bootstrap over steps, widened by the run-to-run spread of A "
            f"({_runs(runs_a)}) and of B ({_runs(runs_b)}); runs are paired in repeat order"
        )
    names = {d.name for d in differences}
    if "device" in names:
        notes.append("different devices: the speedup compares machines as much as code")
    if "plan" in names:
        notes.append("different step plans: timed windows start at different steps")
    return tuple(notes)


def compare_runs(run_a: Path, run_b: Path, *, tolerance: float | None = None) -> RunComparison:
    """Judge run B against run A (each a session directory or a child run directory).

    `tolerance` overrides the loss tolerance category of the numerics guard (default: the
    catalog category of what B applied that A did not, "exact" when nothing, widened by A's
    own run-to-run spread exactly as `profile` widens it: numerics.loss_tolerance)."""
    return compare_sides(load_side(Path(run_a)), load_side(Path(run_b)), tolerance=tolerance)


def compare_sides(a: LoadedSide, b: LoadedSide, *, tolerance: float | None = None) -> RunComparison:
    """compare_runs over two sides already loaded (the regression gate reads the same)."""
    side_a, side_b = _summarize(a), _summarize(b)
    why_not = numerics_comparable(a, b)
    judgement = judge(a.samples, b.samples, why_not_comparable=why_not, tolerance=tolerance)
    differences = _setup_differences(side_a, side_b)
    changes, only_a, only_b = fact_changes(a.facts, b.facts)
    fixed, introduced, kept = finding_changes(a.findings, b.findings)
    verdict = judgement.result
    log.debug("compare %s -> %s: %s (%s)", a.path, b.path, verdict.verdict, verdict.reason)
    return RunComparison(
        schema_version=SCHEMA_VERSION,
        a=side_a,
        b=side_b,
        verdict=verdict,
        numerics_judged=judgement.numerics_judged,
        numerics_note=judgement.numerics_note,
        loss_delta=judgement.loss_delta,
        differences=differences,
        fact_changes=changes,
        facts_only_in_a=only_a,
        facts_only_in_b=only_b,
        findings_fixed=fixed,
        findings_introduced=introduced,
        findings_kept=kept,
        notes=_notes(a, b, differences),
        unrelated=unrelated_runs(side_a, side_b, why_not),
    )

"""The offline pipeline: a session directory -> Report, with no torch import.

`perfdoctor report RUN` calls `analyze_session` on a directory that may come from another
machine; the live pipeline calls the same functions between its runs, so what the reports say
is always derivable from the directory alone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfdoctor.analyze.compile_facts import compile_series
from perfdoctor.analyze.facts import (
    derive_facts,
    gpu_timeline,
    profiler_window_missed,
)
from perfdoctor.analyze.loop_account import (
    counted_optimizer_steps,
    loop_account,
    loop_summary,
    loop_warning,
)
from perfdoctor.analyze.rank_table import rank_summaries
from perfdoctor.analyze.record import RunRecord, load_run
from perfdoctor.analyze.run_stats import RunSample, breakdown_ms, pool_figures, timed_steps
from perfdoctor.analyze.series import series_for
from perfdoctor.errors import EXIT_INTERRUPTED, BadRunDir, CorruptArtifact, TargetNotFound
from perfdoctor.model import (
    BaselineSummary,
    Facts,
    Finding,
    Recommendation,
    Report,
    RunManifest,
    RunStatus,
    SkippedRule,
    Target,
    VariantResult,
)
from perfdoctor.optimize.engine import DEFAULT_MAX_ROUNDS, Looks, rerun_looks
from perfdoctor.optimize.estimate import adjacent_baselines
from perfdoctor.optimize.fix_patch import PATCH_NAME, build_fix_patch
from perfdoctor.optimize.inprocess import ABLog, load_ab_log
from perfdoctor.optimize.inprocess_verdict import METHOD as IN_PROCESS
from perfdoctor.optimize.inprocess_verdict import compare_in_process
from perfdoctor.optimize.measured_recommendations import follow_measurement
from perfdoctor.optimize.prediction import with_prediction
from perfdoctor.optimize.recommend import auto_candidates as _auto_candidates
from perfdoctor.optimize.recommend import recommend
from perfdoctor.optimize.run_samples import load_run_samples, run_sample_from_record
from perfdoctor.optimize.stall import judge_under_stall, stack_on_thread_fix
from perfdoctor.optimize.verdicts import compare_variant, stack_candidates
from perfdoctor.report_signals import deferred_stop_signals, hold_for_tests
from perfdoctor.rules import evaluate
from perfdoctor.run_schema import Observations
from perfdoctor.rundir import (
    BASELINE_LABEL,
    BATCH_PLAN_FILE,
    LATEST_LINK,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    SCHEMA_VERSION,
    SESSION_FILE,
    is_child_dir,
    read_json,
    repeat_dirs,
    write_file,
)
from perfdoctor.session import Session, VariantPlan, load_session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Diagnosis:
    record: RunRecord
    facts: Facts
    findings: tuple[Finding, ...]
    skipped: tuple[SkippedRule, ...]
    recommendations: tuple[Recommendation, ...]


def resolve_input(path: Path) -> Path:
    """path.resolve(), with a symbolic link that leads back to itself (`ln -s d d`) refused
    as a path that does not exist (66): Python raises RuntimeError for the loop."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as err:
        raise TargetNotFound(f"{path} does not exist: a symbolic link loop ({err})") from None


def resolve_session_dir(path: Path) -> Path:
    """Accept the session dir, the `latest` link, a child run dir inside a session, or the
    `--out` directory of `perfdoctor profile` (its `latest` session)."""
    path = resolve_input(path)
    if not path.exists():
        # As everywhere else (diagnose, compare, the script of profile): a missing path is 66.
        raise TargetNotFound(f"{path} does not exist")
    if not path.is_dir():
        raise BadRunDir(f"{path} is not a directory")
    if (path / SESSION_FILE).is_file() or (path / BASELINE_LABEL).is_dir():
        return path
    latest = path / LATEST_LINK
    if latest.is_dir() and not is_child_dir(path):
        return resolve_session_dir(latest)
    if is_child_dir(path) and (path.parent / SESSION_FILE).is_file():
        return path.parent
    if is_child_dir(path):
        return path
    # `perfdoctor diagnose` writes its reports without a run behind them: say where to look.
    diagnosed = (path / "report.json").is_file()
    raise BadRunDir(
        f"{path} is not a perfdoctor run directory (no {SESSION_FILE} and no "
        f"{BASELINE_LABEL}/ inside)",
        hint=(
            "it holds the reports of `perfdoctor diagnose` (report.md, report.html, "
            "report.json); run perfdoctor diagnose on the traces again to re-render them"
            if diagnosed
            else None
        ),
    )


def is_lone_child_run(path: Path) -> bool:
    """A child run directory on its own (copied out of its session), not a session."""
    # A baseline/ that is no child run (TensorBoard scalars an earlier perfdoctor wrote into
    # a lone run) does not make it a session.
    return (
        is_child_dir(path)
        and not is_child_dir(path / BASELINE_LABEL)
        and not (path / SESSION_FILE).is_file()
    )


def _baseline_dirs(session_dir: Path) -> list[Path]:
    if is_lone_child_run(session_dir):
        return [session_dir]
    base = session_dir / BASELINE_LABEL
    if not base.is_dir():
        raise BadRunDir(f"{session_dir} has no {BASELINE_LABEL}/ run")
    return repeat_dirs(base)


def _session_or_none(session_dir: Path) -> Session | None:
    if not (session_dir / SESSION_FILE).is_file():
        return None
    try:
        return load_session(session_dir)
    except (KeyError, TypeError, ValueError) as err:
        raise BadRunDir(f"{session_dir / SESSION_FILE} is unreadable: {err}") from err


def diagnose_session(session_dir: Path) -> Diagnosis:
    session_dir = resolve_session_dir(session_dir)
    # A completed run always gets its report: a trace it cannot read costs only its facts.
    record = load_run(_baseline_dirs(session_dir)[0], skip_corrupt_trace=True)
    facts = derive_facts(record)
    results = evaluate(facts)
    recommendations = recommend(results.findings, facts)
    return Diagnosis(
        record=record,
        facts=facts,
        findings=tuple(results.findings),
        skipped=tuple(results.skipped),
        recommendations=tuple(recommendations),
    )


def auto_candidates(
    diagnosis: Diagnosis, *, only: Sequence[str] | None = None, skip: Sequence[str] = ()
) -> list[str]:
    return list(
        _auto_candidates(list(diagnosis.recommendations), diagnosis.facts, only=only, skip=skip)
    )


def baseline_samples(
    session_dir: Path,
    session: Session,
    profiled: RunRecord | None = None,
    *,
    with_trace: bool = True,
) -> dict[str, RunSample]:
    """Each baseline run's RunSample by its path in the session; `profiled`, the baseline
    run already loaded for the diagnosis, is not read a second time."""
    samples = {}
    for rel in session.baseline_runs:
        path = session_dir / rel
        if profiled is not None and path.resolve() == Path(profiled.dir).resolve():
            samples[rel] = run_sample_from_record(profiled)
        else:
            samples[rel] = run_sample_from_record(load_run(path, with_trace=with_trace))
    return samples


def compare_variants(
    session_dir: Path,
    baseline: dict[str, RunSample] | None = None,
    *,
    parse_traces: bool = True,
) -> list[VariantResult]:
    """Each variant judged against the baseline runs of its own A/B rounds (`baseline`:
    baseline_samples() when the caller has them already). The verdicts need no trace:
    `parse_traces=False` (the pipeline's looks between rounds) skips them."""
    session_dir = resolve_session_dir(session_dir)
    session = _session_or_none(session_dir)
    if session is None or not session.variants:
        return []
    samples_by_rel = (
        baseline
        if baseline is not None
        else baseline_samples(session_dir, session, with_trace=parse_traces)
    )
    results = []
    ab_cache: dict[str, tuple[RunSample, ABLog | None]] = {}
    for variant in session.variants:
        if variant.method == IN_PROCESS and variant.ab_run is not None:
            results.append(
                with_prediction(
                    _in_process_result(session_dir, session, variant, samples_by_rel, ab_cache),
                    variant.predicted_speedup,
                    variant.predicted_from or "",
                )
            )
            continue
        if not variant.runs:
            continue
        samples = load_run_samples(
            (session_dir / rel for rel in variant.runs), with_trace=parse_traces
        )
        paired = adjacent_baselines(session.run_order, list(samples_by_rel), variant.runs)
        baseline_runs = [samples_by_rel[rel] for rel in paired] or list(samples_by_rel.values())
        judged = compare_variant(
            baseline_runs,
            samples,
            variant.optimizations,
            label=variant.label,
            looks=session_looks(session),
            rounds_note=variant.rounds_stop,
            statistic=variant.statistic,
            statistic_why=variant.statistic_why,
        )
        results.append(
            with_prediction(judged, variant.predicted_speedup, variant.predicted_from or "")
        )
    return judge_under_stall(results)


def session_looks(session: Session) -> Looks:
    """The engine's looks for the session's re-run comparisons: from --repeat rounds up to
    --max-rounds (optimize/engine.py rerun_looks); the pipeline stops a variant's rounds at
    these same looks."""
    raw = session.options.get("max_rounds")
    max_rounds = raw if isinstance(raw, int) and not isinstance(raw, bool) else DEFAULT_MAX_ROUNDS
    return rerun_looks(session.repeat, max_rounds)


def _in_process_result(
    session_dir: Path,
    session: Session,
    variant: VariantPlan,
    baseline: dict[str, RunSample],
    cache: dict[str, tuple[RunSample, ABLog | None]],
) -> VariantResult:
    """A fix measured in one process: its A/B child's comparison, numerics from its seeded
    run (a peel comparison's: the stack's, which holds the same fixes)."""
    assert variant.ab_run is not None
    for rel in (variant.ab_run, *variant.ab_runs):
        if rel not in cache:
            ab_dir = session_dir / rel
            sample = load_run_samples([ab_dir], with_trace=False)[0]
            cache[rel] = (sample, load_ab_log(ab_dir))
    chain = [cache[rel] for rel in (variant.ab_run, *variant.ab_runs)]
    numerics_runs = load_run_samples((session_dir / rel for rel in variant.runs), with_trace=False)
    note = None
    if variant.peel_of is not None:
        note = "checked with the whole stack's seeded run"
    elif not variant.runs:
        note = "not checked: only a fix that is faster gets its seeded run"
    # The seeded baseline run(s) hold the reference losses (the profiled run first).
    return compare_in_process(
        list(baseline.values()),
        [sample for sample, _ in chain],
        [ab_log for _, ab_log in chain],
        numerics_runs,
        variant.optimizations,
        label=variant.label,
        numerics_note=note,
        peel_of=variant.peel_of,
        chain_stop=variant.rounds_stop,
    )


def accepted_optimizations(session_dir: Path) -> list[str]:
    """Accepted single optimizations to stack, best first, mutually exclusive ones resolved;
    then the fixes a thread stall left undecided, to be measured on the thread fix
    (optimize/stall.py)."""
    results = compare_variants(session_dir)
    return stack_on_thread_fix(results, stack_candidates(results))


def _baseline_summary(
    record: RunRecord, facts: Facts, pool: Sequence[RunSample] = ()
) -> BaselineSummary:
    """The profiled run's figures, and over `pool` (every baseline run, when there are two
    or more) the pooled step figures each variant is compared with. Both through
    run_stats.pool_figures, as each variant's figures are (optimize/verdicts.py)."""
    timed = timed_steps(record.steps)
    optimizer_steps = counted_optimizer_steps(record)
    # The profiled run's own figures whatever its end: a crashed script's report is partial,
    # not empty (the comparison pools, which drop failed runs, are taken elsewhere).
    figures = pool_figures([replace(run_sample_from_record(record), status="completed")])
    micro = facts.get("micro_batches_per_step")
    summary = BaselineSummary(
        steps_timed=len(timed),
        optimizer_steps=optimizer_steps,
        micro_batches_per_step=float(micro) if micro is not None else None,
        step_ms_p50=figures.step_ms_p50,
        step_ms_p90=figures.step_ms_p90,
        data_wait_frac=_float(facts.get("data_wait_frac")),
        step_detection=record.manifest.step_detection if record.manifest else None,
        throughput_samples_s=figures.throughput_samples_s,
        # The medians the *_frac facts come from (analyze/facts.py), so table and facts agree.
        breakdown_ms=breakdown_ms(timed),
        peak_memory_bytes=figures.peak_memory_bytes,
        closure_steps=record.observed.closure_calls or 0,
    )
    pooled = pool_figures(pool)
    if pooled.runs < 2:
        return summary  # one run: the profiled run's figures are the pool
    return replace(
        summary,
        pooled_step_ms_p50=pooled.step_ms_p50,
        pooled_step_ms_p90=pooled.step_ms_p90,
        pooled=pooled.pooled,
    )


def _batch_plan(session_dir: Path) -> dict[str, Any] | None:
    """batch_plan.json (--plan-batch, batch_plan.py) as plain JSON for the report's batch
    section (render/batch_section.py); None when the session has none or it is unreadable."""
    path = session_dir / BATCH_PLAN_FILE
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError, CorruptArtifact) as err:
        log.warning("unreadable %s: %s", path, err)
        return None
    return data if isinstance(data, dict) else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


_COMPILE_IDS = frozenset({"compile", "compile-cudagraphs"})


def _ab_compile_series(
    session_dir: Path, session: Session | None, runs: Mapping[str, RunRecord]
) -> dict[str, dict[str, Any]]:
    """The compile diagnosis of a `compile` variant measured in-process and not re-run on
    its own (not faster): its compile.json lies in the A/B run, its steps are its arm's."""
    out: dict[str, dict[str, Any]] = {}
    if session is None:
        return out
    loaded: dict[str, RunRecord | None] = {}
    for variant in session.variants:
        if variant.label in runs or not variant.ab_run or variant.peel_of is not None:
            continue
        if not _COMPILE_IDS.intersection(variant.optimizations):
            continue
        if variant.ab_run not in loaded:
            try:
                loaded[variant.ab_run] = load_run(session_dir / variant.ab_run, with_trace=False)
            except (BadRunDir, CorruptArtifact, OSError) as err:
                log.warning("A/B run %s not read: %s", variant.ab_run, err)
                loaded[variant.ab_run] = None
        record = loaded[variant.ab_run]
        data = compile_series(record, arm=variant.label) if record is not None else {}
        if data:
            out[variant.label] = data
    return out


def analyze_session(session_dir: Path) -> Report:
    session_dir = resolve_session_dir(session_dir)
    session = _session_or_none(session_dir)
    diagnosis = diagnose_session(session_dir)
    record = diagnosis.record
    manifest = record.manifest
    baseline = baseline_samples(session_dir, session, record) if session is not None else {}
    variants = compare_variants(session_dir, baseline)

    series: dict[str, dict] = {"steps": {}, "breakdown_ms": {}, "samples": {}, "memory": {}}
    runs = {BASELINE_LABEL: record}
    if session is not None:
        for variant in session.variants:
            if variant.runs:
                runs[variant.label] = load_run(
                    session_dir / variant.runs[0], skip_corrupt_trace=True
                )
    for label, run in runs.items():
        for key, value in series_for(run).items():
            if value:
                series.setdefault(key, {})[label] = value
    for label, data in _ab_compile_series(session_dir, session, runs).items():
        series.setdefault("compile", {})[label] = data
    batch_plan = _batch_plan(session_dir)
    if batch_plan is not None:
        series["batch_plan"] = batch_plan

    if session is not None:
        target = session.target
    elif record.spec is not None:
        target = record.spec.target
    else:
        target = Target(kind="script", name=str(session_dir), argv=())
    script = target.name if target.kind != "module" else f"-m {target.name}"
    status, exit_code, stop_warnings = _session_status(session, manifest)
    warnings = stop_warnings + (list(manifest.warnings) if manifest else [])
    if manifest is not None and manifest.error and status != "completed":
        # The script's own error line ("RuntimeError: boom at step 12"), in every report.
        line = f"the script's error: {manifest.error}"
        if line not in warnings:
            warnings.append(line)
    warnings += [w for w in record.observed.warnings or () if w not in warnings]
    # What loading the run found amiss (steps.jsonl missing or unreadable, several traces).
    warnings += [n for n in record.notes if n not in warnings]
    withheld = diagnosis.facts.settings.get("withheld") or ()
    warnings += [w for w in withheld if w not in warnings]
    missed = profiler_window_missed(record.observed)
    if missed:
        warnings.append(missed)
    account = loop_account(record)
    unrepresentative = loop_warning(account)
    if unrepresentative:
        warnings.append(unrepresentative)
    if (
        record.ranks_launched > 1
        and not _process_group_seen(record.observed)
        and _launched_as_ranks(record.observed)
    ):
        warnings.append(
            f"{record.ranks_launched} ranks were started by torchrun, but the script "
            "never initialised a process group (torch.distributed.init_process_group): each "
            "rank trained alone, and the figures are rank 0's"
        )
    if diagnosis.facts.get("memory_history_truncated") is True:
        limit = record.spec.memory_history_max_entries if record.spec else None
        warnings.append(
            "the CUDA memory history was truncated: it reached its max_entries bound"
            + (f" ({limit:,} events)" if limit else "")
            + ", so the snapshot holds only the latest allocator events"
        )
    fix_patch = _fix_patch(variants, diagnosis, record, target, session, session_dir)
    artifacts = _artifacts(session_dir, manifest.artifacts if manifest else {})
    if fix_patch:
        artifacts["fixes_patch"] = str(session_dir / PATCH_NAME)
    return Report(
        schema_version=SCHEMA_VERSION,
        script=script,
        argv=tuple(target.argv),
        exit_code=exit_code,
        status=status,
        device=manifest.device if manifest else None,
        versions=dict(manifest.versions) if manifest else {},
        baseline=_baseline_summary(record, diagnosis.facts, list(baseline.values())),
        findings=diagnosis.findings,
        skipped_rules=diagnosis.skipped,
        recommendations=tuple(
            follow_measurement(diagnosis.recommendations, variants, diagnosis.facts)
        ),
        variants=tuple(variants),
        run_dir=str(session_dir),
        artifacts=artifacts,
        warnings=tuple(warnings),
        facts=dict(diagnosis.facts.values),
        created_at=session.created_at if session else time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        run_dir_bytes=_dir_bytes(session_dir),
        series=series,
        gpu=gpu_timeline(diagnosis.facts),
        compute=diagnosis.facts.settings.get("compute") or {},
        script_end=_script_end(manifest, session, record.observed),
        # Lightning reuses version_1 once it is removed: each entry once, in order.
        removed_outputs=tuple(dict.fromkeys(session.removed_outputs)) if session else (),
        ranks=rank_summaries(record),
        loop=loop_summary(account),
        fix_patch=fix_patch,
    )


def _fix_patch(
    variants: Sequence[VariantResult],
    diagnosis: Diagnosis,
    record: RunRecord,
    target: Target,
    session: Session | None,
    session_dir: Path,
) -> dict[str, Any]:
    """fixes.patch of the accepted fixes (optimize/fix_patch.py), as report.json holds it;
    {} without an accepted fix or a script file to patch."""
    if not any(v.verdict == "accepted" for v in variants) or target.kind == "command":
        return {}
    cwd = record.spec.cwd if record.spec is not None else (session.cwd if session else None)
    if not cwd:
        return {}
    script = target.name
    if target.kind == "module":  # -m pkg.train: its file under the working directory
        base = target.name.replace(".", "/")
        found = [p for p in (f"{base}.py", f"{base}/__main__.py") if (Path(cwd) / p).is_file()]
        if not found:
            return {}
        script = found[0]
    changes = {r.optimization_id: r.code_change for r in diagnosis.recommendations}
    try:
        patch = build_fix_patch(variants, diagnosis.facts, script, Path(cwd), changes)
    except (OSError, ValueError, RecursionError) as err:  # a report without a patch, said why
        log.warning("fixes.patch not built: %s", err)
        return {}
    if patch.empty:
        return {}
    path = str(session_dir / PATCH_NAME)
    return {**patch.to_dict(path), "text": patch.text(path)}


def _script_end(
    manifest: RunManifest | None, session: Session | None, observed: Observations
) -> dict[str, Any]:
    """How the baseline's script ended, for the report's line about it (Report.script_end).
    A run recorded before manifests had `stopped_at` still says it was stopped."""
    if manifest is None or manifest.status != "completed":
        return {}
    if manifest.stopped_at is None and observed.stopped_by_perfdoctor:
        return {"stopped_by_perfdoctor": True}
    if manifest.stopped_at is None:
        run_to_end = bool(session is not None and session.options.get("run_to_end"))
        return {"stopped_by_perfdoctor": False, "run_to_end": run_to_end}
    end: dict[str, Any] = {"stopped_by_perfdoctor": True}
    step = manifest.stopped_at.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        end["step"] = step
    framework = manifest.stopped_at.get("framework")
    if isinstance(framework, str):
        end["framework"] = framework
    where = manifest.stopped_at.get("location")
    if isinstance(where, dict) and where.get("file"):
        end["location"] = f"{where['file']}:{where.get('line')} in {where.get('function')}"
    return end


def _session_status(
    session: Session | None, manifest: RunManifest | None
) -> tuple[RunStatus, int, list[str]]:
    """The report's status and exit code: the baseline's, unless the session did not end.

    A session that perfdoctor was stopped in (Ctrl-C, SIGTERM) reads "interrupted" with the
    code the command returned, even when its baseline had completed; a baseline without a
    manifest was never finished by its launcher (perfdoctor was killed outright), so it
    cannot read as completed either.
    """
    warnings: list[str] = []
    status: RunStatus
    if manifest is None:
        status, exit_code = "interrupted", EXIT_INTERRUPTED
        warnings.append(
            "the baseline has no manifest.json: perfdoctor was stopped before the run ended "
            "(killed outright?), so this report is partial"
        )
    else:
        status, exit_code = manifest.status, manifest.exit_code
    stop = session.interrupted if session is not None else None
    if stop:
        by = str(stop.get("by") or "an interruption")
        during = stop.get("during")
        code = stop.get("exit_code")
        where = f" during {during}" if during else ""
        partial = (
            "the baseline's diagnosis is complete; the variants' results are partial"
            if during and during != BASELINE_LABEL
            else "this report is partial"
        )
        warnings.insert(0, f"perfdoctor was stopped by {by}{where}: {partial}")
        status = "interrupted"
        exit_code = code if isinstance(code, int) else EXIT_INTERRUPTED
    return status, exit_code, warnings


def _launched_as_ranks(obs: Observations) -> bool:
    """Started as a rank by a launcher (torchrun), not as a worker the script started itself
    (a Hogwild trainer needs no process group); collect/process_tree.py records the kind."""
    return obs.process is None or obs.process.kind == "torchrun"


def _process_group_seen(obs: Observations) -> bool:
    # Runs that ended before observations were written say nothing: no warning then.
    return obs.dist is None or obs.dist.initialized is not False


def _dir_bytes(path: Path) -> int:
    """Disk used by a session (traces dominate; issue: large runs must stay usable)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _artifacts(session_dir: Path, child_artifacts: Mapping[str, str]) -> dict[str, str]:
    found = {
        name: str(session_dir / fname)
        for name, fname in (
            ("report_json", REPORT_JSON),
            ("report_md", REPORT_MD),
            ("report_html", REPORT_HTML),
        )
    }
    base = session_dir if is_lone_child_run(session_dir) else session_dir / BASELINE_LABEL
    for name, rel in child_artifacts.items():
        found[f"baseline_{name}"] = str(base / rel)
    found["tensorboard_logdir"] = str(session_dir)
    return found


# Each report states the session's size, its own bytes included, so the reports are rendered
# until their lengths agree with the figure they state: twice as a rule (only the figure's own
# characters can change a length, and only when its digit count or unit changes).
_SIZE_ROUNDS = 4


@dataclass(frozen=True)
class WrittenReports:
    report: Report  # as written: `run_dir_bytes` counts the reports and scalars just written
    paths: dict[str, Path]


def _write_scalars(session_dir: Path, report: Report) -> None:
    from perfdoctor.render.tensorboard_export import write_scalars

    try:
        write_scalars(session_dir, report)
    except (OSError, UnicodeError) as err:  # a convenience: the reports stand alone
        # (UnicodeError: TensorBoard's writer cannot take a path that is not valid UTF-8.)
        log.warning("could not write TensorBoard scalars: %s", err)


def _scalars_beside(session_dir: Path, report: Report, meanwhile: Callable[[], Any]) -> None:
    """TensorBoard's writer costs about 0.35 s of imports before it writes a byte, and the
    charts about as much in matplotlib: in a forked child the scalars use the second core
    while this process draws the charts (benchmarks/README.md, issue 11 item 7). Forked only
    from a single-threaded process (a fork copies no other thread, and their locks could be
    held); otherwise, and without fork, one after the other."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        _write_scalars(session_dir, report)
        meanwhile()
        return
    pid = os.fork()
    if pid == 0:  # the child: write, then leave without running the parent's cleanup
        code = 1
        try:
            _write_scalars(session_dir, report)
            code = 0
        finally:
            os._exit(code)
    try:
        meanwhile()
    finally:
        _, status = os.waitpid(pid, 0)
        if status != 0:
            log.warning("the TensorBoard scalars' writer failed (wait status %d)", status)


def write_reports(session_dir: Path, report: Report) -> WrittenReports:
    """_write_reports with stop signals held until it is done (report_signals.py)."""
    with deferred_stop_signals():
        hold_for_tests()
        return _write_reports(session_dir, report)


def _write_reports(session_dir: Path, report: Report) -> WrittenReports:
    """The TensorBoard scalars, then report.json, report.md and report.html, side by side.

    `run_dir_bytes` is the session's size once they are all written; render the returned
    report (not the one passed in) to show the same figure the files state.
    """
    from perfdoctor.history.trend import with_trend
    from perfdoctor.render.charts import build_charts
    from perfdoctor.render.registry import REPORT_RENDERERS, file_renderers

    report = with_trend(session_dir, report)
    # The charts are drawn once (render/charts.py keeps them) while the scalars are written.
    _scalars_beside(session_dir, report, lambda: build_charts(report))
    renderers = {name: r.load() for name, r in file_renderers(REPORT_RENDERERS).items()}
    paths = {fname: session_dir / fname for fname in renderers}
    on_disk = _dir_bytes(session_dir)
    others = on_disk - sum(
        p.stat().st_size for p in paths.values() if p.is_file() and not p.is_symlink()
    )
    # Re-rendering a session rewrites reports of the same size: right at the first guess.
    sized = replace(report, run_dir_bytes=on_disk)
    for _ in range(_SIZE_ROUNDS):
        # backslashreplace: a path that is not valid UTF-8 (its bytes decoded as surrogates)
        # is shown escaped rather than failing the whole report.
        texts = {
            fname: render(sized).encode("utf-8", "backslashreplace")
            for fname, render in renderers.items()
        }
        total = others + sum(len(text) for text in texts.values())
        if total == sized.run_dir_bytes:
            break
        rendered_with, sized = sized, replace(sized, run_dir_bytes=total)
    else:  # the figure's length keeps flipping (a unit boundary): off by a few bytes at most
        sized = rendered_with
    for fname, text in texts.items():
        write_file(paths[fname], text)  # a link at the name is replaced, never written through
    patch_text = report.fix_patch.get("text") if report.fix_patch else None
    if isinstance(patch_text, str) and patch_text:
        write_file(session_dir / PATCH_NAME, patch_text.encode("utf-8"))
    return WrittenReports(sized, paths)

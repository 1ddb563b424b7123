"""`perfdoctor diagnose`: Reports from profiler traces (and memory snapshots) recorded anywhere.

The same facts -> rules -> recommend path as `perfdoctor report`, over a RunRecord built from
the traces alone (analyze/trace_record.py). What only a perfdoctor run records is unknown, so
the rules that need it are skipped and the report says why; there are no variants and nothing
is applied. The input is only read: reports go to a directory of their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfdoctor import __version__
from perfdoctor.analyze.fact_catalog import FACTS, TRACE_ONLY_REASON
from perfdoctor.analyze.facts import derive_facts, gpu_timeline
from perfdoctor.analyze.run_stats import breakdown_ms
from perfdoctor.analyze.series import series_for
from perfdoctor.analyze.trace_inputs import Discovery, RunInput, discover
from perfdoctor.analyze.trace_record import TraceRunRecord, load_trace_run
from perfdoctor.errors import PerfdoctorError
from perfdoctor.model import BaselineSummary, Facts, Report, SkippedRule
from perfdoctor.optimize.recommend import recommend
from perfdoctor.report_signals import deferred_stop_signals
from perfdoctor.rules import ALL_RULES, evaluate
from perfdoctor.rules.engine import missing_reason
from perfdoctor.rundir import REPORT_HTML, REPORT_JSON, REPORT_MD, SCHEMA_VERSION, write_file

log = logging.getLogger(__name__)

# Step facts a perfdoctor run measures with its hooks and a trace cannot give.
_RUN_ONLY_STEP_FACTS = frozenset(
    {
        "forward_frac",
        "backward_frac",
        "optimizer_frac",
        "other_frac",
        "micro_batches_per_step",
        "throughput_samples_s",
        "rss_growth_bytes_per_step",
        "rss_growth_over_noise",
        "rss_bytes_max",
        "cuda_allocated_growth_bytes_per_step",
        "cuda_allocated_growth_over_noise",
        "loss_is_finite",
    }
)
RUN_ONLY_FACTS = frozenset(
    name for name, doc in FACTS.items() if doc.source in ("obs", "samples")
) | (_RUN_ONLY_STEP_FACTS & FACTS.keys())


@dataclass(frozen=True)
class TraceDiagnosis:
    run: RunInput
    report: Report | None
    error: PerfdoctorError | None = None


def _missing_reason(record: TraceRunRecord, facts: Facts, name: str) -> str:
    """Why a fact is None when the input is traces and snapshots, in words a user can act on."""
    if name in RUN_ONLY_FACTS:
        return TRACE_ONLY_REASON
    doc = FACTS.get(name)
    if doc is None:
        return missing_reason(facts, name)
    if doc.gpu_only and facts.get("device_is_cuda") is False:
        return "not measured: the trace shows no GPU work"
    if doc.source == "memory":
        return "no CUDA memory snapshot was given (pass its .pickle beside the trace)"
    if record.trace is None:
        return "no profiler trace was given"
    if doc.source in ("trace", "steps") and not record.trace.steps:
        return "the trace has no ProfilerStep spans"
    if doc.source == "steps":
        return "too few profiled steps in the trace"
    if doc.source == "manifest":
        return "the trace does not show it (no deviceProperties or GPU events)"
    return "not found in the trace"


def _skip_reasons(
    skipped: Sequence[SkippedRule], facts: Facts, record: TraceRunRecord
) -> tuple[SkippedRule, ...]:
    """The engine's reasons, reworded for an input of traces and snapshots."""
    rules = {r.id: r for r in ALL_RULES}
    out = []
    for item in skipped:
        rule = rules.get(item.rule_id)
        if rule is None or item.reason.startswith("internal error"):
            out.append(item)
            continue
        if item.reason.startswith("applies to CUDA"):
            out.append(SkippedRule(item.rule_id, "applies to CUDA training; the trace shows none"))
            continue
        if item.reason.startswith("applies to CPU"):
            out.append(SkippedRule(item.rule_id, "applies to CPU training; the trace shows a GPU"))
            continue
        if item.reason.startswith("applies to multi-rank"):
            out.append(
                SkippedRule(
                    item.rule_id,
                    "applies to multi-rank runs; one rank's trace was given (pass every "
                    "rank's trace, or their directory)",
                )
            )
            continue
        missing = [n for n in rule.needs if facts.get(n) is None]
        if not missing:
            out.append(item)
            continue
        by_reason: dict[str, list[str]] = {}
        for name in missing:
            by_reason.setdefault(_missing_reason(record, facts, name), []).append(name)
        text = "; ".join(f"needs {', '.join(ns)}: {r}" for r, ns in by_reason.items())
        out.append(SkippedRule(item.rule_id, text))
    return tuple(out)


def _baseline(record: TraceRunRecord, facts: Facts) -> BaselineSummary:
    steps = record.timed_steps
    waits = [s.data_wait_ms for s in steps if s.data_wait_ms is not None]
    breakdown: dict[str, float] = {}
    if steps and waits:
        parts = breakdown_ms(steps)
        # A trace has no forward/backward phases of its own: data, and the rest of the step.
        breakdown = {"data": parts["data"], "other": parts["other"]}
    peak = facts.get("peak_allocated_bytes")
    return BaselineSummary(
        steps_timed=len(steps),
        optimizer_steps=len(steps),
        micro_batches_per_step=None,
        step_ms_p50=_float(facts.get("step_ms_p50")),
        step_ms_p90=_float(facts.get("step_ms_p90")),
        data_wait_frac=_float(facts.get("data_wait_frac")),
        step_detection=None,
        breakdown_ms=breakdown,
        peak_memory_bytes=int(peak) if isinstance(peak, (int, float)) else None,
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _series(record: TraceRunRecord) -> dict[str, dict]:
    series: dict[str, dict] = {"steps": {}, "breakdown_ms": {}, "samples": {}, "memory": {}}
    label = "rank " + str(record.rank_summaries[0].rank) if record.rank_summaries else "trace"
    if record.rank_summaries and record.rank_summaries[0].rank is None:
        label = record.rank_summaries[0].worker
    waits_known = any(s.data_wait_ms is not None for s in record.timed_steps)
    for key, value in series_for(record).items():
        # No NVML samples from a trace; a breakdown without data waits is one "other" bar.
        if not value or key == "samples" or (key == "breakdown_ms" and not waits_known):
            continue
        series[key][label] = value
    for summary, rank in zip(record.rank_summaries[1:], record.ranks, strict=False):
        name = f"rank {summary.rank}" if summary.rank is not None else summary.worker
        series["steps"][name] = {
            "index": [s.index for s in rank.steps],
            "wall_ms": [s.wall_ms for s in rank.steps],
            "step_ms": [s.step_ms for s in rank.steps],
            "loss": [None] * len(rank.steps),
            "data_wait_ms": [s.data_wait_ms for s in rank.steps],
            "phase": [s.phase for s in rank.steps],
        }
    return series


def _warnings(record: TraceRunRecord, facts: Facts, extra: Sequence[str]) -> list[str]:
    warnings = list(extra)
    steps = len(record.timed_steps)
    if steps:
        warnings.append(
            f"step figures come from the {steps} profiled step(s) (ProfilerStep spans), which "
            "carry the profiler's own overhead; `perfdoctor profile` times steps without it"
        )
    elif record.trace is not None:
        warnings.append(
            "the trace has no ProfilerStep spans (the profiler was not stepped with "
            "prof.step()): no step time, and per-step facts are missing"
        )
    if facts.get("dataloader_multiprocess") is True:
        warnings.append(
            "the DataLoader runs worker processes (_MultiProcessingDataLoaderIter); the "
            "trace does not say how many"
        )
    warnings.extend(record.notes)
    warnings.extend(facts.settings.get("withheld") or ())
    if record.trace is not None:
        # The step note above already says it, with the cause.
        warnings.extend(n for n in record.trace.notes if "no ProfilerStep spans" not in n)
    if record.memory is not None:
        warnings.extend(record.memory.notes)
    return list(dict.fromkeys(warnings))


def build_trace_report(
    record: TraceRunRecord, *, out_dir: Path, notes: Sequence[str] = ()
) -> Report:
    facts = derive_facts(record)
    results = evaluate(facts)
    recommendations = recommend(results.findings, facts)
    artifacts: dict[str, str] = {
        "report_json": str(out_dir / REPORT_JSON),
        "report_md": str(out_dir / REPORT_MD),
        "report_html": str(out_dir / REPORT_HTML),
    }
    summaries = record.rank_summaries
    if summaries:
        for s in summaries:
            key = f"trace_rank{s.rank}" if s.rank is not None else f"trace_{s.worker}"
            artifacts[key] = s.trace
    elif record.trace_files:
        artifacts["trace"] = record.trace_files[0]
    snapshot = next((p for p in record.inputs if p.endswith((".pickle", ".pkl"))), None)
    if snapshot:
        artifacts["memory_snapshot"] = snapshot
    return Report(
        schema_version=SCHEMA_VERSION,
        script=record.run_name,
        argv=(),
        exit_code=0,
        status="completed",
        device=record.device,
        versions={"perfdoctor": __version__},
        baseline=_baseline(record, facts),
        findings=tuple(results.findings),
        skipped_rules=_skip_reasons(results.skipped, facts, record),
        recommendations=tuple(recommendations),
        variants=(),
        run_dir=str(out_dir),
        artifacts=artifacts,
        warnings=tuple(_warnings(record, facts, notes)),
        facts=dict(facts.values),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        run_dir_bytes=None,
        series=_series(record),
        gpu=gpu_timeline(facts),
        compute=facts.settings.get("compute") or {},
        source="trace",
        inputs=record.inputs,
        ranks=summaries,
    )


def default_out_dir(discovery: Discovery, root: Path = Path("perfdoctor-diagnose")) -> Path:
    name = discovery.runs[0].name if len(discovery.runs) == 1 else "runs"
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"


def run_out_dir(out_dir: Path, discovery: Discovery, run: RunInput) -> Path:
    """One run: its reports directly in `out_dir`; several: one subdirectory per run."""
    return out_dir if len(discovery.runs) == 1 else out_dir / run.name


def diagnose_run(run: RunInput, out_dir: Path, notes: Sequence[str] = ()) -> Report:
    return build_trace_report(load_trace_run(run), out_dir=out_dir, notes=notes)


def _diagnose_with_strays(
    run: RunInput, out_dir: Path, notes: Sequence[str]
) -> tuple[Report, list[RunInput]]:
    """The run's report, and the traces found with it that are not of its job
    (trace_record.one_job), each as a run of its own."""
    record = load_trace_run(run)
    report = build_trace_report(record, out_dir=out_dir, notes=notes)
    strays = [
        RunInput(name=f"{run.name}-{stray.worker}", directory=run.directory, ranks=(stray,))
        for stray in record.strays
    ]
    return report, strays


def diagnose_traces(paths: Sequence[Path], out_dir: Path | None = None) -> list[TraceDiagnosis]:
    """Every run found under `paths`, diagnosed (nothing written). A run whose trace cannot
    be used carries its error instead of a report; a missing path or no usable input at all
    raises (TargetNotFound, CorruptArtifact)."""
    discovery = discover(paths)
    # Absolute: the reports name their own paths, and are opened from anywhere.
    out_dir = (out_dir or default_out_dir(discovery)).absolute()
    done = []
    for run in discovery.runs:
        try:
            report, strays = _diagnose_with_strays(
                run, run_out_dir(out_dir, discovery, run), discovery.notes
            )
        except PerfdoctorError as err:
            if len(discovery.runs) == 1:
                raise
            done.append(TraceDiagnosis(run, None, err))
            continue
        done.append(TraceDiagnosis(run, report))
        for stray in strays:
            # Beside the job's own report: a folder of its own under the output directory.
            try:
                alone = diagnose_run(stray, out_dir / stray.name, discovery.notes)
            except PerfdoctorError as err:
                done.append(TraceDiagnosis(stray, None, err))
                continue
            done.append(TraceDiagnosis(stray, alone))
    return done


def write_trace_reports(report: Report) -> dict[str, Path]:
    """report.json, report.md and report.html in the report's own directory."""
    from perfdoctor.render.registry import REPORT_RENDERERS, file_renderers

    out = Path(report.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    with deferred_stop_signals():  # a stop waits for the reports (report_signals.py)
        for name, renderer in file_renderers(REPORT_RENDERERS).items():
            path = out / name
            write_file(path, str(renderer.render(report)).encode("utf-8", "backslashreplace"))
            paths[path.name] = path
    return paths

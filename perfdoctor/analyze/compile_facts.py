"""A run's compile diagnosis (analyze/compile_diag.py) as flat facts for the rules, and as
plain JSON for the report's compile section (Report.series["compile"][label])."""

from __future__ import annotations

from typing import Any

from perfdoctor.analyze.compile_diag import (
    CompileDiagnosis,
    diagnose_compile,
    load_compile_log,
    noise_floor_ms,
    ranked_cost,
)
from perfdoctor.analyze.compile_fixes import DISABLED_CAUSE
from perfdoctor.analyze.record import RunRecord

COMPILE_FACTS = (
    "compile_frames",
    "compile_graph_break_sites",
    "compile_break_eager_ms_per_step",
    "compile_break_step_frac",
    "compile_recompiles",
    "compile_recompile_ms_per_step",
    "compile_recompile_step_frac",
    "compile_time_s",
    "compile_top_issue",
    "compile_top_issue_ms_per_step",
    "compile_top_break",
    "compile_disable_break_sites",
    "compile_top_recompile",
    "cudagraph_skip_count",
    "compile_recompile_limit",
    "compile_recompile_limit_hit",
)


def compile_diagnosis(record: RunRecord, arm: str | None = None) -> CompileDiagnosis | None:
    """`arm`: the diagnosis of one arm of an in-process A/B run (its steps only). Such a run
    has no profiler window, and its compile.json holds what that arm compiled (the other arms
    run the script's own code), so the breaks are counted there, not priced."""
    log = load_compile_log(record.dir)
    if log is None:
        return None
    steps = [s for s in record.timed_steps if arm is None or s.arm == arm]
    trace = record.trace if arm is None else None
    regions = getattr(trace, "compiled", None) if trace is not None else None
    timed = sorted(s.wall_ms for s in steps if s.wall_ms is not None)
    profiled = trace.step_ms_p50 if trace is not None else None
    scale = timed[len(timed) // 2] / profiled if timed and profiled else None
    return diagnose_compile(log, regions, [s.index for s in steps], scale, noise_floor_ms(timed))


def compile_facts(record: RunRecord, diagnosis: CompileDiagnosis | None = None) -> dict[str, Any]:
    d = diagnosis if diagnosis is not None else compile_diagnosis(record)
    if d is None:
        return {}
    steps = [s.wall_ms for s in record.timed_steps if s.wall_ms is not None]
    step_ms = sorted(steps)[len(steps) // 2] if steps else None
    recompile_ms = (
        sum(i.cost_ms_per_step or 0.0 for i in d.issues if i.kind == "recompile")
        if d.measured_steps
        else None
    )
    top = d.issues[0] if d.issues and ranked_cost(d.issues[0]) else None

    def first(kind: str) -> str | None:
        found = next((i for i in d.issues if i.kind == kind and ranked_cost(i)), None)
        return f"{found.where} ({found.cause})" if found else None

    def frac(ms: float | None) -> float | None:
        return ms / step_ms if ms is not None and step_ms else None

    return {
        "compile_frames": d.frames_compiled,
        "compile_graph_break_sites": d.graph_breaks,
        "compile_break_eager_ms_per_step": d.eager_ms_per_step,
        "compile_break_step_frac": frac(d.eager_ms_per_step),
        "compile_recompiles": d.recompiles,
        "compile_recompile_ms_per_step": recompile_ms,
        "compile_recompile_step_frac": frac(recompile_ms),
        "compile_time_s": d.compile_s_total,
        "compile_top_issue": f"{top.where} ({top.cause})" if top else None,
        "compile_top_issue_ms_per_step": top.cost_ms_per_step if top else None,
        "compile_top_break": first("graph_break"),
        "compile_disable_break_sites": sum(
            1 for i in d.issues if i.kind == "graph_break" and i.cause == DISABLED_CAUSE
        ),
        "compile_top_recompile": first("recompile"),
        "cudagraph_skip_count": d.cudagraph_skips,
        "compile_recompile_limit": d.recompile_limit,
        "compile_recompile_limit_hit": d.recompile_limit_hit,
    }


def compile_series(record: RunRecord, arm: str | None = None) -> dict[str, Any]:
    d = compile_diagnosis(record, arm)
    return d.to_json() if d is not None else {}

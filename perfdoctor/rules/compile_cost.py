"""torch.compile that does not pay: graph breaks and recompiles priced in step time.

Reads the compile facts (analyze/compile_facts.py); the report's compile section lists
every break and recompile at its line with its fix, these findings say how much it costs.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, num, pct, seen, text

GRAPH_BREAKS = "compile-graph-breaks"
RECOMPILE_COST = "compile-recompile-cost"
CUDAGRAPH_SKIPS = "cudagraph-skips"


def _severity(frac: float, t: Mapping[str, float]) -> str:
    return "critical" if frac >= t["critical_frac"] else "warning"


def check_graph_breaks(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    sites = num(facts, "compile_graph_break_sites")
    frac = num(facts, "compile_break_step_frac")
    if not sites or frac is None or frac < t["min_step_frac"]:
        return None
    ms = num(facts, "compile_break_eager_ms_per_step") or 0.0
    top = text(facts, "compile_top_break")
    # A disable'd helper is the one break perfdoctor can lift at runtime, so what removing
    # it buys is measured (in-process A/B) rather than left at the upper bound below.
    lift = ("compile-lift-disable",) if num(facts, "compile_disable_break_sites") else ()
    return Finding(
        rule_id=GRAPH_BREAKS,
        severity=_severity(frac, t),  # type: ignore[arg-type]
        title=f"Graph breaks leave {pct(frac)} of each step running eagerly",
        explanation=(
            f"torch.compile splits the model at {sites:g} graph break(s); the code between "
            f"the compiled graphs runs eagerly, {ms:.2f} ms per step (measured in the profiled "
            "steps between `Torch-Compiled Region` spans). Each break is listed with its line "
            "and fix in the compile section" + (f"; the costliest is {top}." if top else ".")
        ),
        evidence=(
            ev("compile_break_step_frac", frac, t["min_step_frac"], ">="),
            *seen(
                facts,
                "compile_graph_break_sites",
                "compile_break_eager_ms_per_step",
                "compile_disable_break_sites",
            ),
        ),
        optimizations=lift,
        gain=GainEstimate(
            step_time_frac=frac,
            method="eager time between compiled graphs / median step: the upper bound of what "
            "removing the breaks buys (the code then runs compiled, not for free)",
            upper_bound=True,
        ),
    )


def check_recompile_cost(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    frac = num(facts, "compile_recompile_step_frac")
    if frac is None or frac < t["min_step_frac"]:
        return None
    ms = num(facts, "compile_recompile_ms_per_step") or 0.0
    top = text(facts, "compile_top_recompile")
    return Finding(
        rule_id=RECOMPILE_COST,
        severity=_severity(frac, t),  # type: ignore[arg-type]
        title=f"Recompiling costs {pct(frac)} of step time in the measured steps",
        explanation=(
            f"torch.compile kept recompiling during the measured steps: {ms:.1f} ms of compile "
            "per step on average. A guard failed each time (a Python value or shape that "
            "changes between calls); the compile section names the guard, the line and the fix"
            + (f"; the costliest is {top}." if top else ".")
        ),
        evidence=(
            ev("compile_recompile_step_frac", frac, t["min_step_frac"], ">="),
            *seen(facts, "compile_recompile_ms_per_step", "compile_recompiles", "compile_time_s"),
        ),
        gain=GainEstimate(
            step_time_frac=min(frac, 1.0),
            method="recompile seconds inside the timed steps / timed steps / median step",
        ),
    )


def check_cudagraph_skips(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    skips = num(facts, "cudagraph_skip_count")
    if skips is None or skips < t["min_skips"]:
        return None
    return Finding(
        rule_id=CUDAGRAPH_SKIPS,
        severity="warning",
        title=f"CUDA graphs skipped {skips:g} time(s) under mode='reduce-overhead'",
        explanation=(
            "Inductor ran those graphs without CUDA graphs, so reduce-overhead saved no launch "
            "overhead there. The compile section lists each reason and its fix."
        ),
        evidence=(ev("cudagraph_skip_count", int(skips), int(t["min_skips"]), ">="),),
        gain=GainEstimate(method="not estimated: launch overhead depends on the graph"),
    )


_SOURCE = (
    "5% of the median step: the ladder the other time rules use (base.py, TF-xprof "
    "input-bound 5%/20%); the prices are measured: on "
    "tests/integration/scripts/compile_planted.py the recompile storm's came within 25% of "
    "removing it by hand; a torch.compiler.disable'd helper's eager time is an upper bound "
    "(3.3x what removing it bought), so what lifting it buys is measured by the "
    "compile-lift-disable variant (benchmarks/README.md, Compile diagnosis)"
)

RULES = (
    Rule(
        id=GRAPH_BREAKS,
        title="torch.compile graph breaks priced in step time",
        area="model",
        needs=("compile_graph_break_sites", "compile_break_step_frac"),
        uses=(
            "compile_break_eager_ms_per_step",
            "compile_top_break",
            "compile_disable_break_sites",
        ),
        thresholds={"min_step_frac": 0.05, "critical_frac": 0.20},
        source=_SOURCE,
        description="Eager time between compiled graphs, charged to each graph break.",
        check=check_graph_breaks,
        optimizations=("compile-lift-disable",),
        selects_optimizations=True,
    ),
    Rule(
        id=RECOMPILE_COST,
        title="torch.compile recompiles inside the measured steps",
        area="model",
        needs=("compile_recompile_step_frac",),
        uses=(
            "compile_recompile_ms_per_step",
            "compile_recompiles",
            "compile_time_s",
            "compile_top_recompile",
        ),
        thresholds={"min_step_frac": 0.05, "critical_frac": 0.20},
        source=_SOURCE,
        description="Compile time spent inside training steps by recompiles (a storm).",
        check=check_recompile_cost,
    ),
    Rule(
        id=CUDAGRAPH_SKIPS,
        title="CUDA graphs skipped under reduce-overhead",
        area="model",
        needs=("cudagraph_skip_count",),
        thresholds={"min_skips": 1.0},
        source="inductor counters['inductor']['cudagraph_skips'] (mechanics.md §3.h): any "
        "skip means that graph runs without CUDA graphs",
        description="Inductor's cudagraph skips, with their reasons in the compile section.",
        check=check_cudagraph_skips,
    ),
)

"""The diagnosis rules catalog: facts -> ranked, merged findings, and the rules that were skipped.

`ALL_RULES` is explicit: adding a rule means adding it here, where `perfdoctor rules` and the
tests see it. Rules never import torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfdoctor.model import Facts
from perfdoctor.rules import (
    allocator,
    capture,
    compile_cost,
    cpu,
    cpu_precision,
    cudnn,
    debug,
    input_pipeline,
    jitter,
    launch,
    layout,
    loop,
    measurement,
    memory,
    modeling,
    multigpu,
    optimizer,
    precision,
    sync,
    thread_stall,
    timeline_causes,
    utilization,
)
from perfdoctor.rules.base import Rule
from perfdoctor.rules.engine import RuleResults, describe, evaluate_rules
from perfdoctor.rules.workload_framing import frame_for_workload

ALL_RULES: tuple[Rule, ...] = (
    *capture.RULES,
    *input_pipeline.RULES,
    *timeline_causes.RULES,
    *debug.RULES,
    *thread_stall.RULES,
    *cpu.RULES,
    *precision.RULES,
    *cpu_precision.RULES,
    *launch.RULES,
    *sync.RULES,
    *utilization.RULES,
    *cudnn.RULES,
    *layout.RULES,
    *optimizer.RULES,
    *memory.RULES,
    *allocator.RULES,
    *multigpu.RULES,
    *modeling.RULES,
    *jitter.RULES,
    *compile_cost.RULES,
    *measurement.RULES,
    *loop.RULES,
)


def evaluate(
    facts: Facts,
    rules: Sequence[Rule] = ALL_RULES,
    overrides: Mapping[str, Mapping[str, float]] | None = None,
) -> RuleResults:
    """Findings ranked by expected gain (one headline per root cause) and skipped rules."""
    return frame_for_workload(facts, evaluate_rules(facts, rules, overrides), rules)


def describe_rules(rules: Sequence[Rule] = ALL_RULES) -> list[dict[str, object]]:
    """One row per rule for `perfdoctor rules`: id, title, area, needs, thresholds, source."""
    return describe(rules)


__all__ = ["ALL_RULES", "Rule", "RuleResults", "describe_rules", "evaluate"]

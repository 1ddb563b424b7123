"""Run rules over facts: skip what cannot be decided, merge one root cause, rank by gain.

Ranking: severity first (a critical finding is never shown below a warning), then the
expected step-time saving, then the expected memory saving, then catalog order. Severity is
itself derived from the expected gain in most rules (base.GAIN_WARNING / GAIN_CRITICAL), so
within the ladder the order is the order of expected gain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from perfdoctor.analyze.fact_catalog import FACTS
from perfdoctor.model import Facts, Finding, GainEstimate, SkippedRule
from perfdoctor.rules.base import SEVERITY_RANK, Rule, flag
from perfdoctor.rules.machine_load import qualify

log = logging.getLogger(__name__)
T = TypeVar("T")


_SOURCE_REASONS = {
    "trace": "not found in the profiler trace",
    "memory": "no CUDA memory snapshot was read",
    "samples": "no device samples were recorded",
    "obs": "the child did not observe it",
    "steps": "not enough timed steps to measure it",
    "manifest": "not in the run manifest",
    "compile": "the script did not run torch.compile (no compile.json)",
}
_MAX_MERGED_LOCATIONS = 8


@dataclass(frozen=True)
class RuleResults:
    findings: tuple[Finding, ...]  # merged and ranked, headline first
    skipped: tuple[SkippedRule, ...]
    passed: tuple[str, ...] = ()  # rule ids that were evaluated and found nothing


def missing_reason(facts: Facts, name: str) -> str:
    """Why a fact is None, in words a user can act on."""
    doc = FACTS.get(name)
    if doc is None:
        return "not a documented fact"
    if doc.gpu_only and flag(facts, "device_is_cuda") is False:
        return "not measured on a CPU run"
    if doc.source == "trace" and facts.get("trace_steps") is None:
        return "no profiler trace in this run"
    return _SOURCE_REASONS.get(doc.source, "not measured in this run")


def skip_reason(rule: Rule, facts: Facts) -> str | None:
    """None when the rule can run; else one line saying why it cannot."""
    on_cuda = flag(facts, "device_is_cuda")
    if rule.device == "cuda" and on_cuda is False:
        return "applies to CUDA training; this run trained on the CPU"
    if rule.device == "cpu" and on_cuda is True:
        return "applies to CPU training; this run trained on a CUDA device"
    ranks = facts.get("ranks_launched")
    if rule.multi_rank and not (isinstance(ranks, int) and ranks > 1):
        return "applies to multi-rank runs (--nproc-per-node N > 1); this run had one process"
    missing = [name for name in rule.needs if facts.get(name) is None]
    if not missing:
        return None
    by_reason: dict[str, list[str]] = {}
    for name in missing:
        by_reason.setdefault(missing_reason(facts, name), []).append(name)
    return "; ".join(f"needs {', '.join(names)}: {reason}" for reason, names in by_reason.items())


def _run_one(
    rule: Rule, facts: Facts, overrides: Mapping[str, Mapping[str, float]]
) -> Finding | None:
    thresholds = {**rule.thresholds, **overrides.get(rule.id, {})}
    finding = rule.check(facts, thresholds)
    if finding is None:
        return None
    if finding.rule_id != rule.id:
        raise ValueError(f"rule {rule.id} returned a finding for {finding.rule_id}")
    if not rule.selects_optimizations:
        if finding.optimizations:
            raise ValueError(
                f"rule {rule.id} names optimizations in its check: declare them on the Rule"
            )
        finding = replace(finding, optimizations=rule.optimizations)
    unknown = [o for o in finding.optimizations if o not in rule.optimizations]
    if unknown:
        raise ValueError(f"rule {rule.id} names undeclared optimizations {unknown}")
    gain = finding.gain
    saved = gain.step_time_frac
    if saved is not None and not 0.0 <= saved <= 1.0:
        # A saving is a share of the step: outside 0-100% the estimate is a miscount, and
        # the report says so rather than promise it.
        finding = replace(
            finding,
            gain=replace(
                gain,
                step_time_frac=None,
                method=f"not estimated: the estimate came out at {saved:.0%} of the step, "
                "outside 0-100% (a miscount upstream)",
            ),
        )
    elif saved is not None:
        # Estimates are coarse; four decimals keep reports and JSON free of float noise.
        finding = replace(finding, gain=replace(gain, step_time_frac=round(saved, 4)))
    return finding


def evaluate_rules(
    facts: Facts,
    rules: Sequence[Rule],
    overrides: Mapping[str, Mapping[str, float]] | None = None,
) -> RuleResults:
    """Every rule once; `overrides` replaces named thresholds per rule id (for tuning)."""
    overrides = overrides or {}
    fired: list[tuple[Rule, Finding]] = []
    skipped: list[SkippedRule] = []
    passed: list[str] = []
    for rule in rules:
        reason = skip_reason(rule, facts)
        if reason is not None:
            skipped.append(SkippedRule(rule.id, reason))
            continue
        try:
            finding = _run_one(rule, facts, overrides)
        except Exception as err:  # one broken rule must not cost the user the diagnosis
            log.exception("rule %s failed", rule.id)
            skipped.append(SkippedRule(rule.id, f"internal error: {type(err).__name__}: {err}"))
            continue
        if finding is None:
            passed.append(rule.id)
        else:
            # A CPU-side share measured on a busy machine says so (rules/machine_load.py).
            fired.append((rule, qualify(rule, finding, facts)))
    return RuleResults(
        findings=merge_and_rank(fired, rules), skipped=tuple(skipped), passed=tuple(passed)
    )


# --------------------------------------------------------------------------- merge / rank


def _rank_key(finding: Finding, order: Mapping[str, int]) -> tuple[int, float, float, int]:
    return (
        SEVERITY_RANK.get(finding.severity, len(SEVERITY_RANK)),
        -(finding.gain.step_time_frac or 0.0),
        -float(finding.gain.memory_bytes or 0),
        order.get(finding.rule_id, len(order)),
    )


def _groups(fired: Sequence[tuple[Rule, Finding]]) -> list[list[Finding]]:
    """Union of findings that share a root cause or name each other in `related`."""
    parent = list(range(len(fired)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    index_of_id = {finding.rule_id: i for i, (_, finding) in enumerate(fired)}
    first_of_key: dict[str, int] = {}
    for i, (rule, finding) in enumerate(fired):
        key = rule.merge_key
        if key in first_of_key:
            union(i, first_of_key[key])
        else:
            first_of_key[key] = i
        for other in finding.related:
            if other in index_of_id:
                union(i, index_of_id[other])
    groups: dict[int, list[Finding]] = {}
    for i, (_, finding) in enumerate(fired):
        groups.setdefault(find(i), []).append(finding)
    return list(groups.values())


def _unique(items: Sequence[T], key: Callable[[T], Hashable]) -> list[T]:
    out: dict[Hashable, T] = {}
    for item in items:
        out.setdefault(key(item), item)
    return list(out.values())


def _merge(group: Sequence[Finding]) -> Finding:
    head, rest = group[0], list(group[1:])
    if not rest:
        return replace(head, related=())
    evidence = _unique(
        [e for f in group for e in f.evidence], key=lambda e: (e.name, repr(e.value))
    )
    locs = _unique(
        [loc for f in group for loc in f.locations], key=lambda loc: (loc.file, loc.line)
    )
    optimizations = list(dict.fromkeys(o for f in group for o in f.optimizations))
    time_best = max(group, key=lambda f: f.gain.step_time_frac or 0.0)
    mem_best = max(group, key=lambda f: f.gain.memory_bytes or 0)
    methods = dict.fromkeys(m for m in (time_best.gain.method, mem_best.gain.method) if m)
    gain = GainEstimate(
        step_time_frac=time_best.gain.step_time_frac,
        memory_bytes=mem_best.gain.memory_bytes,
        method="; ".join(methods),
    )
    also = "; ".join(f.title for f in rest)
    return replace(
        head,
        explanation=f"{head.explanation} Same root cause: {also}.",
        evidence=tuple(evidence),
        locations=tuple(locs[:_MAX_MERGED_LOCATIONS]),
        optimizations=tuple(optimizations),
        gain=gain,
        related=tuple(f.rule_id for f in rest),
    )


def merge_and_rank(
    fired: Sequence[tuple[Rule, Finding]], rules: Sequence[Rule]
) -> tuple[Finding, ...]:
    order = {rule.id: i for i, rule in enumerate(rules)}
    merged = []
    for group in _groups(fired):
        group.sort(key=lambda f: _rank_key(f, order))
        merged.append(_merge(group))
    merged.sort(key=lambda f: _rank_key(f, order))
    return tuple(merged)


def describe(rules: Sequence[Rule]) -> list[dict[str, object]]:
    """Rows for `perfdoctor rules`, in catalog order."""
    return [
        {
            "id": r.id,
            "module": r.module,
            "title": r.title,
            "area": r.area,
            "device": r.device,
            "needs": list(r.needs),
            "uses": list(r.uses),
            "thresholds": dict(r.thresholds),
            "source": r.source,
            "description": r.description,
            "optimizations": list(r.optimizations),
            "selects_optimizations": r.selects_optimizations,
            "root_cause": r.merge_key,
        }
        for r in rules
    ]

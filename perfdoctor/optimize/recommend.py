"""Findings -> ranked recommendations, and which of them to try automatically.

One recommendation per optimization id that some finding names. Ranking: the largest expected
step-time saving among the findings that name it, then the findings' severity, then the
expected memory saving, then catalog order (so equal evidence always ranks the same way).

Dropped, with a log line saying why: ids the catalog does not know, ids for another device
(a CUDA-only fix on a CPU run, CPU threads on a GPU run), and ids that need a newer GPU than
the one measured (bf16/TF32 before Ampere). An id whose entry has a `stand_in` hook is
replaced by the alternative that fits the device: of amp-bf16 and amp-fp16 only one
survives, bf16 where the GPU has native bf16 (compute capability >= 8.0), fp16 + GradScaler
otherwise. Trade-offs come from each entry's `conflicts` hook (optimize/policies.py).

Pure: no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from perfdoctor.model import Facts, Finding, GainEstimate, Recommendation, SourceLocation
from perfdoctor.optimize.catalog import CATALOG, Optimization
from perfdoctor.optimize.snippets import title_for
from perfdoctor.rules.base import SEVERITY_RANK, num

log = logging.getLogger(__name__)

# Findings of no known severity rank after "info".
_UNRANKED = len(SEVERITY_RANK)
_CATALOG_ORDER = {opt_id: index for index, opt_id in enumerate(CATALOG)}


@dataclass
class _Gathered:
    rule_ids: list[str] = field(default_factory=list)
    step_time_frac: float | None = None
    step_time_upper_bound: bool = False  # the largest step_time_frac is a ceiling
    memory_bytes: int | None = None
    methods: list[str] = field(default_factory=list)
    severity: int = _UNRANKED  # the most severe finding's SEVERITY_RANK (0: critical)
    locations: list[SourceLocation] = field(default_factory=list)


def _is_cuda(facts: Facts) -> bool | None:
    value = facts.get("device_is_cuda")
    return None if value is None else bool(value)


def device_reason(opt: Optimization, facts: Facts) -> str | None:
    """Why `opt` does not apply to the measured device (None: it applies or is unknown)."""
    cuda = _is_cuda(facts)
    if cuda is False and opt.device == "cuda":
        return "needs a CUDA device; this run trained on the CPU"
    if cuda is True and opt.device == "cpu":
        return "only for CPU training; this run trained on a GPU"
    cc = num(facts, "gpu_compute_capability")
    if cuda and cc is not None and opt.min_compute_capability and cc < opt.min_compute_capability:
        return f"needs compute capability >= {opt.min_compute_capability:g}; this GPU is {cc:g}"
    return None


def _gather(findings: Sequence[Finding], facts: Facts) -> dict[str, _Gathered]:
    gathered: dict[str, _Gathered] = {}
    for finding in findings:
        for opt_id in dict.fromkeys(finding.optimizations):
            if opt_id not in CATALOG:
                log.warning("finding %s names unknown optimization %r", finding.rule_id, opt_id)
                continue
            stand_in = CATALOG[opt_id].stand_in
            if stand_in is not None:
                opt_id = stand_in(facts)  # e.g. amp-bf16 or amp-fp16: the device decides
            entry = gathered.setdefault(opt_id, _Gathered())
            if finding.rule_id not in entry.rule_ids:
                entry.rule_ids.append(finding.rule_id)
            gain = finding.gain
            if gain.step_time_frac is not None and (
                entry.step_time_frac is None or gain.step_time_frac > entry.step_time_frac
            ):
                entry.step_time_frac = gain.step_time_frac
                entry.step_time_upper_bound = gain.upper_bound
            if gain.memory_bytes is not None and (
                entry.memory_bytes is None or gain.memory_bytes > entry.memory_bytes
            ):
                entry.memory_bytes = gain.memory_bytes
            if gain.method and gain.method not in entry.methods:
                entry.methods.append(gain.method)
            entry.severity = min(entry.severity, SEVERITY_RANK.get(finding.severity, _UNRANKED))
            for location in finding.locations:
                if location not in entry.locations:
                    entry.locations.append(location)
    return gathered


def conflicts_for(opt_id: str, chosen: Sequence[str], facts: Facts) -> tuple[str, ...]:
    """One line per trade-off or clash of `opt_id` with the measured run or other picks
    (the entry's `conflicts` hook)."""
    hook = CATALOG[opt_id].conflicts
    return hook(facts, frozenset(chosen) - {opt_id}) if hook is not None else ()


def code_change_for(opt: Optimization, facts: Facts) -> str:
    """The catalog's by-hand change, written for this script where the entry knows how."""
    return opt.tailor(facts, opt.code_change) if opt.tailor is not None else opt.code_change


def recommend(findings: Sequence[Finding], facts: Facts) -> list[Recommendation]:
    gathered = _gather(findings, facts)
    kept: dict[str, _Gathered] = {}
    for opt_id, entry in gathered.items():
        reason = device_reason(CATALOG[opt_id], facts)
        if reason is not None:
            log.info("dropping recommendation %s: %s", opt_id, reason)
            continue
        kept[opt_id] = entry

    def rank(opt_id: str) -> tuple[float, int, int, int]:
        entry = kept[opt_id]
        return (
            -(entry.step_time_frac or 0.0),
            entry.severity,
            -(entry.memory_bytes or 0),
            _CATALOG_ORDER[opt_id],
        )

    ordered = sorted(kept, key=rank)
    recommendations: list[Recommendation] = []
    for opt_id in ordered:
        opt = CATALOG[opt_id]
        entry = kept[opt_id]
        # A runtime fix that this script's settings keep from being tried (its skip_auto
        # hook) is a by-hand change here, and the report says why, not only the log.
        not_tried = opt.skip_auto(facts, False) if opt.skip_auto and opt.kind == "runtime" else None
        conflicts = conflicts_for(opt_id, ordered, facts)
        if not_tried:
            conflicts = (
                *conflicts,
                f"not tried at runtime in this session: {not_tried}; make the change by hand",
            )
        recommendations.append(
            Recommendation(
                optimization_id=opt_id,
                title=title_for(opt_id, opt.title, facts),
                kind="manual" if not_tried else opt.kind,
                risk=opt.risk,
                code_change=code_change_for(opt, facts),
                addresses=tuple(entry.rule_ids),
                expected_gain=GainEstimate(
                    step_time_frac=entry.step_time_frac,
                    memory_bytes=entry.memory_bytes,
                    method="; ".join(entry.methods),
                    upper_bound=entry.step_time_upper_bound,
                ),
                locations=tuple(entry.locations),
                conflicts=conflicts,
            )
        )
    return recommendations


def auto_candidates(
    recs: Sequence[Recommendation],
    facts: Facts,
    only: Sequence[str] | None = None,
    skip: Sequence[str] | None = None,
) -> list[str]:
    """Runtime/env optimization ids to try automatically, in recommendation order.

    `only` names the ids to try (the user's --only); an id there that no finding named is
    still tried, after the recommended ones, as long as it is runtime-applicable and fits the
    device. `skip` removes ids. An entry's `skip_auto` hook leaves it out where trying it
    could only be refused or measure noise (e.g. CUDA graphs with host syncs in the step,
    unless --only asks for them).
    """
    skipped = set(skip or ())
    wanted = list(dict.fromkeys(only)) if only is not None else None
    ordered = [r.optimization_id for r in recs]
    if wanted is not None:
        ordered = [i for i in ordered if i in wanted] + [i for i in wanted if i not in ordered]

    candidates: list[str] = []
    for opt_id in ordered:
        opt = CATALOG.get(opt_id)
        if opt is None or not opt.auto_applicable or opt_id in skipped:
            continue
        reason = device_reason(opt, facts)
        if reason is not None:
            log.info("not trying %s: %s", opt_id, reason)
            continue
        if opt.stand_in is not None and any(other in opt.excludes for other in candidates):
            continue  # one of the alternatives per session; the preferred one ranks first
        why_not = opt.skip_auto(facts, opt_id in (wanted or ())) if opt.skip_auto else None
        if why_not is not None:
            log.info("not trying %s: %s", opt_id, why_not)
            continue
        candidates.append(opt_id)
    return candidates

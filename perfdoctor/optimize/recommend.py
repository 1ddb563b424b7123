"""Findings -> ranked recommendations, and which of them to try automatically.

One recommendation per optimization id that some finding names. Ranking: the largest expected
step-time saving among the findings that name it, then the findings' severity, then the
expected memory saving, then catalog order (so equal evidence always ranks the same way).

Dropped, with a log line saying why: ids the catalog does not know, ids for another device
(a CUDA-only fix on a CPU run, CPU threads on a GPU run), and ids that need a newer GPU than
the one measured (bf16/TF32 before Ampere). Of amp-bf16 and amp-fp16 only one survives:
bf16 where the GPU has native bf16 (compute capability >= 8.0), fp16 + GradScaler otherwise.

Pure: no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from perfdoctor.model import Facts, Finding, GainEstimate, Recommendation, SourceLocation
from perfdoctor.optimize.catalog import CATALOG, Optimization
from perfdoctor.rules.base import SEVERITY_RANK, num

log = logging.getLogger(__name__)

# Findings of no known severity rank after "info".
_UNRANKED = len(SEVERITY_RANK)
_CATALOG_ORDER = {opt_id: index for index, opt_id in enumerate(CATALOG)}
BF16_MIN_CC = 8.0


@dataclass
class _Gathered:
    rule_ids: list[str] = field(default_factory=list)
    step_time_frac: float | None = None
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


def _preferred_amp(facts: Facts) -> str:
    cc = num(facts, "gpu_compute_capability")
    return "amp-fp16" if cc is not None and cc < BF16_MIN_CC else "amp-bf16"


def _gather(findings: Sequence[Finding], facts: Facts) -> dict[str, _Gathered]:
    gathered: dict[str, _Gathered] = {}
    preferred_amp = _preferred_amp(facts)
    for finding in findings:
        for opt_id in dict.fromkeys(finding.optimizations):
            if opt_id in ("amp-bf16", "amp-fp16"):
                # Both name "use mixed precision"; the device decides which dtype.
                opt_id = preferred_amp
            if opt_id not in CATALOG:
                log.warning("finding %s names unknown optimization %r", finding.rule_id, opt_id)
                continue
            entry = gathered.setdefault(opt_id, _Gathered())
            if finding.rule_id not in entry.rule_ids:
                entry.rule_ids.append(finding.rule_id)
            gain = finding.gain
            if gain.step_time_frac is not None and (
                entry.step_time_frac is None or gain.step_time_frac > entry.step_time_frac
            ):
                entry.step_time_frac = gain.step_time_frac
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


def cpu_threads_target(facts: Facts) -> int | None:
    """The intra-op thread count the cpu-threads applier (collect/appliers/cpu.py) sets:
    the cores the run may use (its CPU affinity, its share of them per rank), minus the
    training DataLoader's worker processes. None when the cores were not observed."""
    cpu = facts.settings.get("cpu") if isinstance(facts.settings, dict) else None
    affinity = cpu.get("affinity_cores") if isinstance(cpu, dict) else None
    cores = affinity if isinstance(affinity, int) and affinity > 0 else None
    if cores is None:
        logical = num(facts, "cpu_cores_logical")
        cores = int(logical) if logical else None
    if cores is None:
        return None
    ranks = int(num(facts, "ranks_launched") or 1)
    usable = max(1, cores // max(1, ranks))
    workers = int(num(facts, "dataloader_num_workers") or 0)
    return max(1, usable - workers)


def _fact_true(facts: Facts, name: str) -> bool:
    return bool(facts.get(name))


def conflicts_for(opt_id: str, chosen: Sequence[str], facts: Facts) -> tuple[str, ...]:
    """One line per trade-off or clash of `opt_id` with the measured run or other picks."""
    notes: list[str] = []
    others = set(chosen) - {opt_id}
    if opt_id == "activation-checkpointing":
        notes.append("trades time for memory: about 20-30% more compute per step")
    if opt_id in ("compile", "compile-cudagraphs"):
        debug = [
            name
            for name, fact in (
                ("anomaly detection", "anomaly_detection_enabled"),
                ("a user profiler", "user_profiler_active"),
                ("emit_nvtx", "emit_nvtx_enabled"),
            )
            if _fact_true(facts, fact)
        ]
        if debug or others & {"anomaly-off", "debug-modes-off"}:
            what = ", ".join(debug) or "debug modes"
            notes.append(f"compile gains little while {what} is on: switch debug modes off first")
        other_compile = "compile" if opt_id == "compile-cudagraphs" else "compile-cudagraphs"
        if other_compile in others:
            notes.append(f"exclusive with {other_compile}: only one compile mode can be applied")
    if opt_id == "compile-cudagraphs":
        syncs = facts.get("host_syncs_per_step")
        if isinstance(syncs, (int, float)) and syncs > 0:
            notes.append(
                f"CUDA graphs need a step without host syncs; {syncs:g} per step were seen "
                "(remove-host-syncs first)"
            )
        if isinstance(facts.get("input_shape_changes"), int) and facts.get("input_shape_changes"):
            notes.append("CUDA graphs need static shapes; input shapes changed after warm-up")
    if opt_id in ("amp-bf16", "amp-fp16"):
        other = "amp-fp16" if opt_id == "amp-bf16" else "amp-bf16"
        notes.append(f"exclusive with {other}")
        if _fact_true(facts, "anomaly_detection_enabled"):
            notes.append("anomaly detection slows autocast steps too")
    if opt_id == "dataloader-workers" and ("cpu-threads" in others or _is_cuda(facts) is False):
        notes.append("workers compete with the intra-op compute threads for CPU cores")
    if opt_id == "cpu-threads" and "dataloader-workers" in others:
        notes.append("compute threads compete with DataLoader workers for CPU cores")
    if opt_id == "cudnn-benchmark" and facts.get("input_shape_changes"):
        notes.append("re-tunes for every new input shape; shapes changed after warm-up")
    if opt_id == "cudnn-nondeterministic":
        notes.append("gives up bit-reproducibility that the script asked for")
    if opt_id == "non-blocking-copies" and not (
        _fact_true(facts, "dataloader_pin_memory") or "pin-memory" in others
    ):
        notes.append("only overlaps copies from pinned memory: needs pin-memory too")
    return tuple(notes)


# Optimizers with a fused implementation in torch.optim: the snippet names the script's own.
_FUSED_CLASSES = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})


def code_change_for(opt: Optimization, facts: Facts) -> str:
    """The catalog's by-hand change, written for this script where the facts say how: the
    fused-optimizer snippet shows the script's optimizer class, not AdamW for an SGD script."""
    cls = facts.get("optimizer_class")
    if opt.id == "fused-optimizer" and isinstance(cls, str) and cls in _FUSED_CLASSES:
        return f"torch.optim.{cls}(model.parameters(), lr=..., fused=True)"
    return opt.code_change


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
        recommendations.append(
            Recommendation(
                optimization_id=opt_id,
                title=opt.title,
                kind=opt.kind,
                risk=opt.risk,
                code_change=code_change_for(opt, facts),
                addresses=tuple(entry.rule_ids),
                expected_gain=GainEstimate(
                    step_time_frac=entry.step_time_frac,
                    memory_bytes=entry.memory_bytes,
                    method="; ".join(entry.methods),
                ),
                locations=tuple(entry.locations),
                conflicts=conflicts_for(opt_id, ordered, facts),
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
    device. `skip` removes ids. CUDA graphs are left out when host syncs were measured in the
    step (they would only fail), unless --only asks for them.
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
        if any(other in opt.excludes for other in candidates) and opt_id.startswith("amp-"):
            continue  # one precision per session; the preferred one ranks first
        if opt_id == "dataloader-workers" and (num(facts, "dataloader_num_workers") or 0) > 0:
            # The applier never overrides a count the script chose, so the run could only be
            # refused: raising it stays a change by hand (the finding says by how much).
            log.info("not trying dataloader-workers: the script sets num_workers itself")
            continue
        if opt_id == "cpu-threads":
            target = cpu_threads_target(facts)
            threads = num(facts, "torch_num_threads")
            if target is not None and threads is not None and int(threads) == target:
                # The applier would set what the script already runs with: a re-run that
                # changes nothing measures only noise.
                log.info("not trying cpu-threads: the script already runs %d threads", target)
                continue
        if opt_id == "compile-cudagraphs" and wanted is None:
            syncs = facts.get("host_syncs_per_step")
            if isinstance(syncs, (int, float)) and syncs > 0:
                log.info("not trying compile-cudagraphs: %g host syncs per step", syncs)
                continue
        candidates.append(opt_id)
    return candidates

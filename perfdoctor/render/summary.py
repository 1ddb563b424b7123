"""What every report says, worded once: the headline, the step table, the variants table.

Renderers differ in markup only; the sentences and the figures they show come from here so
the terminal, Markdown and HTML reports never disagree. Nothing here measures or judges:
it words what the Report already holds. Returned text is raw (unescaped): each renderer
escapes it for its own format.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from perfdoctor.model import Finding, GainEstimate, Recommendation, Report, VariantResult
from perfdoctor.render import format as fmt
from perfdoctor.rundir import BASELINE_LABEL, REPORT_HTML, REPORT_JSON, REPORT_MD

BREAKDOWN_PARTS = ("data", "forward", "backward", "optimizer", "other")

_STATUS_NOTES = {
    "finished_early": "The script ended on its own before the step plan was done; "
    "the figures use the steps it ran.",
    "script_exited": "The script exited with code {code} before the plan was done; "
    "this report is partial.",
    "script_crashed": "The script crashed (exit code {code}); this report is partial.",
    "timeout": "The script ran past --timeout and was stopped; this report is partial.",
    "launch_failed": "The script never started (exit code {code}); see the warnings.",
    "interrupted": "The run was interrupted; this report is partial.",
}

_DETECTION_NOTES = {
    "optimizer": "optimizer.step calls",
    "backward": "backward calls (no torch.optim optimizer seen)",
    "time": "time windows (no optimizer step and no backward seen)",
}


@dataclass(frozen=True)
class Headline:
    slow: str  # what holds training back
    fix: str  # what fixes it
    measured: str  # what perfdoctor measured when it applied the fix
    status_note: str | None = None  # set when the run did not complete its plan


@dataclass(frozen=True)
class VariantRow:
    label: str
    applied: str
    step_p50: str
    step_p90: str
    speedup: str
    memory: str
    loss_delta: str
    verdict: str
    reason: str


def headline(report: Report) -> Headline:
    note = _STATUS_NOTES.get(report.status)
    status_note = note.format(code=report.exit_code) if note else None
    if not report.findings and not report.baseline.steps_timed:
        # Nothing ran long enough to be judged: saying "no bottleneck" would read as a clean
        # bill of health.
        return Headline(
            slow="Not measured: the script stopped before its first timed training step.",
            fix="Make the script reach its training loop (its output is in stderr.log and "
            "stdout.log of the run directory), then profile it again.",
            measured=_measured_overall(report),
            status_note=status_note,
        )
    if not report.findings:
        return Headline(
            slow="No bottleneck rule fired on this run.",
            fix="Nothing to fix from what was measured.",
            measured=_measured_overall(report),
            status_note=status_note,
        )
    top = lead_finding(report)
    recs = recommendations_for(report, top)
    return Headline(
        slow=_slow_sentence(top),
        fix=_fix_sentence(top, recs),
        measured=_measured_sentence(report, top, recs),
        status_note=status_note,
    )


def lead_finding(report: Report) -> Finding:
    """The finding the headline leads with: after apply, the one whose fix was accepted with
    the largest measured speedup (a measured result outranks an estimate, and a fix that was
    tried and rejected must not headline over one that worked); else the top-ranked one."""
    accepted = sorted(
        (v for v in report.variants if v.verdict == "accepted" and len(v.optimizations) == 1),
        key=lambda v: v.speedup if v.speedup is not None else float("-inf"),
        reverse=True,
    )
    for variant in accepted:
        for finding in report.findings:
            fixes = {r.optimization_id for r in recommendations_for(report, finding)}
            if set(variant.optimizations) & (fixes | set(finding.optimizations)):
                return finding
    return report.findings[0]


def recommendations_for(report: Report, finding: Finding) -> list[Recommendation]:
    by_rule = [r for r in report.recommendations if finding.rule_id in r.addresses]
    if by_rule:
        return by_rule
    wanted = set(finding.optimizations)
    return [r for r in report.recommendations if r.optimization_id in wanted]


def gain_text(gain: GainEstimate, with_method: bool = True) -> str:
    parts = []
    if gain.step_time_frac is not None:
        parts.append(f"~{fmt.percent(gain.step_time_frac, 0)} of step time")
    if gain.memory_bytes is not None:
        parts.append(f"~{fmt.nbytes(gain.memory_bytes)} of peak memory")
    if not parts:
        return ""
    text = "saves " + " and ".join(parts)
    return f"{text} ({gain.method})" if gain.method and with_method else text


def _slow_sentence(top: Finding) -> str:
    if top.evidence:
        return f"{top.title}: {fmt.evidence(top.evidence[0])}."
    return f"{top.title}."


def _fix_sentence(top: Finding, recs: list[Recommendation]) -> str:
    if recs:
        titles = "; ".join(rec.title for rec in recs[:2])
        gain = next((g for g in (gain_text(r.expected_gain, False) for r in recs) if g), "")
        return f"{titles} — {gain}." if gain else f"{titles}."
    if top.optimizations:
        return "Apply " + ", ".join(top.optimizations) + "."
    return "No automatic fix: see the explanation of this finding."


def _variant_sentence(variant: VariantResult, baseline_ms: float | None) -> str:
    if variant.verdict == "failed":
        return f"{variant.label}: failed ({variant.reason})."
    text = f"{variant.label}: {fmt.speedup(variant.speedup, variant.speedup_noise)}"
    if variant.verdict == "accepted":
        # Only an accepted speedup is a measured direction; a rejected one may be noise.
        text += " faster" if (variant.speedup or 0) >= 1 else " slower"
    if baseline_ms is not None and variant.step_ms_p50 is not None:
        text += f", step {fmt.ms(baseline_ms)} → {fmt.ms(variant.step_ms_p50)}"
    return f"{text}, {variant.verdict} ({variant.reason})."


def _measured_sentence(report: Report, top: Finding, recs: list[Recommendation]) -> str:
    if not report.variants:
        return _measured_overall(report)
    fix_ids = {r.optimization_id for r in recs} | set(top.optimizations)
    relevant = [v for v in report.variants if fix_ids & set(v.optimizations)]
    if not relevant:
        return "No variant applied a fix for this finding; see the variants table."
    accepted = [v for v in relevant if v.verdict == "accepted"]
    pool = accepted or relevant
    best = max(pool, key=lambda v: v.speedup if v.speedup is not None else float("-inf"))
    return _variant_sentence(best, report.baseline.step_ms_p50)


def _measured_overall(report: Report) -> str:
    if not report.variants:
        return "Not measured: no optimization was applied and re-measured in this run."
    accepted = [v for v in report.variants if v.verdict == "accepted"]
    if not accepted:
        return f"{len(report.variants)} variant(s) measured, none accepted."
    best = max(accepted, key=lambda v: v.speedup if v.speedup is not None else float("-inf"))
    return _variant_sentence(best, report.baseline.step_ms_p50)


def step_rows(report: Report) -> list[tuple[str, str]]:
    """The baseline's step figures as (label, value) pairs."""
    base = report.baseline
    micro = base.micro_batches_per_step
    rows = [
        ("step time p50", fmt.ms(base.step_ms_p50)),
        ("step time p90", fmt.ms(base.step_ms_p90)),
        ("throughput", fmt.throughput(base.throughput_samples_s)),
        ("waiting for data", fmt.percent(base.data_wait_frac)),
        ("peak memory", fmt.nbytes(base.peak_memory_bytes)),
        ("steps timed", fmt.number(base.steps_timed)),
        ("optimizer steps", fmt.number(base.optimizer_steps)),
        ("micro-batches per step", fmt.number(micro)),
        ("steps counted by", _DETECTION_NOTES.get(base.step_detection or "", fmt.MISSING)),
    ]
    return rows


def breakdown_rows(breakdown_ms: Mapping[str, float]) -> list[tuple[str, float, float]]:
    """(part, ms, share of the total) in the canonical order, unknown parts last."""
    parts = [p for p in BREAKDOWN_PARTS if p in breakdown_ms]
    parts += sorted(p for p in breakdown_ms if p not in BREAKDOWN_PARTS)
    values = [(p, float(breakdown_ms[p])) for p in parts if breakdown_ms[p] is not None]
    total = sum(v for _, v in values)
    return [(p, v, v / total if total > 0 else 0.0) for p, v in values]


def variant_rows(report: Report) -> list[VariantRow]:
    """The baseline first (the reference every speedup is relative to), then each variant."""
    base = report.baseline
    rows = [
        VariantRow(
            label=BASELINE_LABEL,
            applied=fmt.MISSING,
            step_p50=fmt.ms(base.step_ms_p50),
            step_p90=fmt.ms(base.step_ms_p90),
            speedup=fmt.speedup(1.0) if base.step_ms_p50 is not None else fmt.MISSING,
            memory=fmt.nbytes(base.peak_memory_bytes),
            loss_delta=fmt.MISSING,
            verdict="reference",
            reason="the unmodified script",
        )
    ]
    for v in report.variants:
        rows.append(
            VariantRow(
                label=v.label,
                applied=fmt.applied(v.applied, v.optimizations, v.label),
                step_p50=fmt.ms(v.step_ms_p50),
                step_p90=fmt.ms(v.step_ms_p90),
                speedup=fmt.speedup(v.speedup, v.speedup_noise),
                memory=fmt.nbytes(v.peak_memory_bytes),
                loss_delta=fmt.signed_percent(v.loss_delta),
                # "?": measured while other processes kept the machine busy (see reason).
                verdict=f"{v.verdict}?" if v.low_confidence else v.verdict,
                reason=v.reason,
            )
        )
    return rows


def applied_changes(report: Report) -> list[tuple[str, str]]:
    """(optimization id, what its applier changed and why) for each applied optimization,
    once, from the first variant that applied it (single variants come before the stack)."""
    changes: dict[str, str] = {}
    for variant in report.variants:
        for item in variant.applied:
            if item.applied and item.detail and item.id not in changes:
                changes[item.id] = item.detail
    return list(changes.items())


def run_title(report: Report) -> str:
    return " ".join([report.script, *report.argv])


def device_text(report: Report) -> str:
    dev = report.device
    if dev is None:
        return fmt.MISSING
    text = dev.name if dev.count <= 1 else f"{dev.count}x {dev.name}"
    extras = []
    if dev.total_memory_bytes:
        extras.append(fmt.nbytes(dev.total_memory_bytes))
    if dev.compute_capability:
        extras.append(f"sm {dev.compute_capability}")
    if dev.kind == "cpu" and dev.cpu_cores_logical:
        extras.append(f"{dev.cpu_cores_logical} logical cores")
    ranks = world_text(report)
    return (
        f"{dev.kind}: {text}"
        + (f" ({', '.join(extras)})" if extras else "")
        + (f"; {ranks}" if ranks else "")
    )


def world_text(report: Report) -> str:
    """'world size 2 (2 ranks, gloo)' for a multi-rank run; '' for a single process."""
    facts = report.facts
    ranks, world, backend = (
        facts.get("ranks_launched"),
        facts.get("world_size"),
        facts.get("dist_backend"),
    )
    ranks = ranks if isinstance(ranks, int) and not isinstance(ranks, bool) else 1
    world = world if isinstance(world, int) and not isinstance(world, bool) else 1
    if ranks <= 1 and world <= 1:
        return ""
    if world <= 1:
        return f"{ranks} ranks, no process group"
    details = ", ".join(
        part for part in (f"{ranks} ranks" if ranks > 1 else "", str(backend or "")) if part
    )
    return f"world size {world}" + (f" ({details})" if details else "")


def tensorboard_command(report: Report) -> str:
    return f"perfdoctor tensorboard {report.run_dir}" if report.run_dir else ""


_BRIEF_ARTIFACT_WORDS = ("trace", "snapshot", "memory")


def artifact_rows(report: Report, brief: bool = False) -> list[tuple[str, str]]:
    """Where to look next: the reports, then the run's own artifacts, then TensorBoard.

    Artifact paths may be relative to the run directory (RunManifest.artifacts) or absolute;
    a path already listed (the reports, the logdir itself) is listed once. `brief` keeps
    only the artifacts a person opens (traces, memory snapshots), not the raw logs.
    """
    rows: list[tuple[str, str]] = []
    root = report.run_dir.rstrip("/")
    if root:
        size = f" ({fmt.nbytes(report.run_dir_bytes)})" if report.run_dir_bytes else ""
        rows.append(("run directory", root + size))
        rows.extend((name, f"{root}/{name}") for name in (REPORT_HTML, REPORT_MD, REPORT_JSON))
    shown = {os.path.normpath(path) for _, path in rows}
    for name, path in sorted(report.artifacts.items()):
        relative = root and not os.path.isabs(path) and not path.startswith(root)
        full = f"{root}/{path}" if relative else path
        if os.path.normpath(full) in shown:
            continue
        if brief and not any(word in name.lower() for word in _BRIEF_ARTIFACT_WORDS):
            continue
        shown.add(os.path.normpath(full))
        rows.append((name, full))
    command = tensorboard_command(report)
    if command:
        rows.append(("traces and scalars", command))
    return rows

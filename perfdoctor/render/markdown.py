"""report.md: GitHub-flavoured Markdown, ready to paste into a pull request or a wiki page.

Text from traces, scripts and paths goes through `md_text`, which collapses it to one line
and backslash-escapes every character Markdown (and GitHub's extensions: tables, math,
strikethrough) would read as syntax, so an op named `a|b` cannot split a table cell and a
path holding `<script>` stays text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from perfdoctor.model import Finding, Recommendation, Report
from perfdoctor.render import (
    batch_section,
    compute_section,
    gpu_view,
    loop_section,
    measurement,
    outcome,
    summary,
)
from perfdoctor.render import format as fmt
from perfdoctor.render.compile_section import compile_markdown
from perfdoctor.render.memory_section import CATEGORY_NOTE, memory_section

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that start
# inline syntax (emphasis, code, links, HTML, entities, tables, GitHub math, strikethrough).
_INLINE_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~$&])")
# Line starts that open a block: "- x" / "+ x" bullets, a "---" rule, and "1." / "1)" list
# items (digits cannot be escaped, so the escape goes on the "." or ")"). Quotes and headings
# start with ">" and "#", which the inline set already escapes.
_BLOCK_MARKER = re.compile(r"^(\s*)([-+])(?=\s|$|-)")
_ORDERED_ITEM = re.compile(r"^(\s*\d+)([.)])(?=\s|$)")

_SEVERITY_MARK = {"critical": "🔴", "warning": "🟠", "info": "🔵"}


def md_text(text: str) -> str:
    """Untrusted text as one line of literal Markdown."""
    escaped = _INLINE_SPECIAL.sub(r"\\\1", fmt.one_line(str(text)))
    escaped = _BLOCK_MARKER.sub(r"\1\\\2", escaped)
    return _ORDERED_ITEM.sub(r"\1\\\2", escaped)


def _code_block(code: str, language: str = "") -> list[str]:
    # A fence longer than any backtick run inside, so the snippet cannot close it early.
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *code.splitlines(), fence]


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    """Cells are already escaped. `align` holds one of l/r per column (default left)."""
    marks = [("---:" if a == "r" else "---") for a in (align or "l" * len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render_markdown(report: Report) -> str:
    report = fmt.printable_all(report)  # no raw ESC from artifacts in a .md either
    lines: list[str] = []
    lines += _title(report)
    lines += _headline(report)
    lines += _step(report)
    lines += _gpu(report)
    lines += _memory(report)
    lines += compute_section.markdown_lines(report, md_text, _table)
    lines += batch_section.markdown_lines(report)
    lines += compile_markdown(report, md_text)
    lines += _ranks(report)
    lines += _loop(report)
    lines += _findings(report)
    lines += _recommendations(report)
    if not summary.is_trace(report):  # a trace has no variants: nothing was applied
        lines += _variants(report)
        lines += _patch(report)
    lines += _skipped(report)
    lines += _warnings(report)
    lines += _environment(report)
    lines += _artifacts(report)
    return "\n".join(lines).rstrip("\n") + "\n"


def _title(report: Report) -> list[str]:
    if summary.is_trace(report):
        meta = [
            f"**Device:** {md_text(summary.device_text(report))}",
            f"**Source:** {md_text(summary.source_text(report))}",
        ]
        if report.created_at:
            meta.append(f"**Created:** {md_text(report.created_at)}")
        title = f"# perfdoctor diagnose: {md_text(summary.run_title(report))}"
        inputs = [f"- {md_text(p)}" for p in report.inputs]
        return [title, "", " · ".join(meta), "", "Input:", "", *inputs, ""]
    meta = [
        f"**Device:** {md_text(summary.device_text(report))}",
        f"**Status:** {md_text(report.status)} (exit code {report.exit_code})",
    ]
    if report.created_at:
        meta.append(f"**Created:** {md_text(report.created_at)}")
    return [f"# perfdoctor report: {md_text(summary.run_title(report))}", "", " · ".join(meta), ""]


def _headline(report: Report) -> list[str]:
    head = summary.headline(report)
    lines = ["## Diagnosis", ""]
    if head.status_note:
        lines += [f"> **{md_text(head.status_note)}**", ""]
    for note in head.run_notes:
        lines += [f"> {md_text(note)}", ""]
    lines += _table(
        ["", ""],
        [
            ["**Slow**", md_text(head.slow)],
            ["**Fix**", md_text(head.fix)],
            ["**Measured**", md_text(head.measured)],
        ],
    )
    return [*lines, ""]


def _step(report: Report) -> list[str]:
    lines = [f"## {md_text(summary.step_title(report))}", ""]
    lines += _table(
        ["measure", "value"], [[md_text(k), md_text(v)] for k, v in summary.step_rows(report)], "lr"
    )
    if not summary.has_steps(report):
        return [*lines, ""]
    parts = summary.breakdown_rows(report.baseline.breakdown_ms)
    lines += ["", f"### {md_text(summary.breakdown_title(report))}", ""]
    if not parts:
        missing = summary.breakdown_missing(report)
        if not summary.is_trace(report):
            missing = "not measured: no per-phase timing was recorded for this run"
        return [*lines, md_text(missing[0].upper() + missing[1:] + "."), ""]
    rows = [[md_text(p), fmt.ms(v), fmt.percent(share)] for p, v, share in parts]
    return [*lines, *_table(["part", "time", "share of step"], rows, "lrr"), ""]


def _gpu(report: Report) -> list[str]:
    if not gpu_view.has_gpu_view(report):
        return []
    lines = ["## GPU timeline", ""]
    window = gpu_view.window_text(report)
    if window:
        lines += [md_text(window) + ". " + md_text(gpu_view.DEFINITIONS), ""]
    rows = [[md_text(r.label), r.value, md_text(r.note)] for r in gpu_view.timeline_rows(report)]
    lines += [*_table(["where the GPU time went", "share", "meaning"], rows, "lrl"), ""]
    comm = [[md_text(r.label), r.value, md_text(r.note)] for r in gpu_view.comm_rows(report)]
    if comm:
        lines += [*_table(["communication", "share", "meaning"], comm, "lrl"), ""]
    collectives = [[md_text(c) for c in row] for row in gpu_view.collective_rows(report)]
    if collectives:
        lines += ["### Collectives", ""]
        lines += [*_table(list(gpu_view.COLLECTIVE_COLUMNS), collectives, "lrrrrrl"), ""]
        lines += [md_text(gpu_view.COLLECTIVE_NOTE), ""]
    counts = gpu_view.count_text(report)
    if counts:
        lines += [md_text(counts) + ".", ""]
    kernels = [
        [md_text(k.name), k.count, k.total_ms, k.share, md_text(k.kind)]
        for k in gpu_view.kernel_rows(report)
    ]
    if kernels:
        lines += ["### Top kernels", ""]
        lines += [*_table(["kernel", "count", "time", "share", "kind"], kernels, "lrrrl"), ""]
    return lines


def _ranks(report: Report) -> list[str]:
    if not report.ranks:
        return []
    rows = [[md_text(c) for c in row] for row in summary.rank_rows(report)]
    return [
        f"## {summary.ranks_title(report)}",
        "",
        *_table(list(summary.RANK_COLUMNS), rows, "llrrrrrr"),
        "",
        md_text(summary.rank_spread_text(report)),
        "",
        md_text(summary.rank_note(report)),
        "",
    ]


def _loop(report: Report) -> list[str]:
    rows = [[md_text(c) for c in row] for row in loop_section.loop_rows(report)]
    if not rows:
        return []
    verdict = md_text(loop_section.loop_verdict(report))
    return [
        f"## {loop_section.TITLE}",
        "",
        *_table(list(loop_section.COLUMNS), rows, "lrr"),
        "",
        verdict,
        "",
    ]


def _finding(rank: int, finding: Finding) -> list[str]:
    mark = _SEVERITY_MARK.get(finding.severity, "")
    lines = [
        f"### {rank}. {mark} {md_text(finding.severity)}: {md_text(finding.title)}",
        "",
        f"Rule `{finding.rule_id}`"
        if _plain_id(finding.rule_id)
        else f"Rule {md_text(finding.rule_id)}",
        "",
        md_text(finding.explanation),
        "",
    ]
    if finding.evidence:
        rows = [
            [
                md_text(e.name),
                md_text(fmt.scalar(e.value, fmt.unit_for(e.name, e.unit))),
                md_text(
                    f"{e.comparison} {fmt.scalar(e.threshold, fmt.unit_for(e.name, e.unit))}"
                    if e.threshold is not None
                    else fmt.MISSING
                ),
                md_text(e.note) if e.note else "",
            ]
            for e in finding.evidence
        ]
        lines += [*_table(["evidence", "measured", "threshold", "note"], rows, "lrrl"), ""]
    if finding.locations:
        lines += ["Where in the code:", ""]
        lines += [f"- {md_text(fmt.location(loc))}" for loc in finding.locations]
        lines.append("")
    gain = summary.gain_text(finding.gain)
    if finding.optimizations or gain:
        fix = ", ".join(md_text(o) for o in finding.optimizations) or fmt.MISSING
        lines += [f"**Fix:** {fix}" + (f"; {md_text(gain)}" if gain else ""), ""]
    return lines


def _plain_id(value: str) -> bool:
    """Our own kebab-case ids read best as code; anything else is escaped text."""
    return re.fullmatch(r"[A-Za-z0-9._-]+", value) is not None


def _findings(report: Report) -> list[str]:
    lines = ["## Findings", ""]
    if not report.findings:
        return [*lines, "No rule fired on this run.", ""]
    for rank, finding in enumerate(report.findings, start=1):
        lines += _finding(rank, finding)
    return lines


def _recommendation(rec: Recommendation) -> list[str]:
    ident = (
        f"`{rec.optimization_id}`"
        if _plain_id(rec.optimization_id)
        else md_text(rec.optimization_id)
    )
    lines = [f"### {md_text(rec.title)} ({ident})", ""]
    facts = [f"**{label}:** {md_text(value)}" for label, value in summary.recommendation_facts(rec)]
    lines += [" · ".join(facts), ""]
    for conflict in rec.conflicts:
        lines.append(f"- Trade-off: {md_text(conflict)}")
    for loc in rec.locations:
        lines.append(f"- At {md_text(fmt.location(loc))}")
    if rec.conflicts or rec.locations:
        lines.append("")
    if rec.code_change:
        lines += [*_code_block(rec.code_change, "python"), ""]
    return lines


def _memory(report: Report) -> list[str]:
    section = memory_section(report)
    if section is None:
        return []
    lines = ["## GPU memory (CUDA memory snapshot)", ""]
    lines += _table(["measure", "value"], ([md_text(m), md_text(v)] for m, v in section.figures))
    lines.append("")
    if section.categories:
        lines += ["**What the peak holds**", ""]
        rows = ([md_text(n), md_text(b), md_text(s)] for n, b, s in section.categories)
        lines += _table(["memory", "bytes", "share"], rows, "lrr")
        lines += ["", md_text(CATEGORY_NOTE), ""]
    for title, sites in (
        ("Allocated where: live at the peak", section.sites_at_peak),
        (f"Allocated where: whole history ({section.overall_total})", section.sites_overall),
    ):
        if not sites:
            continue
        lines += [f"**{md_text(title)}**", ""]
        rows = ([md_text(r.site), *map(md_text, r.cells())] for r in sites)
        lines += _table(["site", "function", "bytes", "share", "blocks"], rows, "llrrr")
        lines.append("")
    return lines


def _recommendations(report: Report) -> list[str]:
    if not report.recommendations:
        return []
    lines = ["## Recommendations", ""]
    for rec in report.recommendations:
        lines += _recommendation(rec)
    return lines


def _variants(report: Report) -> list[str]:
    lines = ["## Variants", ""]
    if not report.variants:
        return [*lines, "None measured: no runtime optimization was applied in this run.", ""]
    header = ["variant", "applied", summary.PAIRED_STEP_HEADER, "speedup"]
    header += [summary.POOLED_P90_HEADER, "peak memory", "loss Δ"]
    header += ["verdict", "reason"]
    rows = [
        [
            md_text(r.label),
            md_text(r.applied),
            md_text(r.step_p50),
            md_text(r.speedup),
            md_text(r.step_p90),
            md_text(r.memory),
            md_text(r.loss_delta),
            f"**{md_text(r.verdict)}**",
            md_text(r.reason),
        ]
        for r in summary.variant_rows(report)
    ]
    lines += _table(header, rows, "llrrrrrll")
    lines += ["", summary.VARIANTS_NOTE, ""]
    measured = measurement.measurement_rows(report)
    if measured:
        lines += ["### How each fix was measured", ""]
        lines += _table(
            list(measurement.HEADER),
            [[md_text(c) for c in measurement.cells(r)] for r in measured],
            "llrrrrrrll",
        )
        lines += ["", measurement.NOTE, ""]
    changes = summary.applied_changes(report)
    if changes:
        lines += ["What the applied optimizations changed:", ""]
        lines += [f"- {md_text(opt_id)}: {md_text(detail)}" for opt_id, detail in changes]
        lines.append("")
    return lines


def _patch(report: Report) -> list[str]:
    """fixes.patch: each change with its measured gain (here, never in the user's code),
    the lines to add by hand, and how to apply it."""
    patch = report.fix_patch or {}
    hunks, adds = patch.get("hunks") or [], patch.get("lines_to_add") or []
    if not hunks and not adds:
        return []
    lines = ["## Patch of the proven fixes", ""]
    if hunks:
        lines += [f"`{md_text(outcome.patch_path(report) or '')}` changes:", ""]
        lines += _table(
            ["file:line", "fix", "change", "measured"],
            [
                [
                    md_text(f"{h.get('file')}:{h.get('line')}"),
                    md_text(str(h.get("optimization_id"))),
                    md_text(str(h.get("change"))),
                    md_text(str(h.get("gain"))),
                ]
                for h in hunks
            ],
        )
        lines.append("")
    for add in adds:
        lines += [
            f"Add by hand ({md_text(str(add.get('optimization_id')))}, measured "
            f"{md_text(str(add.get('gain')))}; {md_text(str(add.get('where')))}):",
            "",
            *_code_block(str(add.get("line"))),
            "",
        ]
    command = patch.get("apply")
    if isinstance(command, str) and command:
        lines += ["Apply it (`patch -p1` from the same directory works too; `-R` takes it back):"]
        lines += ["", *_code_block(command, "sh"), ""]
    return lines


def _skipped(report: Report) -> list[str]:
    if not report.skipped_rules:
        return []
    rows = [[md_text(s.rule_id), md_text(s.reason)] for s in report.skipped_rules]
    return [
        "## Skipped rules",
        "",
        "<details>",
        f"<summary>{md_text(summary.skipped_summary(report))}</summary>",
        "",
        *_table(["rule", "why"], rows),
        "",
        "</details>",
        "",
    ]


def _warnings(report: Report) -> list[str]:
    if not report.warnings:
        return []
    return ["## Warnings", "", *(f"- {md_text(w)}" for w in report.warnings), ""]


def _environment(report: Report) -> list[str]:
    rows = [["device", md_text(summary.device_text(report))]]
    rows += [[md_text(k), md_text(v)] for k, v in sorted(report.versions.items())]
    return ["## Environment", "", *_table(["", ""], rows), ""]


def _artifacts(report: Report) -> list[str]:
    rows = summary.artifact_rows(report)
    if not rows:
        return []
    return [
        "## Artifacts",
        "",
        *_table(["artifact", "where"], [[md_text(k), md_text(v)] for k, v in rows]),
        "",
    ]

"""The terminal summary printed right after a run: rich panels and tables in 100 columns.

Every string that comes from a trace, a script or a path is wrapped in `rich.text.Text`, so
rich never reads it as markup (`[/]` in an op name would otherwise raise, and `[red]` would
restyle the report). Colour comes from the Console: `make_console()` gives one that is
plain when stdout is not a TTY and has no colour at all when NO_COLOR is set.
"""

from __future__ import annotations

import os
from typing import TextIO

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

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
from perfdoctor.render.compile_section import compile_panel
from perfdoctor.render.memory_section import CATEGORY_NOTE, MemorySection, memory_section, sparkline
from perfdoctor.render.rich_figures import figures_grid

MAX_WIDTH = 100

_VERDICT_STYLE = {
    "accepted": "bold green",
    "rejected": "yellow",
    "undecided": "cyan",
    "failed": "red",
    "reference": "dim",
}
_BAR_WIDTH = 24
_MAX_LOCATIONS = 5
_SIDE_BY_SIDE_WIDTH = 96  # below this the step figures and the breakdown are stacked
_APPLIED_COLUMN_WIDTH = 90  # below this "applied" moves from its column to the reason lines


def make_console(file: TextIO | None = None) -> Console:
    """A Console at most 100 columns wide; no styling at all when NO_COLOR is set.

    rich alone only drops *colours* under NO_COLOR and keeps bold/underline escapes;
    `color_system=None` drops every escape, which is what scripts piping our output expect.
    Non-TTY files get no escapes from rich already.
    """
    no_color = bool(os.environ.get("NO_COLOR"))
    if no_color:
        console = Console(file=file, color_system=None, no_color=True, highlight=False)
    else:
        console = Console(file=file, highlight=False)
    piped_without_width = not console.is_terminal and not os.environ.get("COLUMNS")
    if console.width > MAX_WIDTH or piped_without_width:
        # Pipes and CI logs get rich's 80-column default otherwise, which wraps paths.
        console.width = MAX_WIDTH
    return console


def render_terminal(report: Report, console: Console) -> None:
    report = fmt.printable_all(report)  # names from artifacts: no raw control characters
    console.print(_header(report))
    console.print(_headline_panel(report))
    console.print(_step_section(report, side_by_side=console.width >= _SIDE_BY_SIDE_WIDTH))
    if gpu_view.has_gpu_view(report):
        console.print(_gpu_section(report))
    memory = memory_section(report)
    if memory is not None:
        console.print(_memory_panel(memory))
    compute = compute_section.terminal_panel(report)
    if compute is not None:
        console.print(compute)
    batch = batch_section.terminal_panel(report)
    if batch is not None:
        console.print(batch)
    compiled = compile_panel(report)
    if compiled is not None:
        console.print(compiled)
    if report.ranks:
        console.print(_ranks_section(report))
    if loop_section.has_loop_section(report):
        console.print(_loop_section(report))
    if report.findings:
        console.print(_findings_section(report))
    if report.recommendations:
        console.print(_recommendations_section(report))
    if not summary.is_trace(report):  # a trace has no variants: nothing was applied
        console.print(_variants_table(report, with_applied=console.width >= _APPLIED_COLUMN_WIDTH))
    for line in _footer_lines(report):
        console.print(line)


def render_runs_overview(reports: list[Report], console: Console) -> None:
    """`perfdoctor diagnose` over several runs: one line each, after their own summaries
    (each run's reports are in its own subdirectory, named after the run)."""
    reports = fmt.printable_all(reports)  # names from artifacts: no raw control characters
    table = Table(title="Runs diagnosed", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("run", overflow="fold", ratio=1, min_width=12)
    table.add_column("ranks", justify="right", no_wrap=True)
    table.add_column(summary.PAIRED_STEP_HEADER, justify="right", no_wrap=True)
    table.add_column("first finding", overflow="fold", ratio=1)
    for report in reports:
        top = report.findings[0] if report.findings else None
        finding = Text(
            top.title if top else "none",
            style=fmt.SEVERITY_STYLE.get(top.severity, "") if top else "dim",
        )
        table.add_row(
            Text(report.script),
            Text(str(max(1, len(report.ranks)))),
            Text(fmt.ms(report.baseline.step_ms_p50)),
            finding,
        )
    console.print(table)


def _header(report: Report) -> Text:
    if summary.is_trace(report):
        text = Text("perfdoctor diagnose ", style="bold")
        text.append(summary.run_title(report))
        text.append(f"\n{summary.device_text(report)}", style="dim")
        text.append(f"\n{summary.source_text(report)}", style="dim")
        return text
    text = Text("perfdoctor ", style="bold")
    text.append(summary.run_title(report))
    text.append(f"\n{summary.device_text(report)}", style="dim")
    text.append(f"  ·  status {report.status}, exit code {report.exit_code}", style="dim")
    return text


def _ranks_section(report: Report) -> Group:
    table = Table(
        title=summary.ranks_title(report), title_justify="left", box=box.SIMPLE_HEAD,
        show_edge=False,
    )  # fmt: skip
    for i, column in enumerate(summary.RANK_COLUMNS):
        if i == 1:  # worker names can be long (<host>_<pid>): they wrap, the figures never do
            table.add_column(column, overflow="fold", ratio=1, min_width=12)
        else:
            table.add_column(column, justify="left" if i == 0 else "right", no_wrap=True)
    for row in summary.rank_rows(report):
        table.add_row(*(Text(cell) for cell in row))
    return Group(table, Text(summary.rank_spread_text(report)), Text(""))


def _loop_section(report: Report) -> Group:
    table = Table(
        title=loop_section.TITLE, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False
    )
    for i, column in enumerate(loop_section.COLUMNS):
        table.add_column(column, justify="left" if i == 0 else "right", ratio=1 if i == 0 else None)
    for row in loop_section.loop_rows(report):
        table.add_row(*(Text(cell) for cell in row))
    return Group(table, Text(loop_section.loop_verdict(report)), Text(""))


def _headline_panel(report: Report) -> Panel:
    head = summary.headline(report)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row("Slow", Text(head.slow))
    grid.add_row("Fix", Text(head.fix))
    grid.add_row("Measured", Text(head.measured))
    parts: list[Table | Text] = [grid]
    if head.status_note:
        parts.append(Text(head.status_note, style="bold yellow"))
    parts += [Text(note, style="dim") for note in head.run_notes]
    return Panel(Group(*parts), title="Diagnosis", title_align="left", box=box.ROUNDED)


def _breakdown_table(
    parts: list[tuple[str, float, float]], title: str = "Where a step goes"
) -> Table | Text:
    if not parts:
        return Text("step breakdown: not measured", style="dim")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, title=title, title_justify="left")
    # Beside a wide step table the bars give way, never the labels and figures ("optimiz…").
    times = [fmt.ms(value) for _, value, _ in parts]
    table.add_column("part", no_wrap=True, min_width=max(len(p) for p, _, _ in parts))
    table.add_column("time", justify="right", no_wrap=True, min_width=max(map(len, times)))
    table.add_column("share", justify="right", no_wrap=True, min_width=6)
    table.add_column("", no_wrap=True, overflow="crop")
    for part, value, share in parts:
        bar = "█" * max(round(share * _BAR_WIDTH), 1 if share > 0 else 0)
        table.add_row(Text(part), fmt.ms(value), fmt.percent(share), Text(bar, style="blue"))
    return table


def _step_section(report: Report, side_by_side: bool) -> Table:
    figures = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        title=summary.step_title(report),
        title_justify="left",
    )
    figures.add_column("measure", no_wrap=True)
    figures.add_column("value", justify="right")
    for label, value in summary.step_rows(report):
        figures.add_row(label, Text(value))

    if not summary.has_steps(report):
        return figures
    breakdown = _breakdown_table(
        summary.breakdown_rows(report.baseline.breakdown_ms), summary.breakdown_title(report)
    )
    outer = Table.grid(padding=(0, 3))
    if side_by_side:
        outer.add_column()
        outer.add_column()
        outer.add_row(figures, breakdown)
    else:
        outer.add_column()
        outer.add_row(figures)
        outer.add_row(breakdown)
    return outer


_KERNEL_NAME_WIDTH = 56


def _gpu_section(report: Report) -> Group:
    timeline = Table(
        box=box.SIMPLE_HEAD, show_edge=False, title="GPU timeline", title_justify="left"
    )
    timeline.add_column("where the GPU time went", no_wrap=True)
    timeline.add_column("share", justify="right", no_wrap=True)
    timeline.add_column("meaning", style="dim")
    for row in [*gpu_view.timeline_rows(report), *gpu_view.comm_rows(report)]:
        timeline.add_row(row.label, row.value, row.note)
    parts: list[Table | Text] = []
    window = gpu_view.window_text(report)
    if window:
        parts.append(Text(window, style="dim"))
    parts.append(timeline)
    collectives = gpu_view.collective_rows(report)
    if collectives:
        table = Table(
            box=box.SIMPLE_HEAD, show_edge=False, title="Collectives", title_justify="left"
        )
        for i, column in enumerate(gpu_view.COLLECTIVE_COLUMNS):
            table.add_column(column, justify="left" if i in (0, 6) else "right")
        for cells in collectives:
            table.add_row(*(Text(cell) for cell in cells))
        parts.append(table)
    kernels = gpu_view.kernel_rows(report)[:5]
    if kernels:
        top = Table(box=box.SIMPLE_HEAD, show_edge=False, title="Top kernels", title_justify="left")
        top.add_column("kernel", no_wrap=True)
        top.add_column("count", justify="right", no_wrap=True, min_width=5)
        top.add_column("time", justify="right", no_wrap=True, min_width=9)
        top.add_column("share", justify="right", no_wrap=True, min_width=6)
        top.add_column("", no_wrap=True, min_width=12)
        for k in kernels:
            top.add_row(
                Text(fmt.one_line(k.name, _KERNEL_NAME_WIDTH)), k.count, k.total_ms, k.share, k.kind
            )
        parts.append(top)
    return Group(*parts)


def _memory_panel(section: MemorySection) -> Panel:
    grid = figures_grid(section.figures)
    if section.timeline:
        grid.add_row("allocated over time", Text(sparkline(section.timeline), style="blue"))
    parts: list[Table | Text] = [grid]
    if section.categories:
        cats = Table(
            box=box.SIMPLE_HEAD, show_edge=False, title="What the peak holds", title_justify="left"
        )
        cats.add_column("memory")
        cats.add_column("bytes", justify="right", no_wrap=True)
        cats.add_column("share", justify="right", no_wrap=True)
        for name, size, share in section.categories:
            cats.add_row(Text(name), size, share)
        parts += [cats, Text(CATEGORY_NOTE, style="dim")]
    for title, rows in (
        ("Allocated where: live at the peak", section.sites_at_peak),
        (f"Allocated where: whole history ({section.overall_total})", section.sites_overall),
    ):
        if not rows:
            continue
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, title=title, title_justify="left")
        table.add_column("site", overflow="fold")
        table.add_column("function", overflow="fold")
        table.add_column("bytes", justify="right", no_wrap=True)
        table.add_column("share", justify="right", no_wrap=True)
        table.add_column("blocks", justify="right", no_wrap=True)
        for r in rows:
            table.add_row(Text(r.site), Text(r.function), r.size, r.share, r.blocks)
        parts.append(table)
    return Panel(
        Group(*parts),
        title="GPU memory (CUDA memory snapshot)",
        title_align="left",
        box=box.ROUNDED,
    )


def _indented(text: Text, indent: int = 3) -> Padding:
    return Padding(text, (0, 0, 0, indent))


def _finding_block(rank: int, finding: Finding) -> Group:
    title = Text(f"{rank}. ")
    title.append(f"[{finding.severity}]", style=fmt.SEVERITY_STYLE.get(finding.severity, ""))
    title.append(" ")
    title.append(finding.title, style="bold")
    title.append(f"  ({finding.rule_id})", style="dim")
    lines: list[Text | Padding] = [title, _indented(Text(fmt.one_line(finding.explanation)))]
    for item in finding.evidence:
        lines.append(_indented(Text("• " + fmt.evidence(item))))
    for loc in finding.locations[:_MAX_LOCATIONS]:
        lines.append(_indented(Text("at " + fmt.location(loc), style="cyan")))
    hidden = len(finding.locations) - _MAX_LOCATIONS
    if hidden > 0:
        lines.append(_indented(Text(f"… and {hidden} more places", style="dim")))
    gain = summary.gain_text(finding.gain)
    if finding.optimizations or gain:
        fix = ", ".join(finding.optimizations) or fmt.MISSING
        lines.append(_indented(Text(f"fix: {fix}" + (f"; {gain}" if gain else ""), style="green")))
    return Group(*lines)


def _spaced(blocks: list[Group]) -> Group:
    parts: list[Group | Text] = []
    for i, block in enumerate(blocks):
        if i:
            parts.append(Text(""))
        parts.append(block)
    return Group(*parts)


def _findings_section(report: Report) -> Panel:
    blocks = [_finding_block(i, f) for i, f in enumerate(report.findings, start=1)]
    return Panel(_spaced(blocks), title="Findings", title_align="left", box=box.ROUNDED)


def _recommendation_block(rec: Recommendation) -> Group:
    title = Text("→ ")
    title.append(rec.title, style="bold")
    title.append(f"  ({rec.optimization_id}, {rec.kind})", style="dim")
    lines: list[Text | Padding] = [title]
    gain = summary.gain_text(rec.expected_gain)
    details = [f"risk: {fmt.one_line(rec.risk)}"] + ([f"expected: {gain}"] if gain else [])
    lines.append(_indented(Text("; ".join(details))))
    for conflict in rec.conflicts:
        lines.append(_indented(Text("trade-off: " + fmt.one_line(conflict), style="yellow")))
    if rec.locations:
        lines.append(_indented(Text("at " + fmt.location(rec.locations[0]), style="cyan")))
    if rec.code_change:
        lines.append(_indented(Text(rec.code_change, style="green"), indent=5))
    return Group(*lines)


def _recommendations_section(report: Report) -> Panel:
    blocks = [_recommendation_block(r) for r in report.recommendations]
    return Panel(_spaced(blocks), title="Recommendations", title_align="left", box=box.ROUNDED)


def _variants_table(report: Report, with_applied: bool = True) -> Table | Text | Group:
    if not report.variants:
        return Text(
            "Variants: none measured (no runtime optimization applied in this run).", style="dim"
        )
    table = Table(
        title="Variants", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )
    table.add_column("variant", overflow="fold", ratio=1, min_width=10)
    if with_applied:
        table.add_column("applied", overflow="fold", ratio=1, min_width=9)
    table.add_column(summary.PAIRED_STEP_HEADER, justify="right", no_wrap=True)
    table.add_column("speedup", justify="right", no_wrap=True)
    table.add_column("memory", justify="right", no_wrap=True)
    table.add_column("loss Δ", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    rows = summary.variant_rows(report)
    for i, row in enumerate(rows):
        # The baseline row is the reference; a dash keeps the verdict column narrow.
        verdict = fmt.MISSING if i == 0 else row.verdict
        cells = [Text(row.label), Text(row.applied)] if with_applied else [Text(row.label)]
        cells += [
            Text(row.step_p50),
            Text(row.speedup),
            Text(row.memory),
            Text(row.loss_delta),
            Text(verdict, style=_VERDICT_STYLE.get(verdict, "")),
        ]
        table.add_row(*cells)
    # The reasons get whole lines under the table: in a column they would be squeezed.
    reasons = []
    for row in rows[1:]:
        label = row.label if with_applied else f"{row.label} ({row.applied})"
        line = Text(f"  {label}: ", style="bold")
        line.append(row.verdict, style=_VERDICT_STYLE.get(row.verdict, ""))
        line.append(" — " + fmt.one_line(row.reason))
        reasons.append(line)
    note = Text(fmt.one_line(summary.VARIANTS_NOTE), style="dim")
    measured = [
        Text("  " + fmt.one_line(measurement.line(r), 400), style="dim")
        for r in measurement.measurement_rows(report)
    ]
    if measured:
        measured.insert(0, Text("How each fix was measured", style="bold"))
    return Group(table, *reasons, note, *measured)


def _footer_lines(report: Report) -> list[Text]:
    lines: list[Text] = []
    if report.skipped_rules:
        lines.append(
            Text(
                summary.skipped_summary(report) + " (listed in report.md / report.html).",
                style="dim",
            )
        )
    for warning in report.warnings:
        lines.append(Text("warning: " + fmt.one_line(warning, 300), style="yellow"))
    rows = summary.artifact_rows(report, brief=True)
    if rows:
        lines.append(Text("Artifacts", style="bold"))
        for name, path in rows:
            line = Text(f"  {name}: ", style="dim")
            line.append(path)
            lines.append(line)
    # The summary ends with the command that applies what was proven.
    lines += [Text(line, style="bold green") for line in outcome.apply_lines(report)]
    return lines

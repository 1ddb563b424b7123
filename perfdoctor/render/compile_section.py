"""The compile section every renderer shows when the script, or perfdoctor's `compile`
variant, ran torch.compile: every graph break and recompile at the user's line, ranked by
what it costs per step, with the fix and the line rewritten.

Built from `report.series["compile"][label]` (analyze/compile_facts.py `compile_series`),
plain JSON, so a report read back from report.json renders the same section. The baseline's
diagnosis is shown when the script compiles itself; else the `compile` variant's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from perfdoctor.model import Report
from perfdoctor.render import format as fmt
from perfdoctor.render.rich_figures import figures_grid
from perfdoctor.rundir import BASELINE_LABEL

TITLE = "torch.compile: graph breaks and recompiles"
_KIND = {
    "graph_break": "graph break",
    "recompile": "recompile",
    "cudagraph_skip": "cudagraph skip",
    "recompile_limit": "recompile limit",
}
COLUMNS = ("#", "what", "where", "cause", "cost/step", "per step", "compiles")
PRICE_NOTE = (
    "Graph breaks are priced by the eager time between compiled graphs in the profiled steps "
    "(the `Torch-Compiled Region` spans), forward and backward, as a share of the profiled "
    "step applied to the timed step (the profiler slows eager Python more); recompiles by "
    "the compile time spent inside the timed steps, per step. A train/eval switch compiles "
    "one graph per mode, once: it is listed, not priced as a cost inside training."
)


@dataclass(frozen=True)
class IssueRow:
    cells: tuple[str, ...]
    reason: str
    fix: str
    code: str | None
    rewritten: str | None


@dataclass(frozen=True)
class CompileSection:
    label: str
    figures: tuple[tuple[str, str], ...]
    rows: tuple[IssueRow, ...]
    notes: tuple[str, ...]


def _pick(series: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    base = series.get(BASELINE_LABEL)
    if isinstance(base, Mapping) and base.get("frames_compiled"):
        return BASELINE_LABEL, base
    for label in ("compile", "compile-cudagraphs", *sorted(series)):
        data = series.get(label)
        if isinstance(data, Mapping) and data.get("frames_compiled"):
            return label, data
    return None


def compile_section(report: Report) -> CompileSection | None:
    series = report.series.get("compile") if isinstance(report.series, Mapping) else None
    if not isinstance(series, Mapping):
        return None
    picked = _pick(series)
    if picked is None:
        return None
    label, d = picked
    figures = [
        ("frames compiled", f"{d.get('frames_compiled', 0)} ({d.get('recompiles', 0)} recompiles)"),
        ("graph-break sites", str(d.get("graph_breaks", 0))),
        ("compile time, whole run", fmt.seconds(d.get("compile_s_total"))),
        (
            "compile time inside the timed steps",
            f"{fmt.seconds(d.get('compile_s_in_measured_steps'))} over "
            f"{d.get('measured_steps', 0)} steps",
        ),
        ("in compiled graphs, per step", fmt.ms(d.get("compiled_ms_per_step"))),
        ("eager between graphs, per step", fmt.ms(d.get("eager_ms_per_step"))),
    ]
    if d.get("cudagraph_skips"):
        figures.append(("cudagraph skips", str(d.get("cudagraph_skips"))))
    rows = []
    for n, issue in enumerate(d.get("issues") or [], 1):
        cost = issue.get("cost_ms_per_step")
        per_step = issue.get("per_step")
        rows.append(
            IssueRow(
                cells=(
                    str(n),
                    _KIND.get(str(issue.get("kind")), str(issue.get("kind"))),
                    str(issue.get("where") or "?"),
                    str(issue.get("cause") or ""),
                    fmt.ms(cost) if cost is not None else "not priced",
                    f"{per_step:.2g}" if isinstance(per_step, (int, float)) else "–",
                    str(issue.get("compiles", "")),
                ),
                reason=str(issue.get("reason") or ""),
                fix=str(issue.get("fix") or ""),
                code=issue.get("code"),
                rewritten=issue.get("rewritten"),
            )
        )
    notes = [*(str(n) for n in d.get("notes") or []), PRICE_NOTE]
    if label != BASELINE_LABEL:
        notes.insert(0, f"The script does not compile; this is perfdoctor's `{label}` variant.")
    return CompileSection(label, tuple(figures), tuple(rows), tuple(notes))


def _fix_lines(row: IssueRow) -> list[str]:
    lines = [f"{row.cells[0]}. {row.cells[2]}: {row.reason}", f"   fix: {row.fix}"]
    if row.code:
        lines.append(f"   now:    {row.code.strip()}")
    if row.rewritten:
        lines.append(f"   change: {row.rewritten.strip()}")
    return lines


def compile_markdown(report: Report, md_text: Callable[[str], str]) -> list[str]:
    section = compile_section(report)
    if section is None:
        return []
    lines = [f"## {TITLE}", ""]
    lines += ["| measure | value |", "| --- | --- |"]
    lines += [f"| {md_text(m)} | {md_text(v)} |" for m, v in section.figures]
    lines.append("")
    if section.rows:
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        lines += ["| " + " | ".join(md_text(c) for c in r.cells) + " |" for r in section.rows]
        lines.append("")
        for r in section.rows:
            lines.append(f"**{md_text(r.cells[0])}. {md_text(r.cells[2])}**: {md_text(r.reason)}")
            lines += ["", f"- fix: {md_text(r.fix)}"]
            if r.code or r.rewritten:
                lines += ["", "```python"]
                if r.code:
                    lines.append(f"# now\n{r.code.strip()}")
                if r.rewritten:
                    lines.append(f"# change\n{r.rewritten.strip()}")
                lines += ["```"]
            lines.append("")
    lines += [md_text(n) for n in section.notes]
    lines.append("")
    return lines


def compile_html(report: Report, esc: Callable[[object], str]) -> str:
    section = compile_section(report)
    if section is None:
        return ""
    parts = [f"<section><h2>{esc(TITLE)}</h2><table>"]
    parts += [f"<tr><th>{esc(m)}</th><td>{esc(v)}</td></tr>" for m, v in section.figures]
    parts.append("</table>")
    if section.rows:
        parts.append("<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in COLUMNS) + "</tr>")
        for r in section.rows:
            parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r.cells) + "</tr>")
        parts.append("</table>")
        for r in section.rows:
            parts.append(
                f'<h3>{esc(r.cells[0])}. <span class="loc">{esc(r.cells[2])}</span>: '
                f"{esc(r.reason)}</h3><p>fix: {esc(r.fix)}</p>"
            )
            code = []
            if r.code:
                code.append(f"# now\n{r.code.strip()}")
            if r.rewritten:
                code.append(f"# change\n{r.rewritten.strip()}")
            if code:
                parts.append(f"<pre>{esc(chr(10).join(code))}</pre>")
    parts += [f'<p class="muted">{esc(n)}</p>' for n in section.notes]
    parts.append("</section>")
    return "".join(parts)


def compile_panel(report: Report) -> Panel | None:
    section = compile_section(report)
    if section is None:
        return None
    grid = figures_grid(section.figures)
    parts: list[Any] = [grid]
    if section.rows:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for i, col in enumerate(COLUMNS):
            table.add_column(col, justify="right" if i in (0, 4, 5, 6) else "left")
        for r in section.rows:
            table.add_row(*(Text(c) for c in r.cells))
        parts.append(table)
        for r in section.rows:
            parts.append(Text("\n".join(_fix_lines(r))))
    parts += [Text(n, style="dim") for n in section.notes]
    return Panel(Group(*parts), title=TITLE, title_align="left")

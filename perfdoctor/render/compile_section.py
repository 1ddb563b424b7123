"""The compile section every renderer shows when the script, or perfdoctor's `compile`
variant, ran torch.compile: every graph break and recompile at the user's line, ranked by
what it costs per step, with the fix and the line rewritten.

Built from `report.series["compile"][label]` (analyze/compile_facts.py `compile_series`),
plain JSON, so a report read back from report.json renders the same section. The baseline's
diagnosis is shown when the script compiles itself; else the `compile` variant's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from perfdoctor.analyze.compile_fixes import DISABLED_CAUSE
from perfdoctor.model import Report, VariantResult
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
    "one graph per mode, once: it is listed, not priced as a cost inside training. A "
    "torch.compiler.disable'd helper's price is an upper bound (≤): without the break its "
    "ops still run, compiled; perfdoctor's `compile-lift-disable` variant measures what "
    "lifting it buys (A/B, the helper traced into the graph or not), shown where it ran. "
    "A price below the noise is smaller than the timed steps resolve (the median step's "
    "~95% interval, ±1.58 IQR/√n) and is not ranked."
)
LIFT_ID = "compile-lift-disable"


@dataclass(frozen=True)
class IssueRow:
    cells: tuple[str, ...]
    reason: str
    fix: str
    code: str | None
    rewritten: str | None
    price: str | None = None  # how the cost was found, where it is not a plain figure


@dataclass(frozen=True)
class LiftMeasured:
    """What lifting the script's torch.compiler.disable bought, from the variant's A/B."""

    saved_ms: float  # per step: the paired baseline median less the variant's
    low_ms: float | None  # from the speedup's interval
    high_ms: float | None
    step_ms: float  # the paired baseline median

    @property
    def frac(self) -> float:
        return self.saved_ms / self.step_ms

    def on(self, step_ms: float | None) -> float:
        """The saving as its share of the A/B's step, applied to `step_ms` (the step the
        section's other prices are per): the A/B ran at another moment, under its load."""
        return self.frac * step_ms if step_ms else self.saved_ms

    how: str  # "in one process, 27 pairs" / "re-runs, 3 pairs"
    verdict: str


def _saved_ms(step_ms: float, speedup: float) -> float:
    return step_ms * (1.0 - 1.0 / speedup)


def lift_measured(variants: Sequence[VariantResult]) -> LiftMeasured | None:
    for v in variants:
        if v.label != LIFT_ID or v.peel_of is not None or not v.speedup:
            continue
        base = v.baseline_step_ms_p50
        if not base:
            return None
        low, high = v.interval if v.interval else (None, None)
        method = "in one process" if v.method == "in-process" else v.method
        return LiftMeasured(
            saved_ms=_saved_ms(base, v.speedup),
            low_ms=_saved_ms(base, low) if low else None,
            high_ms=_saved_ms(base, high) if high else None,
            step_ms=base,
            how=f"{method}, {v.pairs} pairs" if v.pairs else method,
            verdict=str(v.verdict),
        )
    return None


def _measured_text(m: LiftMeasured, sites: int) -> str:
    band = (
        f" [{fmt.ms(m.low_ms)}, {fmt.ms(m.high_ms)}]"
        if m.low_ms is not None and m.high_ms is not None
        else ""
    )
    together = f", all {sites} disable'd helpers lifted together" if sites > 1 else ""
    word = "buys" if m.saved_ms >= 0 else "costs"
    return (
        f"measured: lifting the disable {word} {fmt.percent(abs(m.frac))} of the step, "
        f"{fmt.ms(abs(m.saved_ms))}{band} of the A/B's {fmt.ms(m.step_ms)} step ({m.how}"
        f"{together}; verdict {m.verdict})"
    )


def _cost_cell(
    issue: Mapping[str, Any], measured: LiftMeasured | None, step_ms: float | None
) -> str:
    cost = issue.get("cost_ms_per_step")
    if cost is None:
        return "not priced"
    if issue.get("below_noise"):
        return "below noise"
    if issue.get("cost_is_bound"):
        if measured is not None:
            return f"{fmt.ms(measured.on(step_ms))} (≤{fmt.ms(cost)})"
        return f"≤{fmt.ms(cost)}"
    return fmt.ms(cost)


def _price_line(
    issue: Mapping[str, Any], measured: LiftMeasured | None, noise: Any, sites: int
) -> str | None:
    cost = issue.get("cost_ms_per_step")
    if cost is None:
        return None
    if issue.get("below_noise"):
        floor = f" (±{fmt.ms(noise)})" if isinstance(noise, (int, float)) else ""
        return (
            f"priced {fmt.ms(cost)}/step: below the noise of the timed steps{floor}, so not "
            "ranked; removing it buys less than this run can tell apart"
        )
    if not issue.get("cost_is_bound"):
        return None
    bound = (
        f"at most {fmt.ms(cost)}/step: the helper's eager time between compiled graphs; "
        "without the break its ops still run, compiled"
    )
    if measured is None:
        return bound + (
            " (not measured: `perfdoctor profile` measures what lifting it buys with its "
            "`compile-lift-disable` variant, not tried in this session)"
        )
    return f"{_measured_text(measured, sites)}; {bound}"


def _rank(issue: Mapping[str, Any], measured: LiftMeasured | None, step_ms: float | None) -> float:
    """Rows rank by what removing each buys: the measured figure where there is one."""
    if issue.get("below_noise"):
        return 0.0
    if issue.get("cost_is_bound") and measured is not None:
        return measured.on(step_ms)
    cost = issue.get("cost_ms_per_step")
    return float(cost) if isinstance(cost, (int, float)) else 0.0


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
    compiled = f"{d.get('frames_compiled', 0)} ({d.get('recompiles', 0)} recompiles)"
    if d.get("frames_failed"):
        compiled += f"; {d.get('frames_failed')} failed and ran eager: {d.get('failure') or '?'}"
    figures = [
        ("frames compiled", compiled),
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
    issues = [i for i in d.get("issues") or [] if isinstance(i, Mapping)]
    sites = sum(1 for i in issues if i.get("cost_is_bound") or i.get("cause") == DISABLED_CAUSE)
    # The variant measures the script's own run: only the baseline's diagnosis gets it.
    measured = lift_measured(report.variants) if label == BASELINE_LABEL else None
    step_ms = report.baseline.step_ms_p50
    issues.sort(key=lambda i: -_rank(i, measured, step_ms))  # stable: the diagnosis's order on ties
    rows = []
    for n, issue in enumerate(issues, 1):
        per_step = issue.get("per_step")
        rows.append(
            IssueRow(
                cells=(
                    str(n),
                    _KIND.get(str(issue.get("kind")), str(issue.get("kind"))),
                    str(issue.get("where") or "?"),
                    str(issue.get("cause") or ""),
                    _cost_cell(issue, measured, step_ms),
                    f"{per_step:.2g}" if isinstance(per_step, (int, float)) else "–",
                    str(issue.get("compiles", "")),
                ),
                reason=str(issue.get("reason") or ""),
                fix=str(issue.get("fix") or ""),
                code=issue.get("code"),
                rewritten=issue.get("rewritten"),
                price=_price_line(issue, measured, d.get("noise_ms"), sites),
            )
        )
    notes = [*(str(n) for n in d.get("notes") or []), PRICE_NOTE]
    if label != BASELINE_LABEL:
        notes.insert(0, f"The script does not compile; this is perfdoctor's `{label}` variant.")
    return CompileSection(label, tuple(figures), tuple(rows), tuple(notes))


def _fix_lines(row: IssueRow) -> list[str]:
    lines = [f"{row.cells[0]}. {row.cells[2]}: {row.reason}", f"   fix: {row.fix}"]
    if row.price:
        lines.append(f"   price: {row.price}")
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
            if r.price:
                lines.append(f"- price: {md_text(r.price)}")
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
            if r.price:
                parts.append(f"<p>price: {esc(r.price)}</p>")
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

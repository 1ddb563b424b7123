"""The batch / memory section every renderer shows after `perfdoctor profile --plan-batch`:
how the batch was changed, the memory fit and its check, the curve (samples/s and peak
memory against batch size), the fastest batch within memory and its A/B confirmation, the
ways to make a wanted batch fit, and the recipe caveat.

Built from `report.series["batch_plan"]` (batch_plan.json, run_schema.BatchPlan), plain
JSON, so a report read back from report.json renders the same section. Each renderer calls
one function of this module.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.model import Report
from perfdoctor.units import format_bytes

TITLE = "Batch size and memory (--plan-batch)"
_CURVE_HEADER = ("batch", "samples/s", "peak memory", "predicted", "run")
_OPTION_HEADER = (
    "way to fit",
    "at batch",
    "peak memory",
    "saved",
    "samples/s",
    "time cost",
    "note",
)


@dataclass(frozen=True)
class BatchSection:
    lines: tuple[str, ...]  # sentences, in order
    curve: tuple[tuple[str, ...], ...]  # rows of _CURVE_HEADER
    options: tuple[tuple[str, ...], ...]  # rows of _OPTION_HEADER
    recipe: str
    # (batch, samples/s, peak bytes) of the usable points, for the chart
    points: tuple[tuple[int, float | None, float | None], ...]
    limit_bytes: float | None
    best_batch: int | None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _bytes(value: Any) -> str:
    number = _num(value)
    return format_bytes(number) if number is not None else "-"


def _rate(value: Any) -> str:
    number = _num(value)
    return (
        f"{number:,.0f}"
        if number is not None and number >= 100
        else (f"{number:.1f}" if number is not None else "-")
    )


def _fits(value: Any) -> str:
    return "fits" if value is True else "does not fit" if value is False else ""


def batch_section(report: Report) -> BatchSection | None:
    plan = (report.series or {}).get("batch_plan")
    if not isinstance(plan, Mapping):
        return None
    lines = []
    trigger = plan.get("trigger")
    if isinstance(trigger, str) and trigger != "--plan-batch":
        lines.append(f"Run by {trigger}.")
    lines.append(f"Batch size: {plan.get('knob_detail', '')}.")
    b0 = plan.get("script_batch")
    if plan.get("knob") == "none":
        return BatchSection(tuple(lines), (), (), str(plan.get("recipe_note", "")), (), None, None)
    what = "CUDA max reserved" if plan.get("peak_kind") == "cuda_reserved" else "process RSS peak"
    fixed, per = _num(plan.get("fixed_bytes")), _num(plan.get("per_sample_bytes"))
    if fixed is not None and per is not None:
        line = f"Memory model ({what}): {format_bytes(fixed)} + {format_bytes(per)} per sample"
        residual = _num(plan.get("fit_worst_residual_frac"))
        if residual is not None:
            line += f" (least squares, worst residual {residual:.1%})"
        lines.append(line + ".")
    activations = _num(plan.get("activations_per_sample_bytes"))
    if activations is not None:
        lines.append(
            f"The baseline's memory snapshot holds {format_bytes(activations)} of activations "
            "per sample at its peak."
        )
    limit = _num(plan.get("limit_bytes"))
    if limit is not None:
        line = f"Limit: {format_bytes(limit)} ({plan.get('limit_source', '')})"
        if plan.get("limit_batch") is not None:
            line += f"; predicted to run out above batch {plan['limit_batch']}"
        lines.append(line + ".")
    error = _num(plan.get("verify_error_frac"))
    if plan.get("verify_batch") is not None:
        checked = f"Check at batch {plan['verify_batch']} ({plan.get('verify_why', '')})"
        lines.append(
            f"{checked}: prediction {error:+.1%} from the measured peak."
            if error is not None
            else f"{checked}: the run measured no peak."
        )
    if plan.get("recheck_batch") is not None:
        refit = (
            f"Refitted with the check's run: {_bytes(plan.get('refit_fixed_bytes'))} + "
            f"{_bytes(plan.get('refit_per_sample_bytes'))} per sample; checked at batch "
            f"{plan['recheck_batch']}"
        )
        again = _num(plan.get("recheck_error_frac"))
        lines.append(
            f"{refit}: prediction {again:+.1%} from the measured peak."
            if again is not None
            else f"{refit}: the run measured no peak."
        )
    confidence = plan.get("prediction_confidence")
    if confidence:
        lines.append(f"Prediction {confidence}: {plan.get('confidence_why', '')}.")
    if plan.get("stopped"):
        lines.append(f"The plan {plan['stopped']}.")
    if plan.get("best_batch") is not None:
        line = f"Fastest within memory: batch {plan['best_batch']} (the script's: {b0})"
        if plan.get("accumulation_steps"):
            line += f", {plan['accumulation_steps']} micro-batches per optimizer step"
        lines.append(line + ".")
    if plan.get("confirmation"):
        lines.append(f"A/B: {plan['confirmation']}.")
    recommended = plan.get("recommended_batch")
    if recommended is not None and plan.get("best_batch") not in (None, b0):
        lines.append(
            f"Recommended: batch {recommended} (the A/B confirmed it)."
            if recommended != b0
            else f"Recommended: keep batch {b0}: the A/B did not confirm batch "
            f"{plan['best_batch']} faster."
        )
    if plan.get("wanted_batch") is not None and plan.get("wanted_fits") is False:
        lines.append(f"Batch {plan['wanted_batch']} does not fit; the ways to make it fit below.")
    lines += [str(n) for n in plan.get("notes") or ()]
    curve_rows, points = [], []
    for p in plan.get("curve") or ():
        if not isinstance(p, Mapping):
            continue
        ok = p.get("status") == "completed"
        run = str(p.get("run", ""))
        curve_rows.append(
            (
                str(p.get("batch")) + (" *" if p.get("batch") == plan.get("best_batch") else ""),
                _rate(p.get("samples_s")),
                _bytes(p.get("peak_bytes")),
                _bytes(p.get("predicted_bytes")),
                run if ok else f"{run} ({p.get('status')})",
            )
        )
        if ok and isinstance(p.get("batch"), int):
            points.append((p["batch"], _num(p.get("samples_s")), _num(p.get("peak_bytes"))))
    option_rows = []
    for o in plan.get("options") or ():
        if not isinstance(o, Mapping):
            continue
        cost = _num(o.get("time_cost_frac"))
        option_rows.append(
            (
                str(o.get("id", "")),
                str(o.get("batch", "")),
                _bytes(o.get("peak_bytes")),
                _bytes(o.get("saved_bytes")),
                _rate(o.get("samples_s")),
                f"{cost:+.0%}" if cost is not None else "-",
                str(o.get("note") or _fits(o.get("fits"))),
            )
        )
    return BatchSection(
        tuple(lines),
        tuple(curve_rows),
        tuple(option_rows),
        str(plan.get("recipe_note", "")),
        tuple(points),
        limit,
        plan.get("best_batch") if isinstance(plan.get("best_batch"), int) else None,
    )


# --------------------------------------------------------------------------- chart


def curve_svg(section: BatchSection) -> str | None:
    """samples/s (left axis) and peak memory (right axis) against batch size, as inline SVG
    (the charts' own matplotlib setup, render/charts.py)."""
    points = [p for p in section.points if p[1] is not None or p[2] is not None]
    if len(points) < 2:
        return None
    from perfdoctor.render.charts import _render

    return _render(_draw_curve, points, section.limit_bytes, section.best_batch)


def _draw_curve(
    fig: Any,
    points: Sequence[tuple[int, float | None, float | None]],
    limit: float | None,
    best: int | None,
) -> None:
    ax = fig.add_subplot(1, 1, 1)
    speed = [(b, s) for b, s, _ in points if s is not None]
    ax.plot([b for b, _ in speed], [s for _, s in speed], marker="o", color="#4c72b0")
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples/s", color="#4c72b0")
    ax.set_xscale("log", base=2)
    ax.set_xticks([b for b, _, _ in points], [str(b) for b, _, _ in points])
    ax.minorticks_off()
    if best is not None:
        ax.axvline(best, color="#55a868", linestyle=":", linewidth=1)
    mem = ax.twinx()
    peaks = [(b, m / 2**20) for b, _, m in points if m is not None]
    mem.plot([b for b, _ in peaks], [m for _, m in peaks], marker="s", color="#dd8452")
    mem.set_ylabel("peak memory (MiB)", color="#dd8452")
    mem.minorticks_off()
    if limit is not None and peaks and limit / 2**20 < 3 * max(m for _, m in peaks):
        mem.axhline(limit / 2**20, color="#c44e52", linestyle="--", linewidth=1)


# --------------------------------------------------------------------------- renderers


def markdown_lines(report: Report) -> list[str]:
    section = batch_section(report)
    if section is None:
        return []

    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    out = [f"## {TITLE}", ""]
    out += [f"- {cell(line)}" for line in section.lines]
    out.append("")
    for header, rows in ((_CURVE_HEADER, section.curve), (_OPTION_HEADER, section.options)):
        if not rows:
            continue
        out.append("| " + " | ".join(header) + " |")
        out.append("| " + " | ".join("---" for _ in header) + " |")
        out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
        out.append("")
    if section.curve:
        out += ["`*` the fastest batch within memory.", ""]
    if section.recipe:
        out += [f"**Recipe:** {cell(section.recipe)}", ""]
    return out


def html_section(report: Report) -> str:
    section = batch_section(report)
    if section is None:
        return ""
    esc = html.escape
    parts = [f"<section><h2>{esc(TITLE)}</h2><ul>"]
    parts += [f"<li>{esc(line)}</li>" for line in section.lines]
    parts.append("</ul>")
    svg = curve_svg(section)
    if svg:
        parts.append(f'<figure class="chart">{svg}</figure>')
    for header, rows in ((_CURVE_HEADER, section.curve), (_OPTION_HEADER, section.options)):
        if not rows:
            continue
        head = "".join(f"<th>{esc(h)}</th>" for h in header)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        parts.append(
            f'<div class="wrap"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>"
        )
    if section.recipe:
        parts.append(f'<p class="muted"><strong>Recipe:</strong> {esc(section.recipe)}</p>')
    parts.append("</section>")
    return "".join(parts)


def terminal_panel(report: Report) -> Any | None:
    """A rich Panel, or None without a plan."""
    section = batch_section(report)
    if section is None:
        return None
    from rich import box
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(line) for line in section.lines]
    for header, rows in ((_CURVE_HEADER, section.curve), (_OPTION_HEADER, section.options)):
        if not rows:
            continue
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for i, name in enumerate(header):
            table.add_column(name, justify="left" if i in (0, len(header) - 1) else "right")
        for row in rows:
            table.add_row(*(Text(c) for c in row))
        parts.append(table)
    if section.recipe:
        parts.append(Text(section.recipe, style="dim"))
    return Panel(Group(*parts), title=TITLE, title_align="left")

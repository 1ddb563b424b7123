"""The compute section every renderer shows: MFU with its denominator, achieved FLOP/s, the
precision the GEMM/conv/attention kernels compute in, and the ops by FLOPs; in HTML also a
roofline of those ops (achieved FLOP/s against arithmetic intensity).

Built from `report.facts` (mfu_*, flops_*, achieved_tflops) and `report.compute`
(analyze/compute_facts.py `compute_settings`), plain JSON, so a report read back from
report.json renders the same section.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.model import Report

TITLE = "Compute: FLOPs, MFU and precision"
TOP_ROWS = 8
# Below this share of GEMM/conv/attention kernel time in counted ops, MFU is a lower bound.
COVERED = 0.95
OP_COLUMNS = ("op", "input shapes", "precision", "calls", "TFLOP/s", "FLOPs", "FLOP/byte")


@dataclass(frozen=True)
class ComputeSection:
    headline: str  # "MFU 12.3% of 989.5 TFLOP/s dense bf16, H100 SXM" or why it is absent
    figures: tuple[tuple[str, str], ...]  # (measure, value)
    ops: tuple[tuple[str, ...], ...]  # OP_COLUMNS
    notes: tuple[str, ...]


def compute_section(report: Report) -> ComputeSection | None:
    facts = report.facts
    compute = report.compute or {}
    flops = _num(facts.get("flops_per_step"))
    trace = compute.get("trace") if isinstance(compute.get("trace"), Mapping) else None
    mix = compute.get("kernel_precision")
    if flops is None and trace is None and not mix:
        return None
    figures: list[tuple[str, str]] = []
    if flops is not None:
        figures.append(("FLOPs per step", _flops(flops)))
    elif trace is not None:
        figures.append(("FLOPs in the profiled window", _flops(float(trace.get("flops", 0.0)))))
    source = facts.get("flops_source")
    if isinstance(source, str):
        figures.append(("counted by", source))
    achieved = _num(facts.get("achieved_tflops"))
    if achieved is not None:
        figures.append(("achieved", f"{_rate(achieved)} over the wall time"))
    if isinstance(mix, Mapping) and mix:
        split = ", ".join(f"{k} {_pct(float(v))}" for k, v in list(mix.items())[:4])
        figures.append(("GEMM/conv/attention kernels compute in", split))
    peak = compute.get("peak")
    if isinstance(peak, Mapping) and peak.get("source"):
        figures.append(("peak table source", str(peak["source"])))
        bandwidth = _num(peak.get("memory_tbps"))
        if bandwidth is not None:
            figures.append(("memory bandwidth (the roofline's slope)", f"{bandwidth:g} TB/s"))
    ops = tuple(_op_row(op, trace) for op in (trace or {}).get("ops", [])[:TOP_ROWS])
    notes = []
    if trace is not None:
        notes.append(
            f"Per-op rates are FLOPs over the op's {trace.get('op_time_basis', 'time')}; "
            "FLOPs count 2 per multiply-add (torch.utils.flop_counter's formulas)."
        )
        for assumption in trace.get("assumptions") or []:
            notes.append(f"Assumed: {assumption}.")
        for wrong in trace.get("over_peak") or []:
            notes.append(f"Not shown: {wrong}.")
        coverage = _num(trace.get("coverage"))
        if coverage is not None and coverage < COVERED:
            notes.append(
                f"The counted ops launched {_pct(coverage)} of the GEMM/conv/attention kernel "
                "time; the rest came from ops with no shapes to count (custom or fused ops, "
                "e.g. a fused MoE), so FLOPs and MFU are a lower bound."
            )
        uncounted = trace.get("uncounted_ops")
        if uncounted:
            notes.append(f"{uncounted} GEMM/conv/attention ops had no usable shapes.")
    return ComputeSection(_headline(facts), tuple(figures), ops, tuple(notes))


def roofline_points(report: Report) -> list[tuple[float, float, str]]:
    """(FLOP/byte, TFLOP/s, label) of the ops whose bytes and time are known."""
    trace = (report.compute or {}).get("trace")
    if not isinstance(trace, Mapping):
        return []
    out = []
    for op in trace.get("ops") or []:
        x, y = _num(op.get("intensity")), _num(op.get("tflops"))
        if x is not None and y is not None and x > 0 and y > 0:
            out.append((x, y, f"{str(op.get('op', '')).replace('aten::', '')} {op.get('shapes')}"))
    return out


def roofline_svg(report: Report) -> str | None:
    """The per-op roofline chart (inline SVG), None without two points to show."""
    points = roofline_points(report)
    if not points:
        return None
    from perfdoctor.render.loglog_svg import roofline_chart

    peak_tflops = _num(report.facts.get("mfu_peak_tflops"))
    peak = (report.compute or {}).get("peak")
    bandwidth = _num(peak.get("memory_tbps")) if isinstance(peak, Mapping) else None
    xs = [p[0] for p in points]
    roof: list[tuple[float, float]] = []
    lo = min(xs) / 2
    if peak_tflops and bandwidth:
        # The roofs: bandwidth x intensity up to the ridge, the dense peak after it.
        hi = max(xs) * 2
        ridge = peak_tflops / bandwidth
        roof = [(x, min(peak_tflops, bandwidth * x)) for x in (lo, max(min(ridge, hi), lo), hi)]
    return roofline_chart(
        points,
        roof=roof,
        peak=peak_tflops,
        peak_label=f"dense peak {peak_tflops:,.4g} TFLOP/s" if peak_tflops else "",
        peak_at=lo,
        xlabel="arithmetic intensity (FLOP per byte, least traffic from shapes)",
        ylabel="achieved TFLOP/s",
    )


def _headline(facts: Mapping[str, Any]) -> str:
    mfu = _num(facts.get("mfu_frac"))
    peak = facts.get("mfu_peak")
    if mfu is not None and isinstance(peak, str):
        return f"MFU {_pct(mfu)} of {peak}"
    missing = facts.get("mfu_missing")
    achieved = _num(facts.get("achieved_tflops"))
    rate = f"achieved {_rate(achieved)}; " if achieved is not None else ""
    if isinstance(missing, str):
        return f"{rate}no MFU: {missing}"
    source = facts.get("flops_source")
    if isinstance(source, str) and source.startswith("not counted"):
        return f"No FLOPs: {source}"
    return f"{rate}no MFU: no FLOPs counted"


def _op_row(op: Mapping[str, Any], trace: Mapping[str, Any] | None) -> tuple[str, ...]:
    total = float((trace or {}).get("flops") or 0.0)
    flops = float(op.get("flops") or 0.0)
    share = f" ({_pct(flops / total)})" if total > 0 else ""
    tflops = _num(op.get("tflops"))
    intensity = _num(op.get("intensity"))
    return (
        str(op.get("op", "")),
        str(op.get("shapes", "")),
        str(op.get("precision", "")),
        str(op.get("count", "")),
        f"{tflops:,.4g}" if tflops is not None else "-",
        _flops(flops) + share,
        _intensity(intensity) if intensity is not None else "-",
    )


def _intensity(flop_per_byte: float) -> str:
    """FLOP per byte: whole numbers from 10 up, two significant digits below (a 32x4
    matmul does well under one FLOP per byte, which ",.0f" printed as 0)."""
    if flop_per_byte >= 10:
        return f"{flop_per_byte:,.0f}"
    return f"{flop_per_byte:.2g}"


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _pct(frac: float) -> str:
    return f"{frac * 100:.1f}%" if frac < 0.1 else f"{frac * 100:.0f}%"


def _rate(tflops: float) -> str:
    if tflops >= 1:
        return f"{tflops:,.4g} TFLOP/s"
    return f"{tflops * 1000:,.4g} GFLOP/s"


def _flops(value: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if value >= scale:
            return f"{value / scale:,.3g} {unit}"
    return f"{value:,.0f} FLOP"


# --------------------------------------------------------------------------- per renderer
# Each renderer passes its own escaping and table helpers, so its hook is one line.


def markdown_lines(
    report: Report,
    md_text: Callable[[str], str],
    table: Callable[[Sequence[str], Iterable[Sequence[str]], str], list[str]],
) -> list[str]:
    section = compute_section(report)
    if section is None:
        return []
    lines = [f"## {TITLE}", "", f"**{md_text(section.headline)}**", ""]
    lines += table(["measure", "value"], ([md_text(m), md_text(v)] for m, v in section.figures), "")
    lines.append("")
    if section.ops:
        lines += ["**Ops by FLOPs**", ""]
        rows = ([md_text(c) for c in row] for row in section.ops)
        lines += table(list(OP_COLUMNS), rows, "lllrrrr")
        lines.append("")
    lines += [md_text(" ".join(section.notes)), ""] if section.notes else []
    return lines


def html_block(
    report: Report,
    esc: Callable[[object], str],
    table: Callable[[Sequence[str], Iterable[Sequence[str]], Sequence[int]], str],
) -> str:
    section = compute_section(report)
    if section is None:
        return ""
    parts = [f"<section><h2>{esc(TITLE)}</h2><p><strong>{esc(section.headline)}</strong></p>"]
    parts.append(table(["measure", "value"], ([esc(m), esc(v)] for m, v in section.figures), ()))
    if section.ops:
        parts.append("<h3>Ops by FLOPs</h3>")
        rows = ([esc(c) for c in row] for row in section.ops)
        parts.append(table(list(OP_COLUMNS), rows, (3, 4, 5, 6)))
    svg = roofline_svg(report)
    if svg is not None:
        parts.append("<h3>Roofline of the ops</h3>" + svg)
    if section.notes:
        parts.append(f'<p class="muted">{esc(" ".join(section.notes))}</p>')
    parts.append("</section>")
    return "".join(parts)


def terminal_panel(report: Report) -> Any:
    """A rich Panel, or None without a compute section."""
    section = compute_section(report)
    if section is None:
        return None
    from rich import box
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from perfdoctor.render.rich_figures import figures_grid

    grid = figures_grid(section.figures)
    parts: list[Any] = [Text(section.headline, style="bold"), grid]
    if section.ops:
        ops = Table(
            box=box.SIMPLE_HEAD, show_edge=False, title="Ops by FLOPs", title_justify="left"
        )
        for i, column in enumerate(OP_COLUMNS):
            ops.add_column(column, justify="right" if i >= 3 else "left", overflow="fold")
        for row in section.ops[:5]:
            ops.add_row(*row)
        parts.append(ops)
    for note in section.notes:
        parts.append(Text(note, style="dim"))
    return Panel(Group(*parts), title=TITLE, title_align="left")

"""report.html's "History" section: the script's step time over its past sessions.

Reads `Report.series["history"]` (history/trend.py; docs/report-schema.md). A small SVG
written by hand, not a matplotlib figure: a dozen points and two lines, inline, so the page
stays self-contained and the section costs nothing to draw.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from perfdoctor.model import Report
from perfdoctor.render import format as fmt

WIDTH, HEIGHT = 560, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 34
BASELINE_COLOUR = "#4c72b0"
FIXED_COLOUR = "#55a868"


def history_points(report: Report) -> list[Mapping[str, Any]]:
    trend = report.series.get("history")
    if not isinstance(trend, Mapping):
        return []
    sessions = trend.get("sessions")
    if not isinstance(sessions, Sequence) or isinstance(sessions, str):
        return []
    return [s for s in sessions if isinstance(s, Mapping)]


def html_section(report: Report) -> str:
    points = history_points(report)
    if len(points) < 2:
        return ""
    script = str(report.series["history"].get("script", report.script))
    svg = trend_svg(points)
    rows = "".join(_row(p) for p in reversed(points))
    fixed = any(_value(p, "fixed_step_ms_p50") is not None for p in points)
    return (
        f'<section id="history"><h2>History of {_esc(script)}</h2>'
        f'<p class="muted">Median step time of the baseline (blue)'
        f"{' and with the accepted fixes (green)' if fixed else ''}"
        f", over the last {len(points)} sessions of this script in this "
        f"directory. All of them: <code>perfdoctor history {_esc(script)}</code>.</p>"
        f'<figure id="chart-history"><div class="plot">{svg}</div></figure>'
        '<table><thead><tr><th>session</th><th>commit</th><th class="num">step p50</th>'
        '<th class="num">with fixes</th><th>accepted fixes</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></section>"
    )


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ms(value: Any) -> str:
    return fmt.ms(float(value)) if isinstance(value, (int, float)) else "—"


def _row(point: Mapping[str, Any]) -> str:
    commit = point.get("git_commit")
    fixes = ", ".join(str(f) for f in point.get("accepted_fixes") or ()) or "—"
    this = " (this one)" if point.get("current") else ""
    return (
        f'<tr><td class="mono">{_esc(point.get("created_at", ""))}{this}</td>'
        f'<td class="mono">{_esc(str(commit)[:10]) if commit else "—"}</td>'
        f'<td class="num">{_ms(point.get("step_ms_p50"))}</td>'
        f'<td class="num">{_ms(point.get("fixed_step_ms_p50"))}</td>'
        f"<td>{_esc(fixes)}</td></tr>"
    )


def _value(point: Mapping[str, Any], key: str) -> float | None:
    value = point.get(key)
    return float(value) if isinstance(value, (int, float)) and value == value else None


def trend_svg(points: Sequence[Mapping[str, Any]]) -> str:
    values = [
        v
        for p in points
        for v in (_value(p, "step_ms_p50"), _value(p, "fixed_step_ms_p50"))
        if v is not None
    ]
    top = max(values) * 1.1 if values and max(values) > 0 else 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = len(points)

    def x(i: int) -> float:
        return LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)  # from 0: a trend read against zero

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="step time over sessions">',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" '
        'stroke="#999"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#999"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end" font-size="11">'
        f"{_esc(fmt.ms(top))}</text>",
        f'<text x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end" font-size="11">0</text>',
    ]
    for key, colour in (("step_ms_p50", BASELINE_COLOUR), ("fixed_step_ms_p50", FIXED_COLOUR)):
        line = [(x(i), y(v)) for i, p in enumerate(points) if (v := _value(p, key)) is not None]
        if len(line) >= 2:
            coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in line)
            parts.append(
                f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for i, p in enumerate(points):
            v = _value(p, key)
            if v is None:
                continue
            label = f"{p.get('session', '')}: {fmt.ms(v)}"
            radius = 5 if p.get("current") else 3.5
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="{radius}" fill="{colour}">'
                f"<title>{_esc(label)}</title></circle>"
            )
    for i in sorted({0, n - 1}):
        when = str(points[i].get("created_at", ""))[:16].replace("T", " ")
        anchor = "start" if i == 0 else "end"
        parts.append(
            f'<text x="{x(i):.1f}" y="{HEIGHT - 10}" text-anchor="{anchor}" font-size="11">'
            f"{_esc(when)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)

"""The per-op roofline (log-log scatter with its roof) written as SVG directly.

A diagnosed trace with recorded shapes draws this chart beside the step time and the
breakdown; drawn by hand like them (line_svg.py, bar_svg.py), no report of a trace imports
matplotlib (0.75 s of CPU, issue 30). Same look as the matplotlib charts: decade ticks
labelled as plain numbers (`{:,.4g}`), a 5% margin in log space, the points in the
palette's first colour, the first six labelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfdoctor.render.line_svg import (
    ASCENT,
    DPI,
    GRID,
    LABEL_PAD,
    LINE_HEIGHT,
    MARGIN,
    PAD,
    PALETTE,
    TICK_LEN,
    TICK_PAD,
    TICK_SIZE,
    WIDTH_IN,
    coord,
    spines,
    svg_text,
    text_width,
    vertical_text,
)

# matplotlib's scatter s=18 (points squared), plus its edge line of 1 point
MARKER_RADIUS = math.sqrt(18) / 2 + 0.5
LABELLED = 6  # points that carry their label
MIN_DECADES = 1.0  # the narrowest axis range, in powers of ten
LABEL_CHARS = 28
POINT_LABEL_SIZE = 6.0
PEAK_LABEL_SIZE = 7.0
ROOF_COLOR = "#888888"


def _log_limits(values: Sequence[float]) -> tuple[float, float]:
    """The axis range (log10) around the values: at least MIN_DECADES wide, so points a few
    percent apart stay together (and a tick falls inside) instead of being spread over the
    whole width."""
    lo, hi = math.log10(min(values)), math.log10(max(values))
    pad = (hi - lo) * MARGIN
    if hi - lo + 2 * pad < MIN_DECADES:
        pad = (MIN_DECADES - (hi - lo)) / 2
    return lo - pad, hi + pad


def decade_ticks(lo: float, hi: float) -> list[float]:
    """Tick values between 10**lo and 10**hi: the powers of ten, and 2x and 5x of them
    when fewer than two powers fall inside."""
    powers = [10.0**k for k in range(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1)]
    if len(powers) >= 2:
        return powers
    found = [
        m * 10.0**k
        for k in range(math.floor(lo) - 1, math.ceil(hi) + 1)
        for m in (1.0, 2.0, 5.0)
        if lo - 1e-9 <= math.log10(m * 10.0**k) <= hi + 1e-9
    ]
    return sorted(found)


def _label(value: float) -> str:
    return f"{value:,.4g}".replace("-", "−")


def roofline_chart(
    points: Sequence[tuple[float, float, str]],
    *,
    roof: Sequence[tuple[float, float]] = (),
    peak: float | None = None,
    peak_label: str = "",
    peak_at: float = 0.0,
    xlabel: str,
    ylabel: str,
    height_in: float = 3.4,
) -> str:
    """Points (x, y > 0) on log axes; `roof`: a dashed line through these points, or, with
    `peak` and no roof, a dashed line across the axes at `peak`; `peak_label` is written
    above (peak_at, peak)."""
    width, height = WIDTH_IN * DPI, height_in * DPI
    xs = [p[0] for p in points] + [x for x, _ in roof]
    ys = [p[1] for p in points] + [y for _, y in roof] + ([peak] if peak else [])
    x0, x1 = _log_limits(xs)
    y0, y1 = _log_limits(ys)
    line_h = TICK_SIZE * LINE_HEIGHT
    bottom = height - (PAD + line_h + LABEL_PAD + line_h + TICK_PAD + TICK_LEN)
    top = PAD
    y_ticks = decade_ticks(y0, y1)
    y_labels = [_label(v) for v in y_ticks]
    widest = max((text_width(t, TICK_SIZE) for t in y_labels), default=0.0)
    left = PAD + line_h + LABEL_PAD + widest + TICK_PAD + TICK_LEN
    right = width - PAD
    x_ticks = decade_ticks(x0, x1)
    x_labels = [_label(v) for v in x_ticks]
    if x_ticks:
        at = left + (math.log10(x_ticks[-1]) - x0) / (x1 - x0) * (right - left)
        right -= max(0.0, at + text_width(x_labels[-1], TICK_SIZE) / 2 - (width - PAD))
    # The points' labels end inside the figure too (charts._fit counts them as well).
    for px, _, label in points[:LABELLED]:
        frac = (math.log10(px) - x0) / (x1 - x0)
        room = width - PAD - 3 - text_width(label[:LABEL_CHARS], POINT_LABEL_SIZE) - left
        if frac > 0 and room > 0:
            right = min(right, left + room / frac)

    def x(value: float) -> float:
        return left + (math.log10(value) - x0) / (x1 - x0) * (right - left)

    def y(value: float) -> float:
        return bottom - (math.log10(value) - y0) / (y1 - y0) * (bottom - top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{coord(width)}pt" '
        f'height="{coord(height)}pt" viewBox="0 0 {coord(width)} {coord(height)}" version="1.1">',
        f'<rect width="{coord(width)}" height="{coord(height)}" fill="#ffffff"/>',
    ]
    grid = [f"M {coord(x(v))} {coord(top)} L {coord(x(v))} {coord(bottom)}" for v in x_ticks]
    grid += [f"M {coord(left)} {coord(y(v))} L {coord(right)} {coord(y(v))}" for v in y_ticks]
    out.append(f'<path d="{" ".join(grid)}" fill="none" {GRID}/>')
    dashed = f'fill="none" stroke="{ROOF_COLOR}" stroke-width="1" stroke-dasharray="3.7,1.6"'
    if roof:
        path = " L ".join(f"{coord(x(a))} {coord(y(b))}" for a, b in roof)
        out.append(f'<path d="M {path}" {dashed}/>')
    elif peak:
        out.append(
            f'<path d="M {coord(left)} {coord(y(peak))} L {coord(right)} {coord(y(peak))}" '
            f"{dashed}/>"
        )
    for px, py, _ in points:
        out.append(
            f'<circle cx="{coord(x(px))}" cy="{coord(y(py))}" r="{coord(MARKER_RADIUS)}" '
            f'fill="{PALETTE[0]}"/>'
        )
    out += [
        svg_text(lx, ly, text, POINT_LABEL_SIZE, "start")
        for lx, ly, text in _placed_labels(
            [(x(px) + 3, y(py) - 3, label[:LABEL_CHARS]) for px, py, label in points[:LABELLED]],
            lowest=bottom,
        )
    ]
    if peak and peak_label:
        out.append(svg_text(x(peak_at), y(peak) - 2, peak_label, PEAK_LABEL_SIZE, "start"))
    marks = [f"M {coord(x(v))} {coord(bottom)} l 0 {coord(TICK_LEN)}" for v in x_ticks]
    marks += [f"M {coord(left)} {coord(y(v))} l {coord(-TICK_LEN)} 0" for v in y_ticks]
    out.append(f'<path d="{" ".join(marks)}" fill="none" stroke="#000000" stroke-width="0.8"/>')
    out.append(spines(left, top, right, bottom))
    below = bottom + TICK_LEN + TICK_PAD + TICK_SIZE * ASCENT
    out += [
        svg_text(x(v), below, t, TICK_SIZE, "middle")
        for v, t in zip(x_ticks, x_labels, strict=True)
    ]
    beside = left - TICK_LEN - TICK_PAD
    out += [
        svg_text(beside, y(v) + TICK_SIZE * (ASCENT - LINE_HEIGHT / 2), t, TICK_SIZE, "end")
        for v, t in zip(y_ticks, y_labels, strict=True)
    ]
    label_y = height - PAD - line_h + TICK_SIZE * ASCENT
    out.append(svg_text((left + right) / 2, label_y, xlabel, TICK_SIZE, "middle"))
    mid, label_x = (top + bottom) / 2, PAD + TICK_SIZE * ASCENT
    out.append(vertical_text(label_x, mid, ylabel))
    out.append("</svg>")
    return "\n".join(out)


def _placed_labels(
    labels: Sequence[tuple[float, float, str]], *, lowest: float
) -> list[tuple[float, float, str]]:
    """Each label at its point, moved down a line at a time while it would overlap a label
    already placed (two ops at one point, or close by, otherwise print over each other),
    and never below `lowest`, where it then stays as placed."""
    line = POINT_LABEL_SIZE * LINE_HEIGHT
    placed: list[tuple[float, float, str]] = []
    boxes: list[tuple[float, float, float, float]] = []  # left, top, right, baseline
    for lx, ly, text in labels:
        width = text_width(text, POINT_LABEL_SIZE)
        y = ly
        while y + line <= lowest and any(
            lx < right and left < lx + width and y - line < base and top < y
            for left, top, right, base in boxes
        ):
            y += line
        boxes.append((lx, y - line, lx + width, y))
        placed.append((lx, y, text))
    return placed
